// Thin torch binding: validates tensors at the boundary, fills the kernels' parameter structs,
// calls the CPU twin or the CUDA launcher. Registered as torch.ops.vlmprep.*; the fake
// (shape-only) implementations live in vlmprep/kernels/torch_ops.py.
#include <torch/library.h>
#include <ATen/ATen.h>

#ifdef VLMPREP_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "host_cache.h"
#include "vlmprep/cpu_paths.h"
#include "vlmprep/limits.h"
#include "vlmprep/normalize_patchify.h"
#include "vlmprep/parse.h"
#include "vlmprep/resize.h"
#include "vlmprep/resize_normalize_patchify.h"
#include "vlmprep/stream_store.h"
#if defined(VLMPREP_WITH_LIBJPEG)
#include "vlmprep/jpeg_rows.h"
#endif

namespace {

using vlmprep::DType;
using vlmprep::Order;
using vlmprep::kMaxSide;

// Every int argument is checked in int64 before it is narrowed to the kernels' int32: a value
// like 2**32 + 3 must not become 3.
int32_t int_arg(const char* op, const char* name, int64_t v, int64_t lo, int64_t hi) {
  TORCH_CHECK(v >= lo && v <= hi, op, ": ", name, ": expected an integer in [", lo, ", ", hi, "], got ", v,
              "; pass the value from the plan");
  return int32_t(v);
}

// An image side (rows or columns): 1 .. 2^28 (vlmprep/limits.h).
int32_t side_arg(const char* op, const char* name, int64_t v) {
  TORCH_CHECK(v >= 1 && v <= kMaxSide, op, ": ", name, ": expected a size in [1, ", kMaxSide, "], got ", v,
              "; pass the size from the plan (or probe)");
  return int32_t(v);
}

// Threads for a call: <= 1 runs inline; more than 1024 is taken as 1024 (no call has that much
// parallel work, and a huge count must not wrap in the int the kernels take).
int threads_arg(int64_t n) { return int(std::clamp<int64_t>(n, 1, 1024)); }

// "[offset, offset + n)" without overflowing, for the messages.
std::string span_text(int64_t offset, int64_t n) {
  const bool fits = offset >= 0 ? n <= INT64_MAX - offset : true;
  return "[" + std::to_string(offset) + ", " +
         (fits ? std::to_string(offset + n) : std::to_string(offset) + " + " + std::to_string(n)) + ")";
}

Order order_arg(const std::string& s) {
  Order o{};
  TORCH_CHECK(vlmprep::parse_order(s, &o), "normalize_patchify: order: expected ", vlmprep::kOrderNames,
              ", got '", s, "'");
  return o;
}

DType parse_dtype(const at::Tensor& out) {
  switch (out.scalar_type()) {
    case at::kFloat: return DType::kFloat32;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kByte: return DType::kUInt8;
    default:
      TORCH_CHECK(false, "normalize_patchify: out: expected float32, bfloat16 or uint8, got ",
                  out.scalar_type(), "; allocate the output in one of those");
  }
}

// The common parameters of normalize_patchify and resize_normalize_patchify, checked.
vlmprep::NormalizePatchifyParams order_params(const char* op, const at::Tensor& out, const std::string& order,
                                              int64_t patch_size, int64_t merge_size,
                                              int64_t temporal_patch_size) {
  vlmprep::NormalizePatchifyParams p{};
  p.order = order_arg(order);
  p.dtype = parse_dtype(out);
  const bool mg = p.order == Order::kMergeGrouped;
  p.patch_size = int_arg(op, "patch_size", patch_size, 1, kMaxSide);
  p.merge_size = mg ? int_arg(op, "merge_size", merge_size, 1, kMaxSide) : 1;
  p.temporal_patch_size = mg ? int_arg(op, "temporal_patch_size", temporal_patch_size, 1, kMaxSide) : 1;
  TORCH_CHECK(out.is_contiguous(), op, ": out: expected a contiguous tensor, got strides ",
              out.strides(), "; pass a contiguous buffer (or a contiguous slice of one)");
  return p;
}

// lut: (3, 256) of out's dtype on out's device; none for a uint8 out (values are copied).
const void* lut_pointer(const char* op, const std::optional<at::Tensor>& lut, const at::Tensor& out) {
  if (out.scalar_type() == at::kByte) return nullptr;
  TORCH_CHECK(lut.has_value(), op, ": a float32/bfloat16 out needs lut (3, 256)");
  const at::Tensor& t = *lut;
  TORCH_CHECK(t.scalar_type() == out.scalar_type() && t.numel() == 3 * 256 && t.is_contiguous() &&
                  t.device() == out.device(),
              op, ": lut: expected a contiguous (3, 256) tensor of ", out.scalar_type(), " on ",
              out.device(), ", got ", t.sizes(), " ", t.scalar_type(), " on ", t.device());
  return t.data_ptr();
}

// A video's temporal group, (T, h, w, 3) uint8 with T == temporal_patch_size >= 2 (merge_grouped):
// its frame 0 as an (h, w, 3) view, and the bytes from one frame to the next (frames apart, in
// order: stride(0) >= h * stride(1)). An (h, w, 3) image is itself with frame stride 0.
at::Tensor frames_arg(const char* op, const std::string& what, const at::Tensor& im,
                      int64_t temporal_patch_size, const std::string& order, int64_t* frame_stride) {
  *frame_stride = 0;
  if (im.dim() != 4) return im;
  TORCH_CHECK(order == "merge_grouped" && temporal_patch_size >= 2 && im.size(0) == temporal_patch_size,
              op, ": ", what, ": expected (h, w, 3), or a temporal group (T, h, w, 3) of T == "
              "temporal_patch_size >= 2 frames in the merge_grouped order, got ", im.sizes(), " with order ",
              order, " and temporal_patch_size ", temporal_patch_size, "; pass one frame group at a time");
  TORCH_CHECK(im.size(1) < 1 || im.stride(0) >= im.size(1) * im.stride(1), op, ": ", what,
              ": expected frames apart in memory (stride(0) >= h * stride(1)), got strides ", im.strides(),
              "; pass .contiguous() frames");
  *frame_stride = im.stride(0);
  return im.select(0, 0);
}

// images[i]: (h, w, 3) uint8 with pixel stride 3 (a crop of a contiguous HWC canvas is fine), or
// a video's temporal group (T, h, w, 3) (frames_arg); lut: (3, 256) of out's dtype (None for
// uint8 out); out: contiguous, offsets[i] its first element for image i. Every element the
// images' rows cover is written exactly once.
void normalize_patchify(at::TensorList images, const std::optional<at::Tensor>& lut,
                        at::Tensor out, at::IntArrayRef offsets, std::string order,
                        int64_t patch_size, int64_t merge_size, int64_t temporal_patch_size,
                        int64_t num_threads) {
  vlmprep::NormalizePatchifyParams p =
      order_params("normalize_patchify", out, order, patch_size, merge_size, temporal_patch_size);
  TORCH_CHECK(int64_t(images.size()) == int64_t(offsets.size()),
              "normalize_patchify: expected one offset per image, got ", images.size(),
              " images and ", offsets.size(), " offsets");
  p.lut = lut_pointer("normalize_patchify", lut, out);
  std::vector<vlmprep::NPSample> samples(images.size());
  int64_t max_rows = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    int64_t frame_stride = 0;
    const at::Tensor im = frames_arg("normalize_patchify", "images[" + std::to_string(i) + "]", images[i],
                                     temporal_patch_size, order, &frame_stride);
    const int64_t last_frame = frame_stride * (images[i].dim() == 4 ? images[i].size(0) - 1 : 0);
    TORCH_CHECK(im.scalar_type() == at::kByte && im.dim() == 3 && im.size(2) == 3 &&
                    im.stride(2) == 1 && im.stride(1) == 3,
                "normalize_patchify: images[", i, "]: expected (h, w, 3) uint8 with pixel stride 3, got ",
                im.sizes(), " ", im.scalar_type(), " strides ", im.strides(),
                "; pass an HWC image (.contiguous() if needed)");
    TORCH_CHECK(im.device() == out.device(), "normalize_patchify: images[", i, "] is on ", im.device(),
                ", out on ", out.device(), "; move them to one device");
    TORCH_CHECK(im.size(0) <= kMaxSide && im.size(1) <= kMaxSide, "normalize_patchify: images[", i,
                "]: expected sides of at most ", kMaxSide, ", got ", im.sizes(), "; resize it first");
    if (im.numel() > 0 && out.numel() > 0) {
      // The kernels read images and write out as non-aliasing (__restrict__): refuse an out
      // that shares bytes with an image rather than compute garbage.
      const auto* a0 = static_cast<const char*>(im.data_ptr());
      const auto* a1 = a0 + last_frame + (im.size(0) - 1) * im.stride(0) + (im.size(1) - 1) * 3 + 3;
      const auto* b0 = static_cast<const char*>(out.data_ptr());
      const auto* b1 = b0 + out.numel() * out.element_size();
      TORCH_CHECK(a1 <= b0 || b1 <= a0, "normalize_patchify: images[", i, "] and out share memory; "
                  "expected a separate out tensor, got one that overlaps the image; allocate out anew");
    }
    vlmprep::NPSample& s = samples[i];
    s.src = im.data_ptr<uint8_t>();
    s.row_stride = im.stride(0);
    s.height = int32_t(im.size(0));
    s.width = int32_t(im.size(1));
    s.out_offset = offsets[i];
    s.frame_stride = frame_stride;
    const char* bad = vlmprep::check_sample(p, s);
    TORCH_CHECK(bad == nullptr, "normalize_patchify: images[", i, "] (", im.size(0), "x", im.size(1),
                ", patch_size ", patch_size, ", merge_size ", p.merge_size, "): ", bad ? bad : "");
    int64_t n = 0;
    vlmprep::sample_elements(p, s.height, s.width, &n);  // fits: check_sample said so
    TORCH_CHECK(vlmprep::range_ok(s.out_offset, n, out.numel()),
                "normalize_patchify: images[", i, "] needs out elements ", span_text(s.out_offset, n),
                ", out has ", out.numel(), "; size out from the plan");
    max_rows = std::max(max_rows, vlmprep::kernel_rows(p, s.height, s.width));
  }
  p.num_samples = int32_t(samples.size());
  p.out = out.data_ptr();
  if (out.is_cpu()) {
    p.samples = samples.data();
    vlmprep::normalize_patchify_cpu(p, threads_arg(num_threads));
    return;
  }
#ifdef VLMPREP_WITH_CUDA
  TORCH_CHECK(out.is_cuda(), "normalize_patchify: expected a CPU or CUDA out, got ", out.device());
  // The launch grid: x covers the rows 16 at a time (int32 blocks), y one sample each (65535).
  TORCH_CHECK(samples.size() <= 65535 && (max_rows + 15) / 16 <= INT32_MAX, "normalize_patchify: ",
              samples.size(), " images with up to ", max_rows, " rows exceed one CUDA launch (at most ",
              "65535 images of ", int64_t(INT32_MAX) * 16, " rows); split the batch");
  const c10::cuda::CUDAGuard guard(out.device());
  auto st = c10::cuda::getCurrentCUDAStream();
  const int64_t bytes = int64_t(samples.size() * sizeof(vlmprep::NPSample));
  at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), samples.data(), size_t(bytes));
  at::Tensor dev = host.to(out.device(), /*non_blocking=*/true);
  p.samples = reinterpret_cast<const vlmprep::NPSample*>(dev.data_ptr());
  // Lifetimes: the pinned `host` block is kept by torch's host allocator until its copy ran
  // (non_blocking copies record an event), and `dev` returns to the caching allocator on the
  // stream the kernel runs on, so its reuse is ordered after the kernel.
  const int err = vlmprep::normalize_patchify_cuda(p, max_rows, st.stream());
  TORCH_CHECK(err == 0, "normalize_patchify: CUDA launch failed: ", cudaGetErrorName(cudaError_t(err)), " (",
              cudaGetErrorString(cudaError_t(err)), ")");
