// stream_store (vlmprep/stream_store.h): the output-write floor of `vlmprep bench`.
#include "vlmprep/stream_store.h"

#include <cstring>

#include "cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vlmprep {

namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void lines_avx512(uint8_t* p, int64_t lines, uint8_t value) {
  const __m512i v = _mm512_set1_epi8(char(value));
  for (int64_t i = 0; i < lines; ++i) _mm512_stream_si512(reinterpret_cast<__m512i*>(p + i * 64), v);
}

__attribute__((target("avx2"))) void lines_avx2(uint8_t* p, int64_t lines, uint8_t value) {
  const __m256i v = _mm256_set1_epi8(char(value));
  for (int64_t i = 0; i < lines; ++i) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p + i * 64), v);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p + i * 64 + 32), v);
  }
}

void lines_sse2(uint8_t* p, int64_t lines, uint8_t value) {
  const __m128i v = _mm_set1_epi8(char(value));
  for (int64_t i = 0; i < lines * 4; ++i) _mm_stream_si128(reinterpret_cast<__m128i*>(p + i * 16), v);
}
#endif

}  // namespace

void stream_store_cpu(uint8_t* dst, int64_t n, uint8_t value) {
  if (n <= 0) return;
#if defined(__x86_64__)
  // Whole 64-byte lines streamed; the partial head and tail lines stored as usual.
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  int64_t head = int64_t((64 - (addr & 63)) & 63);
  if (head > n) head = n;
  std::memset(dst, value, size_t(head));
  uint8_t* body = dst + head;
  const int64_t lines = (n - head) / 64;
  if (cpu_isa_allows_avx512() && __builtin_cpu_supports("avx512f")) lines_avx512(body, lines, value);
  else if (cpu_isa_allows_avx2() && __builtin_cpu_supports("avx2")) lines_avx2(body, lines, value);
  else lines_sse2(body, lines, value);
  _mm_sfence();
  std::memset(body + lines * 64, value, size_t(n - head - lines * 64));
#else
  std::memset(dst, value, size_t(n));
#endif
}

}  // namespace vlmprep
