// CUDA launcher of normalize_patchify: one launch per batch (the kernel body and its thread
// layout: normalize_patchify_kernel.cuh). Plain CUDA: no torch, no DALI (their bindings call
// normalize_patchify_cuda, check the batch against the grid's 65535 samples first with an
// expected / got / fix message, and report a returned error by name: cudaGetErrorName).
#include <cuda_runtime.h>

#include "normalize_patchify_kernel.cuh"
#include "vlmprep/normalize_patchify.h"

namespace vlmprep {
namespace {

using kernel::kRowsPerBlock;
using kernel::kThreads;
using kernel::normalize_patchify_kernel;

// gridDim.y is the sample (at most 65535), gridDim.x the row runs (at most 2^31 - 1).
constexpr int64_t kMaxLaunchSamples = 65535;
constexpr int64_t kMaxGridX = 2147483647;

template <typename T, bool kLut>
int launch(const NormalizePatchifyParams& p, int64_t max_rows, cudaStream_t stream) {
  if (p.num_samples == 0 || max_rows == 0) return 0;
  const int64_t gx = (max_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // The bindings check first; here a grid CUDA would refuse (or, for y, a wrapped unsigned)
  // is never launched.
  if (p.num_samples < 0 || p.num_samples > kMaxLaunchSamples || gx > kMaxGridX)
    return int(cudaErrorInvalidConfiguration);
  const dim3 grid(unsigned(gx), unsigned(p.num_samples));
  normalize_patchify_kernel<T, kLut><<<grid, kThreads, 0, stream>>>(p);
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
