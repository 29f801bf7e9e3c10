// Pillow-exact separable resize (see resize.h). Weights: Pillow's precompute_coeffs and
// normalize_coeffs_8bpc arithmetic, reimplemented. The vertical pass is written so that the
// compiler vectorises it (one weight for a whole row); the horizontal pass keeps Pillow's
// per-pixel sums over 3 channels.
#include "vlmprep/resize.h"
#include "vlmprep/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu_isa.h"
#include "cpu_threads.h"
#include "resize_avx2.h"
#include "resize_avx512.h"
#include "resize_neon.h"
#include "resize_rows.h"
#include "resize_weights.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {
namespace {


double filter_bilinear(double x) {
  x = x < 0.0 ? -x : x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double filter_bicubic(double x) {
  const double a = -0.5;
  x = x < 0.0 ? -x : x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double filter_lanczos(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }


// Weights of one axis, in Pillow's arithmetic order (so the same doubles, the same ints).
Coeffs coeffs(int in_size, int out_size, Interpolation f) {
  double (*fn)(double) = f == Interpolation::kBilinear ? filter_bilinear
                         : f == Interpolation::kBicubic ? filter_bicubic : filter_lanczos;
  const double support0 = f == Interpolation::kBilinear ? 1.0 : f == Interpolation::kBicubic ? 2.0 : 3.0;
  const double scale = double(float(in_size) - 0.0f) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = support0 * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.bounds.resize(size_t(out_size) * 2);
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = fn((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[size_t(xx) * c.ksize + x] = v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits))
                                            : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
  return c;
}

// torch's antialias filters (UpSampleKernel.cpp aa_filter), written as torch writes them: the
// order of the operations decides the last bit of a double weight, and so some int16 weights.
double tv_filter_bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double tv_filter_bicubic(double x) {
  const double a = -0.5;
  x = x < 0.0 ? -x : x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

double tv_filter_lanczos(double x) {  // Lanczos-3, |x| first (x = -3 gives 0, unlike Pillow's)
  x = x < 0.0 ? -x : x;
  return x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
}

// Weights of one axis in torch's arithmetic (_compute_indices_min_size_weights_aa, then
// _compute_index_ranges_int16_weights): double weights divided by their sum, then int16 at
// the axis's precision p (the largest with the largest weight * 2^(p+1) under 2^15, at most
// 22), returned scaled by 2^(22 - p) so the kPrecisionBits passes give torch's bytes (resize.h).
Coeffs coeffs_torchvision(int in_size, int out_size, Interpolation f) {
  double (*fn)(double) = f == Interpolation::kBilinear ? tv_filter_bilinear
                         : f == Interpolation::kBicubic ? tv_filter_bicubic : tv_filter_lanczos;
  const double interp = f == Interpolation::kBilinear ? 2.0 : f == Interpolation::kBicubic ? 4.0 : 6.0;
  const double scale = double(in_size) / out_size;
  const double support = scale >= 1.0 ? interp * 0.5 * scale : interp * 0.5;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.bounds.resize(size_t(out_size) * 2);
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> w(size_t(out_size) * c.ksize, 0.0);
  double wt_max = 0.0;
  for (int i = 0; i < out_size; ++i) {
    const double center = scale * (i + 0.5);
    const int xmin = std::max(int64_t(center - support + 0.5), int64_t(0));
    const int64_t xmax = std::min(int64_t(center + support + 0.5), int64_t(in_size));
    const int n = int(std::clamp<int64_t>(xmax - xmin, 0, c.ksize));
    double* wi = &w[size_t(i) * c.ksize];
    double total = 0.0;
    for (int j = 0; j < n; ++j) {
      wi[j] = fn((j + xmin - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0)
      for (int j = 0; j < n; ++j) {
        wi[j] /= total;
        wt_max = std::max(wt_max, wi[j]);
      }
    c.bounds[i * 2] = xmin;
    c.bounds[i * 2 + 1] = n;
  }
  int prec = 0;
  for (; prec < kPrecisionBits; ++prec)
    if (int(0.5 + wt_max * (1 << (prec + 1))) >= (1 << 15)) break;
  for (size_t j = 0; j < w.size(); ++j) {
    const double v = w[j];
    const int16_t iv = v < 0 ? int16_t(-0.5 + v * (1 << prec)) : int16_t(0.5 + v * (1 << prec));
    c.k[j] = int32_t(iv) * (1 << (kPrecisionBits - prec));  // exact: |iv| < 2^15, prec <= 22
  }
  c.prec = prec;
  return c;
}


// One output pixel of a horizontal pass: Pillow's three int32 sums over n taps from p.
inline void pixel_sum(const uint8_t* p, const int32_t* k, int n, uint8_t* out) {
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int x = 0; x < n; ++x) {
    s0 += p[x * 3] * k[x];
    s1 += p[x * 3 + 1] * k[x];
    s2 += p[x * 3 + 2] * k[x];
  }
  out[0] = clip8(s0);
  out[1] = clip8(s1);
  out[2] = clip8(s2);
}

// Rows [y0, y1) of a horizontal pass with a fixed tap count K (a compile-time constant, so
// the tap loop unrolls): c.bounds/c.k were widened to K taps (padded weights are 0).
template <int K>
void horizontal_k(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                  int out_w, const Coeffs& c, int y0, int y1) {
  const int ks = K > 0 ? K : c.ksize;
  for (int y = y0; y < y1; ++y) {
    const uint8_t* in = src + int64_t(y) * src_stride;
    uint8_t* out = dst + int64_t(y) * dst_stride;
    for (int xx = 0; xx < out_w; ++xx)
      pixel_sum(in + c.bounds[xx * 2] * 3, &c.k[size_t(xx) * ks], K > 0 ? K : c.bounds[xx * 2 + 1],
                out + xx * 3);
  }
}

// Widens every output's taps to exactly ksize (moving xmin left where the window would run
// past the end, padding with zero weights) so the fixed-K loop never reads out of the row.
// Zero weights add 0 to Pillow's sums, so the result is unchanged. Needs in_size >= ksize.
Coeffs widen(const Coeffs& c, int in_size) {
  Coeffs w = c;
  const int K = c.ksize;
  for (size_t xx = 0; xx < c.bounds.size() / 2; ++xx) {
    const int xmin = c.bounds[xx * 2], n = c.bounds[xx * 2 + 1];
    const int start = std::min(xmin, in_size - K);
    int32_t* k = &w.k[xx * K];
    for (int x = 0; x < K; ++x) k[x] = 0;
    for (int x = 0; x < n; ++x) k[xmin - start + x] = c.k[xx * K + x];
    w.bounds[xx * 2] = start;
    w.bounds[xx * 2 + 1] = K;
  }
  return w;
}

#if defined(__x86_64__)
// AVX2 horizontal pass over widened coefficients: two output pixels per step, each pixel's
// R, G, B (and one zero) in four int32 lanes; the same integer sums as Pillow, so the same
// bytes. A pixel's window is loaded 5 taps (15 bytes) at a time into its 128-bit half, and one
// byte shuffle per tap both picks that tap's R, G, B and zero-extends them to int32.
// `kw` holds each output pair's weights per tap as 8 int32 ([w0 x4, w1 x4]). Pixels whose
// 16-byte loads would pass the row end (the right border) fall back to scalar.
// One pair's sums: R, G, B, 0 of output xx in the low half, of xx + 1 in the high half.
template <int K>
__attribute__((target("avx2"), always_inline)) inline __m256i pair_sums(
    const uint8_t* p0, const uint8_t* p1, const int32_t* w, const __m256i* pick, int k_dyn) {
  const int k_all = K > 0 ? K : k_dyn;
  __m256i acc = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  for (int k0 = 0; k0 < k_all; k0 += 5) {
    const __m256i win = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + k0 * 3))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + k0 * 3)), 1);
    const int n = k_all - k0 < 5 ? k_all - k0 : 5;
    for (int j = 0; j < n; ++j) {
      const __m256i px = _mm256_shuffle_epi8(win, pick[j]);
      const __m256i wk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + size_t(k0 + j) * 8));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, wk));
    }
  }
  return acc;
}