#else
  TORCH_CHECK(false, "normalize_patchify: out is on ", out.device(),
              " but vlmprep's extension was built without CUDA (no nvcc at build time); "
              "rebuild with nvcc on PATH or use a CPU out");
#endif
}

vlmprep::Interpolation interpolation_arg(const std::string& s) {
  vlmprep::Interpolation i{};
  TORCH_CHECK(vlmprep::parse_interpolation(s, &i), "resize: interpolation: expected ",
              vlmprep::kInterpolationNames, ", got '", s, "' (nearest: use PIL)");
  return i;
}

// "pillow" (the default) or "torchvision": whose resize arithmetic (vlmprep/resize.h).
vlmprep::ResizeMatch match_arg(const char* op, const std::string& s) {
  vlmprep::ResizeMatch m{};
  TORCH_CHECK(vlmprep::parse_resize_match(s, &m), op, ": match: expected ", vlmprep::kResizeMatchNames,
              ", got '", s, "'");
  return m;
}

void check_resize_input(const char* op, const at::Tensor& image, int64_t height, int64_t width) {
  TORCH_CHECK(image.is_cpu() && image.scalar_type() == at::kByte && image.dim() == 3 &&
                  image.size(2) == 3 && image.stride(2) == 1 && image.stride(1) == 3,
              op, ": expected a CPU (h, w, 3) uint8 image with pixel stride 3, got ", image.sizes(),
              " ", image.scalar_type(), " on ", image.device(), " strides ", image.strides(),
              "; pass an HWC image (.contiguous() if needed)");
  TORCH_CHECK(height >= 1 && width >= 1, op, ": expected a positive size, got ", height, "x", width);
  side_arg(op, "height", height);
  side_arg(op, "width", width);
  TORCH_CHECK(image.size(0) <= kMaxSide && image.size(1) <= kMaxSide, op, ": image: expected sides of ",
              "at most ", kMaxSide, ", got ", image.sizes(), "; such an image cannot be decoded by Pillow");
}

