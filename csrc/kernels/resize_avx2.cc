// The AVX2 passes of the Pillow-exact resize with Pillow's weights (resize_avx2.h): the vertical
// pass, and the horizontal pass through transposed 32-row blocks (the same sums).
//
// Pillow sums uint8 x 22-bit weights in int32; AVX2's madd multiplies int16 pairs, so each
// weight is split exactly as w = 2048 * hi + lo (hi = w >> 11, lo = w & 2047, both int16), as the
// AVX-512 pass does: sum(v * w) + 2^21 = 2048 * sum(v * hi) + (2^21 + sum(v * lo)). Two source
// rows go through each madd (their bytes interleaved), so a pair of taps costs two madds per 8
// bytes, and 32 output bytes keep their eight sums in registers over all the taps.
#include "resize_avx2.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {

#if defined(__x86_64__)

namespace {

// int16 pair (w_a, w_b) as one int32, low half first (madd's order).
inline int32_t pair16(int32_t a, int32_t b) { return int32_t((uint32_t(uint16_t(b)) << 16) | uint16_t(a)); }

// Taps (wa, wb) of one pair as the madd weights of their hi and lo halves.
inline void split_pair(int32_t wa, int32_t wb, int32_t* hi, int32_t* lo) {
  *hi = pair16(wa >> 11, wb >> 11);
  *lo = pair16(wa & 2047, wb & 2047);
}

// Pillow's sum 2048 * h + l (l holds its 2^21), then its shift.
__attribute__((target("avx2"), always_inline)) inline __m256i total(__m256i h, __m256i l) {
  return _mm256_srai_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), kPrecisionBits);
}

// The sums of 32 output bytes: hi sums h[0..3] and lo sums l[0..3] (l holds Pillow's 2^21);
// lane 0 holds bytes 0-3 / 4-7 / 8-11 / 12-15 of each 16-byte half in turn (the unpack order),
// which finish() undoes.
struct Sums32 {
  __m256i h[4], l[4];
};

__attribute__((target("avx2"), always_inline)) inline void start(Sums32& s) {
  for (int i = 0; i < 4; ++i) {
    s.h[i] = _mm256_setzero_si256();
    s.l[i] = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  }
}

// One pair of taps: the 32 bytes at ra and rb (their bytes interleaved), weights (wa, wb) split
// as pair16 hi and lo halves.
__attribute__((target("avx2"), always_inline)) inline void add_pair(Sums32& s, const uint8_t* ra, const uint8_t* rb,
                                                                     int32_t w_hi, int32_t w_lo) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ra));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rb));
  const __m256i wh = _mm256_set1_epi32(w_hi), wl = _mm256_set1_epi32(w_lo);
  const __m256i ab_lo = _mm256_unpacklo_epi8(a, b), ab_hi = _mm256_unpackhi_epi8(a, b);
  const __m256i v[4] = {_mm256_unpacklo_epi8(ab_lo, zero), _mm256_unpackhi_epi8(ab_lo, zero),
                        _mm256_unpacklo_epi8(ab_hi, zero), _mm256_unpackhi_epi8(ab_hi, zero)};
  for (int i = 0; i < 4; ++i) {
    s.h[i] = _mm256_add_epi32(s.h[i], _mm256_madd_epi16(v[i], wh));
    s.l[i] = _mm256_add_epi32(s.l[i], _mm256_madd_epi16(v[i], wl));
  }
}

// The 32 output bytes in order.
__attribute__((target("avx2"), always_inline)) inline __m256i finish(const Sums32& s) {
  const __m256i p01 = _mm256_packs_epi32(total(s.h[0], s.l[0]), total(s.h[1], s.l[1]));  // bytes 0-7 | 16-23
  const __m256i p23 = _mm256_packs_epi32(total(s.h[2], s.l[2]), total(s.h[3], s.l[3]));  // bytes 8-15 | 24-31
  return _mm256_packus_epi16(p01, p23);
}

}  // namespace

