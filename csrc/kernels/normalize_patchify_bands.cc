// The band path of the CPU twin (normalize_patchify_cpu.h: BandPath).
//
// Step 1, per band row, 4 patches (4P pixels) at a time: three 64-byte loads hold R, G, B
// interleaved; two byte permutes gather one channel's values; the lut lookup is done per
// byte of the output value (lut_planes: a float's 4 bytes are 4 planes of 256 bytes, each
// looked up with two 128-entry permutes and a blend on the index's top bit); unpacks put the
// bytes of each value together. The gather order is chosen so that after the unpacks'
// lane-wise interleave each patch's P values sit in one 16-value slot, stored to the plane
// patch-major: plane[c][patch row][patch column][py][px], so one patch's P x P values are contiguous.
// Step 2, per output row: its [c, t] blocks are P x P runs of the planes; LineStream writes the
// band's rows (contiguous in the output) as whole 64-byte lines, each one unaligned load (two
// where it joins two runs) and one non-temporal store: no staging copy, no regular stores
// between the streamed ones (they would wait behind them in the store buffer).
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu_isa.h"
#include "normalize_patchify_cpu.h"

namespace vlmprep {

#if defined(__x86_64__)
#define VLMPREP_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

bool band_path_cpu() {
  if (!cpu_isa_allows_avx512()) return false;
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  return has;
}

// float32 patch rows that the AVX2 rows take (P 14 or 16, 1 or 2 slots) go there instead: on a
// Xeon with AVX-512 VBMI, 1080p Qwen2-VL float32 rows, one thread, 3.55 ms here against 3.06
// there (streamed from registers; 2.37 against 1.47 ms for the work without the stores), end to
// end 0.5 ms less (bench/results/cpu_paths_xeon3.json). bfloat16 and uint8 stay (1.90 / 1.11 ms
// here against 2.39 / 1.11).
static bool float32_rows_avx2(const NormalizePatchifyParams& p) {
  return p.dtype == DType::kFloat32 && rows_avx2_usable() && patch_rows_avx2_fit(p);
}

bool BandPath::usable(const NormalizePatchifyParams& p) {
  return band_path_cpu() && !float32_rows_avx2(p) && (p.order == Order::kTiles ||
                 ((p.order == Order::kMergeGrouped || p.order == Order::kRaster) && p.patch_size <= 16));
}


namespace {

// Position q of the gathered index vector ends as value number order(q) of the 64 after the
// unpack ladder of an nb-byte value (which interleaves within 128-bit lanes).
int order(int q, int nb) {
  const int L = q / 16;
  if (nb == 4) return 16 * ((q % 16) / 4) + 4 * L + q % 4;
  if (nb == 2) return 32 * ((q % 16) / 8) + 8 * L + q % 8;
  return q;
}

// One byte plane of lut_planes looked up for 64 indices: entries 0..127 and 128..255 by two
// permutes, chosen by the index's top bit.
VLMPREP_VBMI inline __m512i lookup(const uint8_t* plane, __m512i idx) {
  const __m512i lo = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane), idx, _mm512_loadu_si512(plane + 64));
  const __m512i hi = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane + 128), idx,
                                              _mm512_loadu_si512(plane + 192));
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
}

inline __mmask64 first_bytes(int k) {
  return k >= 64 ? ~__mmask64(0) : k <= 0 ? __mmask64(0) : (__mmask64(1) << k) - 1;
}

// Gather controls of one 64-value step: for channel c, position q takes source byte
// 3 * pixel + c, from the first two 64-byte loads (index < 128: one permute) or the third (a
// masked second permute); `pixel(s)` is the pixel whose value ends at output position s.
}  // namespace

struct BandGather {
  alignas(64) uint8_t lo_idx[3][64];
  alignas(64) uint8_t hi_idx[3][64];
  uint64_t hi_mask[3] = {0, 0, 0};

  template <typename F>
  BandGather(int nb, F pixel) {
    for (int c = 0; c < 3; ++c)
      for (int q = 0; q < 64; ++q) {
        const int b = 3 * pixel(order(q, nb)) + c;
        lo_idx[c][q] = uint8_t(b & 127);
        hi_idx[c][q] = uint8_t(b & 63);
        if (b >= 128) hi_mask[c] |= uint64_t(1) << q;
      }
  }
};

