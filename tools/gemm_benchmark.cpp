// gemm_benchmark: kiln's own sgemm (kernels/cpu/gemm.h) against OpenBLAS, in one process, interleaved.
//
//   gemm_benchmark [--sizes 1024,2048,4096,8192] [--repeats 7] [--threads 2]
//
// Per size n (square, f32, row-major, no transposes), each repetition runs the three variants in a rotating
// order and the table reports medians:
//   openblas  cblas_sgemm, C = A * B                     (the bar: the JIT's fused kernel must be <= 1.05x it)
//   kiln      kiln's sgemm writing C
//   fused     kiln's sgemm with no C: an epilogue computes sum(relu(z + sin(z))) tile by tile (the seed workload)
// plus the peak temporary bytes of the kiln variants (kiln::memory_statistics) relative to n * n * 4. Ratios
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

std::vector<std::int64_t> parse_sizes(const char* text) {
  std::vector<std::int64_t> sizes;
  for (const char* cursor = text; *cursor;) {
    char* end = nullptr;
    sizes.push_back(std::strtoll(cursor, &end, 10));
    cursor = *end == ',' ? end + 1 : end;
    if (end == cursor && *end) break;
  }
  return sizes;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes = {1024, 2048, 4096, 8192};
  int repeats = 7;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") sizes = parse_sizes(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--sizes 1024,2048] [--repeats 7] [--threads 2]\n", argv[0]);
      return 2;
    }
  }
  const OpenBlas openblas = load_openblas();
  openblas.set_threads(threads);
  if (runtime::thread_count() != threads) runtime::set_thread_count(threads);
  std::printf("OpenBLAS: %s | core %s | OPENBLAS_CORETYPE=%s OPENBLAS_THREAD_TIMEOUT=%s | %d threads (both)\n",
              openblas.config ? openblas.config() : "?", openblas.core ? openblas.core() : "?",
              std::getenv("OPENBLAS_CORETYPE"), std::getenv("OPENBLAS_THREAD_TIMEOUT"), threads);
  std::printf("%6s %4s | %10s %10s %10s | %7s %7s | %9s %9s | %s\n", "n", "reps", "openblas", "kiln", "fused",
              "kiln/ob", "fused/ob", "tmp kiln", "tmp fused", "GFLOP/s openblas / kiln / fused (median; min-time)");

  for (const std::int64_t n : sizes) {
    const int reps = n >= 8192 ? std::min(repeats, 3) : repeats;
    const std::size_t elements = static_cast<std::size_t>(n * n);
    auto a_buffer = runtime::allocate(Device::cpu(), elements * sizeof(float));
    auto b_buffer = runtime::allocate(Device::cpu(), elements * sizeof(float));
    auto c_openblas = runtime::allocate(Device::cpu(), elements * sizeof(float));
    auto c_kiln = runtime::allocate(Device::cpu(), elements * sizeof(float));
    float* a = static_cast<float*>(a_buffer->data());
    float* b = static_cast<float*>(b_buffer->data());
    std::mt19937 generator(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < elements; ++i) a[i] = normal(generator);
    for (std::size_t i = 0; i < elements; ++i) b[i] = normal(generator);
    float* c_ob = static_cast<float*>(c_openblas->data());
    float* c_k = static_cast<float*>(c_kiln->data());
    const int size = static_cast<int>(n);
    const kernels::cpu::GemmPlan plan = kernels::cpu::plan_sgemm(n, n, n);
    FusedSum fused;
    fused.partial.assign(static_cast<std::size_t>(plan.block_count), 0.0);
    const kernels::cpu::GemmEpilogue epilogue{&FusedSum::epilogue, &fused};
    std::int64_t temporary[3] = {0, 0, 0};

    std::function<void()> variants[3] = {
        [&] { openblas.sgemm(101, 111, 111, size, size, size, 1.0f, a, size, b, size, 0.0f, c_ob, size); },
        [&] { kernels::cpu::sgemm(n, n, n, a, n, false, b, n, false, c_k, n, {}); },
        [&] { kernels::cpu::sgemm(n, n, n, a, n, false, b, n, false, nullptr, 0, epilogue); },
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
    for (int variant = 0; variant < 3; ++variant) run(variant);
    double max_error = 0, max_magnitude = 0;
    for (std::size_t i = 0; i < elements; ++i) {
      max_error = std::max(max_error, static_cast<double>(std::fabs(c_k[i] - c_ob[i])));
      max_magnitude = std::max(max_magnitude, static_cast<double>(std::fabs(c_ob[i])));
    }
    double expected_sum = 0;
    for (std::int64_t row = 0; row < n; row += 64)
      expected_sum += reduce_tile(c_ob + row * n, n, std::min<std::int64_t>(64, n - row), n);
    const double sum_error = std::fabs(fused.total() - expected_sum) / std::max(1.0, std::fabs(expected_sum));
    if (max_error > 1e-4 * max_magnitude || sum_error > 1e-4) {
      std::printf("n=%lld: RESULTS DIFFER: max |C_kiln - C_openblas| = %g (max |C| %g); fused sum %.9g vs %.9g\n",
                  static_cast<long long>(n), max_error, max_magnitude, fused.total(), expected_sum);
      return 1;
    }

    std::vector<double> times[3], ratios[3];
    for (int repeat = 0; repeat < reps; ++repeat) {
      double round[3];
      for (int slot = 0; slot < 3; ++slot) {
        const int variant = (repeat + slot) % 3;  // rotate the order so no variant always runs first
        round[variant] = run(variant);
        times[variant].push_back(round[variant]);
      }
      // Ratios within one round share the machine's state of the moment: steadier than ratios of medians.
      for (int variant = 1; variant < 3; ++variant) ratios[variant].push_back(round[0] / round[variant]);
    }
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    double medians[3], minima[3];
    for (int variant = 0; variant < 3; ++variant) {
      medians[variant] = median(times[variant]);
      minima[variant] = *std::min_element(times[variant].begin(), times[variant].end());
    }
    const double c_bytes = static_cast<double>(elements) * sizeof(float);
    std::printf("%6lld %4d | %8.2fms %8.2fms %8.2fms | %7.3f %7.3f | %8.1f%% %8.1f%% | %.0f / %.0f / %.0f; %.0f / %.0f / %.0f\n",
                static_cast<long long>(n), reps, medians[0] * 1e3, medians[1] * 1e3, medians[2] * 1e3,
                median(ratios[1]), median(ratios[2]), 100.0 * static_cast<double>(temporary[1]) / c_bytes,
                100.0 * static_cast<double>(temporary[2]) / c_bytes, flops / medians[0] / 1e9, flops / medians[1] / 1e9,
                flops / medians[2] / 1e9, flops / minima[0] / 1e9, flops / minima[1] / 1e9, flops / minima[2] / 1e9);
    std::fflush(stdout);
  }
  std::printf("kiln/ob, fused/ob: median over repetitions of OpenBLAS time / kiln time in the same repetition\n"
              "(rate relative to OpenBLAS; 1.0 = equal). tmp: peak temporary bytes / (n * n * 4).\n");
  return 0;
}
