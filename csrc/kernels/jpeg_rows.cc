// JpegRows (jpeg_rows.h): libjpeg-turbo's scanline decoder with errors as return values.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>

#include "vlmprep/jpeg_rows.h"

namespace vlmprep {

namespace {

// libjpeg reports fatal errors through error_exit (which must not return) and warnings through
// emit_message(-1): the first longjmps back to the caller, the second is counted.
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  int warnings = 0;
  char message[JMSG_LENGTH_MAX] = {0};
};

void on_error(j_common_ptr cinfo) {
  ErrorMgr* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  ErrorMgr* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  if (level < 0 && e->warnings++ == 0) (*cinfo->err->format_message)(cinfo, e->message);
}

// libjpeg's message for the caller: a copy in this thread's buffer, so it outlives the JpegRows
// (a caller that returns the reason after its decoder is gone used to read freed memory).
const char* kept(const char* message) {
  thread_local char buf[JMSG_LENGTH_MAX];
  if (message == buf) return buf;
  std::strncpy(buf, message, sizeof(buf) - 1);
  buf[sizeof(buf) - 1] = 0;
  return buf;
}

}  // namespace

struct JpegRows::State {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  bool created = false, started = false;
  int done = 0;  // rows decoded
};

JpegRows::JpegRows() : s_(new State) {}

JpegRows::~JpegRows() {
  if (s_->created) jpeg_destroy_decompress(&s_->cinfo);
}

const char* JpegRows::open(const uint8_t* data, size_t n) {
  State& s = *s_;
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = on_error;
  s.err.pub.emit_message = on_message;
  if (setjmp(s.err.jump)) return kept(s.err.message);
  jpeg_create_decompress(&s.cinfo);
  s.created = true;
  jpeg_mem_src(&s.cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&s.cinfo, TRUE);
  if (s.cinfo.jpeg_color_space != JCS_YCbCr && s.cinfo.jpeg_color_space != JCS_GRAYSCALE &&
      s.cinfo.jpeg_color_space != JCS_RGB)
    return "not a YCbCr, RGB or grayscale JPEG";
  s.cinfo.out_color_space = JCS_RGB;  // defaults otherwise: islow IDCT, fancy upsampling (Pillow's)
  jpeg_start_decompress(&s.cinfo);
  s.started = true;
  if (s.err.warnings) return kept(s.err.message);
  return nullptr;
}

int JpegRows::height() const { return int(s_->cinfo.output_height); }
int JpegRows::width() const { return int(s_->cinfo.output_width); }
int JpegRows::rows_done() const { return s_->done; }

bool JpegRows::can_skip() const {
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 2000000
  return s_->started && !jpeg_has_multiple_scans(&s_->cinfo);
#else
  return false;
#endif
}

int JpegRows::imcu_rows() const { return s_->cinfo.max_v_samp_factor * DCTSIZE; }

const char* JpegRows::skip_to(int row) {
  State& s = *s_;
  if (!can_skip()) return "skipping rows needs libjpeg-turbo 2.0+ and a single-scan JPEG";
  if (row <= s.done) return nullptr;
  if (row >= height()) return "a skip must leave rows to decode";
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 2000000
  if (setjmp(s.err.jump)) return kept(s.err.message);
  const JDIMENSION want = JDIMENSION(row - s.done);
  if (jpeg_skip_scanlines(&s.cinfo, want) != want) return "the decoder stopped early";
  s.done = row;
  if (s.err.warnings) return kept(s.err.message);
#endif
  return nullptr;
}

const char* JpegRows::keep(const char* message) { return message ? kept(message) : nullptr; }

const char* JpegRows::read_until(int until, uint8_t* dst, int64_t stride) {
  State& s = *s_;
  if (!s.created) return "the decoder was not opened";
  if (until > height()) until = height();
  if (s.done >= until) return nullptr;
  if (setjmp(s.err.jump)) return kept(s.err.message);
  while (s.done < until) {
    JSAMPROW rows[16];
    const int want = until - s.done < 16 ? until - s.done : 16;
    for (int k = 0; k < want; ++k) rows[k] = dst + (int64_t(s.done) + k) * stride;
    const int got = int(jpeg_read_scanlines(&s.cinfo, rows, JDIMENSION(want)));
    if (got == 0) return "the decoder stopped early";
    s.done += got;
    if (s.err.warnings) return kept(s.err.message);
  }
  if (s.done == height()) {
    jpeg_finish_decompress(&s.cinfo);  // reads to the end: reports truncated or trailing damage
    s.started = false;
    if (s.err.warnings) return kept(s.err.message);
  }
  return nullptr;
}

}  // namespace vlmprep
