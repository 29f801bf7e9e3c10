// The row path's patch rows with AVX2 (normalize_patchify_cpu.h: patch_row_avx2).
//
// One patch line (P pixels, 3P interleaved bytes) is read with three 16-byte loads inside it;
// per channel, two byte shuffles pick that channel's bytes of pixels [0, 8) and [P - 8, P) (for
// P = 14 the groups overlap on pixels 6 and 7, which get the same values twice), so every
// load and store stays inside the patch's line and the output line: no tail, no masks. The
// lut lookups are 8-lane gathers; uint8 rows need none (the value is the byte).
#include "normalize_patchify_cpu.h"

#include "cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {

bool patch_rows_avx2_fit(const NormalizePatchifyParams& p) {
  if (p.order != Order::kMergeGrouped && p.order != Order::kRaster) return false;
  const int T = p.order == Order::kMergeGrouped ? p.temporal_patch_size : 1;
  return (p.patch_size == 14 || p.patch_size == 16) && (T == 1 || T == 2);
}

#if defined(__x86_64__)

bool rows_avx2_usable() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && cpu_isa_allows_avx2();
}

namespace {

// Per channel: pixels [0, 8) are shuffle(a, lo_a) | shuffle(b, lo_b), pixels [P - 8, P) are
// shuffle(b, hi_b) | shuffle(e, hi_e), with a = bytes [0, 16), b = [16, 32), e = [3P - 16, 3P).
struct Picks {
  alignas(16) int8_t lo_a[3][16], lo_b[3][16], hi_b[3][16], hi_e[3][16];
  explicit Picks(int P) {
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 16; ++i) {
        lo_a[c][i] = lo_b[c][i] = hi_b[c][i] = hi_e[c][i] = -128;  // a zero byte
        if (i >= 8) continue;
        const int q0 = 3 * i + c, q1 = 3 * (P - 8 + i) + c;  // byte of the line
        if (q0 < 16) lo_a[c][i] = int8_t(q0); else lo_b[c][i] = int8_t(q0 - 16);
        if (q1 < 32) hi_b[c][i] = int8_t(q1 - 16); else hi_e[c][i] = int8_t(q1 - (3 * P - 16));
      }
  }
};

template <typename V>
__attribute__((target("avx2"), always_inline)) inline __m128i load16(const V* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// One patch line's three loads (Picks' a, b, e) and channel c's bytes of its pixels [0, 8)
// (i0) and [P - 8, P) (i1).
struct LineBytes {
  __m128i a, b, e;
  template <int P>
  __attribute__((target("avx2"), always_inline)) static LineBytes load(const uint8_t* line) {
    return {load16(line), load16(line + 16), load16(line + 3 * P - 16)};
  }
  __attribute__((target("avx2"), always_inline)) void channel(const Picks& pk, int c, __m128i* i0,
                                                               __m128i* i1) const {
    *i0 = _mm_or_si128(_mm_shuffle_epi8(a, load16(pk.lo_a[c])), _mm_shuffle_epi8(b, load16(pk.lo_b[c])));
    *i1 = _mm_or_si128(_mm_shuffle_epi8(b, load16(pk.hi_b[c])), _mm_shuffle_epi8(e, load16(pk.hi_e[c])));
  }
};

// The lut's values (int32 bits) of 8 index bytes.
__attribute__((target("avx2"), always_inline)) inline __m256i lookup8(const int32_t* lut, __m128i idx) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(lut), _mm256_cvtepu8_epi32(idx), 4);
}

// ELEM: output bytes per value (4: lut32 as is, 2: its low 16 bits, 1: the source byte).
// fs == 0: one source, its values stored to all TT temporal slots; else TT sources (frame t at
// base + t * fs), each stored to its own slot.
template <int P, int TT, int ELEM>
__attribute__((target("avx2")))
void row_k(const uint8_t* base, int64_t stride, int64_t fs, uint8_t* dst, const int32_t* lut32) {
  static const Picks picks(P);
  constexpr int S = P - 8;  // the second group's first pixel
  constexpr int64_t plane = int64_t(P) * P;
  const int sources = fs ? TT : 1, copies = fs ? 1 : TT;
  for (int k = 0; k < sources; ++k)
  for (int py = 0; py < P; ++py) {
    const LineBytes line = LineBytes::load<P>(base + k * fs + int64_t(py) * stride);
    for (int c = 0; c < 3; ++c) {
      __m128i i0, i1;
      line.channel(picks, c, &i0, &i1);
      uint8_t* d = dst + (int64_t(c) * TT * plane + k * plane + int64_t(py) * P) * ELEM;
      if constexpr (ELEM == 1) {
        for (int t = 0; t < copies; ++t) {
          _mm_storel_epi64(reinterpret_cast<__m128i*>(d + t * plane), i0);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(d + t * plane + S), i1);
        }
      } else {
        const __m256i v0 = lookup8(lut32 + c * 256, i0), v1 = lookup8(lut32 + c * 256, i1);
        if constexpr (ELEM == 4) {
          for (int t = 0; t < copies; ++t) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + t * plane * 4), v0);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (t * plane + S) * 4), v1);
          }
        } else {  // 16-bit values: [v0 0-3, v1 0-3 | v0 4-7, v1 4-7] -> v0 then v1
          const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(v0, v1), 0xD8);
          for (int t = 0; t < copies; ++t) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + t * plane * 2), _mm256_castsi256_si128(w));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (t * plane + S) * 2), _mm256_extracti128_si256(w, 1));
          }
        }
      }
    }
  }
}

