// arm64_driver: runs the CPU kernels (resize, normalize_patchify, resize_normalize_patchify) on
// cases read from stdin, for tests/kernels/test_arm64.py, which builds it with
// aarch64-linux-gnu-g++ -static and runs it under qemu-aarch64. No torch, no Python: the
// kernels' sources alone (csrc/sources.json's torch_ext cpu list without csrc/torch/).
//
//   arm64_driver IN_BLOB OUT_BLOB < cases
//
// IN_BLOB holds every case's input bytes (images, luts) at offsets the cases name. Each case's
// output bytes are appended to OUT_BLOB in case order. One case per line:
//   resize GUARD THREADS MATCH INTERP IN_OFF IN_H IN_W PAD OUT_H OUT_W
//   np GUARD THREADS ORDER DTYPE P M T LUT_OFF N (IN_OFF H W PAD) x N   (outputs back to back)
//   fused GUARD THREADS MATCH INTERP IN_OFF IN_H IN_W PAD OUT_H OUT_W ORDER DTYPE P M T LUT_OFF
// An image is contiguous (h, w, 3) in IN_BLOB; the kernel gets it with rows 3w + PAD bytes apart.
// LUT_OFF -1: no lut (uint8 out). GUARD "end": every buffer the kernel gets (image, lut,
// output) ends flush against a PROT_NONE page; "start": it starts right after one (and a
// PROT_NONE page follows its last page): a read or write outside a buffer faults (qemu-user
// honours mprotect), where heap slack would hide it.
//
// stdout: first "path: resize=<path> normalize_patchify=<path>" (cpu_paths.h, the kernels' own
// dispatch under this VLMPREP_CPU_ISA), then "ok <bytes>" per case. A bad case: "error ..." on
// stderr, exit 2.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "vlmprep/cpu_paths.h"
#include "vlmprep/normalize_patchify.h"
#include "vlmprep/parse.h"
#include "vlmprep/resize.h"
#include "vlmprep/resize_normalize_patchify.h"

