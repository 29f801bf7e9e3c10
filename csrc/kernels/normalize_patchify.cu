// CUDA kernel of normalize_patchify: one launch per batch. blockIdx.y picks the sample,
// blockIdx.x a run of kRowsPerBlock output rows; threads walk the columns of a row, so
// consecutive threads write consecutive elements (coalesced) and each thread decodes its
// column's (dy, dx, c) once for all its rows. Tiles use one "row" per (c, y) source line.
// Plain CUDA: no torch, no DALI (their bindings call normalize_patchify_cuda).
#include <cuda_runtime.h>

#include "vlmprep/normalize_patchify.h"

namespace vlmprep {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 8;

template <typename T, bool kTable>
__global__ void normalize_patchify_kernel(NormalizePatchifyParams p) {
  __shared__ T table[kTable ? kChannels * 256 : 1];
  if constexpr (kTable) {
    const T* lut = static_cast<const T*>(p.lut);
    for (int k = threadIdx.x; k < kChannels * 256; k += blockDim.x) table[k] = lut[k];
    __syncthreads();
  }
  const NPSample s = p.samples[blockIdx.y];
  const bool tiles = p.layout == Layout::kTiles;
  // Kernel rows: patch rows, or (c, y) lines of a tile.
  const int64_t rows = tiles ? int64_t(kChannels) * s.height : num_rows(p, s.height, s.width);
  const int64_t D = tiles ? s.width : row_length(p, s.height, s.width);
  const int64_t r0 = int64_t(blockIdx.x) * kRowsPerBlock;
  if (r0 >= rows) return;
  const int64_t r1 = min(rows, r0 + kRowsPerBlock);
  T* out = static_cast<T*>(p.out) + s.out_offset;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    int32_t dy = 0, dx = int32_t(j), c = 0;
    if (!tiles) column_source(p, s.height, s.width, j, &dy, &dx, &c);
    for (int64_t r = r0; r < r1; ++r) {
      int32_t y0, x0;
      if (tiles) {
        c = int32_t(r / s.height);
        y0 = int32_t(r % s.height);
        x0 = 0;
      } else {
        row_origin(p, s.width, r, &y0, &x0);
      }
      const uint8_t v = s.src[int64_t(y0 + dy) * s.row_stride + int64_t(x0 + dx) * 3 + c];
      T y;
      if constexpr (kTable) y = table[c * 256 + v]; else y = T(v);
      out[r * D + j] = y;
    }
  }
}

template <typename T, bool kTable>
int launch(const NormalizePatchifyParams& p, int64_t max_rows, cudaStream_t stream) {
  if (p.num_samples == 0 || max_rows == 0) return 0;
  const dim3 grid(unsigned((max_rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(p.num_samples));
  normalize_patchify_kernel<T, kTable><<<grid, kThreads, 0, stream>>>(p);
  return int(cudaGetLastError());
}

}  // namespace

int normalize_patchify_cuda(const NormalizePatchifyParams& p, int64_t max_rows, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::kFloat32: return launch<float, true>(p, max_rows, st);
    case DType::kBFloat16: return launch<uint16_t, true>(p, max_rows, st);
    case DType::kUInt8: return launch<uint8_t, false>(p, max_rows, st);
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace vlmprep