template <int K>
__attribute__((target("avx2")))
void horizontal_avx2_k(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                       int out_w, int in_w, const Coeffs& c, const std::vector<int32_t>& kw,
                       int y0, int y1) {
  const int Kd = c.ksize;
  const int span = (Kd + 4) / 5 * 5;  // taps covered by the 16-byte loads
  // Outputs [0, simd_end) go four at a time: every load inside the row, and the 16-byte store
  // of 4 pixels (12 bytes + 4 that the next step rewrites) too. A pixel at source pixel b
  // loads bytes [3b + 15i, 3b + 15i + 16) for i < span / 5: the last ends at 3 (b + span) + 1,
  // one byte past its taps, so b + span == in_w would read the byte after the row (and
  // after the buffer, for the last row). Windows start in order, so output xx + 3's is the last.
  int simd_end = 0;
  while (simd_end + 3 < out_w &&
         (int64_t(c.bounds[(simd_end + 3) * 2]) + span) * 3 + 1 <= int64_t(in_w) * 3 &&
         int64_t(simd_end) * 3 + 16 <= int64_t(out_w) * 3)
    simd_end += 4;
  __m256i pick[5];  // tap j of a 5-tap chunk: bytes 3j, 3j+1, 3j+2 -> int32 lanes 0..2
  for (int j = 0; j < 5; ++j) {
    alignas(32) int8_t ctl[32];
    for (int l = 0; l < 32; ++l) ctl[l] = -128;  // high bit: a zero byte
    for (int h = 0; h < 2; ++h)
      for (int ch = 0; ch < 3; ++ch) ctl[h * 16 + ch * 4] = int8_t(3 * j + ch);
    pick[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ctl));
  }
  // Packed bytes [R0 G0 B0 0 R1 G1 B1 0 R2 ..] -> [R0 G0 B0 R1 G1 B1 R2 ..] (12 bytes).
  const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128);
  const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi32(255);
  for (int y = y0; y < y1; ++y) {
    const uint8_t* in = src + int64_t(y) * src_stride;
    uint8_t* out = dst + int64_t(y) * dst_stride;
    for (int xx = 0; xx < simd_end; xx += 4) {
      const int32_t* w = &kw[size_t(xx / 2) * size_t(Kd) * 8];
      __m256i a = pair_sums<K>(in + c.bounds[xx * 2] * 3, in + c.bounds[xx * 2 + 2] * 3, w, pick, Kd);
      __m256i b = pair_sums<K>(in + c.bounds[xx * 2 + 4] * 3, in + c.bounds[xx * 2 + 6] * 3,
                               w + size_t(Kd) * 8, pick, Kd);
      a = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(a, kPrecisionBits), zero), top);
      b = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(b, kPrecisionBits), zero), top);
      // int32 lanes of pixels 0,1 (a) and 2,3 (b) -> 16 bytes in pixel order -> 12 RGB bytes.
      const __m256i w16 = _mm256_packs_epi32(a, b);  // per 128 lane: [a_lo b_lo | a_hi b_hi]
      const __m128i lo = _mm256_castsi256_si128(w16), hi = _mm256_extracti128_si256(w16, 1);
      // lo = [px0, px2] and hi = [px1, px3] as int16x4 each: reorder to px0 px1 px2 px3.
      const __m128i ordered = _mm_packus_epi16(_mm_unpacklo_epi64(lo, hi), _mm_unpackhi_epi64(lo, hi));
      const __m128i rgb = _mm_shuffle_epi8(ordered, squeeze);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + xx * 3), rgb);
    }
    for (int xx = simd_end; xx < out_w; ++xx)  // the right border: scalar, same arithmetic
      pixel_sum(in + c.bounds[xx * 2] * 3, &c.k[size_t(xx) * Kd], Kd, out + xx * 3);
  }
}