// The parameters of the fused ops: one (height, width) sample whose rows go to out from element
// `offset` in a patch order; `s` (the caller's, pointed to by the result) describes it.
vlmprep::NormalizePatchifyParams one_sample_params(const char* op, int64_t height, int64_t width,
                                                   const std::optional<at::Tensor>& lut, at::Tensor& out,
                                                   int64_t offset, const std::string& order,
                                                   int64_t patch_size, int64_t merge_size,
                                                   int64_t temporal_patch_size, vlmprep::NPSample* s) {
  vlmprep::NormalizePatchifyParams p =
      order_params(op, out, order, patch_size, merge_size, temporal_patch_size);
  TORCH_CHECK(p.order != Order::kTiles, op, ": order: expected merge_grouped, raster or naflex, "
              "got tiles; resize, then call normalize_patchify");
  p.lut = lut_pointer(op, lut, out);
  const int32_t h = side_arg(op, "height", height), w = side_arg(op, "width", width);
  *s = vlmprep::NPSample{nullptr, int64_t(3) * w, h, w, offset};
  const char* bad = vlmprep::check_sample(p, *s);
  TORCH_CHECK(bad == nullptr, op, " (", height, "x", width, ", patch_size ", patch_size, ", merge_size ",
              p.merge_size, "): ", bad ? bad : "");
  int64_t n = 0;
  vlmprep::sample_elements(p, s->height, s->width, &n);  // fits: check_sample said so
  TORCH_CHECK(vlmprep::range_ok(offset, n, out.numel()), op, ": the ", height, "x", width,
              " image needs out elements ", span_text(offset, n), ", out has ", out.numel(),
              "; size out from the plan");
  p.num_samples = 1;
  p.samples = s;
  p.out = out.data_ptr();
  return p;
}

