// Internal to the CPU kernels: the instruction sets a call may use. VLMPREP_CPU_ISA caps them
// ("avx2": no AVX-512; "scalar": plain C++), read at every call so tests can run every path
// against the same oracles; the CPU's own features are checked by each path.
#pragma once

#include <cstdlib>
#include <cstring>

namespace vlmprep {

inline bool cpu_isa_capped_at(const char* level) {
  const char* isa = std::getenv("VLMPREP_CPU_ISA");
  return isa && std::strcmp(isa, level) == 0;
}

inline bool cpu_isa_allows_avx512() { return !cpu_isa_capped_at("avx2") && !cpu_isa_capped_at("scalar"); }
inline bool cpu_isa_allows_avx2() { return !cpu_isa_capped_at("scalar"); }
inline bool cpu_isa_allows_neon() { return !cpu_isa_capped_at("scalar"); }  // baseline on aarch64

}  // namespace vlmprep