// AVX2 horizontal pass over widened coefficients, four output pixels per step (two pairs),
// each pixel's R, G, B (and one zero) in four int32 lanes: the same integer sums as Pillow,
// so the same bytes. A pixel's window is loaded 5 taps (15 bytes) at a time into a 128-bit
// half; one byte shuffle per tap picks that tap's R, G, B and zero-extends them to int32.
// `kw` holds each output pair's weights per tap as 8 int32 ([w0 x4, w1 x4]). The right border
// (where a 16-byte load or store would leave the row) is scalar.
void horizontal_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                     int out_w, int in_w, const Coeffs& c, const std::vector<int32_t>& kw,
                     int y0, int y1) {
  switch (c.ksize) {  // the tap loop unrolled for the common window sizes
    case 3: return horizontal_avx2_k<3>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
    case 5: return horizontal_avx2_k<5>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
    case 7: return horizontal_avx2_k<7>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
    case 9: return horizontal_avx2_k<9>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
    default: return horizontal_avx2_k<0>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
  }
}

// Per output pair, per tap: [w(xx) x4, w(xx+1) x4] (the lane layout of horizontal_avx2).
std::vector<int32_t> pair_weights(const Coeffs& c, int out_w) {
  const int K = c.ksize;
  std::vector<int32_t> kw(size_t((out_w + 1) / 2) * K * 8, 0);
  for (int xx = 0; xx + 1 < out_w; xx += 2)
    for (int k = 0; k < K; ++k)
      for (int l = 0; l < 4; ++l) {
        kw[(size_t(xx / 2) * K + k) * 8 + l] = c.k[size_t(xx) * K + k];
        kw[(size_t(xx / 2) * K + k) * 8 + 4 + l] = c.k[size_t(xx + 1) * K + k];
      }
  return kw;
}
#endif

#if defined(__x86_64__)
bool avx2_usable() { return __builtin_cpu_supports("avx2") && cpu_isa_allows_avx2(); }
#endif

