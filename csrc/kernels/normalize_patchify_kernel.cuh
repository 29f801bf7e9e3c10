// The normalize_patchify CUDA kernel body, included by normalize_patchify.cu (and, with a
// host shim for __global__ / __shared__ / threadIdx / __syncthreads, by the emulation test
// tests/kernels/emulate_kernel.cc, so its index math is checked on machines without a GPU).
// blockIdx.y picks the sample, blockIdx.x a run of kRowsPerBlock output rows; threads walk the
// columns of a row, so consecutive threads write consecutive elements (coalesced). Integer index
// math is done once: a row's source origin once per block (shared memory), a column's source
// offset once per thread. Tiles use one "row" per (c, y) source line.
//
// Two column paths, chosen per block (uniform: no divergence): where the block's output rows
// are 4-element aligned (row length, the sample's offset and the output pointer all allow it),
// each thread writes 4 consecutive columns with one 4-element store (16 bytes for float32, 8
// for bfloat16, 4 for uint8); elsewhere (odd tile widths, odd patch sizes, an unaligned view)
// one element at a time. Both read the same source bytes and write the same values.
#pragma once

#include "vlmprep/normalize_patchify.h"

// The emulation counts which path each block takes (tests/kernels/emulate_kernel.cc); a no-op here.
#ifndef VLMPREP_KERNEL_PATH
#define VLMPREP_KERNEL_PATH(vector_path)
#endif

namespace vlmprep {
namespace kernel {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 16;
constexpr int kVec = 4;  // columns per thread step on the vector path

// kVec elements written with one aligned store.
template <typename T>
struct alignas(kVec * sizeof(T)) Pack {
  T v[kVec];
};

// 16 bytes copied with one load and one store (the lookup table's fill).
struct alignas(16) Word16 {
  uint32_t w[4];
};

// Source byte offset of column j (relative to its row's origin) and the lookup-table base of
// its channel (patch orders; a tile's channel belongs to the row, see row_base).
VLMPREP_HD void column_offset(const NormalizePatchifyParams& p, const NPSample& s, bool tiles,
                              int64_t j, int64_t* off, int32_t* lut_base) {
  if (tiles) {  // the row is one (c, y) line: columns are x
    *off = j * 3;
    *lut_base = 0;
    return;
  }
  int32_t dy, dx, c;
  column_source(p, s.height, s.width, j, &dy, &dx, &c);
  *off = int64_t(dy) * s.row_stride + int64_t(dx) * 3 + c + column_frame_offset(p, s, j);
  *lut_base = c * 256;
}

// A source byte through the read-only data path (ld.global.nc): the restrict qualifiers alone
// left nvcc 13 emitting generic loads here (cuobjdump: LD.E.U8), so it is asked for explicitly.
VLMPREP_HD uint8_t load_source(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

template <typename T, bool kLut>
__global__ void normalize_patchify_kernel(NormalizePatchifyParams p) {
  // The table as 16-byte words (so it can be filled a word at a time), read as T.
  constexpr int kLutWords = kLut ? kChannels * 256 * int(sizeof(T)) / 16 : 1;
  __shared__ Word16 lut_words[kLutWords];
  T* lut_s = reinterpret_cast<T*>(lut_words);
  __shared__ int64_t row_base[kRowsPerBlock];  // source byte offset of the row's origin
  __shared__ int32_t row_lut[kRowsPerBlock];   // tiles: the row's channel * 256
  const NPSample s = p.samples[blockIdx.y];
  const bool tiles = p.order == Order::kTiles;
  // Kernel rows: patch rows, or (c, y) lines of a tile.
  const int64_t rows = tiles ? int64_t(kChannels) * s.height : num_rows(p, s.height, s.width);
  const int64_t D = tiles ? s.width : row_length(p, s.height, s.width);
  const int64_t r0 = int64_t(blockIdx.x) * kRowsPerBlock;
  // Before the table fill: the grid covers the batch's largest sample, so a ragged batch's
  // smaller samples have many empty blocks, which leave after one descriptor read. The whole
  // block leaves together: no barrier is skipped.
  if (r0 >= rows) return;
  if constexpr (kLut) {
    if (reinterpret_cast<uintptr_t>(p.lut) % 16 == 0) {  // 16-byte words (a fresh torch tensor)
      const Word16* __restrict__ from = static_cast<const Word16*>(p.lut);
      for (int k = threadIdx.x; k < kLutWords; k += blockDim.x) lut_words[k] = from[k];
    } else {
      const T* __restrict__ from = static_cast<const T*>(p.lut);
      for (int k = threadIdx.x; k < kChannels * 256; k += blockDim.x) lut_s[k] = from[k];
    }
  }
  const int nr = int(min(rows - r0, int64_t(kRowsPerBlock)));
  // Each row's origin once per block (the integer divisions are not repeated per element).
  if (threadIdx.x < nr) {
    const int64_t r = r0 + threadIdx.x;
    if (tiles) {
      const int32_t c = int32_t(r / s.height), y = int32_t(r % s.height);
      row_base[threadIdx.x] = int64_t(y) * s.row_stride + c;
      row_lut[threadIdx.x] = c * 256;
    } else {
      int32_t y0, x0;
      row_origin(p, s.width, r, &y0, &x0);
      row_base[threadIdx.x] = int64_t(y0) * s.row_stride + int64_t(x0) * 3;
      row_lut[threadIdx.x] = 0;
    }
  }
  __syncthreads();
  // __restrict__: source and output never alias (the binding checks it), so loads may take the
  // read-only path and be batched instead of one load / store pair at a time.
  const uint8_t* __restrict__ src = s.src;
  T* __restrict__ out = static_cast<T*>(p.out) + s.out_offset + r0 * D;
  const bool vec = D % kVec == 0 && s.out_offset % kVec == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % sizeof(Pack<T>) == 0;
  VLMPREP_KERNEL_PATH(vec);
  if (vec) {
    Pack<T>* __restrict__ outv = reinterpret_cast<Pack<T>*>(out);
    for (int64_t j = int64_t(threadIdx.x) * kVec; j < D; j += int64_t(blockDim.x) * kVec) {
      int64_t off[kVec];
      int32_t lb[kVec];
      for (int q = 0; q < kVec; ++q) column_offset(p, s, tiles, j + q, &off[q], &lb[q]);
      for (int k = 0; k < nr; ++k) {
        const int64_t base = row_base[k];
        Pack<T> pk;
        for (int q = 0; q < kVec; ++q) {
          const uint8_t v = load_source(src + base + off[q]);
          if constexpr (kLut) pk.v[q] = lut_s[row_lut[k] + lb[q] + v]; else pk.v[q] = T(v);
        }
        outv[(k * D + j) / kVec] = pk;
      }
    }
    return;
  }
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    int64_t off;
    int32_t lb;
    column_offset(p, s, tiles, j, &off, &lb);
    for (int k = 0; k < nr; ++k) {
      const uint8_t v = load_source(src + row_base[k] + off);
      T y;
      if constexpr (kLut) y = lut_s[row_lut[k] + lb + v]; else y = T(v);
      out[k * D + j] = y;
    }
  }
}

}  // namespace kernel
}  // namespace vlmprep
