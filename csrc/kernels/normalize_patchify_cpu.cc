// CPU twin of the normalize_patchify kernel: same index math (normalize_patchify.h), same table,
// so the same bytes. Rows are split across std::threads; inner loops run over one patch line.
#include "normalize_patchify_cpu.h"
#include "cpu_threads.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {
namespace {

// Copies a finished row out with non-temporal stores: a large output (50 MB for one 1080p
// Qwen2-VL image in float32) is written once and not read back here, so streaming it skips the
// read for ownership of every line (measured: 7.8 -> 3.8 ms when the buffer is not already in
// cache). Small outputs keep plain stores: they may still be in cache for the next consumer.
#if defined(__x86_64__)
__attribute__((target("avx2")))
void stream_out_avx2(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  std::memcpy(dst + i, src + i, n - i);
}
#endif

constexpr int64_t kStreamBytes = int64_t(8) << 20;  // outputs from 8 MiB on are streamed

void stream_out(void* dst, const void* src, size_t n, bool stream) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (stream && avx2) return stream_out_avx2(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
#endif
  std::memcpy(dst, src, n);
}

// Rows bound for consecutive addresses, gathered in a small staging buffer and written out as
// whole 64-byte lines with non-temporal stores (a row is rarely line-aligned: 1176 uint8 or
// 2352 bfloat16 bytes; streaming it alone would mix partial lines with plain stores). Without
// `stream` the rows are built in place.
class RowWriter {
 public:
  explicit RowWriter(bool stream) : stream_(stream) {}
  RowWriter(const RowWriter&) = delete;
  ~RowWriter() { flush(true); }

  // Where to build the `n` bytes bound for `dst`; then call commit(n).
  uint8_t* begin(uint8_t* dst, size_t n) {
    if (!stream_) return dst;
    if (dst != start_ + staged_) {  // not contiguous with what is staged: write that out first
      flush(true);
      start_ = dst;
    }
    if (buf_.size() < staged_ + n) buf_.resize(staged_ + n + kChunk);
    return buf_.data() + staged_;
  }

  void commit(size_t n) {
    if (!stream_) return;
    staged_ += n;
    if (staged_ >= kChunk) flush(false);
  }

  // Writes out everything staged (before the fence that publishes the streamed stores).
  void finish() { flush(true); }

 private:
  // Flushed after every row from 1 KiB: short bursts of streamed stores drain while the next
  // row is built (8 KiB bursts stall the core; 1080p Qwen2-VL float32 rows, AVX2 cap, one
  // thread: 3.38 -> 3.25 ms; a 50 MB stream against a gather loop in C: 3.2 -> 2.1 ms).
  static constexpr size_t kChunk = 1 << 10;

  // Streams the staged bytes' whole lines; `all` also writes the partial head and tail.
  void flush(bool all) {
    if (staged_ == 0) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(start_);
    size_t head = ((a + 63) & ~uintptr_t(63)) - a;
    if (head > staged_) head = staged_;
    const size_t lines = (staged_ - head) & ~size_t(63);
    if (!all && lines == 0) return;
    std::memcpy(start_, buf_.data(), head);
    stream_out(start_ + head, buf_.data() + head, lines, true);
    size_t done = head + lines;
    if (all) {
      std::memcpy(start_ + done, buf_.data() + done, staged_ - done);
      done = staged_;
    } else {
      std::memmove(buf_.data(), buf_.data() + done, staged_ - done);
    }
    start_ += done;
    staged_ -= done;
  }

  bool stream_;
  uint8_t* start_ = nullptr;
  size_t staged_ = 0;
  std::vector<uint8_t> buf_;
};

inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();  // streamed stores are weakly ordered: publish them before the call returns
#endif
}

// out[i] = table[c][v] (or v itself for uint8 output, where no table exists).
template <typename T, bool kLut>
struct Map {
  const T* lut;
  T operator()(int c, uint8_t v) const {
    if constexpr (kLut) return lut[c * 256 + v]; else return T(v);
  }
};

