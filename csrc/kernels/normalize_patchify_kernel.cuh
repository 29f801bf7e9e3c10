// The normalize_patchify CUDA kernel body, included by normalize_patchify.cu (and, with a
// host shim for __global__ / __shared__ / threadIdx / __syncthreads, by the emulation test
// tests/kernels/emulate_kernel.cc, so its index math is checked on machines without a GPU).
// blockIdx.y picks the sample, blockIdx.x a run of kRowsPerBlock output rows; threads walk the
// columns of a row, so consecutive threads write consecutive elements (coalesced). Integer index
// math is done once: a row's origin once per block (shared memory), a column's (dy, dx, c) once
// per thread. Tiles use one "row" per (c, y) source line.
#pragma once

#include "vlmprep/normalize_patchify.h"

namespace vlmprep {
namespace kernel {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 16;

template <typename T, bool kLut>
__global__ void normalize_patchify_kernel(NormalizePatchifyParams p) {
  __shared__ T lut_s[kLut ? kChannels * 256 : 1];
  __shared__ int32_t row_y[kRowsPerBlock], row_x[kRowsPerBlock], row_c[kRowsPerBlock];
  if constexpr (kLut) {
    const T* lut = static_cast<const T*>(p.lut);
    for (int k = threadIdx.x; k < kChannels * 256; k += blockDim.x) lut_s[k] = lut[k];
  }
  const NPSample s = p.samples[blockIdx.y];
  const bool tiles = p.order == Order::kTiles;
  // Kernel rows: patch rows, or (c, y) lines of a tile.
  const int64_t rows = tiles ? int64_t(kChannels) * s.height : num_rows(p, s.height, s.width);
  const int64_t D = tiles ? s.width : row_length(p, s.height, s.width);
  const int64_t r0 = int64_t(blockIdx.x) * kRowsPerBlock;
  if (r0 >= rows) return;  // the whole block leaves together: no barrier is skipped
  const int nr = int(min(rows - r0, int64_t(kRowsPerBlock)));
  // Each row's origin once per block (the integer divisions are not repeated per element).
  if (threadIdx.x < nr) {
    const int64_t r = r0 + threadIdx.x;
    if (tiles) {
      row_c[threadIdx.x] = int32_t(r / s.height);
      row_y[threadIdx.x] = int32_t(r % s.height);
      row_x[threadIdx.x] = 0;
    } else {
      row_origin(p, s.width, r, &row_y[threadIdx.x], &row_x[threadIdx.x]);
      row_c[threadIdx.x] = 0;
    }
  }
  __syncthreads();
  // __restrict__: source and output never alias (the binding checks it), so loads may take the
  // read-only path and be batched instead of one load / store pair at a time.
  const uint8_t* __restrict__ src = s.src;
  T* __restrict__ out = static_cast<T*>(p.out) + s.out_offset + r0 * D;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    int32_t dy = 0, dx = int32_t(j), c = 0;
    if (!tiles) column_source(p, s.height, s.width, j, &dy, &dx, &c);
    for (int k = 0; k < nr; ++k) {
      const int32_t cc = tiles ? row_c[k] : c;
      const uint8_t v = src[int64_t(row_y[k] + dy) * s.row_stride + int64_t(row_x[k] + dx) * 3 + cc];
      T y;
      if constexpr (kLut) y = lut_s[cc * 256 + v]; else y = T(v);
      out[k * D + j] = y;
    }
  }
}

}  // namespace kernel
}  // namespace vlmprep
