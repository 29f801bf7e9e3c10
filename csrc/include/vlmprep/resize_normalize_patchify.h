// resize_normalize_patchify: one uint8 HWC image -> its packed ViT rows, resized on the way.
//
// The CPU fast path of the patch orders (merge_grouped, raster, naflex): the same bytes as
// resize_cpu (Pillow 13-exact) followed by normalize_patchify_cpu, but done one band of
// patch rows at a time (P * merge image rows), so the resized image never exists in full and
// each band is patchified while it is still in cache.
//
//   Given qwen2-vl, a 1080x1920 image -> 1092x1932, patch 14, merge 2, T 2, float32:
//   39 bands of 28 rows, each 276 output rows of 1176 floats (contiguous in the output).
//
// CPU only: on a GPU, resizing is torch's or DALI's and the normalize_patchify kernel follows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "vlmprep/normalize_patchify.h"
#include "vlmprep/resize.h"

namespace vlmprep {

// `r`: the image and its resized size (r.dst unused). `p`: order, dtype, patch_size,
// merge_size, temporal_patch_size, lut and out as for normalize_patchify_cpu, with exactly one
// sample whose height and width are r.out_h and r.out_w (its src and row_stride unused) and
// whose out_offset says where its rows go. Returns nullptr on success, else a static message
// (nothing written). `num_threads` <= 1 runs inline; more split the bands across std::threads.
// frame_stride != 0: a video's temporal group, p.temporal_patch_size distinct frames of r's
// size and stride, frame t at r.src + t * frame_stride (merge_grouped only): each frame is
// resized band by band into the band buffer and its values go to the rows' t-th slots.
//
//   Given qwen2-vl, frames (2, 720, 1280, 3) -> 728x1288: 26 bands, each 2 frames x 28 rows
//   resized, then 184 output rows [c, t, py, px] written once (no interleave copy).
const char* resize_normalize_patchify_cpu(const ResizeParams& r, const NormalizePatchifyParams& p,
                                          int num_threads, int64_t frame_stride = 0);

// One 8-bit JPEG -> the rows of its (r.out_h, r.out_w) resize in p's order (one sample, as
// resize_normalize_patchify_cpu takes it; r.src is ignored: the decoded image is used). The
// JPEG must be src_h x src_w (the probed size). With num_threads >= 2 both threads resize and
// write the bands whose source rows are decoded, beside one decoder or two (decode_units.h: a
// second decoder skips to a split row, up to 65% of the rows, lower the more the bands write).
// Returns nullptr on success, else the reason (then the output is partly written: redo it).
// Defined only when built with libjpeg-turbo (VLMPREP_WITH_LIBJPEG; decoder: jpeg_rows.h).
const char* decode_resize_normalize_patchify_cpu(const uint8_t* data, size_t n, int src_h, int src_w,
                                                 const ResizeParams& r, const NormalizePatchifyParams& p,
                                                 int num_threads);

// One 8-bit JPEG -> `n` resized canvases: canvas k is the source box (rs[k].in_h x rs[k].in_w
// at row box_top[k], column box_left[k], inside the src_h x src_w image; rs[k].src and
// src_stride are set here) resized to rs[k].out_h x rs[k].out_w into rs[k].dst (contiguous
// HWC). The same bytes as decoding, then resize_cpu of each box. With num_threads >= 2 the
// 32-row bands whose source rows are decoded are resized beside the decode, split in two as
// above (InternVL: the tile canvas and the thumbnail). Returns
// nullptr on success, else the reason (outputs partly written: redo it). libjpeg builds only.
const char* decode_resize_cpu(const uint8_t* data, size_t size, int src_h, int src_w, ResizeParams* rs,
                              const int* box_top, const int* box_left, int n, int num_threads);

// One 8-bit JPEG (src_h x src_w, the probed size) -> (src_h, src_w, 3) RGB rows 3 * src_w bytes
// apart, Pillow's pixels, into dst(), called once the header has shown that size (so a caller
// allocates for the JPEG's own size, never for a claimed one). With num_threads >= 2 the
// decode is split in two as above. Returns nullptr on success, else the reason. libjpeg only.
const char* decode_jpeg_cpu(const uint8_t* data, size_t size, int src_h, int src_w,
                            const std::function<uint8_t*()>& dst, int num_threads);

// The row where a decode on two or more threads starts its second decoder when beside it the op
// writes `output_pixels` resized pixels in `output_bytes` (0, 0: decode_jpeg); 0 when it does
// not split (a progressive or multi-scan file, a short image, an output whose work would keep
// the second thread busy anyway, libjpeg < turbo 2.0); -1 when the header does not open.
// libjpeg builds only.
int jpeg_split_row_cpu(const uint8_t* data, size_t size, int64_t output_pixels, int64_t output_bytes);

}  // namespace vlmprep
