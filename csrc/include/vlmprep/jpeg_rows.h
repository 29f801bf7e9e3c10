// JpegRows: JPEG decoding with libjpeg-turbo, row by row (the CPU fast path's decoder;
// jpeg_rows.cc).
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

  // Whether skip_to works here: libjpeg-turbo 2.0 or later, and a single-scan file (a
  // progressive or multi-scan one decodes every scan before its first row, so a skip saves
  // nothing). Valid after open().
  bool can_skip() const;
  // Rows of one iMCU row (8 or 16 at 1:1 scale): the decoder's unit; a skip to a multiple of
  // it decodes no row twice.
  int imcu_rows() const;
  // Entropy-decodes rows [rows_done(), row) without writing them (jpeg_skip_scanlines: the rows
  // after are the bytes a full decode gives, checked per subsampling in tests/kernels). Damage
  // in the skipped rows is reported as in read_until. nullptr or the reason it failed.
  const char* skip_to(int row);

  // `message` copied into this thread's message buffer (one from another thread's JpegRows
  // outlives that thread).
  static const char* keep(const char* message);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vlmprep