// The common patch sizes with the loops known at compile time: each value is stored to its
// T places directly (no second pass over the row), lines of the source read once. fs != 0:
// TT distinct frames (frame t at base + t * fs), each to its own slot.
template <int P, int TT, typename T, typename M>
void patch_row_fixed(const uint8_t* base, int64_t stride, int64_t fs, T* dst, M map) {
  constexpr int64_t plane = int64_t(P) * P;
  const int sources = fs ? TT : 1, copies = fs ? 1 : TT;
  for (int c = 0; c < kChannels; ++c) {
    for (int k = 0; k < sources; ++k) {
      T* d0 = dst + int64_t(c) * TT * plane + k * plane;
      for (int py = 0; py < P; ++py) {
        const uint8_t* line = base + k * fs + int64_t(py) * stride + c;
        T v[P];
        for (int px = 0; px < P; ++px) v[px] = map(c, line[px * 3]);
        for (int t = 0; t < copies; ++t) std::memcpy(d0 + t * plane + py * P, v, sizeof(v));
      }
    }
  }
}

// The row path's inputs to patch_row_avx2, decided once per call: `avx2`, the rows go there
// (the CPU allows it and patch_rows_avx2_fit); null `lut32` with `avx2` set means uint8 output
// (no lut).
struct RowsAvx2 {
  bool avx2 = false;
  bool stream = false;  // float32 rows streamed from registers (patch_row_avx2's stream)
  const int32_t* lut32 = nullptr;
  std::vector<int32_t> widened;  // a bfloat16 lut as int32 (the gathers read 4 bytes)
};

template <typename T, bool kLut>
RowsAvx2 rows_avx2(const NormalizePatchifyParams& p) {
  RowsAvx2 r;
  r.avx2 = rows_avx2_usable() && patch_rows_avx2_fit(p);
  if (!r.avx2 || !kLut) return r;
  const T* lut = static_cast<const T*>(p.lut);
  if constexpr (sizeof(T) == 4) {
    r.lut32 = reinterpret_cast<const int32_t*>(lut);
  } else {
    r.widened.assign(lut, lut + kChannels * 256);
    r.lut32 = r.widened.data();
  }
  return r;
}

// Whether the AVX2 float32 rows of units [u0, u1) can be streamed from registers: every row
// there on patch_row_avx2 (v.avx2) and 16-byte aligned (the output's start and each sample's
// offset; rows are 4 P^2 T bytes).
template <typename T, bool kLut>
bool rows_stream_direct(const NormalizePatchifyParams& p, const RowsAvx2& v,
                        const std::vector<int64_t>& unit_start, int64_t u0, int64_t u1) {
  if (sizeof(T) != 4 || !kLut || !v.avx2) return false;
  for (size_t i = 0; i + 1 < unit_start.size(); ++i) {
    if (unit_start[i + 1] <= u0 || unit_start[i] >= u1) continue;
    if ((reinterpret_cast<uintptr_t>(static_cast<const T*>(p.out) + p.samples[i].out_offset) & 15) != 0) return false;
  }
  return true;
}

// One patch row of a patch order, written in column order.
template <typename T, typename M>
void patch_row(const NormalizePatchifyParams& p, const NPSample& s, int64_t r, T* dst, M map,
               const RowsAvx2& v) {
  int32_t y0, x0;
  row_origin(p, s.width, r, &y0, &x0);
  const int32_t P = p.patch_size;
  const uint8_t* base = s.src + int64_t(y0) * s.row_stride + int64_t(x0) * 3;
  if (p.order == Order::kNaflex) {  // [py, px, c]: the source line, channels kept interleaved
    for (int32_t py = 0; py < P; ++py) {
      const uint8_t* line = base + int64_t(py) * s.row_stride;
      T* d = dst + int64_t(py) * P * 3;
      for (int32_t k = 0; k < P * 3; ++k) d[k] = map(k % 3, line[k]);
    }
    return;
  }
  const int32_t T_ = p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1;
  const int64_t plane = int64_t(P) * P;
  const int64_t fs = T_ > 1 ? s.frame_stride : 0;  // check_sample: 0 unless merge_grouped
  if (v.avx2) return patch_row_avx2(P, T_, int(sizeof(T)), base, s.row_stride, fs, dst, v.lut32, v.stream);
  if (T_ == 2 && P == 14) return patch_row_fixed<14, 2>(base, s.row_stride, fs, dst, map);
  if (T_ == 2 && P == 16) return patch_row_fixed<16, 2>(base, s.row_stride, fs, dst, map);
  if (T_ == 1 && P == 16) return patch_row_fixed<16, 1>(base, s.row_stride, 0, dst, map);
  if (T_ == 1 && P == 14) return patch_row_fixed<14, 1>(base, s.row_stride, 0, dst, map);
  // [c, t, py, px]: a still image's t = 0 computed, later t copied; distinct frames each read
  for (int c = 0; c < kChannels; ++c) {
    T* d0 = dst + int64_t(c) * T_ * plane;
    for (int32_t t = 0; t < T_; ++t) {
      if (t > 0 && fs == 0) {
        std::memcpy(d0 + t * plane, d0, plane * sizeof(T));
        continue;
      }
      for (int32_t py = 0; py < P; ++py) {
        const uint8_t* line = base + t * fs + int64_t(py) * s.row_stride + c;
        T* d = d0 + t * plane + int64_t(py) * P;
        for (int32_t px = 0; px < P; ++px) d[px] = map(c, line[px * 3]);
      }
    }
  }
}

