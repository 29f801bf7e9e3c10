// The fused CPU fast path (resize_normalize_patchify.h): ResizeRows produces one band of
// resized rows into a small buffer, the normalize_patchify twin writes that band's output rows.
#include "vlmprep/resize_normalize_patchify.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "normalize_patchify_cpu.h"
#include "resize_rows.h"

namespace vlmprep {

const char* resize_normalize_patchify_cpu(const ResizeParams& r, const NormalizePatchifyParams& p,
                                          int num_threads) {
  if (const char* bad = ResizeRows::check(r)) return bad;
  if (p.layout == Layout::kTiles) return "the tiles layout is not fused: resize, then normalize_patchify";
  if (p.num_samples != 1) return "expected exactly one sample";
  const NPSample& s = p.samples[0];
  if (s.height != r.out_h || s.width != r.out_w) return "the sample's size is not the resized size";
  NPSample whole = s;
  whole.src = nullptr;
  whole.row_stride = int64_t(3) * s.width;
  if (const char* bad = check_sample(p, whole)) return bad;

  // A band is one row of merge groups (merge_grouped) or of patches: its output rows are
  // contiguous, and it is the unit the layout's row order needs whole.
  const int band = p.patch * (p.layout == Layout::kMergeGrouped ? p.merge : 1);
  const int bands = s.height / band;
  const int64_t band_rows = num_rows(p, band, s.width);
  const int64_t row_len = row_length(p, band, s.width);
  const bool stream = normalize_patchify_streams(num_rows(p, s.height, s.width) * row_len *
                                                 dtype_size(p.dtype));
  const ResizeRows rr(r);
  const int64_t stride = int64_t(3) * s.width;

  const bool vector_path = BandPath::usable(p);
  auto run = [&](int b0, int b1) {
    ResizeCache cache;
    std::vector<uint8_t> buf(size_t(band) * stride);
    std::unique_ptr<BandPath> path(vector_path ? new BandPath(p) : nullptr);
    for (int b = b0; b < b1; ++b) {
      rr.rows(b * band, (b + 1) * band, buf.data(), stride, cache);
      const NPSample part{buf.data(), stride, band, s.width, s.out_offset + b * band_rows * row_len};
      if (path) path->run(part, stream);
      else normalize_patchify_sample_cpu(p, part, stream);
    }
  };
  // Below ~256 KiB of resized pixels a thread costs more than it saves.
  const int64_t useful = std::max<int64_t>(1, int64_t(s.height) * stride / (256 << 10));
  const int n = int(std::max<int64_t>(1, std::min<int64_t>({num_threads, useful, bands})));
  if (n == 1) {
    run(0, bands);
    return nullptr;
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(run, bands * t / n, bands * (t + 1) / n);
  run(0, bands / n);
  for (auto& th : pool) th.join();
  return nullptr;
}

}  // namespace vlmprep