namespace {

// Channel c of up to 64 pixels (a, b, d: their 192 interleaved bytes) through lut_planes:
// out[k] holds output values 64k / kBytes ... in order (kBytes vectors).
template <int kBytes>
VLMPREP_VBMI inline void convert(const BandGather& g, int c, __m512i a, __m512i b, __m512i d,
                                 const uint8_t* lut_planes, __m512i* out) {
  __m512i idx = _mm512_permutex2var_epi8(a, _mm512_load_si512(g.lo_idx[c]), b);
  idx = _mm512_mask_permutexvar_epi8(idx, g.hi_mask[c], _mm512_load_si512(g.hi_idx[c]), d);
  if constexpr (kBytes == 1) {
    out[0] = idx;
  } else if constexpr (kBytes == 2) {
    const uint8_t* t = lut_planes + size_t(c) * 2 * 256;
    const __m512i r0 = lookup(t, idx), r1 = lookup(t + 256, idx);
    out[0] = _mm512_unpacklo_epi8(r0, r1);
    out[1] = _mm512_unpackhi_epi8(r0, r1);
  } else {
    const uint8_t* t = lut_planes + size_t(c) * 4 * 256;
    const __m512i r0 = lookup(t, idx), r1 = lookup(t + 256, idx);
    const __m512i r2 = lookup(t + 512, idx), r3 = lookup(t + 768, idx);
    const __m512i x01l = _mm512_unpacklo_epi8(r0, r1), x01h = _mm512_unpackhi_epi8(r0, r1);
    const __m512i x23l = _mm512_unpacklo_epi8(r2, r3), x23h = _mm512_unpackhi_epi8(r2, r3);
    out[0] = _mm512_unpacklo_epi16(x01l, x23l);
    out[1] = _mm512_unpackhi_epi16(x01l, x23l);
    out[2] = _mm512_unpacklo_epi16(x01h, x23h);
    out[3] = _mm512_unpackhi_epi16(x01h, x23h);
  }
}

// Loads the 3 * n bytes of n <= 64 pixels (zeros past them).
VLMPREP_VBMI inline void load_pixels(const uint8_t* s, int n, __m512i* a, __m512i* b, __m512i* d) {
  const int bytes = 3 * n;
  *a = _mm512_maskz_loadu_epi8(first_bytes(bytes), s);
  *b = _mm512_maskz_loadu_epi8(first_bytes(bytes - 64), s + 64);
  *d = _mm512_maskz_loadu_epi8(first_bytes(bytes - 128), s + 128);
}

// Band row y -> its P-value segments in the three patch-major planes, 4 patches at a time:
// each patch's P values land in one 16-value slot, stored with one masked store.
template <int kBytes>
VLMPREP_VBMI void row_to_planes(const BandGather& g, const uint8_t* src, int width, int P, int y,
                                const uint8_t* lut_planes, uint8_t* planes, int64_t plane_stride) {
  const int cols = width / P;
  const int64_t patch_bytes = int64_t(P) * P * kBytes;
  uint8_t* row_base = planes + (int64_t(y / P) * cols * P * P + int64_t(y % P) * P) * kBytes;
  for (int pc0 = 0; pc0 < cols; pc0 += 4) {
    const int n = cols - pc0 < 4 ? cols - pc0 : 4;  // patches in this chunk
    __m512i a, b, d;
    load_pixels(src + int64_t(pc0) * P * 3, n * P, &a, &b, &d);
    for (int c = 0; c < 3; ++c) {
      __m512i v[kBytes];
      convert<kBytes>(g, c, a, b, d, lut_planes, v);
      uint8_t* out = row_base + c * plane_stride + int64_t(pc0) * patch_bytes;  // patch pc0, line y % P
      const __mmask16 m = __mmask16((1u << P) - 1);
      if constexpr (kBytes == 1) {
        const __m128i lane[4] = {_mm512_extracti32x4_epi32(v[0], 0), _mm512_extracti32x4_epi32(v[0], 1),
                                 _mm512_extracti32x4_epi32(v[0], 2), _mm512_extracti32x4_epi32(v[0], 3)};
        for (int k = 0; k < n; ++k) _mm_mask_storeu_epi8(out + k * patch_bytes, m, lane[k]);
      } else if constexpr (kBytes == 2) {
        for (int k = 0; k < n; ++k) {
          const __m256i half = (k & 1) ? _mm512_extracti64x4_epi64(v[k / 2], 1) : _mm512_castsi512_si256(v[k / 2]);
          _mm256_mask_storeu_epi16(out + k * patch_bytes, m, half);
        }
      } else {
        for (int k = 0; k < n; ++k) _mm512_mask_storeu_epi32(out + k * patch_bytes, m, v[k]);
      }
    }
  }
}

// Writes a contiguous destination from a sequence of source runs (each >= 64 bytes): whole
// 64-byte lines, each one unaligned load, or two where it joins two runs; non-temporal stores
// when `stream`. The partial first and last lines are masked regular stores (their other
// bytes belong to neighbours).
class LineStream {
 public:
  VLMPREP_VBMI LineStream(uint8_t* dst, bool stream)
      : line_(reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(dst) & ~uintptr_t(63))),
        fill_(int(dst - line_)), head_(fill_), stream_(stream), acc_(_mm512_setzero_si512()) {}

