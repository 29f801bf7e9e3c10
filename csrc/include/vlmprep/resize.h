// resize: uint8 HWC RGB -> uint8 HWC RGB, bit-exact with Pillow 13's Image.resize (or with
// torchvision's antialiased uint8 resize: ResizeMatch, below).
//
// Pillow resizes separably in fixed point: per output pixel, double-precision filter weights,
// normalised to sum 1, rounded to 22-bit integers; per pass an int32 sum starting at 2^21,
// shifted by 22 and clipped to 0..255. Pillow 13 runs the vertical pass first iff the height
// shrinks by more than twice the pixels the width does (vlmprep/backends/resample_order.py).
// CPU only: GPU resizing is torch's or DALI's job; this is the CPU fast path's resize.
#pragma once

#include <cstdint>

namespace vlmprep {

enum class Interpolation : int32_t { kBilinear = 0, kBicubic = 1, kLanczos = 2 };

// Whose arithmetic the resize reproduces. kTorchvision: torch's antialiased uint8 CPU resize
// (torchvision's resize(antialias=True) of a uint8 tensor; lanczos: torch >= 2.14's): its own
// filter expressions, weights rounded to int16 at a per-axis precision p <= 22, sums from
// 2^(p-1) shifted by p, horizontal pass first. The Pillow passes run it with the weights scaled
// by 2^(22-p) (sums scale exactly, so the shifted bytes are torch's); on AVX2 (no AVX-512) it
// has int16 madd passes of its own, as torch's kernel (resize.cc: horizontal16, vertical16).
enum class ResizeMatch : int32_t { kPillow = 0, kTorchvision = 1 };

struct ResizeParams {
  const uint8_t* src;   // (in_h, in_w, 3), pixel stride 3
  int64_t src_stride;   // bytes between source rows
  int32_t in_h, in_w;
  uint8_t* dst;         // (out_h, out_w, 3), contiguous
  int32_t out_h, out_w;
  Interpolation interpolation;
  ResizeMatch match = ResizeMatch::kPillow;  // last, defaulted: existing braces stay Pillow
};

// Returns nullptr on success, else a static message (sizes invalid). `num_threads` <= 1 runs
// inline; more split each pass's output rows across std::threads.
const char* resize_cpu(const ResizeParams& p, int num_threads);

}  // namespace vlmprep
