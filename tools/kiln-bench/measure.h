#pragma once
// Timing and the floors every workload is judged against, all measured in
// the same run (BENCHMARKING.md): streaming copy bandwidth at a given
// footprint, and the OpenBLAS sgemm rate.

#include <kiln/kiln.h>

#include <functional>
#include <vector>

namespace kiln::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double mean_ms = 0;  // the loop's total time / runs, as the seed article reports it
};

// Runs `call` `warmup` times, then `runs` times, timing each run. `call`
// must return only when its work is done (read a result back if the work
// could still be running on a device).
Timing time_calls(const std::function<void()>& call, int runs, int warmup = 2);

// Best streaming copy bandwidth in bytes/s (read + write counted) over the
// plain-store and non-temporal-store copies of `footprint_bytes` in total
// (half source, half destination), using every kiln thread.
double copy_bandwidth(double footprint_bytes, int runs);

// Time of one cblas_sgemm of a (m x k) by b (k x n), both row-major f32.
Timing time_sgemm(const Tensor& a, const Tensor& b, int runs);

// OpenBLAS's sgemm rate (flops/s) on two 2048 x 2048 matrices, the shape at
// which it runs near its peak here; measured once per process, then cached.
double peak_sgemm_rate(int runs);

// Time of OpenBLAS doing attention's matmul work alone: for each of the
// batch x heads slices, S = Q K^T then S V (q, k, v: f32[..., sequence,
// head_size]). The better of two schedules: heads in parallel with
// single-threaded sgemm, or heads in turn with multithreaded sgemm.
Timing time_attention_sgemms(const Tensor& q, const Tensor& k, const Tensor& v, int runs);

}  // namespace kiln::bench
