// AVX-512 passes of the Pillow-exact resize (resize_avx512.h).
#include "resize_avx512.h"

#include "cpu_isa.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {

#if defined(__x86_64__)
#define VLMPREP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")))

bool resize_avx512_usable() {
  if (!cpu_isa_allows_avx512()) return false;
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

namespace {

constexpr int kMaxPairs = 16;  // windows of up to 32 taps (a downscale by ~8)

inline int16_t hi_part(int32_t w) { return int16_t(w >> 11); }
inline int16_t lo_part(int32_t w) { return int16_t(w & 2047); }

// Pillow's sum >> 22 from its two parts: 2048 * hi sums + (2^21 + lo sums).
VLMPREP_AVX512 inline __m512i sum(__m512i hv, __m512i lv) {
  return _mm512_srai_epi32(_mm512_add_epi32(_mm512_slli_epi32(hv, 11), lv), kPrecisionBits);
}

// Bytes 0 and 2 of every int32 lane: where a permutation puts pixel bytes (the other bytes are
// zero, so each int32 lane is an int16 pair of pixel values).
constexpr uint64_t kPairMask = 0x5555555555555555ull;

// Rows [y, y + kRows) of groups [0, groups): each group's table entries are loaded once for
// all kRows rows (the table is ~50 B per output pixel, too big for L1: reloading it per row
// was the pass's bottleneck). kTwo: the windows span up to 128 bytes (two loads, two-source
// permutes), for downscales by up to ~8.
template <int kPairs, int kRows, bool kTwo>
VLMPREP_AVX512 inline void horizontal512_rows(const Horizontal512& h, const uint8_t* src,
                                              int64_t src_stride, uint8_t* dst,
                                              int64_t dst_stride) {
  const __m512i round = _mm512_set1_epi32(1 << (kPrecisionBits - 1)), zero = _mm512_setzero_si512();
  const int groups = h.groups;
  const uint8_t* t = h.table.data();
  // Up to 8 pairs the group's table stays in registers across its rows (24 of the 32).
  constexpr int kHeld = kPairs <= 8 ? kPairs : 1;
  for (int g = 0; g < groups; ++g, t += kPairs * 3 * 64) {
    __m512i ctl[kHeld], whi[kHeld], wlo[kHeld];
    if constexpr (kPairs <= 8)
      for (int j = 0; j < kPairs; ++j) {
        ctl[j] = _mm512_loadu_si512(t + j * 192);
        whi[j] = _mm512_loadu_si512(t + j * 192 + 64);
        wlo[j] = _mm512_loadu_si512(t + j * 192 + 128);
      }
    const int64_t base = int64_t(h.bases[g]) * 3;
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* in = src + r * src_stride + base;
      const __m512i win = _mm512_loadu_si512(in);
      const __m512i win2 = kTwo ? _mm512_loadu_si512(in + 64) : win;
      __m512i acc_hi = zero, acc_lo = round;
      for (int j = 0; j < kPairs; ++j) {
        const bool held = kPairs <= 8;
        const __m512i c = held ? ctl[held ? j : 0] : _mm512_loadu_si512(t + j * 192);
        const __m512i wh = held ? whi[held ? j : 0] : _mm512_loadu_si512(t + j * 192 + 64);
        const __m512i wl = held ? wlo[held ? j : 0] : _mm512_loadu_si512(t + j * 192 + 128);
        const __m512i px = kTwo ? _mm512_maskz_permutex2var_epi8(kPairMask, win, c, win2)
                                : _mm512_maskz_permutexvar_epi8(kPairMask, c, win);
        acc_hi = _mm512_dpwssd_epi32(acc_hi, px, wh);
        acc_lo = _mm512_dpwssd_epi32(acc_lo, px, wl);
      }
      const __m512i v = _mm512_max_epi32(sum(acc_hi, acc_lo), zero);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + r * dst_stride + g * 16), _mm512_cvtusepi32_epi8(v));
    }
  }
}

