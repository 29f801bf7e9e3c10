// JPEG decoding with libjpeg-turbo, row by row (the CPU fast path's decoder).
//
// Built only where libjpeg-turbo's headers were found at build time (VLMPREP_WITH_LIBJPEG);
// Pillow's defaults (islow IDCT, fancy upsampling), so the same pixels as Pillow's decoder.
// Any libjpeg warning (corrupt or truncated data) counts as an error: the caller then decodes
// with Pillow, which decides how bad data is reported. Messages returned are static or this
// thread's copy of libjpeg's (valid until its next JpegRows error), never the decoder's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vlmprep/normalize_patchify.h"
#include "vlmprep/resize.h"

namespace vlmprep {

class JpegRows {
 public:
  JpegRows();
  ~JpegRows();
  JpegRows(const JpegRows&) = delete;

  // Reads the header of data[0, n) and starts decoding to RGB. nullptr or the reason it cannot.
  const char* open(const uint8_t* data, size_t n);
  int height() const;
  int width() const;
  int rows_done() const;  // rows decoded so far

  // Decodes rows until `rows_done() >= until` (at most height()) into dst (row r at
  // dst + r * stride). nullptr or the reason it failed.
  const char* read_until(int until, uint8_t* dst, int64_t stride);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One 8-bit JPEG -> the rows of its (r.out_h, r.out_w) resize in p's layout (one sample, as
// resize_normalize_patchify_cpu takes it; r.src is ignored: the decoded image is used). The
// JPEG must be src_h x src_w (the probed size). With num_threads >= 2 the decode runs on the
// calling thread while the others resize and write the bands whose source rows are decoded.
// Returns nullptr on success, else the reason (then the output is partly written: redo it).
const char* decode_resize_normalize_patchify_cpu(const uint8_t* data, size_t n, int src_h, int src_w,
                                                 const ResizeParams& r, const NormalizePatchifyParams& p,
                                                 int num_threads);

}  // namespace vlmprep
