// CPU side of the DALI plugin: schema, the CPU op (one task per sample on DALI's thread pool,
// each running the CPU twin on its sample).
#include "normalize_patchify_op.h"

namespace vlmprep_dali {

template <>
void NormalizePatchify<dali::CPUBackend>::RunImpl(dali::Workspace& ws) {
  const auto& in = ws.Input<dali::CPUBackend>(0);
  auto& out = ws.Output<dali::CPUBackend>(0);
  auto& tp = ws.GetThreadPool();
  for (int i = 0; i < in.num_samples(); ++i) {
    tp.AddWork([&, i](int) {
      const auto sh = in.tensor_shape(i);
      vlmprep::NPSample s{in.template tensor<uint8_t>(i), 3 * sh[1], int32_t(sh[0]),
                          int32_t(sh[1]), 0};
      vlmprep::NormalizePatchifyParams p = params_;
      p.lut = lut_.empty() ? nullptr : lut_.data();
      p.out = out.raw_mutable_tensor(i);
      p.num_samples = 1;
      p.samples = &s;
      vlmprep::normalize_patchify_cpu(p, 1);
    }, dali::volume(in.tensor_shape(i)));
  }
  tp.RunAll();
}

}  // namespace vlmprep_dali

namespace dali {

DALI_SCHEMA(VlmprepNormalizePatchify)
    .DocStr(R"(vlmprep's fused normalize + patchify: HWC uint8 images -> packed ViT rows in the
family's row order (merge_grouped, raster, naflex; or CHW tiles), normalized through a per-channel
256-entry table (float32) or left as uint8.)")
    .NumInput(1)
    .NumOutput(1)
    .InputLayout(0, "HWC")
    .AddArg("order", "merge_grouped | raster | naflex | tiles", DALI_STRING)
    .AddArg("patch_size", "patch side P", DALI_INT32)
    .AddOptionalArg("merge_size", "m (merge_grouped)", 1)
    .AddOptionalArg("temporal_patch_size", "T copies of a still image (merge_grouped)", 1)
    .AddOptionalArg("lut", "3*256 floats: normalized value of level v in channel c at c*256+v",
                    std::vector<float>{})
    .AddOptionalTypeArg("dtype", "FLOAT (normalized) or UINT8 (pixels as they are)", DALI_FLOAT);

DALI_REGISTER_OPERATOR(VlmprepNormalizePatchify, ::vlmprep_dali::NormalizePatchify<CPUBackend>, CPU);

}  // namespace dali