// float32 rows streamed straight from registers (no staging copy): per channel and source, two
// patch lines at a time, whose 2P values fill whole 16-byte pieces (P = 14: 112 bytes, 7
// pieces; 16: 128 bytes, 8), each stored non-temporally to every slot it goes to. dst is
// 16-byte aligned (the caller checks), and so is every piece: planes are 4P^2 bytes. A
// channel's planes are written one after another (one or two write streams at a time, which
// the write-combining buffers keep whole).
template <int P, int TT>
__attribute__((target("avx2")))
void row_stream_k(const uint8_t* base, int64_t stride, int64_t fs, float* dst, const int32_t* lut32) {
  static const Picks picks(P);
  constexpr int64_t plane = int64_t(P) * P;
  constexpr int kPieces = P / 2;
  const int sources = fs ? TT : 1, copies = fs ? 1 : TT;
  for (int c = 0; c < 3; ++c) {
    const int32_t* lut = lut32 + c * 256;
    for (int k = 0; k < sources; ++k)
      for (int py = 0; py < P; py += 2) {
        __m256i v[2][2];  // [line][pixels 0-7, P-8 .. P-1]
        for (int r = 0; r < 2; ++r) {
          __m128i i0, i1;
          LineBytes::load<P>(base + k * fs + int64_t(py + r) * stride).channel(picks, c, &i0, &i1);
          v[r][0] = lookup8(lut, i0);
          v[r][1] = lookup8(lut, i1);
        }
        __m128i piece[8];
        if constexpr (P == 14) {  // line 0: v00 (px 0-7), v01 lanes 2-7 (px 8-13); line 1 likewise
          piece[0] = _mm256_castsi256_si128(v[0][0]);
          piece[1] = _mm256_extracti128_si256(v[0][0], 1);
          piece[2] = _mm256_castsi256_si128(_mm256_permute4x64_epi64(v[0][1], 0x09));  // px 8-11
          piece[3] = _mm_castpd_si128(_mm_shuffle_pd(_mm_castsi128_pd(_mm256_extracti128_si256(v[0][1], 1)),
                                                     _mm_castsi128_pd(_mm256_castsi256_si128(v[1][0])), 1));
          piece[4] = _mm256_castsi256_si128(_mm256_permute4x64_epi64(v[1][0], 0x09));  // px 2-5
          piece[5] = _mm256_castsi256_si128(v[1][1]);                                   // px 6-9
          piece[6] = _mm256_extracti128_si256(v[1][1], 1);                               // px 10-13
        } else {
          for (int r = 0; r < 2; ++r)
            for (int h = 0; h < 2; ++h) {
              piece[4 * r + 2 * h] = _mm256_castsi256_si128(v[r][h]);
              piece[4 * r + 2 * h + 1] = _mm256_extracti128_si256(v[r][h], 1);
            }
        }
        for (int t = 0; t < copies; ++t) {
          __m128i* d = reinterpret_cast<__m128i*>(dst + (int64_t(c) * TT + k + t) * plane + int64_t(py) * P);
          for (int m = 0; m < kPieces; ++m) _mm_stream_si128(d + m, piece[m]);
        }
      }
  }
}

template <int ELEM>
void row_elem(int P, int TT, const uint8_t* base, int64_t stride, int64_t fs, uint8_t* dst,
              const int32_t* lut32) {
  if (P == 14) return TT == 2 ? row_k<14, 2, ELEM>(base, stride, fs, dst, lut32) : row_k<14, 1, ELEM>(base, stride, 0, dst, lut32);
  return TT == 2 ? row_k<16, 2, ELEM>(base, stride, fs, dst, lut32) : row_k<16, 1, ELEM>(base, stride, 0, dst, lut32);
}

}  // namespace

void patch_row_avx2(int P, int TT, int elem, const uint8_t* base, int64_t stride, int64_t frame_stride,
                    void* dst, const int32_t* lut32, bool stream) {
  if (stream) {
    float* f = static_cast<float*>(dst);
    if (P == 14) return TT == 2 ? row_stream_k<14, 2>(base, stride, frame_stride, f, lut32)
                                : row_stream_k<14, 1>(base, stride, 0, f, lut32);
    return TT == 2 ? row_stream_k<16, 2>(base, stride, frame_stride, f, lut32)
                   : row_stream_k<16, 1>(base, stride, 0, f, lut32);
  }
  uint8_t* d = static_cast<uint8_t*>(dst);
  if (elem == 4) return row_elem<4>(P, TT, base, stride, frame_stride, d, lut32);
  if (elem == 2) return row_elem<2>(P, TT, base, stride, frame_stride, d, lut32);
  row_elem<1>(P, TT, base, stride, frame_stride, d, lut32);
}

#else  // not x86-64: never usable, never called

bool rows_avx2_usable() { return false; }
void patch_row_avx2(int, int, int, const uint8_t*, int64_t, int64_t, void*, const int32_t*, bool) {}

#endif

}  // namespace vlmprep
