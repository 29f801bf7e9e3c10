// Internal to the CPU kernels: one JPEG decoded into a source buffer while units of work that
// read it (resized bands, canvas bands) run as soon as their source rows are there. The one
// home of that schedule for decode_resize_normalize_patchify_cpu, decode_resize_cpu and
// decode_jpeg_cpu (no units).
//
// One thread: decode just ahead of each unit. Two or more: the entropy decode is serial, so a
// second decoder on the same bytes skips to a split row (entropy decoding the rows above without
// the IDCT, upsampling and colour conversion) and decodes the rest, while the first decodes the
// rows above; each thread then takes units not yet taken. Without a split (libjpeg < turbo 2.0,
// progressive or multi-scan files, short images, units whose work fills the second thread
// anyway: split_row) the first thread decodes and the others take units. Every row comes from
// a decoder that read all the data before it, so any damage is reported as a whole-image
// decode reports it.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu_threads.h"
#include "vlmprep/jpeg_rows.h"

namespace vlmprep {

// Opens `jr` on data[0, size) and checks the header's size against the probed one (every
// buffer is then sized by the JPEG's own size). nullptr or why not.
inline const char* open_probed(JpegRows& jr, const uint8_t* data, size_t size, int src_h, int src_w) {
  if (const char* bad = jr.open(data, size)) return bad;
  if (jr.height() != src_h || jr.width() != src_w) return "the JPEG's size is not the probed size";
  return nullptr;
}

// Source rows [lo, hi) that one unit reads.
struct SourceUnit {
  int lo, hi;
};

// The units' work beside the decode over the decode's, estimated from what they write: ~1.7 ns
// per output pixel (the exact resize) and ~0.16 ns per output byte (the stores, weighed up for
// the bandwidth two threads share: float32 compact Qwen2-VL rows split at 0.29 were 11.4 ms
// against 11.0 unsplit), against ~5.3 ns per source pixel for libjpeg-turbo (1080p, 2-core CI
// VM, session 16).
inline double rest_ratio(int64_t source_pixels, int64_t output_pixels, int64_t output_bytes) {
  return (0.32 * double(output_pixels) + 0.03 * double(output_bytes)) / double(std::max<int64_t>(source_pixels, 1));
}

// Where the second decoder starts: 0 for no split. It entropy decodes the rows above the split
// (h = ~46% of a whole decode on 4:2:0 photos, 56% at 4:4:4) and decodes the rest; the first
// decoder decodes the rows above and then takes units. Both threads finish together when the
// split is at s = (1 - r) / (2 - h) of the rows, r = rest_ratio: 0.65 for a decode alone, less
// the more the units write (Qwen2-VL 1080p rows, A/B over s: uint8 best near 0.35, 11.5 ms
// against 13.7 with one decoder; float32, whose stores are bandwidth-bound, equal at any s).
// Rounded down to the iMCU row; no split below 0.2 (the saving is within the second start's
// cost), under one iMCU row, or for images under 8 iMCU rows.
// VLMPREP_JPEG_SPLIT=0 turns it off (read per call: A/B runs in one process).
inline int split_row(const JpegRows& jr, double rest) {
  if (const char* env = std::getenv("VLMPREP_JPEG_SPLIT"); env && env[0] == '0') return 0;
  const int h = jr.height(), m = jr.imcu_rows();
  if (!jr.can_skip() || m < 1 || h < 8 * m || !(rest < 1.0)) return 0;
  const double frac = std::min(0.65, (1.0 - std::max(rest, 0.0)) / (2.0 - 0.46));
  if (frac < 0.2) return 0;  // float32 Qwen2-VL rows split at 0.14: 12.9 ms, 12.2 unsplit
  const int s = int(h * frac) / m * m;
  return s > 0 && s < h ? s : 0;
}

// Threads worth using to decode a JPEG of `source_bytes` while units write `output_bytes`: the
// decode alone may use two (threads_for: one per ~256 KiB of either).
inline int decode_threads(int units, int64_t source_bytes, int64_t output_bytes, int num_threads) {
  return threads_for(std::max(units, 2), std::max(source_bytes, output_bytes), num_threads);
}

// Decodes the JPEG (`top` opened on data[0, size)) into dst (row r at dst + r * stride) and
// calls run(i, t) once for every unit i, on thread t in [0, threads), after its source rows are
// decoded. `units` are in increasing order of hi; `rest` is their work over the decode's
// (rest_ratio). nullptr or why the decode failed (the units not run then; a run in flight
// finishes).
template <typename Run>
const char* decode_units(JpegRows& top, const uint8_t* data, size_t size, uint8_t* dst, int64_t stride,
                         const std::vector<SourceUnit>& units, double rest, int threads,
                         Run&& run) {
  const int H = top.height();
  const int n = int(units.size());
  if (threads < 2) {
    for (int i = 0; i < n; ++i) {
      if (const char* bad = top.read_until(units[i].hi, dst, stride)) return bad;
      run(i, 0);
    }
    return top.read_until(H, dst, stride);  // the rest: reports damage there
  }
  const int split = split_row(top, rest);
  const int first_end = split ? split : H;  // the first decoder's rows: [0, first_end)
  std::atomic<int> top_ready{0}, bottom_ready{first_end};
  std::atomic<bool> failed{false};
  std::unique_ptr<std::atomic<bool>[]> taken(new std::atomic<bool>[size_t(std::max(n, 1))]());
  std::string second_error;  // the second decoder's message, copied before its thread ends
  auto publish = [](std::atomic<int>& a, int v) {
    a.store(v, std::memory_order_release);
    a.notify_all();
  };
  auto fail = [&] {
    failed.store(true);
    publish(top_ready, INT_MAX);
    publish(bottom_ready, INT_MAX);
  };
  auto wait_for = [](std::atomic<int>& a, int need) {
    for (int v = a.load(std::memory_order_acquire); v < need; v = a.load(std::memory_order_acquire))
      a.wait(v, std::memory_order_acquire);
  };
  // Takes the units of `order` not yet taken, each once its rows are decoded.
  auto take = [&](const std::vector<int>& order, int t) {
    for (int i : order) {
      if (taken[i].exchange(true)) continue;
      const SourceUnit u = units[i];
      if (u.lo < first_end) wait_for(top_ready, std::min(u.hi, first_end));
      if (u.hi > first_end) wait_for(bottom_ready, u.hi);
      if (failed.load()) return;
      run(i, t);
    }
  };
  std::vector<int> forward(n), second_order;
  for (int i = 0; i < n; ++i) forward[i] = i;
  if (split) {  // the second decoder's rows first, then the rest from the split upwards
    for (int i = 0; i < n; ++i)
      if (units[i].lo >= split) second_order.push_back(i);
    for (int i = n - 1; i >= 0; --i)
      if (units[i].lo < split) second_order.push_back(i);
  }
  std::vector<std::thread> pool;
  // A thread that cannot start (resource limits) declines the image: the started ones see
  // `failed` and end, so none is left joinable (std::terminate) or waiting.
  try {
    for (int t = 1; t < threads; ++t) {
      if (t == 1 && split) {
        pool.emplace_back([&] {
          JpegRows jr;
          const char* bad = jr.open(data, size);
          if (!bad) bad = jr.skip_to(split);
          for (int done = split; !bad && done < H && !failed.load();) {
            bad = jr.read_until(std::min(done + 32, H), dst, stride);
            done = jr.rows_done();
            if (!bad) publish(bottom_ready, done);
          }
          if (bad) {
            second_error = bad;
            fail();
            return;
          }
          take(second_order, 1);
        });
      } else if (n > 0) {
        pool.emplace_back([&, t] { take(forward, t); });
      }
    }
  } catch (const std::system_error&) {
    fail();
    for (auto& th : pool) th.join();
    return "could not start a decoding thread";
  }
  const char* bad = nullptr;
  for (int done = 0; done < first_end && !bad;) {
    bad = top.read_until(std::min(done + 32, first_end), dst, stride);
    done = top.rows_done();
    if (bad) fail();
    else publish(top_ready, done);
  }
  if (!bad) take(forward, 0);
  for (auto& th : pool) th.join();
  if (bad) return bad;
  return second_error.empty() ? nullptr : JpegRows::keep(second_error.c_str());
}

}  // namespace vlmprep