  VLMPREP_VBMI void put(const uint8_t* src, int64_t n) {
    if (fill_) {  // complete the pending line with this run's first bytes
      const int k = int(n < 64 - fill_ ? n : 64 - fill_);
      acc_ = _mm512_mask_loadu_epi8(acc_, first_bytes(fill_ + k) & ~first_bytes(fill_), src - fill_);
      fill_ += k;
      src += k;
      n -= k;
      if (fill_ < 64) return;
      emit(acc_);
    }
    for (; n >= 64; n -= 64, src += 64) emit(_mm512_loadu_si512(src));
    if (n > 0) {
      acc_ = _mm512_maskz_loadu_epi8(first_bytes(int(n)), src);
      fill_ = int(n);
    }
  }

  // Appends the first n <= 64 bytes of a register: a byte shift across lanes (one permute)
  // joins them to the pending line, another keeps the rest for the next.
  VLMPREP_VBMI void put_vec(__m512i v, int n) {
    const __m512i iota = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48,
                                         47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32,
                                         31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                         15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    if (fill_ == 0 && n == 64) return emit(v);
    const int k = n < 64 - fill_ ? n : 64 - fill_;  // bytes that go to the pending line
    acc_ = _mm512_mask_permutexvar_epi8(acc_, first_bytes(fill_ + k) & ~first_bytes(fill_),
                                        _mm512_sub_epi8(iota, _mm512_set1_epi8(char(fill_))), v);
    const int shift = k;
    fill_ += k;
    if (fill_ < 64) return;
    emit(acc_);
    if (n > shift) {
      acc_ = _mm512_permutexvar_epi8(_mm512_add_epi8(iota, _mm512_set1_epi8(char(shift))), v);
      fill_ = n - shift;
    }
  }

  // The last partial line; streamed stores fenced.
  VLMPREP_VBMI void finish() {
    if (fill_) _mm512_mask_storeu_epi8(line_, first_bytes(fill_) & ~first_bytes(head_), acc_);
    if (stream_) _mm_sfence();
  }

 private:
  VLMPREP_VBMI void emit(__m512i v) {
    if (head_) {  // the first line: bytes before the destination are not ours
      _mm512_mask_storeu_epi8(line_, ~first_bytes(head_), v);
      head_ = 0;
    } else if (stream_) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(line_), v);
    } else {
      _mm512_store_si512(line_, v);
    }
    line_ += 64;
    fill_ = 0;
  }

  uint8_t* line_;  // the 64-byte line being gathered
  int fill_;       // bytes of it gathered (from its start)
  int head_;       // the first line's bytes before the destination (0 after it)
  bool stream_;
  __m512i acc_;
};

