// GPU side of the DALI plugin: one kernel launch per batch on the workspace's stream.
#include <cuda_runtime.h>

#include "normalize_patchify_op.h"

namespace vlmprep_dali {

// Device copies of the table and of the per-sample descriptors, grown as needed.
struct DeviceBuffers {
  void* lut = nullptr;
  void* samples = nullptr;
  size_t samples_bytes = 0;
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    cudaFree(lut);
    cudaFree(samples);
  }
};

template <>
void NormalizePatchify<dali::GPUBackend>::RunImpl(dali::Workspace& ws) {
  if (!device_) device_ = std::make_shared<DeviceBuffers>();
  DeviceBuffers& buf = *static_cast<DeviceBuffers*>(device_.get());
  const auto& in = ws.Input<dali::GPUBackend>(0);
  auto& out = ws.Output<dali::GPUBackend>(0);
  const int n = in.num_samples();
  if (n == 0) return;
  cudaStream_t stream = ws.stream();
  const int esize = vlmprep::dtype_size(params_.dtype);
  auto* base = static_cast<char*>(out.raw_mutable_tensor(0));
  std::vector<vlmprep::NPSample> samples(n);
  int64_t max_rows = 0;
  for (int i = 0; i < n; ++i) {
    const auto sh = in.tensor_shape(i);
    // Outputs are contiguous (HasContiguousOutputs), so each sample is an offset from sample 0.
    const int64_t off = (static_cast<char*>(out.raw_mutable_tensor(i)) - base) / esize;
    samples[i] = {in.template tensor<uint8_t>(i), 3 * sh[1], int32_t(sh[0]), int32_t(sh[1]), off};
    max_rows = std::max(max_rows, vlmprep::kernel_rows(params_, samples[i].height, samples[i].width));
  }
  const size_t bytes = samples.size() * sizeof(vlmprep::NPSample);
  if (bytes > buf.samples_bytes) {
    CUDA_CALL(cudaFree(buf.samples));
    CUDA_CALL(cudaMalloc(&buf.samples, bytes));
    buf.samples_bytes = bytes;
  }
  // Pageable source: the call returns once the bytes are staged, so `samples` may go.
  CUDA_CALL(cudaMemcpyAsync(buf.samples, samples.data(), bytes, cudaMemcpyHostToDevice, stream));
  vlmprep::NormalizePatchifyParams p = params_;
  if (!lut_.empty()) {
    if (!buf.lut) CUDA_CALL(cudaMalloc(&buf.lut, 3 * 256 * sizeof(float)));
    CUDA_CALL(cudaMemcpyAsync(buf.lut, lut_.data(), 3 * 256 * sizeof(float), cudaMemcpyHostToDevice,
                              stream));
    p.lut = buf.lut;
  }
  p.out = base;
  p.num_samples = n;
  p.samples = static_cast<const vlmprep::NPSample*>(buf.samples);
  const int err = vlmprep::normalize_patchify_cuda(p, max_rows, stream);
  DALI_ENFORCE(err == 0, "vlmprep_normalize_patchify: kernel launch failed: " +
                             std::string(cudaGetErrorString(cudaError_t(err))));
}

}  // namespace vlmprep_dali

namespace dali {
DALI_REGISTER_OPERATOR(VlmprepNormalizePatchify, ::vlmprep_dali::NormalizePatchify<GPUBackend>, GPU);
}  // namespace dali
