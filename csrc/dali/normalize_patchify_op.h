// DALI binding of normalize_patchify: fn.vlmprep_normalize_patchify(images, order=..., ...).
// Input: HWC uint8 images (ragged batch). Output per sample: (rows, row_length) for patch
// orders, (3, h, w) for "tiles", float32 (through `lut`, (3*256) floats) or uint8 (no lut).
// Thin: parses arguments, fills vlmprep::NormalizePatchifyParams, calls the kernel or its twin.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dali/pipeline/operator/operator.h"
#include "vlmprep/normalize_patchify.h"
#include "vlmprep/parse.h"

namespace vlmprep_dali {

template <typename Backend>
class NormalizePatchify : public dali::Operator<Backend> {
 public:
  explicit NormalizePatchify(const dali::OpSpec& spec)
      : dali::Operator<Backend>(spec),
        lut_(spec.template GetRepeatedArgument<float>("lut")) {
    const auto order = spec.template GetArgument<std::string>("order");
    if (!vlmprep::parse_order(order, &params_.order))
      DALI_FAIL("vlmprep_normalize_patchify: order: expected " + std::string(vlmprep::kOrderNames) +
                ", got '" + order + "'");
    params_.patch_size = spec.template GetArgument<int>("patch_size");
    const bool mg = params_.order == vlmprep::Order::kMergeGrouped;
    params_.merge_size = mg ? spec.template GetArgument<int>("merge_size") : 1;
    params_.temporal_patch_size = mg ? spec.template GetArgument<int>("temporal_patch_size") : 1;
    dtype_ = spec.template GetArgument<dali::DALIDataType>("dtype");
    DALI_ENFORCE(dtype_ == DALI_FLOAT || dtype_ == DALI_UINT8,
                 "vlmprep_normalize_patchify: dtype: expected FLOAT or UINT8");
    params_.dtype = dtype_ == DALI_FLOAT ? vlmprep::DType::kFloat32 : vlmprep::DType::kUInt8;
    DALI_ENFORCE(dtype_ == DALI_UINT8 || lut_.size() == 3 * 256,
                 "vlmprep_normalize_patchify: a FLOAT output needs lut with 3*256 values (the "
                 "per-channel table of normalized values), got " + std::to_string(lut_.size()));
    const int32_t P = params_.patch_size, m = params_.merge_size, T = params_.temporal_patch_size;
    DALI_ENFORCE(P >= 1 && m >= 1 && T >= 1 && P <= vlmprep::kMaxSide && m <= vlmprep::kMaxSide &&
                     T <= vlmprep::kMaxSide,
                 "vlmprep_normalize_patchify: patch_size, merge_size, temporal_patch_size: expected "
                 "integers in [1, " + std::to_string(vlmprep::kMaxSide) + "], got " + std::to_string(P) +
                     ", " + std::to_string(m) + ", " + std::to_string(T) + "; pass the family's values");
  }

 protected:
  bool SetupImpl(std::vector<dali::OutputDesc>& out, const dali::Workspace& ws) override {
    const auto& in = ws.Input<Backend>(0);
    const int n = in.num_samples();
    out.resize(1);
    out[0].type = dtype_;
    out[0].shape.resize(n, params_.order == vlmprep::Order::kTiles ? 3 : 2);
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
      if (params_.order == vlmprep::Order::kTiles)
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
  std::shared_ptr<void> device_;  // GPU op: the device copy of lut_, made once (normalize_patchify_op.cu)
};

}  // namespace vlmprep_dali