// image: (h, w, 3) uint8 CPU -> the rows of its (height, width) resize in `order`, written
// to out from element `offset`: the bytes of resize then normalize_patchify, band by band. A
// video's temporal group (T, h, w, 3) (frames_arg): each frame resized, frame t's values in the
// rows' t-th slots.
void resize_normalize_patchify(const at::Tensor& frames, int64_t height, int64_t width,
                               std::string interpolation, const std::optional<at::Tensor>& lut,
                               at::Tensor out, int64_t offset, std::string order, int64_t patch_size,
                               int64_t merge_size, int64_t temporal_patch_size, int64_t num_threads,
                               std::string match) {
  const char* op = "resize_normalize_patchify";
  int64_t frame_stride = 0;
  const at::Tensor image = frames_arg(op, "image", frames, temporal_patch_size, order, &frame_stride);
  check_resize_input(op, image, height, width);
  TORCH_CHECK(out.is_cpu(), op, ": expected a CPU out, got ", out.device(),
              "; on a GPU, resize there and call normalize_patchify");
  vlmprep::NPSample s{};
  const vlmprep::NormalizePatchifyParams p =
      one_sample_params(op, height, width, lut, out, offset, order, patch_size, merge_size,
                        temporal_patch_size, &s);
  const vlmprep::Interpolation interp = interpolation_arg(interpolation);
  const vlmprep::ResizeParams r{image.data_ptr<uint8_t>(), image.stride(0), int32_t(image.size(0)),
                                int32_t(image.size(1)), nullptr, int32_t(height), int32_t(width),
                                interp, match_arg(op, match)};
  const char* bad = vlmprep::resize_normalize_patchify_cpu(r, p, threads_arg(num_threads), frame_stride);
  TORCH_CHECK(bad == nullptr, op, " (", height, "x", width, ", patch_size ", patch_size, ", merge_size ",
              p.merge_size, "): ", bad ? bad : "");
}

