// Internal to the CPU resize: the two Pillow-exact passes with NEON (aarch64), the same int32
// sums as Pillow (resize.cc's scalar passes), so the same bytes. Defined on aarch64 only, where
// NEON is baseline; resize.cc calls them under `#if defined(__aarch64__)` for the Pillow match
// (the torchvision match stays on the scalar passes there).
//
// Pillow's weights have 22 bits and a sign, too wide for NEON's int16 multiplies: the sums run
// on int32 lanes (vmlaq_n_s32) of pixel bytes zero-extended to int32. An integer sum does not
// depend on the order of its terms, so any grouping into lanes gives Pillow's integers.
#pragma once

#include <cstdint>

#include "resize_weights.h"

namespace vlmprep {

// Rows [y0, y1) of a horizontal pass over widened weights (every output exactly c.ksize taps,
// resize.cc's widen): output pixels [0, returned) of every row. The rest of each row (pixels
// whose 16-byte window loads would pass the row's end, and a last group of fewer than 4) is the
// caller's, with the scalar pixel_sum (the same arithmetic).
int horizontal_neon(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int out_w,
                    int in_w, const Coeffs& c, int y0, int y1);

// Output rows [y0, y1) of a vertical pass into dst (row y0 first); row i of src is source row
// i + shift; `width` pixels of 3 bytes per row. All of each row (its last n % 16 bytes scalar).
void vertical_neon(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int width,
                   const Coeffs& c, int y0, int y1, int shift);

}  // namespace vlmprep