// Horizontal pass rows [y0, y1); `widened`: c has exactly ksize taps per output (see widen).
void horizontal(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                int out_w, int in_w, const Coeffs& c, const std::vector<int32_t>& kw, int y0,
                int y1) {
#if defined(__x86_64__)
  if (!kw.empty()) return horizontal_avx2(src, src_stride, dst, dst_stride, out_w, in_w, c, kw, y0, y1);
#endif
#if defined(__aarch64__)  // NEON (resize_neon.h), Pillow's weights widened; the right border scalar
  if (c.prec == kPrecisionBits && !c.bounds.empty() && c.bounds[1] == c.ksize && cpu_isa_allows_neon()) {
    const int done = horizontal_neon(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
    for (int y = y0; y < y1; ++y)
      for (int xx = done; xx < out_w; ++xx)
        pixel_sum(src + int64_t(y) * src_stride + c.bounds[xx * 2] * 3, &c.k[size_t(xx) * c.ksize], c.ksize,
                  dst + int64_t(y) * dst_stride + xx * 3);
    return;
  }
#endif
  switch (c.bounds.empty() ? 0 : c.bounds[1] == c.ksize ? c.ksize : 0) {  // widened: fixed K
    case 3: return horizontal_k<3>(src, src_stride, dst, dst_stride, out_w, c, y0, y1);
    case 5: return horizontal_k<5>(src, src_stride, dst, dst_stride, out_w, c, y0, y1);
    case 7: return horizontal_k<7>(src, src_stride, dst, dst_stride, out_w, c, y0, y1);
    case 9: return horizontal_k<9>(src, src_stride, dst, dst_stride, out_w, c, y0, y1);
    default: return horizontal_k<0>(src, src_stride, dst, dst_stride, out_w, c, y0, y1);
  }
}

// Output rows [y0, y1) of a vertical pass into dst (row y0 first): each is a weighted sum of
// whole source rows (row i of `src` is source row i + shift), so the inner loop runs over
// contiguous bytes with one weight (vectorisable). The plain C++ twin of the vector passes
// (vertical512, vertical_avx2, vertical_neon): compiled for the baseline only, so that
// VLMPREP_CPU_ISA=scalar runs it as written on every CPU (target clones chose by the CPU alone).
void vertical(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
              int width, const Coeffs& c, int y0, int y1, int shift) {
#if defined(__aarch64__)  // NEON (resize_neon.h), Pillow's weights (the torchvision match: below)
  if (c.prec == kPrecisionBits && cpu_isa_allows_neon())
    return vertical_neon(src, src_stride, dst, dst_stride, width, c, y0, y1, shift);
#endif
  const int n = width * 3;
  std::vector<int32_t> acc(n);
  for (int yy = y0; yy < y1; ++yy) {
    const int ymin = c.bounds[yy * 2] - shift, taps = c.bounds[yy * 2 + 1];
    const int32_t* k = &c.k[size_t(yy) * c.ksize];
    int32_t* a = acc.data();
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < taps; ++y) {
      const uint8_t* in = src + int64_t(ymin + y) * src_stride;
      const int32_t w = k[y];
      for (int j = 0; j < n; ++j) a[j] += int32_t(in[j]) * w;
    }
    uint8_t* out = dst + int64_t(yy - y0) * dst_stride;
    for (int j = 0; j < n; ++j) out[j] = clip8(a[j]);
  }
}

#if defined(__x86_64__)
// The horizontal pass with int16 weights (the torchvision match on AVX2; widened coefficients),
// as torch's AVX2 kernel sums: per output pixel and pair of taps, one 16-byte load at the pair's
// first pixel, one shuffle to int16 lanes [R0 R1 G0 G1 B0 B1 0 0], one madd with the pair's
// weights: int32 R, G, B sums (from 2^(prec-1)), the same integers as pixel_sum's with the
// scaled weights. Two pixels per 256-bit vector, four per step; `kw16` holds per output pair
// and tap pair 8 int32 ([(w0, w1) of xx x4, of xx + 1 x4]); an odd last tap pairs with the
// next pixel at weight 0. Outputs whose loads or 16-byte store would leave the row are scalar.
// Pillow's 22-bit weights take the same pass split exactly as w = 2048 * hi + lo (hi = w >> 11,
// lo = w & 2047, both int16; kSplit): two madds per tap pair, the lo sums from 2^21, and
// sum = 2048 * hi sums + lo sums, the same int32 as pixel_sum's (the AVX-512 passes' split).
// One pair of pixels' clamped sums (horizontal16): R, G, B, 0 of p0 low, of p1 high. QT > 0:
// the tap pair count as a constant (the loop unrolls), else Q. `wl`: the lo weights (kSplit).
template <int QT, bool kSplit>
__attribute__((target("avx2"), always_inline)) inline __m256i pair_sums16(
    const uint8_t* p0, const uint8_t* p1, const int32_t* w, const int32_t* wl, int q_dyn, __m256i pick,
    __m256i round, int prec) {
  const int Q = QT > 0 ? QT : q_dyn;
  __m256i acc = kSplit ? _mm256_setzero_si256() : round, lo = round;
  for (int q = 0; q < Q; ++q) {
    const __m256i win = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + q * 6))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + q * 6)), 1);
    const __m256i px = _mm256_shuffle_epi8(win, pick);
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + size_t(q) * 8));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(px, wq));
    if constexpr (kSplit) {
      const __m256i wlq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wl + size_t(q) * 8));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, wlq));
    }
  }
  if constexpr (kSplit) acc = _mm256_add_epi32(_mm256_slli_epi32(acc, 11), lo);
  return _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(acc, prec), _mm256_setzero_si256()),
                          _mm256_set1_epi32(255));
}