// The JPEG bytes of a decode op: a contiguous 1-D uint8 CPU tensor.
void check_jpeg_input(const char* op, const at::Tensor& data, int64_t src_h, int64_t src_w) {
  TORCH_CHECK(data.is_cpu() && data.scalar_type() == at::kByte && data.dim() == 1 && data.is_contiguous(),
              op, ": data: expected the file's bytes as a contiguous 1-D uint8 CPU tensor, got ",
              data.sizes(), " ", data.scalar_type(), " on ", data.device());
  TORCH_CHECK(src_h >= 1 && src_w >= 1, op, ": expected the probed size, got ", src_h, "x", src_w);
  side_arg(op, "src_h", src_h);
  side_arg(op, "src_w", src_w);
#if !defined(VLMPREP_WITH_LIBJPEG)
  TORCH_CHECK(false, op, ": vlmprep's extension was built without libjpeg-turbo's headers "
              "(jpeglib.h); install libjpeg-turbo's dev package and rebuild, or decode first");
#endif
}

// data: a JPEG file's bytes, src_h x src_w (probed) -> the rows of its (height, width) resize in
// `order` from element `offset` of out. When the fast path cannot (damaged or unusual data:
// decode with Pillow instead; out is then partly written) it raises "...: declined: <why>".
void decode_resize_normalize_patchify(const at::Tensor& data, int64_t src_h, int64_t src_w,
                                      int64_t height, int64_t width, std::string interpolation,
                                      const std::optional<at::Tensor>& lut, at::Tensor out,
                                      int64_t offset, std::string order, int64_t patch_size,
                                      int64_t merge_size, int64_t temporal_patch_size,
                                      int64_t num_threads, std::string match) {
  const char* op = "decode_resize_normalize_patchify";
  check_jpeg_input(op, data, src_h, src_w);
  TORCH_CHECK(height >= 1 && width >= 1, op, ": expected a positive size, got ", height, "x", width);
  TORCH_CHECK(out.is_cpu(), op, ": expected a CPU out, got ", out.device());
  vlmprep::NPSample s{};
  const vlmprep::NormalizePatchifyParams p =
      one_sample_params(op, height, width, lut, out, offset, order, patch_size, merge_size,
                        temporal_patch_size, &s);
#if defined(VLMPREP_WITH_LIBJPEG)
  const vlmprep::Interpolation interp = interpolation_arg(interpolation);
  const vlmprep::ResizeParams r{nullptr, 0, 0, 0, nullptr, int32_t(height), int32_t(width),
                                interp, match_arg(op, match)};
  const char* bad = vlmprep::decode_resize_normalize_patchify_cpu(
      data.data_ptr<uint8_t>(), size_t(data.numel()), int(src_h), int(src_w), r, p, threads_arg(num_threads));
  TORCH_CHECK(bad == nullptr, op, ": declined: ", bad ? bad : "");
#endif
}

