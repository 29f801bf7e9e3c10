// The fused CPU fast path (resize_normalize_patchify.h; JPEG rows from jpeg_rows.h): ResizeRows produces one band
// of resized rows into a small buffer, the normalize_patchify twin writes that band's output
// rows. With a JPEG source the decoder fills the source rows as the bands need them.
#include "vlmprep/resize_normalize_patchify.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "cpu_threads.h"
#include "normalize_patchify_cpu.h"
#include "resize_rows.h"
#if defined(VLMPREP_WITH_LIBJPEG)
#include "decode_units.h"
#include "vlmprep/jpeg_rows.h"
#endif

namespace vlmprep {

namespace {

// What every band of one image shares.
struct Bands {
  const ResizeRows& rr;
  const NormalizePatchifyParams& p;
  NPSample s;            // the whole output sample (src unused)
  int band = 0;          // image rows per band: one row of merge groups (or of patches)
  int count = 0;         // bands
  int64_t band_rows = 0, row_len = 0, out_bytes = 0;  // out_bytes: the whole sample's output
  bool stream = false, vector_path = false;
  int frames = 1;            // distinct source frames (a video's temporal group) or 1
  int64_t frame_stride = 0;  // bytes from one source frame to the next

  Bands(const ResizeRows& rr_, const NormalizePatchifyParams& p_, const NPSample& s_, int64_t frame_stride_ = 0)
      : rr(rr_), p(p_), s(s_), frames(frame_stride_ ? p_.temporal_patch_size : 1), frame_stride(frame_stride_) {
    // A band's output rows are contiguous, and it is the unit the row order needs whole.
    band = p.patch_size * (p.order == Order::kMergeGrouped ? p.merge_size : 1);
    count = s.height / band;
    band_rows = num_rows(p, band, s.width);
    row_len = row_length(p, band, s.width);
    out_bytes = num_rows(p, s.height, s.width) * row_len * dtype_size(p.dtype);
    stream = normalize_patchify_streams(out_bytes);
    vector_path = BandPath::usable(p);
  }
  // Source rows band b (and all before it) read.
  int source_rows(int b) const { return rr.source_rows((b + 1) * band); }
  int64_t resized_bytes() const { return int64_t(frames) * s.height * s.width * 3; }
};

// One thread's working state: the resize caches (one per frame), the band buffer (the band of
// every frame, one after another), the band path.
struct Worker {
  const Bands& j;
  std::vector<ResizeCache> caches;
  std::vector<uint8_t> buf;
  std::unique_ptr<BandPath> path;

  explicit Worker(const Bands& bands)
      : j(bands), caches(size_t(bands.frames)), buf(size_t(bands.frames) * bands.band * 3 * bands.s.width),
        path(bands.vector_path ? new BandPath(bands.p) : nullptr) {}

