#pragma once
// Timing and the floors every workload is judged against, all measured in
// the same run (BENCHMARKING.md): streaming copy bandwidth at a given
// footprint, and the OpenBLAS sgemm rate.

#include <kiln/kiln.h>

#include "runtime/buffer.h"

#include <functional>
#include <vector>

namespace kiln::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double mean_ms = 0;  // the loop's total time / runs, as the seed article reports it
};

// Median, min, max and mean of per-run times in ms (at least one).
Timing summarize(std::vector<double> times);

// Runs `call` `warmup` times, then `runs` times, timing each run. `call`
// must return only when its work is done (read a result back if the work
// could still be running on a device).
Timing time_calls(const std::function<void()>& call, int runs, int warmup = 2);

// Copy bandwidth in bytes/s (read + write counted) of `footprint_bytes` in
// total (half source, half destination), using every kiln thread: the median
// of max(runs, 10) BandwidthSampler samples taken now.
double copy_bandwidth(double footprint_bytes, int runs);

// Copy bandwidth sampled in between a workload's timed calls. On a shared
// machine the memory bandwidth left to us drifts by 2x within a minute, so a
// floor measured before or after the workload compares it with a different
// machine; samples taken between its calls see the same one. Each sample
// times a plain and a non-temporal copy of the workload's footprint and keeps
// the faster.
class BandwidthSampler {
 public:
  explicit BandwidthSampler(double footprint_bytes);
  void sample();
  // Median of the samples in bytes/s (0 without samples).
  double bandwidth() const;

 private:
  runtime::Array source_, destination_;
  std::int64_t count_ = 0;
  std::vector<double> samples_;
};

// time_calls, with `between` run (untimed) after every timed call, and then an untimed call, so that each timed
// call finds the caches as the call before it left them (as calls back to back do, and as the peers time them).
Timing time_calls_between(const std::function<void()>& call, int runs, const std::function<void()>& between,
                          int warmup = 2);

// Time of one cblas_sgemm of a (m x k) by b (k x n), both row-major f32.
Timing time_sgemm(const Tensor& a, const Tensor& b, int runs);

// Time of one bf16 product a (m x k) by b (k x n), both bf16 row-major, into an f32 C kept between calls: kiln's
// own bf16 GEMM alone (kernels/cpu/gemm_bf16.h: AMX tiles, or AVX512_BF16 where it pays), without the rounding
// pass and the fresh output a matmul adds. Needs kernels::cpu::has_bf16_products().
Timing time_gemm_bf16(const Tensor& a, const Tensor& b, int runs);

// OpenBLAS's sgemm rate (flops/s) on two 2048 x 2048 matrices, the shape at
// which it runs near its peak here; measured once per process, then cached.
double peak_sgemm_rate(int runs);

// Time of OpenBLAS doing attention's matmul work alone: for each of the
// batch x heads slices, S = Q K^T then S V (q, k, v: f32[..., sequence,
// head_size]). The better of two schedules: heads in parallel with
// single-threaded sgemm, or heads in turn with multithreaded sgemm.
Timing time_attention_sgemms(const Tensor& q, const Tensor& k, const Tensor& v, int runs);

// OpenBLAS computing the products of a transformer block (kiln-bench's `block`) on `tokens` rows of
// `width`, `heads` heads and an MLP `hidden` wide, one call after the other on all threads, each head's
// two products reading the projections in place (leading dimension `width`): the block's compute floor.
Timing time_block_sgemms(std::int64_t tokens, std::int64_t width, std::int64_t heads, std::int64_t hidden, int runs);

}  // namespace kiln::bench
