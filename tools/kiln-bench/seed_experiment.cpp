#include "seed_experiment.h"

#include "kernels/cpu/blas.h"
#include "runtime/parallel.h"
#include "suite.h"
#include "workloads.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace kiln::bench {
namespace {

// One call that returns only when its work is done: the scalar result is
// read back to the host, which waits for any device work (the article's loop
// reads nothing and, on a GPU, times only the dispatch of asynchronous work).
std::vector<Tensor> call_and_wait(const Call& call, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs = call(inputs);
  outputs.at(0).item<double>();
  return outputs;
}

// The first call's outputs and its time.
std::pair<std::vector<Tensor>, double> first_call(const Call& call, const std::vector<Tensor>& inputs) {
  auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = call_and_wait(call, inputs);
  return {outputs, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()};
}

}  // namespace

int run_seed_experiment(const SeedOptions& options) {
  Workload workload = make_workload("seed-" + std::to_string(options.size), {.device = options.device});
  const std::int64_t n = options.size;
  std::printf("kiln seed experiment: the article's tf.function vs tf.function(jit_compile=True), with kiln::function\n");
  std::printf("  f(x, y) = reduce_sum(relu(z + sin(z))), z = matmul(x, y); x, y: f32[%lld, %lld] ~ N(0, 1) on %s\n",
              static_cast<long long>(n), static_cast<long long>(n), options.device.to_string().c_str());
  std::printf("  %s, %u cores, %d threads; %d timed runs of each function after one warm-up call\n",
              cpu_model().c_str(), std::thread::hardware_concurrency(), runtime::thread_count(), options.runs);
  std::printf("  Unlike the article, every timed call waits for its work to finish before the clock is read:\n"
              "  the scalar result is read back to the host (Tensor::item) inside the timed loop.\n\n");

  // --- warm-up: traces, and compiles (or loads from the disk cache) ---
  auto [standard_outputs, standard_first_ms] = first_call(workload.standard, workload.inputs);
  auto [jit_outputs, jit_first_ms] = first_call(workload.jit, workload.inputs);
  std::printf("warm-up: standard first call %.1f ms (trace + run); JIT first call %.1f ms (trace + compile or\n"
              "  disk-cache load + run)\n",
              standard_first_ms, jit_first_ms);
  Result result;
  result.id = workload.id;
  result.name = workload.name;
  result.shape = workload.shape;
  judge_jit(workload, standard_outputs, jit_outputs, result);
  std::printf("results: standard %.9g, JIT %.9g (relative difference %.2g)%s%s\n",
              standard_outputs[0].item<double>(), jit_outputs[0].item<double>(), result.jit_difference,
              result.jit_note.empty() ? "" : "\n  JIT ", result.jit_note.c_str());

  // --- timing: standard, then JIT, as in the article ---
  Timing standard = time_calls([&] { call_and_wait(workload.standard, workload.inputs); }, options.runs, 0);
  std::printf("\nstandard kiln::function average time: %.3f ms\n", standard.mean_ms);
  Timing jit = time_calls([&] { call_and_wait(workload.jit, workload.inputs); }, options.runs, 0);
  std::printf("JIT kiln::function (jit_compile) average time: %.3f ms\n", jit.mean_ms);
  std::printf("\nspeedup (standard / JIT): %.2fx\n", standard.mean_ms / jit.mean_ms);

  std::printf("\nmedian of %d runs: standard %.3f ms (min %.3f, max %.3f), JIT %.3f ms (min %.3f, max %.3f); "
              "speedup of the medians %.2fx\n",
              options.runs, standard.median_ms, standard.min_ms, standard.max_ms, jit.median_ms, jit.min_ms,
              jit.max_ms, standard.median_ms / jit.median_ms);

  measure_floors(workload, options.runs, result);
  const std::string blas = options.device.is_cuda() ? "cuBLAS" : kernels::cpu::blas::name();
  std::printf(
      "floor: %.3f ms = max(compute floor %.3f ms: flops / %.0f GFLOP/s, the best %s sgemm rate in this\n"
      "  run; memory floor %.3f ms: bytes / %.1f GB/s copy bandwidth at the same footprint)\n",
      result.floor_ms, result.compute_floor_ms, result.sgemm_rate * 1e-9, blas.c_str(), result.memory_floor_ms,
      result.bandwidth / 1e9);
  std::printf("floor ratio (median / floor): standard %.3f, JIT %.3f\n", standard.median_ms / result.floor_ms,
              jit.median_ms / result.floor_ms);

  std::printf("\n%s: %s sgemm alone %.2f ms (%.0f GFLOP/s); kiln standard matmul %.2f ms = %.1f%% of the sgemm rate\n",
              workload.shape.c_str(), blas.c_str(), result.blas_ms, result.flops / result.blas_ms * 1e-6,
              result.matmul_ms, 100 * result.blas_ms / result.matmul_ms);
  if (result.jit_note.empty()) {
    measure_first_calls(workload, result);
    std::printf("%s: JIT %.2f ms = %.3fx the time of sgemm alone; peak temporary memory %.1f%% of the matmul output "
                "(%.2f MiB)\n",
                workload.shape.c_str(), jit.median_ms, jit.median_ms / result.blas_ms,
                100 * result.jit_peak_temporary_bytes / result.matmul_output_bytes,
                result.jit_peak_temporary_bytes / (1 << 20));
    std::printf("JIT first call: cold %.1f ms (trace + compile, empty caches); warm disk cache %.1f ms "
                "(a new function, as a second process sees it)\n",
                result.cold_first_call_ms, result.warm_cache_first_call_ms);
  }
  std::printf("kernels per call: standard %lld, JIT %lld\n", static_cast<long long>(result.standard_kernels),
              static_cast<long long>(result.jit_kernels));
  return result.jit_note.starts_with("WRONG") ? 1 : 0;
}

}  // namespace kiln::bench