template <int QT, bool kSplit>
__attribute__((target("avx2")))
void horizontal16_q(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                    int in_w, const Coeffs& c, const std::vector<int32_t>& kw16, const std::vector<int32_t>& kw16_lo,
                    int y0, int y1) {
  const int K = c.ksize, Q = (K + 1) / 2, prec = c.prec;
  // Pixel b's last load is bytes [3 (b + 2 (Q - 1)), + 16): inside the row, for xx + 3 (the
  // last window of a step: windows start in order).
  int simd_end = 0;
  while (simd_end + 3 < out_w &&
         (int64_t(c.bounds[(simd_end + 3) * 2]) + 2 * (Q - 1)) * 3 + 16 <= int64_t(in_w) * 3 &&
         int64_t(simd_end) * 3 + 16 <= int64_t(out_w) * 3)
    simd_end += 4;
  const __m256i pick = _mm256_setr_epi8(0, -128, 3, -128, 1, -128, 4, -128, 2, -128, 5, -128, -128, -128, -128, -128,
                                        0, -128, 3, -128, 1, -128, 4, -128, 2, -128, 5, -128, -128, -128, -128, -128);
  const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -128, -128, -128, -128);
  const __m256i round = _mm256_set1_epi32(1 << (prec - 1));
  for (int y = y0; y < y1; ++y) {
    const uint8_t* in = src + int64_t(y) * src_stride;
    uint8_t* out = dst + int64_t(y) * dst_stride;
    for (int xx = 0; xx < simd_end; xx += 4) {
      const size_t at = size_t(xx / 2) * size_t(Q) * 8;
      const int32_t* w = &kw16[at];
      const int32_t* wl = kSplit ? &kw16_lo[at] : nullptr;
      const __m256i a = pair_sums16<QT, kSplit>(in + c.bounds[xx * 2] * 3, in + c.bounds[xx * 2 + 2] * 3, w, wl, Q,
                                                pick, round, prec);
      const __m256i b = pair_sums16<QT, kSplit>(in + c.bounds[xx * 2 + 4] * 3, in + c.bounds[xx * 2 + 6] * 3,
                                                w + size_t(Q) * 8, kSplit ? wl + size_t(Q) * 8 : nullptr, Q, pick,
                                                round, prec);
      // As horizontal_avx2_k: int32 lanes of pixels 0,1 (a) and 2,3 (b) -> 12 RGB bytes.
      const __m256i w16 = _mm256_packs_epi32(a, b);
      const __m128i lo = _mm256_castsi256_si128(w16), hi = _mm256_extracti128_si256(w16, 1);
      const __m128i ordered = _mm_packus_epi16(_mm_unpacklo_epi64(lo, hi), _mm_unpackhi_epi64(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + xx * 3), _mm_shuffle_epi8(ordered, squeeze));
    }
    for (int xx = simd_end; xx < out_w; ++xx)  // the right border: scalar, the same sums
      pixel_sum(in + c.bounds[xx * 2] * 3, &c.k[size_t(xx) * K], K, out + xx * 3);
  }
}

template <bool kSplit>
void horizontal16_split(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                        int in_w, const Coeffs& c, const std::vector<int32_t>& kw16,
                        const std::vector<int32_t>& lo, int y0, int y1) {
#define VLMPREP_H16(Q) horizontal16_q<Q, kSplit>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw16, lo, y0, y1)
  switch ((c.ksize + 1) / 2) {  // the tap-pair loop unrolled for the common window sizes
    case 2: return VLMPREP_H16(2);
    case 3: return VLMPREP_H16(3);
    case 4: return VLMPREP_H16(4);
    case 5: return VLMPREP_H16(5);
    case 6: return VLMPREP_H16(6);
    case 7: return VLMPREP_H16(7);
    // downscales by 3-6x (a 720p or 1080p frame to a 384-512 tile): 1.5x slower than torch's
    // kernel on the dynamic loop (measured 1.56 vs 1.02 ms, 720p -> 384x384 bicubic)
    case 8: return VLMPREP_H16(8);
    case 9: return VLMPREP_H16(9);
    case 10: return VLMPREP_H16(10);
    case 11: return VLMPREP_H16(11);
    case 12: return VLMPREP_H16(12);
    case 13: return VLMPREP_H16(13);
    default: return VLMPREP_H16(0);
  }
#undef VLMPREP_H16
}

// kw16_lo empty: the torchvision match's int16 weights (c.prec bits); else Pillow's split in two.
void horizontal16(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                  int in_w, const Coeffs& c, const std::vector<int32_t>& kw16, const std::vector<int32_t>& kw16_lo,
                  int y0, int y1) {
  if (kw16_lo.empty())
    return horizontal16_split<false>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw16, kw16_lo, y0, y1);
  horizontal16_split<true>(src, src_stride, dst, dst_stride, out_w, in_w, c, kw16, kw16_lo, y0, y1);
}

// Per output pair, per tap pair: [(w0, w1) of xx x4, of xx + 1 x4] as int16 pairs in int32
// (horizontal16's layout), from the scaled weights of c (c.prec bits each).
// part: 0 the scaled weights; 1 / 2 the hi / lo halves of Pillow's (horizontal16's split).
std::vector<int32_t> pair16_weights(const Coeffs& c, int out_w, int part = 0) {
  const int K = c.ksize, Q = (K + 1) / 2;
  auto w16 = [&](int xx, int k) -> uint32_t {
    if (k >= K) return 0u;
    const int32_t w = c.k[size_t(xx) * K + k];
    return uint16_t(int16_t(part == 1 ? w >> 11 : part == 2 ? w & 2047 : w >> (kPrecisionBits - c.prec)));
  };
  std::vector<int32_t> kw(size_t((out_w + 1) / 2) * Q * 8, 0);
  for (int xx = 0; xx + 1 < out_w; xx += 2)
    for (int q = 0; q < Q; ++q)
      for (int l = 0; l < 4; ++l) {
        kw[(size_t(xx / 2) * Q + q) * 8 + l] = int32_t(w16(xx, 2 * q) | (w16(xx, 2 * q + 1) << 16));
        kw[(size_t(xx / 2) * Q + q) * 8 + 4 + l] = int32_t(w16(xx + 1, 2 * q) | (w16(xx + 1, 2 * q + 1) << 16));
      }
  return kw;
}

