// Internal to the CPU kernels: the CPU twin of normalize_patchify one sample at a time, for
// callers that produce a sample in bands (resize_normalize_patchify_cpu).
#pragma once

#include <cstdint>

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

}  // namespace vlmprep
