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

}  // namespace vlmprep