// data: a JPEG file's bytes, src_h x src_w (probed) -> one (h, w, 3) uint8 canvas per box:
// boxes = [top, left, box_h, box_w] * n inside the image, sizes = [h, w] * n; canvas k is box k
// resized to sizes k, Pillow-exact (the bytes of decode_jpeg, crop, resize). When the fast path
// cannot (damaged or unusual data: decode with Pillow instead) it raises "...: declined: <why>".
std::vector<at::Tensor> decode_resize(const at::Tensor& data, int64_t src_h, int64_t src_w,
                                      at::IntArrayRef boxes, at::IntArrayRef sizes,
                                      std::string interpolation, int64_t num_threads, std::string match) {
  const char* op = "decode_resize";
  check_jpeg_input(op, data, src_h, src_w);
  const int64_t n = int64_t(sizes.size()) / 2;
  TORCH_CHECK(n >= 1 && int64_t(sizes.size()) == 2 * n && int64_t(boxes.size()) == 4 * n, op,
              ": expected boxes [top, left, h, w] and sizes [h, w] for each of n >= 1 canvases, got ",
              boxes.size(), " box and ", sizes.size(), " size values");
  const vlmprep::Interpolation interp = interpolation_arg(interpolation);
  const vlmprep::ResizeMatch m = match_arg(op, match);
  std::vector<vlmprep::ResizeParams> rs(n);
  std::vector<int> top(n), left(n);
  std::vector<at::Tensor> outs;
  for (int64_t k = 0; k < n; ++k) {
    top[k] = int_arg(op, "boxes top", boxes[4 * k], 0, src_h - 1);
    left[k] = int_arg(op, "boxes left", boxes[4 * k + 1], 0, src_w - 1);
    const int32_t bh = int_arg(op, "boxes height", boxes[4 * k + 2], 1, src_h - top[k]);
    const int32_t bw = int_arg(op, "boxes width", boxes[4 * k + 3], 1, src_w - left[k]);
    const int32_t h = side_arg(op, "height", sizes[2 * k]), w = side_arg(op, "width", sizes[2 * k + 1]);
    outs.push_back(vlmprep_empty_host(int64_t(h) * w * 3).view({h, w, 3}));
    rs[k] = vlmprep::ResizeParams{nullptr, 0, bh, bw, outs.back().data_ptr<uint8_t>(), h, w, interp, m};
  }
#if defined(VLMPREP_WITH_LIBJPEG)
  const char* bad = vlmprep::decode_resize_cpu(data.data_ptr<uint8_t>(), size_t(data.numel()), int(src_h),
                                               int(src_w), rs.data(), top.data(), left.data(), int(n),
                                               threads_arg(num_threads));
  TORCH_CHECK(bad == nullptr, op, ": declined: ", bad ? bad : "");
#endif
  return outs;
}

// data: a JPEG file's bytes, src_h x src_w (probed) -> (src_h, src_w, 3) uint8 RGB, Pillow's pixels
// (num_threads >= 2: the decode split in two, decode_units.h).
at::Tensor decode_jpeg(const at::Tensor& data, int64_t src_h, int64_t src_w, int64_t num_threads) {
  check_jpeg_input("decode_jpeg", data, src_h, src_w);
#if defined(VLMPREP_WITH_LIBJPEG)
  // The kernel reads the header first: the output is allocated for the JPEG's own size, not the
  // caller's word.
  at::Tensor out;
  const char* bad = vlmprep::decode_jpeg_cpu(
      data.data_ptr<uint8_t>(), size_t(data.numel()), int(src_h), int(src_w),
      [&] {
        out = at::empty({src_h, src_w, 3}, data.options());
        return out.data_ptr<uint8_t>();
      },
      threads_arg(num_threads));
  TORCH_CHECK(bad == nullptr, "decode_jpeg: ", bad ? bad : "", "; decode it with Pillow to see the error");
  return out;
#else
  return at::Tensor();  // not reached: check_jpeg_input raised
#endif
}

// data: a JPEG file's bytes -> the row where a decode on 2+ threads that writes output_pixels
// resized pixels in output_bytes beside it starts its second decoder (0: not split; -1: the
// header does not open).
int64_t jpeg_split_row(const at::Tensor& data, int64_t output_pixels, int64_t output_bytes) {
  TORCH_CHECK(data.is_cpu() && data.dim() == 1 && data.scalar_type() == at::kByte && data.is_contiguous(),
              "jpeg_split_row: data: expected a contiguous 1-D uint8 CPU tensor, got ", data.sizes(), " ",
              data.scalar_type(), " on ", data.device(), "; pass torch.frombuffer(bytearray(data), dtype=torch.uint8)");
#if defined(VLMPREP_WITH_LIBJPEG)
  TORCH_CHECK(output_pixels >= 0 && output_bytes >= 0, "jpeg_split_row: expected output_pixels and output_bytes "
              ">= 0, got ", output_pixels, " and ", output_bytes);
  return vlmprep::jpeg_split_row_cpu(data.data_ptr<uint8_t>(), size_t(data.numel()), output_pixels, output_bytes);
#else
  TORCH_CHECK(false, "jpeg_split_row: built without libjpeg-turbo; reinstall with libjpeg-turbo's dev package");
  return 0;
#endif
}

