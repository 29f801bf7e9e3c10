// normalize_patchify: resized uint8 HWC images of a ragged batch -> packed ViT rows.
//
// Framework-free (no torch, no DALI): plain structs, raw pointers and a stream.
// Shared by the CPU twin (normalize_patchify_cpu.cc) and the CUDA kernel (normalize_patchify.cu):
// the index math lives here once, as __host__ __device__ inline functions.
//
// Normalization is a per-channel 256-entry table `lut[c * 256 + v]` of the output type, built
// by the caller from its own formula (rescale, mean, std folded together). A uint8 input has
// only 256 values per channel, so one load replaces the multiply-add and every backend stays
// bit-exact with its pure implementation, whatever order that one rounds in.
#pragma once

#include <cstdint>

#include "vlmprep/limits.h"

#if defined(__CUDACC__)
#define VLMPREP_HD __host__ __device__ __forceinline__
#else
#define VLMPREP_HD inline
#endif

namespace vlmprep {

// Row orders (the names of vlmprep.ops.patchify.order; see vlmprep/plan/grid.py; parsed by
// parse_order in vlmprep/parse.h).
enum class Order : int32_t {
  kMergeGrouped = 0,  // Qwen: rows (bh, bw, mh, mw), columns [c, t, py, px]; t repeats the image
  kRaster = 1,        // Pixtral: rows (gy, gx), columns [c, py, px]
  kNaflex = 2,        // SigLIP2: rows (gy, gx), columns [py, px, c]
  kTiles = 3,         // tiling families: one "row" per sample, the tile as [c, y, x] (CHW)
};

enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kUInt8 = 2 };

VLMPREP_HD int dtype_size(DType d) { return d == DType::kFloat32 ? 4 : d == DType::kBFloat16 ? 2 : 1; }

// One image (or tile) of the batch. Given a 28x56 image, patch 14: rows 8, row_length 588*T.
// A video's temporal group (merge_grouped, T > 1) is one sample of T distinct frames of the same
// size: frame t at src + t * frame_stride, its pixels in the row's t-th [py, px] planes.
struct NPSample {
  const uint8_t* src;   // (height, width, 3) uint8, pixel stride 3, rows `row_stride` bytes apart
  int64_t row_stride;   // bytes between image rows (>= 3 * width; a crop of a canvas is a view)
  int32_t height;
  int32_t width;
  int64_t out_offset;   // first output element of this sample (in elements, not bytes)
  int64_t frame_stride = 0;  // bytes from frame t to t + 1; 0: a still image, repeated T times
};

struct NormalizePatchifyParams {
  Order order;
  DType dtype;
  int32_t patch_size;           // P
  int32_t merge_size;           // m (merge_grouped only; 1 elsewhere)
  int32_t temporal_patch_size;  // T copies of a still image (merge_grouped only; 1 elsewhere)
  const void* lut;              // [3][256] of the output type; nullptr for uint8 (values are copied)
  void* out;                    // the packed output, elements of `dtype`
  int32_t num_samples;
  const NPSample* samples;  // host memory for the CPU twin, device memory for the kernel
};

constexpr int kChannels = 3;

// Elements of one output row.
VLMPREP_HD int64_t row_length(const NormalizePatchifyParams& p, int32_t h, int32_t w) {
  switch (p.order) {
    case Order::kMergeGrouped:
      return int64_t(kChannels) * p.temporal_patch_size * p.patch_size * p.patch_size;
    case Order::kTiles: return int64_t(kChannels) * h * w;
    default: return int64_t(kChannels) * p.patch_size * p.patch_size;
  }
}

// Output rows of one sample.
VLMPREP_HD int64_t num_rows(const NormalizePatchifyParams& p, int32_t h, int32_t w) {
  return p.order == Order::kTiles ? 1 : int64_t(h / p.patch_size) * (w / p.patch_size);
}

// Top-left source pixel (y0, x0) of output row r (patch orders).
VLMPREP_HD void row_origin(const NormalizePatchifyParams& p, int32_t w, int64_t r, int32_t* y0,
                           int32_t* x0) {
  const int32_t P = p.patch_size;
  const int32_t gw = w / P;
  if (p.order == Order::kMergeGrouped) {
    const int32_t m = p.merge_size;
    const int64_t group = r / (int64_t(m) * m);  // (bh, bw) block of m x m patches
    const int32_t in = int32_t(r % (int64_t(m) * m));
    const int32_t bwc = gw / m;
    *y0 = (int32_t(group / bwc) * m + in / m) * P;
    *x0 = (int32_t(group % bwc) * m + in % m) * P;
  } else {
    *y0 = int32_t(r / gw) * P;
    *x0 = int32_t(r % gw) * P;
  }
}