__attribute__((target("avx2")))
void vertical_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                   int width, const Coeffs& c, int y0, int y1, int shift) {
  const int n = width * 3;
  const int vec_end = n / 32 * 32;  // bytes [vec_end, n) of each row: scalar, same sums
  std::vector<int32_t> w_hi, w_lo;  // one output row's tap pairs, as pair16
  for (int yy = y0; yy < y1; ++yy) {
    const int ymin = c.bounds[yy * 2] - shift, taps = c.bounds[yy * 2 + 1];
    const int32_t* k = &c.k[size_t(yy) * c.ksize];
    const int pairs = (taps + 1) / 2;
    w_hi.resize(pairs);
    w_lo.resize(pairs);
    for (int q = 0; q < pairs; ++q) {  // an odd last tap pairs with itself at weight 0
      split_pair(k[2 * q], 2 * q + 1 < taps ? k[2 * q + 1] : 0, &w_hi[q], &w_lo[q]);
    }
    const uint8_t* rows = src + int64_t(ymin) * src_stride;
    uint8_t* out = dst + int64_t(yy - y0) * dst_stride;
    for (int j = 0; j < vec_end; j += 32) {
      Sums32 sums;
      start(sums);
      for (int q = 0; q < pairs; ++q) {
        const uint8_t* ra = rows + int64_t(2 * q) * src_stride + j;
        add_pair(sums, ra, 2 * q + 1 < taps ? ra + src_stride : ra, w_hi[q], w_lo[q]);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), finish(sums));
    }
    for (int j = vec_end; j < n; ++j) out[j] = vertical_byte(rows, src_stride, k, taps, j);
  }
}

// The horizontal pass as the vertical one: in a block of 32 rows every row has the same
// weights for output pixel xx, so the block is transposed (source byte 3x + c becomes a line of
// its 32 rows' values; pixel x is then a "row" of 96 bytes), run through the vertical pass's
// madd sums above with the horizontal weights, and transposed back. The sums are Pillow's, so
// the bytes are. Two 16x16 byte transposes per 32x16 block (one per 128-bit lane), 4 rounds of
// 16 unpacks: each round rotates the 8-bit (row, column) index left by one.
namespace {

__attribute__((target("avx2"), always_inline)) inline void transpose16x2(__m256i r[16]) {
  for (int round = 0; round < 4; ++round) {
    __m256i t[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm256_unpacklo_epi8(r[i], r[i + 8]);
      t[2 * i + 1] = _mm256_unpackhi_epi8(r[i], r[i + 8]);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
}

// src rows [0, rows) (rows <= 32) of n bytes -> t: byte j of row y at t[32 j + y] (rows past
// `rows` read as 0).
__attribute__((target("avx2")))
void to_columns(const uint8_t* src, int64_t stride, int rows, int64_t n, uint8_t* t) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256i r[16];
    for (int i = 0; i < 16; ++i) {
      const __m128i a = i < rows ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * stride + j))
                                 : _mm_setzero_si128();
      const __m128i b = i + 16 < rows
                            ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (i + 16) * stride + j))
                            : _mm_setzero_si128();
      r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    }
    transpose16x2(r);
    for (int i = 0; i < 16; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + (j + i) * 32), r[i]);
  }
  for (; j < n; ++j)
    for (int y = 0; y < 32; ++y) t[j * 32 + y] = y < rows ? src[y * stride + j] : 0;
}

// The inverse: t[32 j + y] -> byte j of dst row y, rows [0, rows), n bytes each.
__attribute__((target("avx2")))
void from_columns(const uint8_t* t, int64_t n, uint8_t* dst, int64_t stride, int rows) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256i r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + (j + i) * 32));
    transpose16x2(r);
    for (int i = 0; i < 16; ++i) {
      if (i < rows) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i * stride + j), _mm256_castsi256_si128(r[i]));
      if (i + 16 < rows)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (i + 16) * stride + j), _mm256_extracti128_si256(r[i], 1));
    }
  }
  for (; j < n; ++j)
    for (int y = 0; y < rows; ++y) dst[y * stride + j] = t[j * 32 + y];
}

}  // namespace

