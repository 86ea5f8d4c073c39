// gemm_benchmark: kiln's own sgemm (kernels/cpu/gemm.h) against OpenBLAS, in one process, interleaved.
//
//   gemm_benchmark [--sizes 1024,2048,4096x4096x512,...] [--repeats 7] [--threads 2]
//
// Per size (n: square; MxNxK: C is M x N, the depth K; f32, row-major, no transposes), each repetition runs
// the three variants in a rotating order and the table reports medians:
//   openblas  cblas_sgemm, C = A * B                     (the bar: the JIT's fused kernel must be <= 1.05x it)
//   kiln      kiln's sgemm writing C
//   fused     kiln's sgemm with no C: an epilogue computes sum(relu(z + sin(z))) tile by tile (the seed workload)
//   ob+epi    the same through sgemm_through_openblas: OpenBLAS a panel of rows at a time, then the same epilogue
//             on the panel's blocks (what the JIT runs where prefers_openblas; marked * in the table)
// plus the peak temporary bytes of the kiln variants (kiln::memory_statistics) relative to C's M * N * 4. Ratios
// are medians over repetitions of the ratio within each repetition; GFLOP/s from median and minimum times.
// Results are checked first: kiln's C against OpenBLAS's, and the fused sum against the same reduction of
// OpenBLAS's C.
//
// OpenBLAS is loaded here with dlopen, like kernels/cpu/blas.cpp does, with the same environment defaults
// (OPENBLAS_CORETYPE from the CPU's features, OPENBLAS_THREAD_TIMEOUT=4 so that its idle threads sleep at once
// instead of spinning while kiln's pool runs); a user's own settings win. Run timings under
// `flock /tmp/kiln-timing.lock` on shared machines.

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_math.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <kiln/memory.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace kiln;
using SgemmFunction = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                               int);

struct OpenBlas {
  SgemmFunction sgemm = nullptr;
  void (*set_threads)(int) = nullptr;
  char* (*config)() = nullptr;
  char* (*core)() = nullptr;
};

OpenBlas load_openblas() {
  __builtin_cpu_init();
  const char* coretype = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                         : __builtin_cpu_supports("avx2") ? "Haswell"
                                                          : nullptr;
  if (coretype) setenv("OPENBLAS_CORETYPE", coretype, /*overwrite=*/0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "cannot load libopenblas.so.0 (%s); install libopenblas0-pthread\n", dlerror());
    std::exit(1);
  }
  OpenBlas library;
  library.sgemm = reinterpret_cast<SgemmFunction>(dlsym(handle, "cblas_sgemm"));
  library.set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
  library.config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
  library.core = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  if (!library.sgemm || !library.set_threads) {
    std::fprintf(stderr, "libopenblas.so.0 lacks cblas_sgemm\n");
    std::exit(1);
  }
  return library;
}

// sum(relu(z + sin(z))) over a tile, 16 lanes at a time (a zero-padded tail adds relu(0 + sin 0) = 0).
double reduce_tile(const float* tile, std::int64_t ld, std::int64_t rows, std::int64_t columns) {
  namespace vm = kiln::vector_math;
  vm::f32v sum = {};
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* row = tile + i * ld;
    std::int64_t j = 0;
    for (; j + vm::kLanes <= columns; j += vm::kLanes) {
      const vm::f32v z = vm::load(row + j);
      const vm::f32v y = z + vm::sin(z);
      sum += vm::select(y > 0.0f, y, vm::f32v{});
    }
    if (j < columns) {
      const vm::f32v z = vm::load_partial(row + j, static_cast<int>(columns - j));
      const vm::f32v y = z + vm::sin(z);
      sum += vm::select(y > 0.0f, y, vm::f32v{});
    }
  }
  double total = 0;
  for (int lane = 0; lane < vm::kLanes; ++lane) total += static_cast<double>(sum[lane]);
  return total;
}

