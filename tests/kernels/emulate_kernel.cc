// Runs the CUDA kernel body (csrc/kernels/normalize_patchify_kernel.cuh) on the host, one
// std::thread per CUDA thread, a std::barrier per block for __syncthreads, blocks in turn, and
// compares every output byte with the CPU twin's on random ragged batches of every order and
// dtype, each batch written once at an aligned output (blocks whose rows allow it take the
// kernel's 4-element vector path) and once one element off (every block takes the scalar path).
// Built and run by tests/kernels/test_kernel_emulated.py (machines without a GPU check the
// kernel's index math this way), which also builds it against a deliberately broken copy of the
// body (VLMPREP_KERNEL_BODY) to show a wrong index is caught. Usage: emulate_kernel SEED; exit
// status 0: all equal; the last line counts the blocks of each path.
#include <atomic>
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

// Blocks per column path (counted by thread 0 of each block that has rows).
std::atomic<long> g_vector_blocks{0}, g_scalar_blocks{0};
#define VLMPREP_KERNEL_PATH(vector_path) \
  if (threadIdx.x == 0) ((vector_path) ? g_vector_blocks : g_scalar_blocks)++

#ifndef VLMPREP_KERNEL_BODY
#define VLMPREP_KERNEL_BODY "../../csrc/kernels/normalize_patchify_kernel.cuh"
#endif
#include VLMPREP_KERNEL_BODY

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
                        {Order::kNaflex, 5, 1, 1},        {Order::kTiles, 14, 1, 1},
                        // row_form="compact": Qwen rows with the temporal copies left out
                        {Order::kMergeGrouped, 14, 2, 1}, {Order::kMergeGrouped, 16, 2, 1}};
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
      // The table twice: 16-byte aligned (the kernel fills shared memory in 16-byte words) and
      // one element off (element by element).
      const size_t lut_bytes = 3 * 256 * size_t(esize);
      std::vector<uint8_t> lut(lut_bytes), lut_off(lut_bytes + 16);
      for (auto& b : lut) b = uint8_t(rng());
      std::memcpy(lut_off.data() + esize, lut.data(), lut_bytes);
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
      // shift 0: the output 16-byte aligned (vector path where rows allow); 1: one element
      // off (scalar path everywhere), with the table one element off too. Each side starts from its own fill (an element the kernel
      // skips shows), and the 16 guard bytes on either side must stay untouched.
      for (int shift = 0; shift < 2; ++shift) {
        const size_t bytes = size_t(total) * esize, guard = 16, at = guard + size_t(shift) * esize;
        std::vector<uint8_t> a(bytes + 2 * guard, 0xAB), b(bytes + 2 * guard, 0xCD);  // 16-aligned
        p.lut = dt == DType::kUInt8 ? nullptr : shift ? lut_off.data() + esize : lut.data();
        p.out = a.data() + at;
        launch(p, max_rows);
        p.out = b.data() + at;
        vlmprep::normalize_patchify_cpu(p, 1);
        bool bad = std::memcmp(a.data() + at, b.data() + at, bytes) != 0;
        for (size_t k = 0; k < a.size(); ++k)
          if (k < at || k >= at + bytes) bad |= a[k] != 0xAB;
        if (bad) {
          ++failures;
          std::printf("MISMATCH order %d P%d m%d T%d dtype %d shift %d (seed %u)\n", int(c.order),
                      c.patch_size, c.merge_size, c.temporal_patch_size, int(dt), shift, seed);
        }
      }
    }
  }
  std::printf("%s: %d mismatches\n", failures ? "FAIL" : "OK", failures);
  std::printf("blocks: vector %ld scalar %ld\n", g_vector_blocks.load(), g_scalar_blocks.load());
  return failures ? 1 : 0;
}