template <int kBytes>
VLMPREP_VBMI void run_band(const NormalizePatchifyParams& p, const BandGather& g,
                           const uint8_t* lut_planes, std::vector<uint8_t>& planes, const NPSample& s,
                           bool stream) {
  const int P = p.patch_size;
  const int T = p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1;
  // A still image's planes once (its T slots repeat them); distinct frames: one set per frame.
  const int frames = T > 1 && s.frame_stride ? T : 1;
  const int64_t plane_stride = int64_t(s.height) * s.width * kBytes;
  const int64_t frame_planes = 3 * plane_stride;
  if (planes.size() < size_t(frames * frame_planes)) planes.resize(size_t(frames * frame_planes));
  for (int f = 0; f < frames; ++f)
    for (int y = 0; y < s.height; ++y)
      row_to_planes<kBytes>(g, s.src + f * s.frame_stride + int64_t(y) * s.row_stride, s.width, P, y,
                            lut_planes, planes.data() + f * frame_planes, plane_stride);
  const int cols = s.width / P;
  const int64_t rows = num_rows(p, s.height, s.width);
  const int64_t block = int64_t(P) * P * kBytes;
  LineStream out(static_cast<uint8_t*>(p.out) + s.out_offset * kBytes, stream);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t y0, x0;
    row_origin(p, s.width, r, &y0, &x0);
    const uint8_t* patch = planes.data() + (int64_t(y0 / P) * cols + x0 / P) * block;
    for (int c = 0; c < 3; ++c)
      for (int t = 0; t < T; ++t) out.put(patch + (frames > 1 ? t * frame_planes : 0) + c * plane_stride, block);
  }
  out.finish();
}

// One tile of the tiles order: source line y -> line y of the tile's three CHW planes, 64
// pixels at a time straight from registers into one LineStream per plane.
template <int kBytes>
VLMPREP_VBMI void run_tile(const NormalizePatchifyParams& p, const BandGather& g,
                           const uint8_t* lut_planes, const NPSample& s, bool stream) {
  const int64_t plane = int64_t(s.height) * s.width * kBytes;
  uint8_t* base = static_cast<uint8_t*>(p.out) + s.out_offset * kBytes;
  LineStream out[3] = {LineStream(base, stream), LineStream(base + plane, stream),
                       LineStream(base + 2 * plane, stream)};
  for (int y = 0; y < s.height; ++y) {
    const uint8_t* src = s.src + int64_t(y) * s.row_stride;
    for (int x = 0; x < s.width; x += 64) {
      const int n = s.width - x < 64 ? s.width - x : 64;
      __m512i a, b, d;
      load_pixels(src + int64_t(x) * 3, n, &a, &b, &d);
      for (int c = 0; c < 3; ++c) {
        __m512i v[kBytes];
        convert<kBytes>(g, c, a, b, d, lut_planes, v);
        for (int k = 0, left = n * kBytes; k < kBytes && left > 0; ++k, left -= 64)
          out[c].put_vec(v[k], left < 64 ? left : 64);
      }
    }
  }
  for (auto& o : out) o.finish();
}

}  // namespace

BandPath::BandPath(const NormalizePatchifyParams& p) : p(p) {
  const int nb = dtype_size(p.dtype), P = p.patch_size;
  // Patch orders: slot k of a 64-value step holds patch k's P pixels (see row_to_planes);
  // tiles: pixels in order.
  if (p.order == Order::kTiles)
    gather.reset(new BandGather(nb, [](int v) { return v; }));
  else
    gather.reset(new BandGather(nb, [P](int s) { return s % 16 < P ? (s / 16) * P + s % 16 : 0; }));
  if (p.dtype == DType::kUInt8) return;
  lut_planes.resize(size_t(3) * nb * 256);
  const uint8_t* lut = static_cast<const uint8_t*>(p.lut);
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v)
      for (int b = 0; b < nb; ++b)
        lut_planes[(size_t(c) * nb + b) * 256 + v] = lut[(size_t(c) * 256 + v) * nb + b];
}

BandPath::~BandPath() = default;

void BandPath::run(const NPSample& s, bool stream) {
  if (p.order == Order::kTiles) {
    switch (dtype_size(p.dtype)) {
      case 4: return run_tile<4>(p, *gather, lut_planes.data(), s, stream);
      case 2: return run_tile<2>(p, *gather, lut_planes.data(), s, stream);
      default: return run_tile<1>(p, *gather, lut_planes.data(), s, stream);
    }
  }
  switch (dtype_size(p.dtype)) {
    case 4: return run_band<4>(p, *gather, lut_planes.data(), planes, s, stream);
    case 2: return run_band<2>(p, *gather, lut_planes.data(), planes, s, stream);
    default: return run_band<1>(p, *gather, lut_planes.data(), planes, s, stream);
  }
}

#else  // not x86-64: never usable

bool band_path_cpu() { return false; }
bool BandPath::usable(const NormalizePatchifyParams&) { return false; }
struct BandGather {};
BandPath::BandPath(const NormalizePatchifyParams& p) : p(p) {}
BandPath::~BandPath() = default;
void BandPath::run(const NPSample&, bool) {}

#endif

}  // namespace vlmprep
