// The kernels' argument names -> their enums, for both bindings (torch ops, DALI plugin): one
// parser, so a name means the same op in every layer. Framework-free: each binding reports a
// miss in its own way (TORCH_CHECK, DALI_FAIL) with kOrderNames / kInterpolationNames.
#pragma once

#include <string_view>

#include "vlmprep/normalize_patchify.h"
#include "vlmprep/resize.h"

namespace vlmprep {

// patchify's row order (vlmprep.ops.patchify.order).
constexpr const char* kOrderNames = "merge_grouped, raster, naflex or tiles";

// "merge_grouped" -> Order::kMergeGrouped, ...; false for any other name.
inline bool parse_order(std::string_view s, Order* out) {
  if (s == "merge_grouped") *out = Order::kMergeGrouped;
  else if (s == "raster") *out = Order::kRaster;
  else if (s == "naflex") *out = Order::kNaflex;
  else if (s == "tiles") *out = Order::kTiles;
  else return false;
  return true;
}

// The compiled resize's interpolations (vlmprep.kernels.RESIZE_INTERPOLATIONS; nearest stays with PIL).
constexpr const char* kInterpolationNames = "bilinear, bicubic or lanczos";

// "bilinear" -> Interpolation::kBilinear, ...; false for any other name.
inline bool parse_interpolation(std::string_view s, Interpolation* out) {
  if (s == "bilinear") *out = Interpolation::kBilinear;
  else if (s == "bicubic") *out = Interpolation::kBicubic;
  else if (s == "lanczos") *out = Interpolation::kLanczos;
  else return false;
  return true;
}

constexpr const char* kResizeMatchNames = "pillow or torchvision";

// "pillow" -> ResizeMatch::kPillow, "torchvision" -> kTorchvision; false for any other name.
inline bool parse_resize_match(std::string_view s, ResizeMatch* out) {
  if (s == "pillow") *out = ResizeMatch::kPillow;
  else if (s == "torchvision") *out = ResizeMatch::kTorchvision;
  else return false;
  return true;
}

}  // namespace vlmprep
