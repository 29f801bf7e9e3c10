// Internal to the CPU resize: the AVX2 vertical pass, the same integer sums as Pillow, so the
// same bytes (the horizontal AVX2 pass is in resize.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "resize_weights.h"

namespace vlmprep {

// Output rows [y0, y1) of a vertical pass into dst (row y0 first); row i of src is source row
// i + shift; `width` pixels of 3 bytes per row. c: Pillow's weights (c.prec == kPrecisionBits).
// The caller checks that the CPU has AVX2 (and VLMPREP_CPU_ISA allows it).
void vertical_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                   int width, const Coeffs& c, int y0, int y1, int shift);

// The horizontal pass over widened coefficients (every output has c.ksize taps, all inside the
// row) with the vertical pass's sums, 32 rows at a time through a transpose: hc holds the
// weights split as vertical_avx2 splits them, per output pixel.
struct HorizontalColumns {
  int taps = 0, pairs = 0;
  std::vector<int32_t> hi, lo;  // per output pixel, per tap pair
  HorizontalColumns() = default;
  HorizontalColumns(const Coeffs& c, int out_w);
};

void horizontal_columns_avx2(const HorizontalColumns& hc, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                             int64_t dst_stride, int in_w, int out_w, const Coeffs& c, int rows);

}  // namespace vlmprep
