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
};

// Runs `call` `warmup` times, then `runs` times, timing each run.
Timing time_calls(const std::function<void()>& call, int runs, int warmup = 2);

// Best streaming copy bandwidth in bytes/s (read + write counted) over the
// plain-store and non-temporal-store copies of `footprint_bytes` in total
// (half source, half destination), using every kiln thread.
double copy_bandwidth(double footprint_bytes, int runs);

// Time of one cblas_sgemm of a (m x k) by b (k x n), both row-major f32.
Timing time_sgemm(const Tensor& a, const Tensor& b, int runs);

}  // namespace kiln::bench