// One source line y of a tile, into its three planes of the CHW output (each plane's line
// built in `line_buf`, then streamed out).
template <typename T, typename M>
void tile_line(const NPSample& s, int32_t y, T* dst, M map, std::vector<T>& line_buf,
               bool stream) {
  const uint8_t* line = s.src + int64_t(y) * s.row_stride;
  const int64_t hw = int64_t(s.height) * s.width;
  if (int64_t(line_buf.size()) < s.width) line_buf.resize(size_t(s.width));
  for (int c = 0; c < kChannels; ++c) {
    T* d = line_buf.data();
    for (int32_t x = 0; x < s.width; ++x) d[x] = map(c, line[x * 3 + c]);
    stream_out(dst + c * hw + int64_t(y) * s.width, d, size_t(s.width) * sizeof(T), stream);
  }
}

// Work units: output rows (patch orders) or source lines (tiles); unit_start[i] is sample i's
// first unit, so a thread's range [u0, u1) maps back to (sample, unit) without a search per unit.
template <typename T, bool kLut>
void run_units(const NormalizePatchifyParams& p, const std::vector<int64_t>& unit_start,
               int64_t u0, int64_t u1, bool stream) {
  Map<T, kLut> map{static_cast<const T*>(p.lut)};
  RowsAvx2 v = rows_avx2<T, kLut>(p);
  T* out = static_cast<T*>(p.out);
  v.stream = stream && rows_stream_direct<T, kLut>(p, v, unit_start, u0, u1);
  std::vector<T> row;  // a tile line, built before it is streamed
  RowWriter writer(stream && !v.stream);
  int32_t i = int32_t(std::upper_bound(unit_start.begin(), unit_start.end(), u0) -
                      unit_start.begin()) - 1;
  for (int64_t u = u0; u < u1; ++u) {
    while (u >= unit_start[i + 1]) ++i;
    const NPSample& s = p.samples[i];
    const int64_t k = u - unit_start[i];
    if (p.order == Order::kTiles) {
      tile_line<T>(s, int32_t(k), out + s.out_offset, map, row, stream);
    } else {
      const size_t bytes = size_t(row_length(p, s.height, s.width)) * sizeof(T);
      T* dst = out + s.out_offset + k * int64_t(bytes / sizeof(T));
      patch_row<T>(p, s, k, reinterpret_cast<T*>(writer.begin(reinterpret_cast<uint8_t*>(dst), bytes)),
                   map, v);
      writer.commit(bytes);
    }
  }
  writer.finish();
  if (stream) stream_fence();
}

template <typename T, bool kLut>
void run(const NormalizePatchifyParams& p, int num_threads) {
  std::vector<int64_t> unit_start(p.num_samples + 1, 0);
  int64_t bytes = 0;
  for (int32_t i = 0; i < p.num_samples; ++i) {
    const NPSample& s = p.samples[i];
    unit_start[i + 1] = unit_start[i] + (p.order == Order::kTiles ? s.height
                                         : num_rows(p, s.height, s.width));
    bytes += int64_t(s.height) * s.width * 3;
  }
  const int64_t units = unit_start.back();
  const int64_t out_bytes =
      bytes / 3 * (p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1) * 3 * dtype_size(p.dtype);
  const bool stream = normalize_patchify_streams(out_bytes);
  parallel_ranges(units, bytes, num_threads, [&](int64_t u0, int64_t u1) {
    run_units<T, kLut>(p, unit_start, u0, u1, stream);
  });
}

