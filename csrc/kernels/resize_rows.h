// ResizeRows: the output rows of one Pillow-exact resize (resize.h), band by band.
//
// Internal to the CPU kernels: resize_cpu runs it over the whole image; the fused
// resize_normalize_patchify_cpu runs it one patch band at a time, so the resized image never
// exists in full (a band of 28 rows of a 1932-wide image is 162 KB and stays in cache).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "vlmprep/resize.h"

namespace vlmprep {

// A thread's working rows: for a horizontal-first resize, the horizontally resized source rows
// [lo, hi) (kept between calls, so rows shared by neighbouring bands are computed once); for a
// vertical-first one, the vertically resized rows of the current band.
struct ResizeCache {
  std::vector<uint8_t> buf;
  int lo = 0, hi = 0;
};

class ResizeRows {
 public:
  // nullptr when `p` is valid, else a static message.
  static const char* check(const ResizeParams& p);

  // Weights for both axes, computed once (p must pass check; p.dst is not used).
  explicit ResizeRows(const ResizeParams& p);
  ~ResizeRows();

  // Source rows [0, n) that output rows [0, y1) read (for a producer that fills the source
  // row by row, as a streaming decoder does).
  int source_rows(int y1) const;
  // The first source row that output row y0 reads (y0 in [0, out_h)).
  int first_source_row(int y0) const;

  // Output rows [y0, y1) into dst (rows dst_stride bytes apart). Any order is correct; calls
  // in increasing y0 with one cache reuse the source rows that neighbouring bands share.
  // src_offset: read the source at p.src + src_offset instead (another frame of the same size
  // and stride: one set of weights for a video's frames; one cache per frame).
  void rows(int y0, int y1, uint8_t* dst, int64_t dst_stride, ResizeCache& cache,
            int64_t src_offset = 0) const;

 private:
  struct Weights;
  ResizeParams p_;
  std::unique_ptr<Weights> w_;
};

}  // namespace vlmprep