HorizontalColumns::HorizontalColumns(const Coeffs& c, int out_w) : first(out_w), taps(out_w) {
  for (int xx = 0; xx < out_w; ++xx) {
    const int32_t* k = &c.k[size_t(xx) * c.ksize];
    int lo_tap = 0, hi_tap = c.bounds[xx * 2 + 1];
    while (hi_tap > lo_tap + 1 && k[hi_tap - 1] == 0) --hi_tap;
    while (hi_tap > lo_tap + 1 && k[lo_tap] == 0) ++lo_tap;
    first[xx] = c.bounds[xx * 2] + lo_tap;
    taps[xx] = hi_tap - lo_tap;
    max_pairs = std::max(max_pairs, (taps[xx] + 1) / 2);
  }
  hi.assign(size_t(out_w) * max_pairs, 0);
  lo.assign(size_t(out_w) * max_pairs, 0);
  for (int xx = 0; xx < out_w; ++xx) {
    const int32_t* k = &c.k[size_t(xx) * c.ksize] + (first[xx] - c.bounds[xx * 2]);
    for (int q = 0; 2 * q < taps[xx]; ++q) {  // an odd last tap pairs with itself at weight 0
      split_pair(k[2 * q], 2 * q + 1 < taps[xx] ? k[2 * q + 1] : 0, &hi[size_t(xx) * max_pairs + q],
                 &lo[size_t(xx) * max_pairs + q]);
    }
  }
}

__attribute__((target("avx2")))
void horizontal_columns_avx2(const HorizontalColumns& hc, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                             int64_t dst_stride, int in_w, int out_w, int rows) {
  thread_local std::vector<uint8_t> tin, tout;  // the block's source and output pixels, 96 bytes each
  tin.resize(size_t(in_w) * 96);
  tout.resize(size_t(out_w) * 96);
  for (int y0 = 0; y0 < rows; y0 += 32) {
    const int n_rows = std::min(32, rows - y0);
    to_columns(src + int64_t(y0) * src_stride, src_stride, n_rows, int64_t(in_w) * 3, tin.data());
    for (int xx = 0; xx < out_w; ++xx) {
      const uint8_t* px = tin.data() + int64_t(hc.first[xx]) * 96;
      const int taps = hc.taps[xx], pairs = (taps + 1) / 2;
      const int32_t* wh_ = &hc.hi[size_t(xx) * hc.max_pairs];
      const int32_t* wl_ = &hc.lo[size_t(xx) * hc.max_pairs];
      for (int j = 0; j < 96; j += 32) {  // vertical_avx2's sums over 32 bytes (rows of a channel)
        Sums32 sums;
        start(sums);
        for (int q = 0; q < pairs; ++q) {
          const uint8_t* ra = px + int64_t(2 * q) * 96 + j;
          add_pair(sums, ra, 2 * q + 1 < taps ? ra + 96 : ra, wh_[q], wl_[q]);  // an odd last tap: weight 0
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tout.data() + int64_t(xx) * 96 + j), finish(sums));
      }
    }
    from_columns(tout.data(), int64_t(out_w) * 3, dst + int64_t(y0) * dst_stride, dst_stride, n_rows);
  }
}

#else  // not x86-64: never called

void vertical_avx2(const uint8_t*, int64_t, uint8_t*, int64_t, int, const Coeffs&, int, int, int) {}
HorizontalColumns::HorizontalColumns(const Coeffs&, int) {}
void horizontal_columns_avx2(const HorizontalColumns&, const uint8_t*, int64_t, uint8_t*, int64_t, int, int,
                             int) {}

#endif

}  // namespace vlmprep
