// The host buffer cache of host_cache.cpp, for the other torch binding files.
#pragma once

#include <ATen/ATen.h>

// (nbytes,) uint8 CPU tensor from the cache (reused, not re-faulted); contents undefined.
at::Tensor vlmprep_empty_host(int64_t nbytes);
