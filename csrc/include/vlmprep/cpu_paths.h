// cpu_paths: which instruction-set path each CPU kernel takes on this CPU now (the CPU's
// features, capped by VLMPREP_CPU_ISA, read at every call as the kernels read it). For
// `vlmprep info` and the bench JSON, so every figure names the path that produced it.
#pragma once

namespace vlmprep {

// resize and the resizing ops (Pillow match): "avx512-vnni", "avx2", "neon" or "scalar".
const char* resize_cpu_path();
// normalize_patchify's rows: "avx512-vbmi, float32 patch rows avx2" (the band path for the orders
// it takes, except float32 rows of P 14 / 16, which the AVX2 rows write faster), "avx2" (the row
// path with AVX2 patch rows for P 14 / 16) or "scalar" (the row path in plain C++).
const char* normalize_patchify_cpu_path();

}  // namespace vlmprep
