// The band path of the CPU twin (normalize_patchify_cpu.h: BandPath).
//
// Step 1, per band row, 64 pixels at a time: three 64-byte loads hold R, G, B interleaved; two
// byte permutes gather one channel's 64 values; the table lookup is done per byte of the
// output value (a float's 4 bytes are 4 tables of 256 bytes, each looked up with two
// 128-entry permutes and a blend on the index's top bit); unpacks put the bytes of each value
// together. The gather order is chosen so the unpacks' lane-wise interleave comes out in order.
// Step 2, per output row: P-value segments of the planes copied to their places (T times for
// merge_grouped) in a staging row, streamed out by RowWriter as whole lines.
#include <cstdlib>
#include <cstring>

#include "normalize_patchify_cpu.h"
#include "row_writer.h"

namespace vlmprep {

#if defined(__x86_64__)
#define VLMPREP_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

bool BandPath::usable(const NormalizePatchifyParams& p) {
  const char* isa = std::getenv("VLMPREP_CPU_ISA");
  if (isa && (std::strcmp(isa, "avx2") == 0 || std::strcmp(isa, "scalar") == 0)) return false;
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  return has && (p.layout == Layout::kMergeGrouped || p.layout == Layout::kRaster) && p.patch <= 16;
}

BandPath::BandPath(const NormalizePatchifyParams& p) : p(p) {
  const int nb = dtype_size(p.dtype);
  if (p.dtype == DType::kUInt8) return;
  table.resize(size_t(3) * nb * 256);
  const uint8_t* lut = static_cast<const uint8_t*>(p.lut);
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v)
      for (int b = 0; b < nb; ++b) table[(size_t(c) * nb + b) * 256 + v] = lut[(size_t(c) * 256 + v) * nb + b];
}

namespace {

// Position q of the gathered index vector holds value number order(q) of the 64: what the
// unpack ladder of an nb-byte value turns into values 0..63 in order.
int order(int q, int nb) {
  const int L = q / 16;
  if (nb == 4) return 16 * ((q % 16) / 4) + 4 * L + q % 4;
  if (nb == 2) return 32 * ((q % 16) / 8) + 8 * L + q % 8;
  return q;
}

// One table byte plane looked up for 64 indices: entries 0..127 and 128..255 by two permutes,
// chosen by the index's top bit.
VLMPREP_VBMI inline __m512i lookup(const uint8_t* plane, __m512i idx) {
  const __m512i lo = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane), idx, _mm512_loadu_si512(plane + 64));
  const __m512i hi = _mm512_permutex2var_epi8(_mm512_loadu_si512(plane + 128), idx,
                                              _mm512_loadu_si512(plane + 192));
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
}

// Band row -> its three planes of nb-byte values (x from 0 to width, 64 at a time).
template <int kBytes>
VLMPREP_VBMI void row_to_planes(const uint8_t* src, int width, const uint8_t* table, uint8_t* planes,
                                int64_t plane_stride) {
  // Gather controls: for channel c, position q takes source byte 3 * order(q) + c, from the
  // first two 64-byte loads (index < 128, one permute) or the third (a masked second permute).
  alignas(64) uint8_t lo_idx[3][64], hi_idx[3][64];
  uint64_t hi_mask[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c)
    for (int q = 0; q < 64; ++q) {
      const int b = 3 * order(q, kBytes) + c;
      lo_idx[c][q] = uint8_t(b & 127);
      hi_idx[c][q] = uint8_t(b & 63);
      if (b >= 128) hi_mask[c] |= uint64_t(1) << q;
    }
  for (int x = 0; x < width; x += 64) {
    const int n = width - x < 64 ? width - x : 64;  // pixels in this step
    const int bytes = 3 * n;
    auto m = [](int k) { return k >= 64 ? ~__mmask64(0) : k <= 0 ? __mmask64(0) : (__mmask64(1) << k) - 1; };
    const uint8_t* s = src + int64_t(x) * 3;
    const __m512i a = _mm512_maskz_loadu_epi8(m(bytes), s);
    const __m512i b = _mm512_maskz_loadu_epi8(m(bytes - 64), s + 64);
    const __m512i d = _mm512_maskz_loadu_epi8(m(bytes - 128), s + 128);
    for (int c = 0; c < 3; ++c) {
      __m512i idx = _mm512_permutex2var_epi8(a, _mm512_load_si512(lo_idx[c]), b);
      idx = _mm512_mask_permutexvar_epi8(idx, hi_mask[c], _mm512_load_si512(hi_idx[c]), d);
      uint8_t* out = planes + c * plane_stride + int64_t(x) * kBytes;
      if constexpr (kBytes == 1) {
        _mm512_storeu_si512(out, idx);
      } else if constexpr (kBytes == 2) {
        const uint8_t* t = table + size_t(c) * 2 * 256;
        const __m512i r0 = lookup(t, idx), r1 = lookup(t + 256, idx);
        _mm512_storeu_si512(out, _mm512_unpacklo_epi8(r0, r1));
        _mm512_storeu_si512(out + 64, _mm512_unpackhi_epi8(r0, r1));
      } else {
        const uint8_t* t = table + size_t(c) * 4 * 256;
        const __m512i r0 = lookup(t, idx), r1 = lookup(t + 256, idx);
        const __m512i r2 = lookup(t + 512, idx), r3 = lookup(t + 768, idx);
        const __m512i x01l = _mm512_unpacklo_epi8(r0, r1), x01h = _mm512_unpackhi_epi8(r0, r1);
        const __m512i x23l = _mm512_unpacklo_epi8(r2, r3), x23h = _mm512_unpackhi_epi8(r2, r3);
        _mm512_storeu_si512(out, _mm512_unpacklo_epi16(x01l, x23l));
        _mm512_storeu_si512(out + 64, _mm512_unpackhi_epi16(x01l, x23l));
        _mm512_storeu_si512(out + 128, _mm512_unpacklo_epi16(x01h, x23h));
        _mm512_storeu_si512(out + 192, _mm512_unpackhi_epi16(x01h, x23h));
      }
    }
  }
}

