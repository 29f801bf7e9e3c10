// Internal to the CPU resize: Pillow's fixed-point weights of one axis (resize.h).
#pragma once

#include <cstdint>
#include <vector>

namespace vlmprep {

// Pillow's PRECISION_BITS for 8-bit images: weights are v * 2^22 rounded, sums start at 2^21.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Coeffs {
  int ksize = 0;
  std::vector<int32_t> bounds;  // per output: first input index, tap count
  std::vector<int32_t> k;       // per output: ksize fixed-point weights
  // The torchvision match's int16 weights have `prec` bits: k = w16 << (kPrecisionBits - prec),
  // so k >> (kPrecisionBits - prec) gives them back (the int16 passes). Pillow's: kPrecisionBits.
  int prec = kPrecisionBits;
};

// Pillow's rounding shift of one int32 sum and its clip to 0..255 (its table lookup).
inline uint8_t clip8(int32_t ss) {
  const int32_t v = ss >> kPrecisionBits;  // arithmetic shift, as Pillow's table index
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Byte j of one vertical-pass output row: Pillow's sum over `taps` source rows from `rows`
// (`stride` bytes apart) with weights k (the vector passes' row tails).
inline uint8_t vertical_byte(const uint8_t* rows, int64_t stride, const int32_t* k, int taps, int64_t j) {
  int32_t s = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < taps; ++y) s += int32_t(rows[int64_t(y) * stride + j]) * k[y];
  return clip8(s);
}

}  // namespace vlmprep
