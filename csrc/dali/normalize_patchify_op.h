// DALI binding of normalize_patchify: fn.vlmprep_normalize_patchify(images, layout=..., ...).
// Input: HWC uint8 images (ragged batch). Output per sample: (rows, row_length) for patch
// layouts, (3, h, w) for "tiles", float32 (through `lut`, (3*256) floats) or uint8 (no lut).
// Thin: parses arguments, fills vlmprep::NormalizePatchifyParams, calls the kernel or its twin.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dali/pipeline/operator/operator.h"
#include "vlmprep/normalize_patchify.h"

namespace vlmprep_dali {

vlmprep::Layout ParseLayout(const std::string& s);

template <typename Backend>
class NormalizePatchify : public dali::Operator<Backend> {
 public:
  explicit NormalizePatchify(const dali::OpSpec& spec)
      : dali::Operator<Backend>(spec),
        lut_(spec.template GetRepeatedArgument<float>("lut")) {
    params_.layout = ParseLayout(spec.template GetArgument<std::string>("layout"));
    params_.patch = spec.template GetArgument<int>("patch_size");
    const bool mg = params_.layout == vlmprep::Layout::kMergeGrouped;
    params_.merge = mg ? spec.template GetArgument<int>("merge_size") : 1;
    params_.temporal = mg ? spec.template GetArgument<int>("temporal_patch_size") : 1;
    dtype_ = spec.template GetArgument<dali::DALIDataType>("dtype");
    DALI_ENFORCE(dtype_ == DALI_FLOAT || dtype_ == DALI_UINT8,
                 "vlmprep_normalize_patchify: dtype: expected FLOAT or UINT8");
    params_.dtype = dtype_ == DALI_FLOAT ? vlmprep::DType::kFloat32 : vlmprep::DType::kUInt8;
    DALI_ENFORCE(dtype_ == DALI_UINT8 || lut_.size() == 3 * 256,
                 "vlmprep_normalize_patchify: a FLOAT output needs lut with 3*256 values (the "
                 "per-channel table of normalized values), got " + std::to_string(lut_.size()));
    DALI_ENFORCE(params_.patch >= 1 && params_.merge >= 1 && params_.temporal >= 1 &&
                     params_.patch <= vlmprep::kMaxSide && params_.merge <= vlmprep::kMaxSide &&
                     params_.temporal <= vlmprep::kMaxSide,
                 "vlmprep_normalize_patchify: patch_size, merge_size, temporal_patch_size: expected "
                 "integers in [1, " + std::to_string(vlmprep::kMaxSide) + "], got " +
                     std::to_string(params_.patch) + ", " + std::to_string(params_.merge) + ", " +
                     std::to_string(params_.temporal) + "; pass the family's values");
  }

 protected:
  bool SetupImpl(std::vector<dali::OutputDesc>& out, const dali::Workspace& ws) override {
    const auto& in = ws.Input<Backend>(0);
    const int n = in.num_samples();
    out.resize(1);
    out[0].type = dtype_;
    out[0].shape.resize(n, params_.layout == vlmprep::Layout::kTiles ? 3 : 2);
    for (int i = 0; i < n; ++i) {
      const auto sh = in.tensor_shape(i);
      DALI_ENFORCE(sh.size() == 3 && sh[2] == 3,
                   "vlmprep_normalize_patchify: sample " + std::to_string(i) +
                       ": expected an HWC image with 3 channels");
      // Checked in int64 before the kernels' int32 (a side of 2^32 + 3 must not become 3).
      DALI_ENFORCE(sh[0] >= 1 && sh[1] >= 1 && sh[0] <= vlmprep::kMaxSide && sh[1] <= vlmprep::kMaxSide,
                   "vlmprep_normalize_patchify: sample " + std::to_string(i) + ": expected sides in [1, " +
                       std::to_string(vlmprep::kMaxSide) + "], got " + std::to_string(sh[0]) + "x" +
                       std::to_string(sh[1]) + "; resize it first");
      vlmprep::NPSample s{nullptr, 3 * sh[1], int32_t(sh[0]), int32_t(sh[1]), 0};
      const char* bad = vlmprep::check_sample(params_, s);
      DALI_ENFORCE(bad == nullptr, "vlmprep_normalize_patchify: sample " + std::to_string(i) +
                                       " (" + std::to_string(sh[0]) + "x" + std::to_string(sh[1]) +
                                       "): " + (bad ? bad : ""));
      if (params_.layout == vlmprep::Layout::kTiles)
        out[0].shape.set_tensor_shape(i, dali::TensorShape<>(3, sh[0], sh[1]));
      else
        out[0].shape.set_tensor_shape(
            i, dali::TensorShape<>(vlmprep::num_rows(params_, s.height, s.width),
                                   vlmprep::row_length(params_, s.height, s.width)));
    }
    return true;
  }

  void RunImpl(dali::Workspace& ws) override;

  vlmprep::NormalizePatchifyParams params_{};
  dali::DALIDataType dtype_ = DALI_FLOAT;
  std::vector<float> lut_;
  std::shared_ptr<void> device_;  // GPU op: its device buffers (normalize_patchify_op.cu)
};

}  // namespace vlmprep_dali
