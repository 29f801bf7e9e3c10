// Internal to the CPU kernels: writing a large output once, with non-temporal stores.
#pragma once

#include <cstdint>
#include <cstring>
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

[[maybe_unused]] constexpr int64_t kStreamBytes = int64_t(8) << 20;  // outputs from 8 MiB on are streamed

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
  static constexpr size_t kChunk = 8 << 10;  // stays in L1 with the row being built

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

}  // namespace
}  // namespace vlmprep
