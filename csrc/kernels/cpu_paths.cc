// The path names of cpu_paths.h, decided by the same checks the kernels make.
#include "vlmprep/cpu_paths.h"

#include "cpu_isa.h"
#include "normalize_patchify_cpu.h"
#include "resize_avx512.h"

namespace vlmprep {

const char* resize_cpu_path() {
#if defined(__x86_64__)
  if (resize_avx512_usable()) return "avx512-vnni";
  if (__builtin_cpu_supports("avx2") && cpu_isa_allows_avx2()) return "avx2";
#elif defined(__aarch64__)
  if (cpu_isa_allows_neon()) return "neon";
#endif
  return "scalar";
}

const char* normalize_patchify_cpu_path() {
  if (band_path_cpu()) return rows_avx2_usable() ? "avx512-vbmi, float32 patch rows avx2" : "avx512-vbmi";
  return rows_avx2_usable() ? "avx2" : "scalar";
}

}  // namespace vlmprep