// image: (h, w, 3) uint8 CPU, pixel stride 3 -> (height, width, 3) uint8, Pillow-exact (match
// "torchvision": torchvision's antialiased uint8 resize).
at::Tensor resize(const at::Tensor& image, int64_t height, int64_t width, std::string interpolation,
                  int64_t num_threads, std::string match) {
  check_resize_input("resize", image, height, width);
  // Both sides <= 2^28 (checked): height * width * 3 fits int64.
  at::Tensor out = vlmprep_empty_host(height * width * 3).view({height, width, 3});
  const vlmprep::Interpolation interp = interpolation_arg(interpolation);
  vlmprep::ResizeParams p{image.data_ptr<uint8_t>(), image.stride(0), int32_t(image.size(0)),
                          int32_t(image.size(1)), out.data_ptr<uint8_t>(), int32_t(height),
                          int32_t(width), interp, match_arg("resize", match)};
  const char* bad = vlmprep::resize_cpu(p, threads_arg(num_threads));
  TORCH_CHECK(bad == nullptr, "resize: ", bad ? bad : "");
  return out;
}

// out: any contiguous CPU tensor -> every byte set to `value` with streamed stores, one thread:
// the output-write floor of `vlmprep bench` (what storing exactly out's bytes costs).
void stream_store(at::Tensor out, int64_t value) {
  TORCH_CHECK(out.is_cpu() && out.is_contiguous(), "stream_store: out: expected a contiguous CPU tensor, got ",
              out.sizes(), " strides ", out.strides(), " on ", out.device(), "; pass a contiguous CPU buffer");
  const int32_t v = int_arg("stream_store", "value", value, 0, 255);
  vlmprep::stream_store_cpu(static_cast<uint8_t*>(out.data_ptr()), out.numel() * int64_t(out.element_size()),
                            uint8_t(v));
}

// -> [resize's path, normalize_patchify's path] on this CPU now (VLMPREP_CPU_ISA applied).
std::vector<std::string> cpu_paths() {
  return {vlmprep::resize_cpu_path(), vlmprep::normalize_patchify_cpu_path()};
}

}  // namespace

TORCH_LIBRARY(vlmprep, m) {
  m.def("normalize_patchify(Tensor[] images, Tensor? lut, Tensor(a!) out, int[] offsets, str order, "
        "int patch_size, int merge_size, int temporal_patch_size, int num_threads=1) -> ()");
  m.def("resize(Tensor image, int height, int width, str interpolation, int num_threads=1, "
        "str match=\"pillow\") -> Tensor");
  m.def("resize_normalize_patchify(Tensor image, int height, int width, str interpolation, Tensor? lut, "
        "Tensor(a!) out, int offset, str order, int patch_size, int merge_size, int temporal_patch_size, "
        "int num_threads=1, str match=\"pillow\") -> ()");
  m.def("decode_resize_normalize_patchify(Tensor data, int src_h, int src_w, int height, int width, "
        "str interpolation, Tensor? lut, Tensor(a!) out, int offset, str order, int patch_size, "
        "int merge_size, int temporal_patch_size, int num_threads=1, str match=\"pillow\") -> ()");
  m.def("decode_jpeg(Tensor data, int src_h, int src_w, int num_threads=1) -> Tensor");
  m.def("jpeg_split_row(Tensor data, int output_pixels=0, int output_bytes=0) -> int");
  m.def("stream_store(Tensor(a!) out, int value=0) -> ()");
  m.def("cpu_paths() -> str[]", &cpu_paths);  // no tensor: one kernel for every key
  m.def("decode_resize(Tensor data, int src_h, int src_w, int[] boxes, int[] sizes, str interpolation, "
        "int num_threads=1, str match=\"pillow\") -> Tensor[]");
}

TORCH_LIBRARY_IMPL(vlmprep, CPU, m) {
  m.impl("normalize_patchify", &normalize_patchify);
  m.impl("resize", &resize);
  m.impl("resize_normalize_patchify", &resize_normalize_patchify);
  m.impl("decode_resize_normalize_patchify", &decode_resize_normalize_patchify);
  m.impl("decode_jpeg", &decode_jpeg);
  m.impl("jpeg_split_row", &jpeg_split_row);
  m.impl("stream_store", &stream_store);
  m.impl("decode_resize", &decode_resize);
}

#ifdef VLMPREP_WITH_CUDA
TORCH_LIBRARY_IMPL(vlmprep, CUDA, m) {
  m.impl("normalize_patchify", &normalize_patchify);
}
#endif