// The vertical pass with int16 weights (the torchvision match: c.prec bits, see Coeffs), as
// torch's AVX2 kernel does it: two source rows' bytes interleaved as int16 pairs, one madd per
// pair of taps (a tap count that is odd pairs its last row with a zero weight), int32 sums
// from 2^(prec-1), shifted by prec, saturated to uint8. The same integer sums as `vertical`
// (which runs the weights scaled by 2^(22 - prec)), so the same bytes, at about 3x the speed
// of its int32 multiplies. 16 bytes a step; the row's last (n % 16) bytes are scalar.
__attribute__((target("avx2")))
void vertical16(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                int width, const Coeffs& c, const std::vector<int16_t>& w16, int y0, int y1, int shift) {
  const int n = width * 3, prec = c.prec;
  const __m256i round = _mm256_set1_epi32(1 << (prec - 1));
  std::vector<const uint8_t*> rows(c.ksize + 1);
  std::vector<int32_t> pairs(c.ksize / 2 + 1);  // (w[2q], w[2q+1]) as one int32 (madd's pair)
  for (int yy = y0; yy < y1; ++yy) {
    const int ymin = c.bounds[yy * 2] - shift, taps = c.bounds[yy * 2 + 1];
    const int16_t* k = &w16[size_t(yy) * c.ksize];
    for (int y = 0; y < taps; ++y) rows[y] = src + int64_t(ymin + y) * src_stride;
    rows[taps] = rows[taps > 0 ? taps - 1 : 0];  // read with weight 0 (odd tap counts)
    const int npairs = (taps + 1) / 2;
    for (int q = 0; q < npairs; ++q) {
      const int16_t w1 = 2 * q + 1 < taps ? k[2 * q + 1] : int16_t(0);
      pairs[q] = int32_t(uint16_t(k[2 * q])) | int32_t(uint32_t(uint16_t(w1)) << 16);
    }
    uint8_t* out = dst + int64_t(yy - y0) * dst_stride;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
      __m256i lo = round, hi = round;
      for (int q = 0; q < npairs; ++q) {
        const __m256i wq = _mm256_set1_epi32(pairs[q]);
        const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2 * q] + j)));
        const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2 * q + 1] + j)));
        // In-lane interleave: lo holds bytes 0-3 and 8-11, hi 4-7 and 12-15 (as int32 sums).
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wq));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wq));
      }
      lo = _mm256_srai_epi32(lo, prec);
      hi = _mm256_srai_epi32(hi, prec);
      const __m256i w = _mm256_packs_epi32(lo, hi);        // in-lane: bytes 0-7 | 8-15, int16
      const __m256i b8 = _mm256_packus_epi16(w, w);         // [0-7 0-7 | 8-15 8-15]
      const __m256i ordered = _mm256_permute4x64_epi64(b8, 0x08);  // qwords 0, 2 -> bytes 0-15
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm256_castsi256_si128(ordered));
    }
    for (; j < n; ++j) {
      int32_t s = 1 << (prec - 1);
      for (int y = 0; y < taps; ++y) s += int32_t(rows[y][j]) * k[y];
      s >>= prec;
      out[j] = uint8_t(s < 0 ? 0 : s > 255 ? 255 : s);
    }
  }
}
#endif

}  // namespace

constexpr int kColumnsMaxWidth = 8192;  // horizontal_columns_avx2's widest rows

struct ResizeRows::Weights {
  bool need_h = false, need_v = false, vertical_first = false;
  Coeffs ch, cv;
  std::vector<int32_t> kw;  // AVX2 pair weights of ch; empty: the scalar horizontal pass
  Horizontal512 h512;       // the AVX-512 horizontal pass, when use_h512
  bool use_h512 = false, use_v512 = false;
  bool use_v2 = false;  // the AVX2 vertical pass (Pillow's weights)
  std::vector<int16_t> v16;  // cv as int16 (the torchvision match on AVX2): vertical16
  std::vector<int32_t> kw16;  // ch's int16 pair weights (the torchvision match on AVX2): horizontal16
  std::vector<int32_t> kw16_lo;  // with Pillow's weights: kw16 their hi halves, these the lo (horizontal16)
  HorizontalColumns hcol;        // the AVX2 horizontal pass through transposed blocks, when use_hcol
  bool use_hcol = false;