template <int kPairs, bool kTwo>
VLMPREP_AVX512 void horizontal512_k(const Horizontal512& h, const uint8_t* src, int64_t src_stride,
                                    uint8_t* dst, int64_t dst_stride, int rows) {
  constexpr int kBlock = 4;
  int y = 0;
  for (; y + kBlock <= rows; y += kBlock)
    horizontal512_rows<kPairs, kBlock, kTwo>(h, src + y * src_stride, src_stride, dst + y * dst_stride,
                                             dst_stride);
  for (; y < rows; ++y)
    horizontal512_rows<kPairs, 1, kTwo>(h, src + y * src_stride, src_stride, dst + y * dst_stride, dst_stride);
}

}  // namespace

bool horizontal512_plan(const Coeffs& c, int in_w, int out_w, Horizontal512* h) {
  const int K = c.ksize;
  const int pairs = (K + 1) / 2;
  if (pairs > kMaxPairs) return false;
  // The widest group window decides one or two 64-byte loads per group.
  int span = 0;
  for (int g = 0; 16 * g + 16 <= 3 * out_w; ++g) {
    const int x0 = 16 * g / 3, x1 = (16 * g + 15) / 3;
    span = std::max(span, (c.bounds[x1 * 2] - c.bounds[x0 * 2] + K) * 3);
  }
  if (span > 128) return false;  // a downscale by more than ~8: the AVX2 pass
  const int load = span > 64 ? 128 : 64;
  // Groups of 16 output bytes (int32 lane l: byte 16g + l, pixel (16g + l) / 3) while their
  // loads stay inside the source row and the 16-byte store inside the output row.
  int groups = 0;
  while (16 * groups + 16 <= 3 * out_w &&
         int64_t(c.bounds[(16 * groups / 3) * 2]) * 3 + load <= int64_t(in_w) * 3)
    ++groups;
  if (16 * groups < 3 * out_w / 2) return false;  // most of the row would be the scalar border
  h->two_loads = load == 128;
  h->pairs = pairs;
  h->groups = groups;
  h->simd_end = 16 * groups / 3;  // a pixel cut by the last group is redone whole by the caller
  h->bases.assign(groups, 0);
  h->table.assign(size_t(groups) * pairs * 192, 0);
  for (int g = 0; g < groups; ++g) {
    const int b0 = c.bounds[(16 * g / 3) * 2];
    h->bases[g] = b0;
    for (int j = 0; j < pairs; ++j) {
      uint8_t* ctl = &h->table[(size_t(g) * pairs + j) * 192];
      int16_t* whi = reinterpret_cast<int16_t*>(ctl + 64);
      int16_t* wlo = reinterpret_cast<int16_t*>(ctl + 128);
      for (int l = 0; l < 16; ++l) {
        const int x = (16 * g + l) / 3, ch = (16 * g + l) % 3;
        const int off = c.bounds[x * 2] - b0;
        const int t0 = 2 * j, t1 = 2 * j + 1 < K ? 2 * j + 1 : 2 * j;  // a missing tap: weight 0
        const int32_t w0 = c.k[size_t(x) * K + t0], w1 = t1 != t0 ? c.k[size_t(x) * K + t1] : 0;
        ctl[4 * l] = uint8_t((off + t0) * 3 + ch);
        ctl[4 * l + 2] = uint8_t((off + t1) * 3 + ch);
        whi[2 * l] = hi_part(w0);
        whi[2 * l + 1] = hi_part(w1);
        wlo[2 * l] = lo_part(w0);
        wlo[2 * l + 1] = lo_part(w1);
      }
    }
  }
  return true;
}

template <int kPairs>
void horizontal512_dispatch(const Horizontal512& h, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                            int64_t dst_stride, int rows) {
  if constexpr (kPairs > kMaxPairs) {
    return;  // never planned (horizontal512_plan refuses)
  } else if (h.pairs != kPairs) {
    return horizontal512_dispatch<kPairs + 1>(h, src, src_stride, dst, dst_stride, rows);
  } else if (h.two_loads) {
    return horizontal512_k<kPairs, true>(h, src, src_stride, dst, dst_stride, rows);
  } else {
    return horizontal512_k<kPairs, false>(h, src, src_stride, dst, dst_stride, rows);
  }
}

void horizontal512(const Horizontal512& h, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                   int64_t dst_stride, int rows) {
  horizontal512_dispatch<1>(h, src, src_stride, dst, dst_stride, rows);  // pair loop unrolled
}

