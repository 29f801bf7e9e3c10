// NEON passes of the Pillow-exact resize (resize_neon.h). Compiles to nothing off aarch64.
#include "resize_neon.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstring>
#include <vector>

namespace vlmprep {
namespace {

// int32 sums >> 22, clipped to 0..255 (Pillow's clip8): the saturating narrows clip, since
// anything outside int16 is outside 0..255 too.
inline uint8x8_t clip8x8(int32x4_t a, int32x4_t b) {
  return vqmovun_s16(vcombine_s16(vqmovn_s32(vshrq_n_s32(a, kPrecisionBits)),
                                  vqmovn_s32(vshrq_n_s32(b, kPrecisionBits))));
}

// One output pixel's R, G, B (and a zero) sums over K taps from p (K > 0: a constant, so the
// tap loop unrolls; else k_dyn). The window is loaded 5 taps (15 bytes) per 16-byte load; one
// table lookup per tap picks its R, G, B into the low bytes of int32 lanes (indices >= 16 give
// zero bytes, so the lookup also zero-extends).
template <int K>
inline int32x4_t pixel_neon(const uint8_t* p, const int32_t* w, const uint8x16_t* pick, int k_dyn) {
  const int k_all = K > 0 ? K : k_dyn;
  int32x4_t acc = vdupq_n_s32(1 << (kPrecisionBits - 1));
  for (int k0 = 0; k0 < k_all; k0 += 5) {
    const uint8x16_t win = vld1q_u8(p + k0 * 3);
    const int n = k_all - k0 < 5 ? k_all - k0 : 5;
    for (int j = 0; j < n; ++j)
      acc = vmlaq_n_s32(acc, vreinterpretq_s32_u8(vqtbl1q_u8(win, pick[j])), w[k0 + j]);
  }
  return acc;
}

template <int K>
int horizontal_neon_k(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                      int in_w, const Coeffs& c, int y0, int y1) {
  const int Kd = c.ksize;
  const int loads = (Kd + 4) / 5;
  // A pixel whose window starts at source pixel b reads bytes up to 3b + 15 (loads - 1) + 15:
  // inside the row while 3b + 15 loads + 1 <= 3 in_w. Windows start in order (widen keeps
  // them so), so the first pixel past that ends the vector part; then whole groups of 4.
  int simd_end = 0;
  while (simd_end < out_w && int64_t(c.bounds[simd_end * 2]) * 3 + 15 * loads + 1 <= int64_t(in_w) * 3)
    ++simd_end;
  simd_end &= ~3;
  uint8x16_t pick[5];  // tap j of a load: bytes 3j, 3j+1, 3j+2 -> the low bytes of lanes 0..2
  for (int j = 0; j < 5; ++j) {
    uint8_t ctl[16];
    std::memset(ctl, 0xff, sizeof ctl);  // out of the table: a zero byte
    for (int ch = 0; ch < 3; ++ch) ctl[ch * 4] = uint8_t(3 * j + ch);
    pick[j] = vld1q_u8(ctl);
  }
  // [R0 G0 B0 0 R1 G1 B1 0 ..] -> [R0 G0 B0 R1 G1 B1 ..] (12 bytes).
  static const uint8_t kSqueeze[16] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 0xff, 0xff, 0xff, 0xff};
  const uint8x16_t squeeze = vld1q_u8(kSqueeze);
  for (int y = y0; y < y1; ++y) {
    const uint8_t* in = src + int64_t(y) * src_stride;
    uint8_t* out = dst + int64_t(y) * dst_stride;
    for (int xx = 0; xx < simd_end; xx += 4) {
      const int32_t* w = &c.k[size_t(xx) * Kd];
      const int32x4_t a0 = pixel_neon<K>(in + c.bounds[xx * 2] * 3, w, pick, Kd);
      const int32x4_t a1 = pixel_neon<K>(in + c.bounds[xx * 2 + 2] * 3, w + Kd, pick, Kd);
      const int32x4_t a2 = pixel_neon<K>(in + c.bounds[xx * 2 + 4] * 3, w + 2 * Kd, pick, Kd);
      const int32x4_t a3 = pixel_neon<K>(in + c.bounds[xx * 2 + 6] * 3, w + 3 * Kd, pick, Kd);
      const uint8x16_t rgb = vqtbl1q_u8(vcombine_u8(clip8x8(a0, a1), clip8x8(a2, a3)), squeeze);
      // Exactly the 12 bytes of the 4 pixels: 8, then 4 (no store past the row's end).
      vst1_u8(out + xx * 3, vget_low_u8(rgb));
      const uint32_t last = vgetq_lane_u32(vreinterpretq_u32_u8(rgb), 2);
      std::memcpy(out + xx * 3 + 8, &last, 4);
    }
  }
  return simd_end;
}

}  // namespace

int horizontal_neon(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                    int in_w, const Coeffs& c, int y0, int y1) {
  switch (c.ksize) {  // the tap loop unrolled for the common window sizes
    case 3: return horizontal_neon_k<3>(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
    case 5: return horizontal_neon_k<5>(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
    case 7: return horizontal_neon_k<7>(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
    case 9: return horizontal_neon_k<9>(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
    default: return horizontal_neon_k<0>(src, src_stride, dst, dst_stride, out_w, in_w, c, y0, y1);
  }
}

void vertical_neon(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int width,
                   const Coeffs& c, int y0, int y1, int shift) {
  const int n = width * 3;
  const int32x4_t round = vdupq_n_s32(1 << (kPrecisionBits - 1));
  std::vector<const uint8_t*> rows(c.ksize);
  for (int yy = y0; yy < y1; ++yy) {
    const int ymin = c.bounds[yy * 2] - shift, taps = c.bounds[yy * 2 + 1];
    const int32_t* k = &c.k[size_t(yy) * c.ksize];
    for (int y = 0; y < taps; ++y) rows[y] = src + int64_t(ymin + y) * src_stride;
    uint8_t* out = dst + int64_t(yy - y0) * dst_stride;
    int j = 0;
    // 16 bytes a step, all taps: each byte zero-extended to an int32 lane times the row's weight.
    for (; j + 16 <= n; j += 16) {
      int32x4_t a0 = round, a1 = round, a2 = round, a3 = round;
      for (int y = 0; y < taps; ++y) {
        const uint8x16_t v = vld1q_u8(rows[y] + j);
        const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
        const int32_t w = k[y];
        a0 = vmlaq_n_s32(a0, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo))), w);
        a1 = vmlaq_n_s32(a1, vreinterpretq_s32_u32(vmovl_high_u16(lo)), w);
        a2 = vmlaq_n_s32(a2, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi))), w);
        a3 = vmlaq_n_s32(a3, vreinterpretq_s32_u32(vmovl_high_u16(hi)), w);
      }
      vst1q_u8(out + j, vcombine_u8(clip8x8(a0, a1), clip8x8(a2, a3)));
    }
    for (; j < n; ++j) out[j] = vertical_byte(rows[0], src_stride, k, taps, j);  // the last n % 16
  }
}

}  // namespace vlmprep

#endif  // __aarch64__