struct FusedSum {
  std::vector<double> partial;  // one per block: deterministic whatever thread ran it
  static void epilogue(void* context, const float* tile, std::int64_t ld, std::int64_t row_begin,
                       std::int64_t row_end, std::int64_t column_begin, std::int64_t column_end, std::int64_t block) {
    static_cast<FusedSum*>(context)->partial[static_cast<std::size_t>(block)] =
        reduce_tile(tile, ld, row_end - row_begin, column_end - column_begin);
  }
  double total() const {
    double result = 0;
    for (double value : partial) result += value;
    return result;
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

struct Problem {
  std::int64_t m, n, k;
};

// "1024,4096x4096x512": n alone is n x n x n.
std::vector<Problem> parse_sizes(const char* text) {
  std::vector<Problem> sizes;
  for (const char* cursor = text; *cursor;) {
    std::int64_t dimensions[3] = {0, 0, 0};
    int count = 0;
    char* end = const_cast<char*>(cursor);
    while (count < 3) {
      dimensions[count++] = std::strtoll(cursor, &end, 10);
      if (end == cursor || *end != 'x') break;
      cursor = end + 1;
    }
    if (end == cursor || dimensions[0] <= 0 || (count != 1 && count != 3)) {
      std::fprintf(stderr, "bad size in --sizes %s (n or MxNxK)\n", text);
      std::exit(2);
    }
    sizes.push_back(count == 1 ? Problem{dimensions[0], dimensions[0], dimensions[0]}
                               : Problem{dimensions[0], dimensions[1], dimensions[2]});
    cursor = *end == ',' ? end + 1 : end;
  }
  return sizes;
}

std::string name(const Problem& problem) {
  if (problem.m == problem.n && problem.n == problem.k) return std::to_string(problem.n);
  return std::to_string(problem.m) + "x" + std::to_string(problem.n) + "x" + std::to_string(problem.k);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Problem> sizes = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192}};
  int repeats = 7;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") sizes = parse_sizes(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--sizes 1024,4096x4096x512]  [--repeats 7] [--threads 2]\n", argv[0]);
      return 2;
    }
  }
  const OpenBlas openblas = load_openblas();
  openblas.set_threads(threads);
  if (runtime::thread_count() != threads) runtime::set_thread_count(threads);
  std::printf("OpenBLAS: %s | core %s | OPENBLAS_CORETYPE=%s OPENBLAS_THREAD_TIMEOUT=%s | %d threads (both)\n",
              openblas.config ? openblas.config() : "?", openblas.core ? openblas.core() : "?",
              std::getenv("OPENBLAS_CORETYPE"), std::getenv("OPENBLAS_THREAD_TIMEOUT"), threads);
  std::printf("%16s %4s | %10s %10s %10s %10s | %7s %7s %9s | %9s %9s %9s | %s\n", "size", "reps", "openblas", "kiln",
              "fused", "ob+epi", "kiln/ob", "fused/ob", "fused/epi", "tmp kiln", "tmp fused", "tmp epi",
              "GFLOP/s openblas / kiln / fused / ob+epi (median; min-time)");

  for (const Problem& problem : sizes) {
    const std::int64_t m = problem.m, n = problem.n, k = problem.k;
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const int reps = flops >= 1e12 ? std::min(repeats, 3) : repeats;
    const std::size_t elements = static_cast<std::size_t>(m * n);
    const std::size_t a_elements = static_cast<std::size_t>(m * k), b_elements = static_cast<std::size_t>(k * n);
    auto a_buffer = runtime::allocate(Device::cpu(), a_elements * sizeof(float));
    auto b_buffer = runtime::allocate(Device::cpu(), b_elements * sizeof(float));
    auto c_openblas = runtime::allocate(Device::cpu(), elements * sizeof(float));
    auto c_kiln = runtime::allocate(Device::cpu(), elements * sizeof(float));
    float* a = static_cast<float*>(a_buffer->data());
    float* b = static_cast<float*>(b_buffer->data());
    std::mt19937 generator(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < a_elements; ++i) a[i] = normal(generator);
    for (std::size_t i = 0; i < b_elements; ++i) b[i] = normal(generator);
    float* c_ob = static_cast<float*>(c_openblas->data());
    float* c_k = static_cast<float*>(c_kiln->data());
    const int rows = static_cast<int>(m), columns = static_cast<int>(n), depth = static_cast<int>(k);
    const kernels::cpu::GemmPlan plan = kernels::cpu::plan_sgemm(m, n, k);
    FusedSum fused;
    fused.partial.assign(static_cast<std::size_t>(plan.block_count), 0.0);
    const kernels::cpu::GemmEpilogue epilogue{&FusedSum::epilogue, &fused};
    constexpr int kVariants = 4;
    std::int64_t temporary[kVariants] = {0, 0, 0, 0};

    FusedSum through_openblas;
    through_openblas.partial.assign(static_cast<std::size_t>(plan.block_count), 0.0);
    const kernels::cpu::GemmEpilogue openblas_epilogue{&FusedSum::epilogue, &through_openblas};
    std::function<void()> variants[kVariants] = {
        [&] { openblas.sgemm(101, 111, 111, rows, columns, depth, 1.0f, a, depth, b, columns, 0.0f, c_ob, columns); },
        [&] { kernels::cpu::sgemm(m, n, k, a, k, false, b, n, false, c_k, n, {}); },
        [&] { kernels::cpu::sgemm(m, n, k, a, k, false, b, n, false, nullptr, 0, epilogue); },
        [&] { kernels::cpu::sgemm_through_openblas(m, n, k, a, k, false, b, n, false, nullptr, 0, openblas_epilogue); },
    };
    auto run = [&](int variant) {
      const std::int64_t before = memory_statistics().bytes_in_use;
      reset_peak_memory();
      const auto start = std::chrono::steady_clock::now();
      variants[variant]();
      const double elapsed = seconds_since(start);
      temporary[variant] = std::max(temporary[variant], memory_statistics().peak_bytes_in_use - before);
      return elapsed;
    };

    // Warm up and check: kiln's C against OpenBLAS's, the fused sum against the reduction of OpenBLAS's C.
    for (int variant = 0; variant < kVariants; ++variant) run(variant);
    double max_error = 0, max_magnitude = 0;
    for (std::size_t i = 0; i < elements; ++i) {
      max_error = std::max(max_error, static_cast<double>(std::fabs(c_k[i] - c_ob[i])));
      max_magnitude = std::max(max_magnitude, static_cast<double>(std::fabs(c_ob[i])));
    }
    double expected_sum = 0;
    for (std::int64_t row = 0; row < m; row += 64)
      expected_sum += reduce_tile(c_ob + row * n, n, std::min<std::int64_t>(64, m - row), n);
    const double sum_error = std::fabs(fused.total() - expected_sum) / std::max(1.0, std::fabs(expected_sum));
    const double openblas_sum_error =
        std::fabs(through_openblas.total() - expected_sum) / std::max(1.0, std::fabs(expected_sum));
    if (max_error > 1e-4 * max_magnitude || sum_error > 1e-4 || openblas_sum_error > 1e-4) {
      std::printf("%s: RESULTS DIFFER: max |C_kiln - C_openblas| = %g (max |C| %g); fused sum %.9g vs %.9g\n",
                  name(problem).c_str(), max_error, max_magnitude, fused.total(), expected_sum);
      return 1;
    }

    std::vector<double> times[kVariants], ratios[kVariants];
    std::vector<double> fused_over_openblas_path;  // ob+epi time / fused time, per round
    for (int repeat = 0; repeat < reps; ++repeat) {
      double round[kVariants];
      for (int slot = 0; slot < kVariants; ++slot) {
        const int variant = (repeat + slot) % kVariants;  // rotate the order so no variant always runs first
        round[variant] = run(variant);
        times[variant].push_back(round[variant]);
      }
      // Ratios within one round share the machine's state of the moment: steadier than ratios of medians.
      for (int variant = 1; variant < kVariants; ++variant) ratios[variant].push_back(round[0] / round[variant]);
      fused_over_openblas_path.push_back(round[3] / round[2]);
    }
    double medians[kVariants], minima[kVariants];
    for (int variant = 0; variant < kVariants; ++variant) {
      medians[variant] = median(times[variant]);
      minima[variant] = *std::min_element(times[variant].begin(), times[variant].end());
    }
    const double c_bytes = static_cast<double>(elements) * sizeof(float);
    const char* chosen = kernels::cpu::prefers_openblas(m, n, k) ? "*" : " ";
    std::printf(
        "%16s %4d | %8.2fms %8.2fms %8.2fms %7.2fms%s | %7.3f %7.3f %9.3f | %8.1f%% %8.1f%% %8.1f%% | "
        "%.0f / %.0f / %.0f / %.0f; %.0f / %.0f / %.0f / %.0f\n",
        name(problem).c_str(), reps, medians[0] * 1e3, medians[1] * 1e3, medians[2] * 1e3, medians[3] * 1e3, chosen,
        median(ratios[1]), median(ratios[2]), median(fused_over_openblas_path), 100.0 * static_cast<double>(temporary[1]) / c_bytes,
        100.0 * static_cast<double>(temporary[2]) / c_bytes, 100.0 * static_cast<double>(temporary[3]) / c_bytes,
        flops / medians[0] / 1e9, flops / medians[1] / 1e9, flops / medians[2] / 1e9, flops / medians[3] / 1e9,
        flops / minima[0] / 1e9, flops / minima[1] / 1e9, flops / minima[2] / 1e9, flops / minima[3] / 1e9);
    std::fflush(stdout);
  }
  std::printf(
      "kiln/ob, fused/ob: median over repetitions of OpenBLAS time / kiln time in the same repetition\n"
      "(rate relative to OpenBLAS; 1.0 = equal); fused/epi: ob+epi time / fused time (above 1: kiln's fused\n"
      "sgemm is faster). *: the JIT runs ob+epi at this size (prefers_openblas). tmp: peak temporary bytes /\n"
      "(M * N * 4).\n");
  return 0;
}