  // `rows` rows of the horizontal pass, src row i -> dst row i.
  void hpass(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int in_w,
             int out_w, int rows) const {
#if defined(__x86_64__)
    if (use_hcol) {  // a last block of under 8 rows costs more than a whole one is worth: below
      const int blocked = rows % 32 >= 8 ? rows : rows / 32 * 32;  // rows the blocks take
      if (blocked) horizontal_columns_avx2(hcol, src, src_stride, dst, dst_stride, in_w, out_w, blocked);
      src += int64_t(blocked) * src_stride;
      dst += int64_t(blocked) * dst_stride;
      rows -= blocked;
      if (rows == 0) return;
    }
    if (!kw16.empty())
      return horizontal16(src, src_stride, dst, dst_stride, out_w, in_w, ch, kw16, kw16_lo, 0, rows);
#endif
    if (!use_h512) return horizontal(src, src_stride, dst, dst_stride, out_w, in_w, ch, kw, 0, rows);
    horizontal512(h512, src, src_stride, dst, dst_stride, rows);
    for (int y = 0; y < rows; ++y)  // the right border: scalar, same arithmetic
      for (int xx = h512.simd_end; xx < out_w; ++xx)
        pixel_sum(src + int64_t(y) * src_stride + ch.bounds[xx * 2] * 3, &ch.k[size_t(xx) * ch.ksize],
                  ch.ksize, dst + int64_t(y) * dst_stride + xx * 3);
  }

  // Output rows [y0, y1) of the vertical pass (see vertical).
  void vpass(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int width,
             int y0, int y1, int shift) const {
    if (use_v512) return vertical512(src, src_stride, dst, dst_stride, width, cv, y0, y1, shift);
    if (use_v2) return vertical_avx2(src, src_stride, dst, dst_stride, width, cv, y0, y1, shift);
#if defined(__x86_64__)
    if (!v16.empty()) return vertical16(src, src_stride, dst, dst_stride, width, cv, v16, y0, y1, shift);
#endif
    vertical(src, src_stride, dst, dst_stride, width, cv, y0, y1, shift);
  }
};

const char* ResizeRows::check(const ResizeParams& p) {
  if (p.in_h < 1 || p.in_w < 1 || p.out_h < 1 || p.out_w < 1) return "sizes must be positive";
  if (p.in_h > kMaxSide || p.in_w > kMaxSide || p.out_h > kMaxSide || p.out_w > kMaxSide)
    return "a side is over the kernels' limit of 2^28";
  if (p.src_stride < int64_t(3) * p.in_w) return "src_stride is smaller than 3 * in_w";
  if (p.match != ResizeMatch::kPillow && p.match != ResizeMatch::kTorchvision) return "unknown resize match";
  return nullptr;
}

ResizeRows::ResizeRows(const ResizeParams& p) : p_(p), w_(new Weights) {
  Weights& w = *w_;
  w.need_h = p.out_w != p.in_w;
  w.need_v = p.out_h != p.in_h;
  const bool tv = p.match == ResizeMatch::kTorchvision;
  auto axis = [&](int in, int out) {
    return tv ? coeffs_torchvision(in, out, p.interpolation) : coeffs(in, out, p.interpolation);
  };
  if (w.need_h) {
    w.ch = axis(p.in_w, p.out_w);
    if (p.in_w >= w.ch.ksize) {
      w.ch = widen(w.ch, p.in_w);
      // The torchvision match's weights are its int16 ones scaled by 2^(22 - prec) (Coeffs), so
      // Pillow's AVX-512 sums, (sum(v * k) + 2^21) >> 22, are torch's (sum(v * w16) +
      // 2^(prec - 1)) >> prec exactly (no int32 overflow: the weights sum to 2^22 either way);
      // 2x the AVX2 int16 pass here (720p -> 728x1288 bicubic: 1.30 -> 0.64 ms)
      w.use_h512 = resize_avx512_usable() && horizontal512_plan(w.ch, p.in_w, p.out_w, &w.h512);
#if defined(__x86_64__)
      if (!w.use_h512 && avx2_usable()) {
        if (tv) {
          w.kw16 = pair16_weights(w.ch, p.out_w);  // int16 weights: torch's madd pass
        } else if (w.ch.ksize <= 7) {  // int32 mullo per tap, one 16-byte load per 5 taps
          w.kw = pair_weights(w.ch, p.out_w);
        } else {  // Pillow's weights split in two int16 halves: the same madd pass, twice the madds.
          // Faster from 9 taps (downscales) on an AVX2-capped Xeon: 1080x1920 -> 1080x448
          // bicubic 3.4 vs 3.8 ms, -> 1080x1100 lanczos 4.6 vs 6.7 ms; slower up to 5 (bench/cpu_paths.py)
          w.kw16 = pair16_weights(w.ch, p.out_w, 1);
          w.kw16_lo = pair16_weights(w.ch, p.out_w, 2);
        }
        // Pillow's weights: whole blocks of 32 rows through the transposed pass (its scratch is
        // 96 bytes per source and output pixel, so up to 8192 pixels wide), the rest as above.
        // 1080x1920 -> 1092x1932 bicubic, one thread, AVX2 cap on a Xeon: 4.9 -> 3.2 ms.
        // VLMPREP_RESIZE_COLUMNS=0 turns it off (read per resize: A/B runs and tests).
        const char* cols = std::getenv("VLMPREP_RESIZE_COLUMNS");
        if (!tv && !(cols && cols[0] == '0') && p.in_w <= kColumnsMaxWidth && p.out_w <= kColumnsMaxWidth) {
          w.hcol = HorizontalColumns(w.ch, p.out_w);
          w.use_hcol = true;
        }
      }
#endif
    }
  }
  if (w.need_v) w.cv = axis(p.in_h, p.out_h);
  w.use_v512 = w.need_v && resize_avx512_usable();  // either match: the same sums (above)
#if defined(__x86_64__)
  w.use_v2 = !tv && w.need_v && !w.use_v512 && avx2_usable();
  if (tv && w.need_v && !w.use_v512 && avx2_usable()) {  // int16 weights: torch's madd pass
    w.v16.resize(w.cv.k.size());
    for (size_t j = 0; j < w.cv.k.size(); ++j) w.v16[j] = int16_t(w.cv.k[j] >> (kPrecisionBits - w.cv.prec));
  }
#endif
  // Pillow 13's pass order (resize.h): the pixels depend on it through the rounding between.
  // torch always runs the horizontal pass first.
  const int shrink = p.in_h - p.out_h;
  w.vertical_first = !tv && w.need_h && w.need_v && shrink > 0 && shrink > 2 * (p.in_w - p.out_w);
}