// The band path over a whole batch: work units are bands of P * merge image rows (each
// sample's height is a multiple), split across threads like the rows.
void run_bands(const NormalizePatchifyParams& p, int num_threads) {
  const int band = p.patch_size * (p.order == Order::kMergeGrouped ? p.merge_size : 1);
  const int T = p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1;
  std::vector<int64_t> band_start(p.num_samples + 1, 0);
  int64_t bytes = 0;
  for (int32_t i = 0; i < p.num_samples; ++i) {
    band_start[i + 1] = band_start[i] + p.samples[i].height / band;
    bytes += int64_t(p.samples[i].height) * p.samples[i].width * 3;
  }
  const int64_t units = band_start.back();
  const bool stream = normalize_patchify_streams(bytes * T * dtype_size(p.dtype));
  auto work = [&](int64_t u0, int64_t u1) {
    BandPath path(p);
    int32_t i = int32_t(std::upper_bound(band_start.begin(), band_start.end(), u0) - band_start.begin()) - 1;
    for (int64_t u = u0; u < u1; ++u) {
      while (u >= band_start[i + 1]) ++i;
      const NPSample& s = p.samples[i];
      const int64_t k = u - band_start[i];
      const NPSample part{s.src + k * band * s.row_stride, s.row_stride, band, s.width,
                          s.out_offset + k * num_rows(p, band, s.width) * row_length(p, band, s.width),
                          s.frame_stride};
      path.run(part, stream);
    }
  };
  parallel_ranges(units, bytes, num_threads, work);
}

template <typename T, bool kLut>
void run_sample(const NormalizePatchifyParams& p, const NPSample& s, bool stream) {
  const int64_t units = p.order == Order::kTiles ? s.height : num_rows(p, s.height, s.width);
  NormalizePatchifyParams one = p;
  one.num_samples = 1;
  one.samples = &s;
  const std::vector<int64_t> unit_start = {0, units};
  run_units<T, kLut>(one, unit_start, 0, units, stream);
}

}  // namespace

bool normalize_patchify_streams(int64_t out_bytes) { return out_bytes >= kStreamBytes; }

void normalize_patchify_sample_cpu(const NormalizePatchifyParams& p, const NPSample& s,
                                   bool stream) {
  switch (p.dtype) {
    case DType::kFloat32: return run_sample<float, true>(p, s, stream);
    case DType::kBFloat16: return run_sample<uint16_t, true>(p, s, stream);
    case DType::kUInt8: return run_sample<uint8_t, false>(p, s, stream);
  }
}

// The tiles order on the band path: one unit per tile, split across threads.
void run_tiles(const NormalizePatchifyParams& p, int num_threads) {
  int64_t bytes = 0;
  for (int32_t i = 0; i < p.num_samples; ++i) bytes += int64_t(p.samples[i].height) * p.samples[i].width * 3;
  const bool stream = normalize_patchify_streams(bytes * dtype_size(p.dtype));
  parallel_ranges(p.num_samples, bytes, num_threads, [&](int64_t i0, int64_t i1) {
    BandPath path(p);
    for (int64_t i = i0; i < i1; ++i) path.run(p.samples[i], stream);
  });
}

void normalize_patchify_cpu(const NormalizePatchifyParams& p, int num_threads) {
  if (BandPath::usable(p)) {
    return p.order == Order::kTiles ? run_tiles(p, num_threads) : run_bands(p, num_threads);
  }
  switch (p.dtype) {
    case DType::kFloat32: return run<float, true>(p, num_threads);
    case DType::kBFloat16: return run<uint16_t, true>(p, num_threads);  // bf16 bit patterns
    case DType::kUInt8: return run<uint8_t, false>(p, num_threads);
  }
}

}  // namespace vlmprep
