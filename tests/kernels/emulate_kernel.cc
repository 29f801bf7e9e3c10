// Runs the CUDA kernel body (csrc/kernels/normalize_patchify_kernel.cuh) on the host, one
// std::thread per CUDA thread, a std::barrier per block for __syncthreads, blocks in turn, and
// compares every output byte with the CPU twin's on random ragged batches of every order and
// dtype. Built and run by tests/kernels/test_kernel_emulated.py (machines without a GPU check
// the kernel's index math this way). Usage: emulate_kernel SEED; exit status 0: all equal.
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
thread_local Dim3 threadIdx;
Dim3 blockIdx;  // one block runs at a time: its threads share it
Dim3 blockDim;
std::barrier<>* g_block_barrier = nullptr;
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
using std::min;
#define __global__
#define __shared__ static  // one block at a time: a static is that block's shared memory

#include "../../csrc/kernels/normalize_patchify_kernel.cuh"

namespace {

using vlmprep::DType;
using vlmprep::Order;
using vlmprep::NormalizePatchifyParams;
using vlmprep::NPSample;

template <typename T, bool kLut>
void launch_on_host(const NormalizePatchifyParams& p, int64_t max_rows) {
  using vlmprep::kernel::kRowsPerBlock;
  using vlmprep::kernel::kThreads;
  blockDim.x = kThreads;
  const unsigned gx = unsigned((max_rows + kRowsPerBlock - 1) / kRowsPerBlock);
  for (unsigned by = 0; by < unsigned(p.num_samples); ++by) {
    for (unsigned bx = 0; bx < gx; ++bx) {
      blockIdx.x = bx;
      blockIdx.y = by;
      std::barrier<> bar(kThreads);
      g_block_barrier = &bar;
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < unsigned(kThreads); ++t)
        threads.emplace_back([&p, t] {
          threadIdx.x = t;
          vlmprep::kernel::normalize_patchify_kernel<T, kLut>(p);
        });
      for (auto& th : threads) th.join();
    }
  }
}

void launch(const NormalizePatchifyParams& p, int64_t max_rows) {
  switch (p.dtype) {
    case DType::kFloat32: return launch_on_host<float, true>(p, max_rows);
    case DType::kBFloat16: return launch_on_host<uint16_t, true>(p, max_rows);
    case DType::kUInt8: return launch_on_host<uint8_t, false>(p, max_rows);
  }
}

struct Case {
  Order order;
  int patch_size, merge_size, temporal_patch_size;
};

}  // namespace

int main(int argc, char** argv) {
  const unsigned seed = argc > 1 ? unsigned(std::strtoul(argv[1], nullptr, 10)) : 1;
  std::mt19937 rng(seed);
  const Case cases[] = {{Order::kMergeGrouped, 14, 2, 2}, {Order::kMergeGrouped, 16, 2, 2},
                        {Order::kMergeGrouped, 2, 2, 3},  {Order::kRaster, 16, 1, 1},
                        {Order::kRaster, 3, 1, 1},        {Order::kNaflex, 16, 1, 1},
                        {Order::kNaflex, 5, 1, 1},        {Order::kTiles, 14, 1, 1}};
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kUInt8};
  int failures = 0;
  for (const Case& c : cases) {
    for (DType dt : dtypes) {
      NormalizePatchifyParams p{};
      p.order = c.order;
      p.dtype = dt;
      p.patch_size = c.patch_size;
      p.merge_size = c.merge_size;
      p.temporal_patch_size = c.temporal_patch_size;
      const int esize = vlmprep::dtype_size(dt);
      std::vector<uint8_t> lut(3 * 256 * size_t(esize));
      for (auto& b : lut) b = uint8_t(rng());
      p.lut = dt == DType::kUInt8 ? nullptr : lut.data();
      const int q = c.patch_size * (c.order == Order::kMergeGrouped ? c.merge_size : 1);
      const int n = 1 + int(rng() % 4);
      std::vector<std::vector<uint8_t>> canvases(n);
      std::vector<NPSample> samples(n);
      int64_t total = 0, max_rows = 0;
      for (int i = 0; i < n; ++i) {
        const int h = c.order == Order::kTiles ? 1 + int(rng() % 30) : q * (1 + int(rng() % 3));
        const int w = c.order == Order::kTiles ? 1 + int(rng() % 30) : q * (1 + int(rng() % 3));
        const int pad = int(rng() % 4);  // a crop of a wider canvas: row stride > 3w
        canvases[i].resize(size_t(h) * (w + pad) * 3);
        for (auto& b : canvases[i]) b = uint8_t(rng());
        samples[i] = {canvases[i].data(), int64_t(w + pad) * 3, h, w, total};
        total += vlmprep::num_rows(p, h, w) * vlmprep::row_length(p, h, w);
        max_rows = std::max(max_rows, vlmprep::kernel_rows(p, h, w));
      }
      p.num_samples = n;
      p.samples = samples.data();
      std::vector<uint8_t> a(size_t(total) * esize, 0xAB), b(size_t(total) * esize, 0xCD);
      p.out = a.data();
      launch(p, max_rows);
      p.out = b.data();
      vlmprep::normalize_patchify_cpu(p, 1);
      if (std::memcmp(a.data(), b.data(), a.size()) != 0) {
        ++failures;
        std::printf("MISMATCH order %d P%d m%d T%d dtype %d (seed %u)\n", int(c.order), c.patch_size,
                    c.merge_size, c.temporal_patch_size, int(dt), seed);
      }
    }
  }
  std::printf("%s: %d mismatches\n", failures ? "FAIL" : "OK", failures);
  return failures ? 1 : 0;
}
