// Internal to the CPU kernels: the CPU twin of normalize_patchify one sample at a time, for
// callers that produce a sample in bands (resize_normalize_patchify_cpu).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "vlmprep/normalize_patchify.h"

namespace vlmprep {

// Whether an output of `out_bytes` is written with non-temporal stores (from 8 MiB on: it is
// not read back while in cache, so streaming saves each line's read for ownership).
bool normalize_patchify_streams(int64_t out_bytes);

// Every output row of sample `s` (p.samples is ignored), on the calling thread; `stream` as
// normalize_patchify_streams says for the whole output the sample belongs to. Streamed stores
// are fenced before it returns.
void normalize_patchify_sample_cpu(const NormalizePatchifyParams& p, const NPSample& s,
                                   bool stream);

// The row path's AVX2 patch rows (normalize_patchify_avx2.cc): whether this CPU has AVX2 and
// VLMPREP_CPU_ISA allows it; and one output row of merge_grouped / raster for P in {14, 16},
// TT in {1, 2} (the temporal slots) into dst ([c][t][py][px] values of `elem` bytes: 4 and 2
// from lut32[c][v], the lut widened to int32 bits, 1 the source bytes). base: the patch's
// top-left pixel; stride: the source's row stride in bytes; frame_stride: 0 repeats the one
// image in every slot, else slot t reads the frame at base + t * frame_stride (TT == 2).
// stream (float32 only, dst 16-byte aligned): non-temporal stores straight from registers.
// patch_rows_avx2_fit: whether p's rows are ones patch_row_avx2 takes (the order, P and TT
// above), whatever the CPU.
bool rows_avx2_usable();
bool patch_rows_avx2_fit(const NormalizePatchifyParams& p);
void patch_row_avx2(int P, int TT, int elem, const uint8_t* base, int64_t stride, int64_t frame_stride,
                    void* dst, const int32_t* lut32, bool stream = false);

}  // namespace vlmprep

namespace vlmprep {

// The band path (normalize_patchify_bands.cc), when the CPU has AVX-512 VBMI (and
// VLMPREP_CPU_ISA allows): lut lookups 64 values at a time with byte permutes, output lines
// written whole from registers. merge_grouped / raster (patch <= 16): a band's pixels first
// become patch-major planes, then each row is copied together from them. tiles: each source
// line goes straight to its three CHW plane lines.
// Whether this CPU (and VLMPREP_CPU_ISA) allows the band path at all.
bool band_path_cpu();

struct BandGather;  // the byte-permute controls of the order (normalize_patchify_bands.cc)

struct BandPath {
  // Whether the path applies to p (decided once per image).
  static bool usable(const NormalizePatchifyParams& p);
  explicit BandPath(const NormalizePatchifyParams& p);  // p.lut as byte planes, the controls
  ~BandPath();
  // Every output row of band sample s (a whole tile for the tiles order), as
  // normalize_patchify_sample_cpu writes them.
  void run(const NPSample& s, bool stream);

  const NormalizePatchifyParams& p;
  std::vector<uint8_t> lut_planes;  // [c][byte of the value][256]: the lut's byte planes
  std::vector<uint8_t> planes;  // [c][patch row][patch column][py][px] values of the output type
  std::unique_ptr<BandGather> gather;
};

}  // namespace vlmprep