// One output row: for each channel and patch line, P values (P * kBytes bytes <= 64) from the
// plane, stored at their T places of [c, t, py, px].
template <int kBytes>
VLMPREP_VBMI void copy_row(const uint8_t* planes, int64_t plane_stride, int64_t row_stride, int y0,
                           int x0, int P, int T, uint8_t* dst) {
  const __mmask64 m = P * kBytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << (P * kBytes)) - 1;
  const int64_t line = int64_t(P) * kBytes, plane_out = line * P;
  for (int c = 0; c < 3; ++c) {
    const uint8_t* src = planes + c * plane_stride + int64_t(y0) * row_stride + int64_t(x0) * kBytes;
    uint8_t* d = dst + int64_t(c) * T * plane_out;
    for (int py = 0; py < P; ++py) {
      const __m512i v = _mm512_maskz_loadu_epi8(m, src + py * row_stride);
      for (int t = 0; t < T; ++t) _mm512_mask_storeu_epi8(d + t * plane_out + py * line, m, v);
    }
  }
}

template <int kBytes>
VLMPREP_VBMI void run_band(const NormalizePatchifyParams& p, const uint8_t* table, std::vector<uint8_t>& planes,
                           const NPSample& s, bool stream) {
  const int64_t row_stride = ((int64_t(s.width) + 63) / 64) * 64 * kBytes;  // one plane row
  const int64_t plane_stride = row_stride * s.height;
  if (planes.size() < size_t(3 * plane_stride)) planes.resize(size_t(3 * plane_stride));
  for (int y = 0; y < s.height; ++y)
    row_to_planes<kBytes>(s.src + int64_t(y) * s.row_stride, s.width, table,
                          planes.data() + y * row_stride, plane_stride);
  const int T = p.layout == Layout::kMergeGrouped ? p.temporal : 1;
  const int64_t rows = num_rows(p, s.height, s.width);
  const size_t bytes = size_t(row_length(p, s.height, s.width)) * kBytes;
  uint8_t* out = static_cast<uint8_t*>(p.out) + s.out_offset * kBytes;
  RowWriter writer(stream);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t y0, x0;
    row_origin(p, s.width, r, &y0, &x0);
    uint8_t* dst = out + r * int64_t(bytes);
    copy_row<kBytes>(planes.data(), plane_stride, row_stride, y0, x0, p.patch, T, writer.begin(dst, bytes));
    writer.commit(bytes);
  }
  writer.finish();
  if (stream) _mm_sfence();
}

}  // namespace

void BandPath::run(const NPSample& s, bool stream) {
  switch (dtype_size(p.dtype)) {
    case 4: return run_band<4>(p, table.data(), planes, s, stream);
    case 2: return run_band<2>(p, table.data(), planes, s, stream);
    default: return run_band<1>(p, table.data(), planes, s, stream);
  }
}

#else  // not x86-64: never usable

bool BandPath::usable(const NormalizePatchifyParams&) { return false; }
BandPath::BandPath(const NormalizePatchifyParams& p) : p(p) {}
void BandPath::run(const NPSample&, bool) {}

#endif

}  // namespace vlmprep
