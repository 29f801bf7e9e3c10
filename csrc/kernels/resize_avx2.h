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

// The horizontal pass with the vertical pass's sums, 32 rows at a time through a transpose.
// Per output pixel: its taps with the zero weights at either end left out (a widened window of
// 5 bicubic taps mostly holds 4 nonzero), split in pairs as vertical_avx2 splits them.
struct HorizontalColumns {
  int max_pairs = 0;
  std::vector<int32_t> first, taps;  // per output pixel: first source pixel, tap count
  std::vector<int32_t> hi, lo;       // per output pixel, max_pairs tap pairs (pair16 halves)
  HorizontalColumns() = default;
  HorizontalColumns(const Coeffs& c, int out_w);
};

void horizontal_columns_avx2(const HorizontalColumns& hc, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                             int64_t dst_stride, int in_w, int out_w, int rows);

}  // namespace vlmprep
