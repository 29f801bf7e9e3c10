// The sizes every kernel entry point accepts, and overflow-checked size arithmetic for the
// bindings' argument checks (torch ops, DALI plugin) and the kernels' own checks.
#pragma once

#include <cstdint>

namespace vlmprep {

// The largest image side (and so patch side) a kernel takes. The kernels keep pixel and byte
// positions within a row in int (3 * side < 2^31) and products of sizes in int64; every image
// Pillow opens (at most 178,956,970 pixels) fits.
constexpr int64_t kMaxSide = int64_t(1) << 28;

// a * b, false when it does not fit int64 (or an operand is negative).
// (Plain division, not __builtin_mul_overflow: nvcc's front end parses this header too.)
inline bool mul_ok(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  if (b != 0 && a > INT64_MAX / b) return false;
  *out = a * b;
  return true;
}

// Whether [offset, offset + n) lies inside [0, size), written so that nothing overflows.
inline bool range_ok(int64_t offset, int64_t n, int64_t size) {
  return offset >= 0 && n >= 0 && n <= size && offset <= size - n;
}

}  // namespace vlmprep
