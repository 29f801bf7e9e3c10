// GPU side of the DALI plugin: one kernel launch per batch on the workspace's stream.
//
// Memory: the 3 KB lookup table is constant for the op's life (an argument): it is uploaded
// once, from pinned memory, into DALI's device memory pool, before the first launch. The
// per-sample descriptors change every batch (pointers, offsets): they are written into pinned
// memory and copied into device memory, both from DALI's scratchpad, stream-ordered (no
// cudaMalloc / cudaFree, no device sync, no copy from pageable memory).
#include <cuda_runtime.h>

#include "dali/core/mm/memory.h"
#include "dali/kernels/dynamic_scratchpad.h"
#include "normalize_patchify_op.h"

namespace vlmprep_dali {

// The device copy of the table, made once per op.
struct DeviceTable {
  dali::mm::uptr<float> host;    // pinned staging, kept while the copy may be in flight
  dali::mm::uptr<float> device;  // DALI's default device resource (its pool)
};

template <>
void NormalizePatchify<dali::GPUBackend>::RunImpl(dali::Workspace& ws) {
  const auto& in = ws.Input<dali::GPUBackend>(0);
  auto& out = ws.Output<dali::GPUBackend>(0);
  const int n = in.num_samples();
  if (n == 0) return;
  // CUDA's grid has at most 65535 rows (gridDim.y: one sample each).
  DALI_ENFORCE(n <= 65535, "vlmprep_normalize_patchify: expected at most 65535 samples per batch "
                           "(one CUDA grid row each), got " + std::to_string(n) +
                               "; fix: use a smaller batch_size");
  cudaStream_t stream = ws.stream();
  if (!lut_.empty() && !device_) {
    auto t = std::make_shared<DeviceTable>();
    t->host = dali::mm::alloc_raw_unique<float, dali::mm::memory_kind::pinned>(lut_.size());
    t->device = dali::mm::alloc_raw_unique<float, dali::mm::memory_kind::device>(lut_.size());
    std::copy(lut_.begin(), lut_.end(), t->host.get());
    CUDA_CALL(cudaMemcpyAsync(t->device.get(), t->host.get(), lut_.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream));
    // Once per op: later batches may run on other streams, so the table is complete before
    // any of them reads it.
    CUDA_CALL(cudaStreamSynchronize(stream));
    device_ = t;
  }
  const int esize = vlmprep::dtype_size(params_.dtype);
  auto* base = static_cast<char*>(out.raw_mutable_tensor(0));
  dali::kernels::DynamicScratchpad scratch{dali::AccessOrder(stream)};
  // Pinned staging: freed in stream order (after the copy below), like the device copy.
  vlmprep::NPSample* samples = scratch.AllocatePinned<vlmprep::NPSample>(n);
  int64_t max_rows = 0;
  for (int i = 0; i < n; ++i) {
    const auto sh = in.tensor_shape(i);
    // Outputs are contiguous (HasContiguousOutputs), so each sample is an offset from sample 0.
    const int64_t off = (static_cast<char*>(out.raw_mutable_tensor(i)) - base) / esize;
    samples[i] = {in.template tensor<uint8_t>(i), 3 * sh[1], int32_t(sh[0]), int32_t(sh[1]), off};
    max_rows = std::max(max_rows, vlmprep::kernel_rows(params_, samples[i].height, samples[i].width));
  }
  vlmprep::NPSample* samples_dev = scratch.AllocateGPU<vlmprep::NPSample>(n);
  CUDA_CALL(cudaMemcpyAsync(samples_dev, samples, n * sizeof(vlmprep::NPSample),
                            cudaMemcpyHostToDevice, stream));
  vlmprep::NormalizePatchifyParams p = params_;
  p.lut = lut_.empty() ? nullptr : static_cast<DeviceTable*>(device_.get())->device.get();
  p.out = base;
  p.num_samples = n;
  p.samples = samples_dev;
  const int err = vlmprep::normalize_patchify_cuda(p, max_rows, stream);
  DALI_ENFORCE(err == 0, "vlmprep_normalize_patchify: kernel launch failed: " +
                             std::string(cudaGetErrorName(cudaError_t(err))) + " (" +
                             cudaGetErrorString(cudaError_t(err)) + ")");
}

}  // namespace vlmprep_dali

namespace dali {
DALI_REGISTER_OPERATOR(VlmprepNormalizePatchify, ::vlmprep_dali::NormalizePatchify<GPUBackend>, GPU);
}  // namespace dali
