// Internal to the CPU resize: the AVX2 vertical pass, the same integer sums as Pillow, so the
// same bytes (the horizontal AVX2 pass is in resize.cc).
#pragma once

#include <cstdint>

#include "resize_weights.h"

namespace vlmprep {

// Output rows [y0, y1) of a vertical pass into dst (row y0 first); row i of src is source row
// i + shift; `width` pixels of 3 bytes per row. c: Pillow's weights (c.prec == kPrecisionBits).
// The caller checks that the CPU has AVX2 (and VLMPREP_CPU_ISA allows it).
void vertical_avx2(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                   int width, const Coeffs& c, int y0, int y1, int shift);

}  // namespace vlmprep