namespace {

using namespace vlmprep;

[[noreturn]] void fail(const std::string& why) {
  std::cerr << "error " << why << std::endl;
  std::exit(2);
}

// n bytes between PROT_NONE pages, flush against the one after (end) or before (start).
class Guarded {
 public:
  Guarded(size_t n, bool at_start) {
    const size_t ps = size_t(sysconf(_SC_PAGESIZE));
    const size_t body = (n + ps - 1) / ps * ps;
    len_ = body + 2 * ps;
    void* m = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("mmap");
    base_ = static_cast<uint8_t*>(m);
    if (mprotect(base_, ps, PROT_NONE) || mprotect(base_ + ps + body, ps, PROT_NONE)) fail("mprotect");
    ptr_ = at_start ? base_ + ps : base_ + ps + body - n;
  }
  ~Guarded() { munmap(base_, len_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  uint8_t* data() const { return ptr_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* ptr_ = nullptr;
  size_t len_ = 0;
};

struct Io {
  std::vector<uint8_t> in;
  std::ofstream out;
  bool start = false;  // this case's guard mode

  // An (h, w, 3) image from in at `off`, rows 3w + pad apart in a guarded buffer (the last
  // row without its padding: the buffer ends where the image does).
  std::unique_ptr<Guarded> image(int64_t off, int h, int w, int pad, int64_t* stride) {
    const int64_t row = int64_t(3) * w;
    *stride = row + pad;
    if (h < 1 || w < 1 || pad < 0 || off < 0 || off + row * h > int64_t(in.size())) fail("image outside IN_BLOB");
    auto g = std::make_unique<Guarded>(size_t((h - 1) * *stride + row), start);
    for (int y = 0; y < h; ++y) {
      std::memcpy(g->data() + y * *stride, in.data() + off + y * row, size_t(row));
      if (y + 1 < h) std::memset(g->data() + y * *stride + row, 0xcd, size_t(pad));
    }
    return g;
  }

  std::unique_ptr<Guarded> lut(int64_t off, DType d) {
    if (off < 0) return nullptr;
    const size_t n = size_t(3 * 256 * dtype_size(d));
    if (off + int64_t(n) > int64_t(in.size())) fail("lut outside IN_BLOB");
    auto g = std::make_unique<Guarded>(n, start);
    std::memcpy(g->data(), in.data() + off, n);
    return g;
  }

  // A guarded output of n bytes, filled with a pattern (an element left unwritten shows).
  std::unique_ptr<Guarded> output(size_t n) {
    auto g = std::make_unique<Guarded>(n, start);
    std::memset(g->data(), 0xa5, n);
    return g;
  }

  void emit(const Guarded& g, size_t n) {
    out.write(reinterpret_cast<const char*>(g.data()), std::streamsize(n));
    std::cout << "ok " << n << std::endl;  // flushed: after a fault, the last line names the case before
  }
};

DType dtype_arg(const std::string& s) {
  if (s == "float32") return DType::kFloat32;
  if (s == "bfloat16") return DType::kBFloat16;
  if (s == "uint8") return DType::kUInt8;
  fail("dtype " + s);
}

// GUARD THREADS: sets the guard mode, returns the thread count.
int common_args(std::istringstream& ls, Io& io) {
  std::string guard;
  int threads;
  if (!(ls >> guard >> threads) || (guard != "end" && guard != "start")) fail("GUARD THREADS");
  io.start = guard == "start";
  return threads;
}

// match interp in_off in_h in_w pad out_h out_w -> ResizeParams (src set, dst unset).
ResizeParams resize_args(std::istringstream& ls, Io& io, std::unique_ptr<Guarded>* src) {
  std::string match, interp;
  int64_t off;
  int in_h, in_w, pad, out_h, out_w;
  if (!(ls >> match >> interp >> off >> in_h >> in_w >> pad >> out_h >> out_w)) fail("resize arguments");
  ResizeParams r{};
  if (!parse_resize_match(match, &r.match)) fail("match " + match);
  if (!parse_interpolation(interp, &r.interpolation)) fail("interpolation " + interp);
  r.in_h = in_h;
  r.in_w = in_w;
  r.out_h = out_h;
  r.out_w = out_w;
  *src = io.image(off, in_h, in_w, pad, &r.src_stride);
  r.src = (*src)->data();
  return r;
}

// order dtype P m T lut_off -> the parameters (samples, out unset).
NormalizePatchifyParams np_args(std::istringstream& ls, Io& io, std::unique_ptr<Guarded>* lut) {
  std::string order, dtype;
  int64_t lut_off;
  NormalizePatchifyParams p{};
  if (!(ls >> order >> dtype >> p.patch_size >> p.merge_size >> p.temporal_patch_size >> lut_off))
    fail("normalize_patchify arguments");
  if (!parse_order(order, &p.order)) fail("order " + order);
  p.dtype = dtype_arg(dtype);
  *lut = io.lut(lut_off, p.dtype);
  p.lut = *lut ? (*lut)->data() : nullptr;
  return p;
}

void run_resize(std::istringstream& ls, Io& io) {
  const int threads = common_args(ls, io);
  std::unique_ptr<Guarded> src;
  ResizeParams r = resize_args(ls, io, &src);
  const size_t n = size_t(3) * r.out_h * r.out_w;
  auto dst = io.output(n);
  r.dst = dst->data();
  if (const char* bad = resize_cpu(r, threads)) fail(bad);
  io.emit(*dst, n);
}

void run_np(std::istringstream& ls, Io& io) {
  const int threads = common_args(ls, io);
  std::unique_ptr<Guarded> lut;
  NormalizePatchifyParams p = np_args(ls, io, &lut);
  int n;
  if (!(ls >> n) || n < 1) fail("normalize_patchify arguments");
  std::vector<std::unique_ptr<Guarded>> images;
  std::vector<NPSample> samples(n);
  int64_t elements = 0;
  for (auto& s : samples) {
    int64_t off;
    int pad;
    if (!(ls >> off >> s.height >> s.width >> pad)) fail("sample arguments");
    images.push_back(io.image(off, s.height, s.width, pad, &s.row_stride));
    s.src = images.back()->data();
    s.out_offset = elements;
    if (const char* bad = check_sample(p, s)) fail(bad);
    int64_t e = 0;
    sample_elements(p, s.height, s.width, &e);
    elements += e;
  }
  const size_t bytes = size_t(elements) * dtype_size(p.dtype);
  auto out = io.output(bytes);
  p.out = out->data();
  p.num_samples = n;
  p.samples = samples.data();
  normalize_patchify_cpu(p, threads);
  io.emit(*out, bytes);
}

void run_fused(std::istringstream& ls, Io& io) {
  const int threads = common_args(ls, io);
  std::unique_ptr<Guarded> src, lut;
  ResizeParams r = resize_args(ls, io, &src);
  NormalizePatchifyParams p = np_args(ls, io, &lut);
  NPSample s{nullptr, int64_t(3) * r.out_w, r.out_h, r.out_w, 0};
  if (const char* bad = check_sample(p, s)) fail(bad);
  int64_t e = 0;
  sample_elements(p, s.height, s.width, &e);
  const size_t bytes = size_t(e) * dtype_size(p.dtype);
  auto out = io.output(bytes);
  p.out = out->data();
  p.num_samples = 1;
  p.samples = &s;
  if (const char* bad = resize_normalize_patchify_cpu(r, p, threads)) fail(bad);
  io.emit(*out, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) fail("usage: arm64_driver IN_BLOB OUT_BLOB < cases");
  Io io;
  {
    std::ifstream f(argv[1], std::ios::binary);
    if (!f) fail(std::string("cannot read ") + argv[1]);
    io.in.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  io.out.open(argv[2], std::ios::binary | std::ios::trunc);
  if (!io.out) fail(std::string("cannot write ") + argv[2]);
  std::cout << "path: resize=" << resize_cpu_path() << " normalize_patchify=" << normalize_patchify_cpu_path()
            << "\n";
  std::string line;
  int cases = 0;
  while (std::getline(std::cin, line)) {
    std::istringstream ls(line);
    std::string op;
    if (!(ls >> op)) continue;
    if (op == "resize") run_resize(ls, io);
    else if (op == "np") run_np(ls, io);
    else if (op == "fused") run_fused(ls, io);
    else fail("op " + op);
    ++cases;
  }
  io.out.close();
  if (!io.out) fail("writing OUT_BLOB");
  std::cout << "cases: " << cases << std::endl;
  return 0;
}
