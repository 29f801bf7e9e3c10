// Internal to the CPU kernels: how many std::threads a call uses, and running contiguous ranges
// of its work units on them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace vlmprep {

// Threads worth starting for `units` work units over `bytes` of data: at most num_threads, at
// most one per unit, and one per ~256 KiB (below that a thread costs more than it saves).
inline int threads_for(int64_t units, int64_t bytes, int num_threads) {
  const int64_t useful = std::max<int64_t>(1, bytes / (256 << 10));
  return int(std::max<int64_t>(1, std::min<int64_t>({num_threads, useful, units})));
}

// f(u0, u1) over contiguous ranges of [0, units), one per thread (threads_for); the calling
// thread takes the first range.
template <typename F>
void parallel_ranges(int64_t units, int64_t bytes, int num_threads, F&& f) {
  const int n = threads_for(units, bytes, num_threads);
  if (n == 1) return f(int64_t(0), units);
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  for (int t = 1; t < n; ++t) pool.emplace_back(f, units * t / n, units * (t + 1) / n);
  f(int64_t(0), units / n);
  for (auto& th : pool) th.join();
}

}  // namespace vlmprep
