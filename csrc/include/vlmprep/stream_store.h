// stream_store: the output-write floor. Writes `n` bytes of `value` at `dst` the way the rows
// kernels write a large output (non-temporal 64-byte stores of whole lines, no read for
// ownership; the partial first and last lines with regular stores), on the calling thread, then
// fences. It computes nothing: its time is what storing exactly those bytes costs this core.
#pragma once

#include <cstdint>

namespace vlmprep {

void stream_store_cpu(uint8_t* dst, int64_t n, uint8_t value);

}  // namespace vlmprep
