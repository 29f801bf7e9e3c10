// Internal to the CPU resize: the two passes with AVX-512 (BW, VBMI, VNNI), the same integer
// sums as Pillow, so the same bytes.
//
// Pillow sums uint8 x 22-bit weights in int32. VNNI's dpwssd multiplies int16 pairs, so each
// weight w is split exactly as w = 2048 * hi + lo (hi = w >> 11, lo = w & 2047, both int16):
// sum(v * w) + 2^21 = 2048 * sum(v * hi) + (2^21 + sum(v * lo)), two dpwssd per pair of taps.
#pragma once

#include <cstdint>
#include <vector>

#include "resize_weights.h"

namespace vlmprep {

// Whether this CPU has what the passes use (and VLMPREP_CPU_ISA does not ask for less:
// "avx2" or "scalar" turn them off, for tests of the other paths).
bool resize_avx512_usable();

// The horizontal pass's plan: output bytes [0, 16 * groups) in groups of 16 (one int32 lane
// per byte), each group one 64-byte source load and, per pair of taps, a byte permutation and
// two dpwssd. Pixels from simd_end on are the caller's.
struct Horizontal512 {
  bool two_loads = false;  // windows of up to 128 bytes: two loads and two-source permutes
  int pairs = 0;
  int groups = 0;
  int simd_end = 0;
  std::vector<int32_t> bases;   // per group: its first source pixel
  std::vector<uint8_t> table;   // per group, per pair: permutation, hi weights, lo weights (64 B each)
};

// Plans the pass over widened weights (every output exactly c.ksize taps). False when the
// groups' windows do not fit 128 bytes (downscales by about 8 and more): use another path.
bool horizontal512_plan(const Coeffs& c, int in_w, int out_w, Horizontal512* h);

// Output bytes [0, 16 * h.groups) of `rows` rows; the caller does pixels h.simd_end on.
void horizontal512(const Horizontal512& h, const uint8_t* src, int64_t src_stride, uint8_t* dst,
                   int64_t dst_stride, int rows);

// Output rows [y0, y1) of a vertical pass into dst (row y0 first); row i of src is source row
// i + shift. `width` pixels of 3 bytes per row.
void vertical512(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride,
                 int width, const Coeffs& c, int y0, int y1, int shift);

}  // namespace vlmprep