// Source (dy, dx, c) of column j, relative to the row's origin.
VLMPREP_HD void column_source(const NormalizePatchifyParams& p, int32_t h, int32_t w, int64_t j,
                              int32_t* dy, int32_t* dx, int32_t* c) {
  const int32_t P = p.patch_size;
  switch (p.order) {
    case Order::kMergeGrouped: {  // [c, t, py, px]
      const int32_t pp = int32_t(j % (int64_t(P) * P));
      *c = int32_t(j / (int64_t(P) * P * p.temporal_patch_size));
      *dy = pp / P;
      *dx = pp % P;
      break;
    }
    case Order::kRaster: {  // [c, py, px]
      *c = int32_t(j / (int64_t(P) * P));
      const int32_t pp = int32_t(j % (int64_t(P) * P));
      *dy = pp / P;
      *dx = pp % P;
      break;
    }
    case Order::kNaflex: {  // [py, px, c]
      *c = int32_t(j % kChannels);
      const int32_t pp = int32_t(j / kChannels);
      *dy = pp / P;
      *dx = pp % P;
      break;
    }
    default: {  // kTiles: [c, y, x]
      const int64_t hw = int64_t(h) * w;
      *c = int32_t(j / hw);
      *dy = int32_t((j % hw) / w);
      *dx = int32_t(j % w);
    }
  }
}

// Source byte offset of column j's frame (merge_grouped: t = (j / P^2) % T; 0 for a still
// image, frame_stride 0, and every other order).
VLMPREP_HD int64_t column_frame_offset(const NormalizePatchifyParams& p, const NPSample& s, int64_t j) {
  if (s.frame_stride == 0 || p.order != Order::kMergeGrouped) return 0;
  const int64_t pp = int64_t(p.patch_size) * p.patch_size;
  return ((j / pp) % p.temporal_patch_size) * s.frame_stride;
}

// Output elements of one h x w sample (num_rows * row_length), false when they overflow int64
// (the parameters come from callers: checked, not trusted).
inline bool sample_elements(const NormalizePatchifyParams& p, int64_t h, int64_t w, int64_t* n) {
  if (p.order == Order::kTiles) return mul_ok(h, w, n) && mul_ok(*n, kChannels, n);
  if (p.patch_size < 1 || p.temporal_patch_size < 1) return false;
  int64_t rows, len;
  const int64_t T = p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1;
  return mul_ok(h / p.patch_size, w / p.patch_size, &rows) &&
         mul_ok(int64_t(p.patch_size), p.patch_size, &len) && mul_ok(len, int64_t(kChannels) * T, &len) &&
         mul_ok(rows, len, n);
}

// Checks a sample against the order; returns nullptr when valid, else a static message.
// Overflow-safe for any field values (they come from callers).
inline const char* check_sample(const NormalizePatchifyParams& p, const NPSample& s) {
  if (s.height < 1 || s.width < 1) return "sample has an empty size";
  if (s.height > kMaxSide || s.width > kMaxSide) return "sample side is over the kernels' limit of 2^28";
  if (s.row_stride < int64_t(3) * s.width) return "row_stride is smaller than 3 * width";
  if (s.frame_stride != 0 && (p.order != Order::kMergeGrouped || p.temporal_patch_size < 2))
    return "distinct frames (frame_stride) need the merge_grouped order with temporal_patch_size >= 2";
  if (s.frame_stride < 0) return "frame_stride is negative";
  if (p.order != Order::kTiles) {
    if (p.patch_size < 1 || p.merge_size < 1 || p.temporal_patch_size < 1)
      return "patch_size, merge_size and temporal_patch_size must be >= 1";
    const int64_t q = int64_t(p.patch_size) * (p.order == Order::kMergeGrouped ? p.merge_size : 1);
    if (s.height % q || s.width % q) return "sample sides are not multiples of patch_size * merge_size";
  }
  int64_t n;
  if (!sample_elements(p, s.height, s.width, &n)) return "the sample's output size overflows int64";
  return nullptr;
}

// CPU twin: fills every output element of every sample exactly once. `num_threads` <= 1 runs
// inline; more split the batch's rows across std::threads.
void normalize_patchify_cpu(const NormalizePatchifyParams& p, int num_threads);

// CUDA kernel: one launch for the whole batch on `stream` (a cudaStream_t). `p.samples` must be
// device memory. `max_rows` is the largest per-sample kernel-row count, computed on the host by
// kernel_rows(). Returns a cudaError_t as int (0: success). Defined only when built with nvcc.
int normalize_patchify_cuda(const NormalizePatchifyParams& p, int64_t max_rows, void* stream);

// Rows the CUDA kernel walks for one sample: patch rows, or 3 * height (c, y) lines of a tile.
inline int64_t kernel_rows(const NormalizePatchifyParams& p, int32_t h, int32_t w) {
  return p.order == Order::kTiles ? int64_t(kChannels) * h : num_rows(p, h, w);
}

}  // namespace vlmprep