ResizeRows::~ResizeRows() = default;

int ResizeRows::source_rows(int y1) const {
  if (y1 <= 0) return 0;
  if (!w_->need_v) return y1;
  return w_->cv.bounds[(y1 - 1) * 2] + w_->cv.bounds[(y1 - 1) * 2 + 1];
}

int ResizeRows::first_source_row(int y0) const {
  if (y0 <= 0) return 0;
  if (!w_->need_v) return y0;
  return w_->cv.bounds[y0 * 2];
}

void ResizeRows::rows(int y0, int y1, uint8_t* dst, int64_t dst_stride, ResizeCache& cache,
                      int64_t src_offset) const {
  const Weights& w = *w_;
  const ResizeParams& p = p_;
  const uint8_t* src = p.src + src_offset;
  if (!w.need_h && !w.need_v) {
    for (int y = y0; y < y1; ++y)
      std::memcpy(dst + int64_t(y - y0) * dst_stride, src + int64_t(y) * p.src_stride, size_t(3) * p.out_w);
    return;
  }
  if (!w.need_v) {
    w.hpass(src + int64_t(y0) * p.src_stride, p.src_stride, dst, dst_stride, p.in_w, p.out_w, y1 - y0);
    return;
  }
  if (!w.need_h) {
    w.vpass(src, p.src_stride, dst, dst_stride, p.in_w, y0, y1, 0);
    return;
  }
  if (w.vertical_first) {  // (in_h, in_w) -> band (y1 - y0, in_w) -> (y1 - y0, out_w)
    const int64_t tmp_stride = int64_t(3) * p.in_w;
    cache.buf.resize(size_t(y1 - y0) * tmp_stride);
    cache.lo = cache.hi = 0;  // nothing kept between calls
    w.vpass(src, p.src_stride, cache.buf.data(), tmp_stride, p.in_w, y0, y1, 0);
    w.hpass(cache.buf.data(), tmp_stride, dst, dst_stride, p.in_w, p.out_w, y1 - y0);
    return;
  }
  // Horizontal first, on the source rows these output rows read: [lo, hi). Rows the cache
  // already holds from the previous band are moved to the front instead of computed again.
  const int lo = w.cv.bounds[y0 * 2];
  const int hi = w.cv.bounds[(y1 - 1) * 2] + w.cv.bounds[(y1 - 1) * 2 + 1];
  const int64_t row = int64_t(3) * p.out_w;
  int start = lo;
  if (cache.lo <= lo && lo < cache.hi && cache.hi <= hi) {
    std::memmove(cache.buf.data(), cache.buf.data() + int64_t(lo - cache.lo) * row,
                 size_t(cache.hi - lo) * row);
    start = cache.hi;
  }
  if (cache.buf.size() < size_t(hi - lo) * row) {
    std::vector<uint8_t> grown(size_t(hi - lo) * row);
    if (start > lo) std::memcpy(grown.data(), cache.buf.data(), size_t(start - lo) * row);
    cache.buf.swap(grown);
  }
  w.hpass(src + int64_t(start) * p.src_stride, p.src_stride, cache.buf.data() + int64_t(start - lo) * row,
          row, p.in_w, p.out_w, hi - start);
  cache.lo = lo;
  cache.hi = hi;
  w.vpass(cache.buf.data(), row, dst, dst_stride, p.out_w, y0, y1, lo);
}


const char* resize_cpu(const ResizeParams& p, int num_threads) {
  if (const char* bad = ResizeRows::check(p)) return bad;
  const ResizeRows rr(p);
  const int64_t out_stride = int64_t(3) * p.out_w;
  constexpr int kBand = 32;  // output rows per step: their source rows stay in cache
  // the work is the source's bytes as much as the output's: a 4K photo to a 384x384 tile is
  // 442 KB out (one thread by that alone) from 36 MB in
  const int64_t bytes = int64_t(p.in_h) * p.in_w * 3 + int64_t(p.out_h) * out_stride;
  parallel_ranges(p.out_h, bytes, num_threads, [&](int64_t a, int64_t b) {
    ResizeCache cache;
    for (int y = int(a); y < b; y += kBand)
      rr.rows(y, int(std::min<int64_t>(y + kBand, b)), p.dst + int64_t(y) * out_stride, out_stride, cache);
  });
  return nullptr;
}

}  // namespace vlmprep