VLMPREP_AVX512 void vertical512(const uint8_t* src, int64_t src_stride, uint8_t* dst,
                                int64_t dst_stride, int width, const Coeffs& c, int y0, int y1,
                                int shift) {
  const int n = width * 3;
  const __m512i round = _mm512_set1_epi32(1 << (kPrecisionBits - 1)), zero = _mm512_setzero_si512();
  std::vector<const uint8_t*> ra, rb;
  std::vector<int32_t> whi, wlo;  // per pair: the int16 pair of hi (lo) weights, as one int32
  for (int yy = y0; yy < y1; ++yy) {
    const int ymin = c.bounds[yy * 2] - shift, taps = c.bounds[yy * 2 + 1];
    const int32_t* k = &c.k[size_t(yy) * c.ksize];
    const int pairs = (taps + 1) / 2;
    ra.resize(pairs);
    rb.resize(pairs);
    whi.resize(pairs);
    wlo.resize(pairs);
    for (int j = 0; j < pairs; ++j) {  // a missing second tap: the first row again, weight 0
      const bool two = 2 * j + 1 < taps;
      ra[j] = src + int64_t(ymin + 2 * j) * src_stride;
      rb[j] = two ? ra[j] + src_stride : ra[j];
      const int32_t w0 = k[2 * j], w1 = two ? k[2 * j + 1] : 0;
      whi[j] = int32_t(uint16_t(hi_part(w0))) | int32_t(uint32_t(uint16_t(hi_part(w1))) << 16);
      wlo[j] = int32_t(uint16_t(lo_part(w0))) | int32_t(uint32_t(uint16_t(lo_part(w1))) << 16);
    }
    uint8_t* out = dst + int64_t(yy - y0) * dst_stride;
    for (int x = 0; x < n; x += 64) {
      const __mmask64 m = n - x >= 64 ? ~__mmask64(0) : (__mmask64(1) << (n - x)) - 1;
      __m512i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
      __m512i l0 = round, l1 = round, l2 = round, l3 = round;
      for (int j = 0; j < pairs; ++j) {
        const __m512i wh = _mm512_set1_epi32(whi[j]), wl = _mm512_set1_epi32(wlo[j]);
        const __m512i a = _mm512_maskz_loadu_epi8(m, ra[j] + x), b = _mm512_maskz_loadu_epi8(m, rb[j] + x);
        const __m512i lo = _mm512_unpacklo_epi8(a, b), hi = _mm512_unpackhi_epi8(a, b);
        // Each int32 lane: the int16 pair (a[i], b[i]) of one byte position i.
        const __m512i p0 = _mm512_unpacklo_epi8(lo, zero), p1 = _mm512_unpackhi_epi8(lo, zero);
        const __m512i p2 = _mm512_unpacklo_epi8(hi, zero), p3 = _mm512_unpackhi_epi8(hi, zero);
        h0 = _mm512_dpwssd_epi32(h0, p0, wh);
        l0 = _mm512_dpwssd_epi32(l0, p0, wl);
        h1 = _mm512_dpwssd_epi32(h1, p1, wh);
        l1 = _mm512_dpwssd_epi32(l1, p1, wl);
        h2 = _mm512_dpwssd_epi32(h2, p2, wh);
        l2 = _mm512_dpwssd_epi32(l2, p2, wl);
        h3 = _mm512_dpwssd_epi32(h3, p3, wh);
        l3 = _mm512_dpwssd_epi32(l3, p3, wl);
      }
      // Saturating packs clip to 0..255 and put the byte positions back in order.
      const __m512i w01 = _mm512_packs_epi32(sum(h0, l0), sum(h1, l1));
      const __m512i w23 = _mm512_packs_epi32(sum(h2, l2), sum(h3, l3));
      _mm512_mask_storeu_epi8(out + x, m, _mm512_packus_epi16(w01, w23));
    }
  }
}

#else  // not x86-64: never usable, never called

bool resize_avx512_usable() { return false; }
bool horizontal512_plan(const Coeffs&, int, int, Horizontal512*) { return false; }
void horizontal512(const Horizontal512&, const uint8_t*, int64_t, uint8_t*, int64_t, int) {}
void vertical512(const uint8_t*, int64_t, uint8_t*, int64_t, int, const Coeffs&, int, int, int) {}

#endif

}  // namespace vlmprep