  void run(int b) {
    const int64_t stride = int64_t(3) * j.s.width, band_bytes = j.band * stride;
    for (int f = 0; f < j.frames; ++f)
      j.rr.rows(b * j.band, (b + 1) * j.band, buf.data() + f * band_bytes, stride, caches[f],
                f * j.frame_stride);
    const NPSample part{buf.data(), stride, j.band, j.s.width, j.s.out_offset + b * j.band_rows * j.row_len,
                        j.frames > 1 ? band_bytes : 0};
    if (path) path->run(part, j.stream);
    else normalize_patchify_sample_cpu(j.p, part, j.stream);
  }
};

// Checks the sample against the resize and the order; nullptr when they agree.
const char* check(const ResizeParams& r, const NormalizePatchifyParams& p, int64_t frame_stride = 0) {
  if (const char* bad = ResizeRows::check(r)) return bad;
  if (p.order == Order::kTiles) return "the tiles order is not fused: resize, then normalize_patchify";
  if (p.num_samples != 1) return "expected exactly one sample";
  const NPSample& s = p.samples[0];
  if (s.height != r.out_h || s.width != r.out_w) return "the sample's size is not the resized size";
  NPSample whole = s;
  whole.src = nullptr;
  whole.row_stride = int64_t(3) * s.width;
  whole.frame_stride = frame_stride;
  return check_sample(p, whole);
}

}  // namespace

const char* resize_normalize_patchify_cpu(const ResizeParams& r, const NormalizePatchifyParams& p,
                                          int num_threads, int64_t frame_stride) {
  if (const char* bad = check(r, p, frame_stride)) return bad;
  const ResizeRows rr(r);
  const Bands j(rr, p, p.samples[0], frame_stride);
  parallel_ranges(j.count, j.resized_bytes(), num_threads, [&](int64_t b0, int64_t b1) {
    Worker w(j);
    for (int64_t b = b0; b < b1; ++b) w.run(int(b));
  });
  return nullptr;
}

#if defined(VLMPREP_WITH_LIBJPEG)

namespace {

// The decoded source of one call: a per-thread buffer kept across calls (no fresh pages to
// fault in), up to 64 MiB (a 4K image is 25 MB); a larger one is freed when the call ends.
struct DecodedBuffer {
  std::vector<uint8_t>& v;
  explicit DecodedBuffer(size_t bytes) : v(buffer()) {
    if (v.size() < bytes) v.resize(bytes);
  }
  ~DecodedBuffer() {
    if (v.size() > (size_t(64) << 20)) std::vector<uint8_t>().swap(v);
  }
  static std::vector<uint8_t>& buffer() {
    thread_local std::vector<uint8_t> decoded;
    return decoded;
  }
};

}  // namespace

const char* decode_resize_normalize_patchify_cpu(const uint8_t* data, size_t size, int src_h, int src_w,
                                                 const ResizeParams& r_in, const NormalizePatchifyParams& p,
                                                 int num_threads) {
  ResizeParams r = r_in;
  r.in_h = src_h;
  r.in_w = src_w;
  r.src_stride = int64_t(3) * src_w;
  if (const char* bad = check(r, p)) return bad;
  // The header first: the buffer below is sized by the JPEG's own size, not the caller's word.
  JpegRows jr;
  if (const char* bad = open_probed(jr, data, size, src_h, src_w)) return bad;
  DecodedBuffer decoded(size_t(src_h) * r.src_stride);
  r.src = decoded.v.data();
  const ResizeRows rr(r);
  const Bands j(rr, p, p.samples[0]);
  std::vector<SourceUnit> units(j.count);
  for (int b = 0; b < j.count; ++b) units[b] = {rr.first_source_row(b * j.band), j.source_rows(b)};
  const int n = decode_threads(j.count, int64_t(src_h) * r.src_stride, j.resized_bytes(), num_threads);
  std::vector<std::unique_ptr<Worker>> workers(n);
  for (auto& w : workers) w.reset(new Worker(j));
  const double rest = rest_ratio(int64_t(src_h) * src_w, int64_t(r.out_h) * r.out_w, j.out_bytes);
  return decode_units(jr, data, size, decoded.v.data(), r.src_stride, units, rest, n,
                      [&](int b, int t) { workers[t]->run(b); });
}

namespace {

// One unit of decode_resize_cpu: output rows [y0, y1) of canvas k, which need source rows
// [0, need).
struct CanvasBand {
  int need, k, y0, y1;
};

}  // namespace

const char* decode_resize_cpu(const uint8_t* data, size_t size, int src_h, int src_w, ResizeParams* rs,
                              const int* box_top, const int* box_left, int n, int num_threads) {
  if (n < 1) return "expected at least one canvas";
  const int64_t stride = int64_t(3) * src_w;
  for (int k = 0; k < n; ++k) {
    ResizeParams& r = rs[k];
    if (box_top[k] < 0 || box_left[k] < 0 || r.in_h < 1 || r.in_w < 1 ||
        int64_t(box_top[k]) + r.in_h > src_h || int64_t(box_left[k]) + r.in_w > src_w)
      return "a canvas box leaves the source image";
    r.src = nullptr;
    r.src_stride = stride;
    if (const char* bad = ResizeRows::check(r)) return bad;
  }
  JpegRows jr;  // the header first: the buffer is sized by the JPEG's own size
  if (const char* bad = open_probed(jr, data, size, src_h, src_w)) return bad;
  DecodedBuffer decoded(size_t(src_h) * stride);
  std::vector<std::unique_ptr<ResizeRows>> rr;
  std::vector<CanvasBand> units;
  constexpr int kBand = 32;  // output rows per unit (resize_cpu's band)
  int64_t out_bytes = 0;
  for (int k = 0; k < n; ++k) {
    rs[k].src = decoded.v.data() + int64_t(box_top[k]) * stride + int64_t(box_left[k]) * 3;
    rr.emplace_back(new ResizeRows(rs[k]));
    for (int y = 0; y < rs[k].out_h; y += kBand) {
      const int y1 = std::min(y + kBand, rs[k].out_h);
      units.push_back({box_top[k] + rr[k]->source_rows(y1), k, y, y1});
    }
    out_bytes += int64_t(rs[k].out_h) * rs[k].out_w * 3;
  }
  // In the order the decoder makes their rows ready (each canvas's bands stay in order).
  std::stable_sort(units.begin(), units.end(), [](const CanvasBand& a, const CanvasBand& b) { return a.need < b.need; });
  std::vector<SourceUnit> rows(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    const CanvasBand& u = units[i];
    rows[i] = {box_top[u.k] + rr[u.k]->first_source_row(u.y0), u.need};
  }
  const int threads = decode_threads(int(units.size()), int64_t(src_h) * stride, out_bytes, num_threads);
  std::vector<std::vector<ResizeCache>> caches(threads, std::vector<ResizeCache>(n));
  const double rest = rest_ratio(int64_t(src_h) * src_w, out_bytes / 3, out_bytes);
  auto run = [&](int i, int t) {
    const CanvasBand& u = units[i];
    const ResizeParams& r = rs[u.k];
    const int64_t row = int64_t(3) * r.out_w;
    rr[u.k]->rows(u.y0, u.y1, r.dst + int64_t(u.y0) * row, row, caches[t][u.k]);
  };
  return decode_units(jr, data, size, decoded.v.data(), stride, rows, rest, threads, run);
}

const char* decode_jpeg_cpu(const uint8_t* data, size_t size, int src_h, int src_w,
                            const std::function<uint8_t*()>& dst, int num_threads) {
  JpegRows jr;
  if (const char* bad = open_probed(jr, data, size, src_h, src_w)) return bad;
  const int threads = decode_threads(0, int64_t(src_h) * src_w * 3, 0, num_threads);
  return decode_units(jr, data, size, dst(), int64_t(3) * src_w, {}, 0.0, threads, [](int, int) {});
}

int jpeg_split_row_cpu(const uint8_t* data, size_t size, int64_t output_pixels, int64_t output_bytes) {
  JpegRows jr;
  if (jr.open(data, size)) return -1;
  return split_row(jr, rest_ratio(int64_t(jr.height()) * jr.width(), output_pixels, output_bytes));
}

#endif

}  // namespace vlmprep
