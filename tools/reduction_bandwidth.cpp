// reduction_bandwidth: how close the CPU reduction and matmul kernels come to
// their floors (see BENCHMARKING.md), measured in one run.
//
// Reductions, f32 [4096,4096] (16M elements, 64 MiB): reduce_sum and
// reduce_max over axis 1 (rows: softmax/layernorm), over axis 0 (columns)
// and over all axes. Floors, at the same 64 MiB footprint and thread count:
//   read floor = 64 MiB / bandwidth of a streaming read (a plain vector sum);
//   copy floor = 64 MiB / bandwidth of a streaming copy of 32 MiB into 32 MiB
//                (read + write counted), the floor BENCHMARKING.md names.
// Matmul: sgemm 2048^3 through kernels::cpu::matmul against cblas_sgemm
// called directly (same OpenBLAS, same threads), interleaved call by call;
// batched attention-shaped products [64,512,64] x [64,64,512] (scores) and
// [64,512,512] x [64,512,64] (values), against a loop of direct
// multithreaded sgemm calls; compute floor = flops / the direct sgemm rate.
// OpenBLAS: after a GEMM, the CPU time its idle threads burn in 100 ms
// (OPENBLAS_THREAD_TIMEOUT) -- rerun with the variable set to compare.
//
// Every time is the median of `runs` timed calls after warm-up (min shown
// too: this machine is shared and noisy); results are checked against a
// double-precision reference before timing.
//
// Usage: reduction_bandwidth [runs]   (default 15; threads: KILN_NUM_THREADS)

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::ir::Op;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;
namespace blas = kiln::kernels::cpu::blas;

int timed_runs = 15;

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double median = 0, min = 0;
};

Timing summarize(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

// Median and min of `body` over timed_runs calls after 3 warm-up calls.
Timing measure(const std::function<void()>& body) {
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < timed_runs; ++i) {
    double start = seconds_now();
    body();
    times.push_back(seconds_now() - start);
  }
  return summarize(times);
}

// Two bodies timed alternately, call by call, so that both see the same
// machine state.
std::pair<Timing, Timing> measure_pair(const std::function<void()>& first, const std::function<void()>& second) {
  for (int i = 0; i < 2; ++i) {
    first();
    second();
  }
  std::vector<double> a, b;
  for (int i = 0; i < timed_runs; ++i) {
    double start = seconds_now();
    first();
    double middle = seconds_now();
    second();
    b.push_back(seconds_now() - middle);
    a.push_back(middle - start);
  }
  return {summarize(a), summarize(b)};
}

Array random_array(DType dtype, const Shape& shape, std::uint64_t seed) {
  Array array = kiln::runtime::allocate_array(dtype, shape);
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  kiln::visit_dtype(dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (std::int64_t i = 0; i < shape.numel(); ++i) {
      double v = value(generator);
      data[i] = static_cast<T>(v == 0 ? 0.5 : v);
    }
  });
  return array;
}

// ---- floors --------------------------------------------------------------------

typedef float Vector16 __attribute__((vector_size(64)));

// The simplest fast read of every byte: 8 vector accumulators per thread.
float stream_read(const float* data, std::int64_t count) {
  int threads = kiln::runtime::thread_count();
  std::vector<float> partial(static_cast<std::size_t>(threads), 0.0f);
  kiln::runtime::parallel_pieces(threads, [&](std::int64_t piece, std::int64_t) {
    std::int64_t begin = count * piece / threads / 128 * 128, end = count * (piece + 1) / threads / 128 * 128;
    Vector16 acc[8] = {};
    for (std::int64_t i = begin; i < end; i += 128)
      for (int j = 0; j < 8; ++j) {
        Vector16 v;
        std::memcpy(&v, data + i + 16 * j, 64);
        acc[j] += v;
      }
    float sum = 0;
    for (auto& a : acc)
      for (int lane = 0; lane < 16; ++lane) sum += a[lane];
    partial[static_cast<std::size_t>(piece)] = sum;
  });
  float total = 0;
  for (float p : partial) total += p;
  return total;
}

void stream_copy(const float* from, float* to, std::int64_t count) {
  int threads = kiln::runtime::thread_count();
  kiln::runtime::parallel_pieces(threads, [&](std::int64_t piece, std::int64_t) {
    std::int64_t begin = count * piece / threads, end = count * (piece + 1) / threads;
    std::memcpy(to + begin, from + begin, static_cast<std::size_t>(end - begin) * sizeof(float));
  });
}

// ---- checks --------------------------------------------------------------------

bool check_reduction(Op op, const std::vector<std::int64_t>& axes, const Array& input, const Array& output) {
  const float* x = input.data<float>();
  const float* y = output.data<float>();
  std::int64_t rows = input.shape[0], columns = input.shape[1];
  auto reference = [&](std::int64_t begin, std::int64_t count, std::int64_t stride, double* magnitude) {
    double acc = op == Op::reduce_max ? -INFINITY : 0.0;
    *magnitude = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      double v = x[begin + i * stride];
      *magnitude += std::fabs(v);
      acc = op == Op::reduce_max ? std::max(acc, v) : acc + v;
    }
    return acc;
  };
  auto close = [&](double actual, double expected, double magnitude) {
    return op == Op::reduce_max ? actual == expected : std::fabs(actual - expected) <= 1e-5 * magnitude;
  };
  double magnitude = 0;
  if (axes.size() == 2) {
    double expected = reference(0, rows * columns, 1, &magnitude);
    return close(y[0], expected, magnitude);
  }
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2047}, std::int64_t{4095}}) {
    double expected =
        axes[0] == 1 ? reference(i * columns, columns, 1, &magnitude) : reference(i, rows, columns, &magnitude);
    if (!close(y[i], expected, magnitude)) return false;
  }
  return true;
}

bool check_matmul(const Array& a, const Array& b, const Array& c) {
  int rank = a.shape.rank();
  std::int64_t batch = rank == 3 ? a.shape[0] : 1, m = a.shape[rank - 2], k = a.shape[rank - 1], n = b.shape[rank - 1];
  const float *x = a.data<float>(), *y = b.data<float>(), *z = c.data<float>();
  for (std::int64_t item : {std::int64_t{0}, batch - 1})
    for (std::int64_t i : {std::int64_t{0}, m / 2, m - 1})
      for (std::int64_t j : {std::int64_t{0}, n / 3, n - 1}) {
        double expected = 0, magnitude = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          double product = double(x[(item * m + i) * k + p]) * y[(item * k + p) * n + j];
          expected += product;
          magnitude += std::fabs(product);
        }
        if (std::fabs(z[(item * m + i) * n + j] - expected) > 1e-5 * magnitude) return false;
      }
  return true;
}

double cpu_seconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) timed_runs = std::max(10, std::atoi(argv[1]));
  const int threads = kiln::runtime::thread_count();
  std::printf("reduction_bandwidth: %d threads, median of %d runs (min in brackets)\n", threads, timed_runs);
  std::printf("OpenBLAS: %s\n\n", blas::describe().c_str());

  // ---- reductions ----
  constexpr std::int64_t rows = 4096, columns = 4096, elements = rows * columns;
  const double bytes = elements * 4.0;
  Array input = random_array(DType::f32, Shape{rows, columns}, 1);
  Array copy_source = random_array(DType::f32, Shape{elements / 2}, 2);
  Array copy_target = kiln::runtime::allocate_array(DType::f32, Shape{elements / 2});
  volatile float sink = 0;
  Timing read = measure([&] { sink = stream_read(input.data<float>(), elements); });
  Timing copy =
      measure([&] { stream_copy(copy_source.data<float>(), copy_target.mutable_data<float>(), elements / 2); });
  std::printf("floors at 64 MiB: streaming read %.1f GB/s [%.1f], streaming copy %.1f GB/s [%.1f] (read+write)\n",
              bytes / read.median * 1e-9, bytes / read.min * 1e-9, bytes / copy.median * 1e-9, bytes / copy.min * 1e-9);
  std::printf("  read floor %.3f ms, copy floor %.3f ms\n\n", read.median * 1e3, copy.median * 1e3);

  struct Case {
    const char* name;
    Op op;
    std::vector<std::int64_t> axes;
    Shape output;
  };
  const Case cases[] = {
      {"reduce_sum rows    [4096,4096] axis 1", Op::reduce_sum, {1}, Shape{rows}},
      {"reduce_max rows    [4096,4096] axis 1", Op::reduce_max, {1}, Shape{rows}},
      {"reduce_sum columns [4096,4096] axis 0", Op::reduce_sum, {0}, Shape{columns}},
      {"reduce_max columns [4096,4096] axis 0", Op::reduce_max, {0}, Shape{columns}},
      {"reduce_sum all     [4096,4096]       ", Op::reduce_sum, {0, 1}, Shape{}},
      {"reduce_max all     [4096,4096]       ", Op::reduce_max, {0, 1}, Shape{}},
  };
  std::printf("%-40s %10s %10s %11s %11s\n", "reduction (f32, 64 MiB read)", "ms", "GB/s", "/read floor",
              "/copy floor");
  for (const Case& c : cases) {
    Array output = kiln::runtime::allocate_array(DType::f32, c.output);
    cpu::reduce(c.op, c.axes, input, output);
    if (!check_reduction(c.op, c.axes, input, output)) {
      std::printf("%-40s WRONG RESULT\n", c.name);
      return 1;
    }
    Timing t = measure([&] { cpu::reduce(c.op, c.axes, input, output); });
    std::printf("%-40s %10.3f %10.1f %5.2f [%.2f] %5.2f [%.2f]\n", c.name, t.median * 1e3, bytes / t.median * 1e-9,
                t.median / read.median, t.min / read.min, t.median / copy.median, t.min / copy.min);
  }

  // ---- matmul ----
  const blas::Functions& functions = blas::functions();
  constexpr std::int64_t n = 2048;
  Array a = random_array(DType::f32, Shape{n, n}, 3), b = random_array(DType::f32, Shape{n, n}, 4);
  Array c = kiln::runtime::allocate_array(DType::f32, Shape{n, n});
  cpu::matmul(false, false, a, b, c);
  if (!check_matmul(a, b, c)) {
    std::printf("matmul WRONG RESULT\n");
    return 1;
  }
  auto direct = [&] {
    blas::sync_thread_count();
    functions.sgemm(blas::row_major, blas::no_transpose, blas::no_transpose, n, n, n, 1.0f, a.data<float>(), n,
                    b.data<float>(), n, 0.0f, c.mutable_data<float>(), n);
  };
  auto through_kiln = [&] { cpu::matmul(false, false, a, b, c); };
  auto [direct_time, kiln_time] = measure_pair(direct, through_kiln);
  const double flops = 2.0 * n * n * n;
  const double sgemm_rate = flops / direct_time.median;
  std::printf("\n%-40s %10s %10s %11s\n", "matmul (f32)", "ms", "GFLOP/s", "/direct");
  std::printf("%-40s %10.3f %10.1f %5.2f [%.2f]\n", "cblas_sgemm direct 2048^3", direct_time.median * 1e3,
              sgemm_rate * 1e-9, 1.0, 1.0);
  std::printf("%-40s %10.3f %10.1f %5.2f [%.2f]   (rate / direct rate: %.2f)\n", "kiln matmul 2048^3",
              kiln_time.median * 1e3, flops / kiln_time.median * 1e-9, kiln_time.median / direct_time.median,
              kiln_time.min / direct_time.min, direct_time.median / kiln_time.median);

  struct Batched {
    const char* name;
    Shape a, b, c;
  };
  const Batched batched[] = {
      {"batched [64,512,64]x[64,64,512]", Shape{64, 512, 64}, Shape{64, 64, 512}, Shape{64, 512, 512}},
      {"batched [64,512,512]x[64,512,64]", Shape{64, 512, 512}, Shape{64, 512, 64}, Shape{64, 512, 64}},
  };
  std::printf("%-40s %10s %10s %11s %14s\n", "", "ms", "GFLOP/s", "/floor", "loop of sgemm");
  for (const Batched& problem : batched) {
    Array x = random_array(DType::f32, problem.a, 5), y = random_array(DType::f32, problem.b, 6);
    Array z = kiln::runtime::allocate_array(DType::f32, problem.c);
    cpu::matmul(false, false, x, y, z);
    if (!check_matmul(x, y, z)) {
      std::printf("%s WRONG RESULT\n", problem.name);
      return 1;
    }
    std::int64_t count = problem.a[0], m = problem.a[1], k = problem.a[2], columns_b = problem.b[2];
    auto loop = [&] {
      blas::sync_thread_count();
      for (std::int64_t item = 0; item < count; ++item)
        functions.sgemm(blas::row_major, blas::no_transpose, blas::no_transpose, static_cast<int>(m),
                        static_cast<int>(columns_b), static_cast<int>(k), 1.0f, x.data<float>() + item * m * k,
                        static_cast<int>(k), y.data<float>() + item * k * columns_b, static_cast<int>(columns_b), 0.0f,
                        z.mutable_data<float>() + item * m * columns_b, static_cast<int>(columns_b));
    };
    auto ours = [&] { cpu::matmul(false, false, x, y, z); };
    auto [loop_time, our_time] = measure_pair(loop, ours);
    double batch_flops = 2.0 * static_cast<double>(count * m * k * columns_b);
    std::printf("%-40s %10.3f %10.1f %5.2f [%.2f] %8.1f GFLOP/s\n", problem.name, our_time.median * 1e3,
                batch_flops / our_time.median * 1e-9, our_time.median / (batch_flops / sgemm_rate),
                our_time.min / (batch_flops / sgemm_rate), batch_flops / loop_time.median * 1e-9);
  }

  // ---- OpenBLAS idle threads against kiln's pool ----
  // A row reduction right after a multithreaded GEMM, against the same
  // reduction right after another reduction: OpenBLAS threads that still
  // spin compete with kiln's pool. Compare runs with different
  // OPENBLAS_THREAD_TIMEOUT values.
  Array row_sums = kiln::runtime::allocate_array(DType::f32, Shape{rows});
  auto row_sum = [&] { cpu::reduce(Op::reduce_sum, {1}, input, row_sums); };
  Array small_a = random_array(DType::f32, Shape{512, 512}, 7), small_b = random_array(DType::f32, Shape{512, 512}, 8);
  Array small_c = kiln::runtime::allocate_array(DType::f32, Shape{512, 512});
  std::vector<double> after_gemm, after_reduction;
  for (int i = 0; i < timed_runs + 2; ++i) {
    cpu::matmul(false, false, small_a, small_b, small_c);
    double start = seconds_now();
    row_sum();
    after_gemm.push_back(seconds_now() - start);
    start = seconds_now();
    row_sum();
    after_reduction.push_back(seconds_now() - start);
  }
  Timing gemm_then = summarize(after_gemm), reduction_then = summarize(after_reduction);
  direct();
  double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double burnt = cpu_seconds() - before;
  std::printf(
      "\nOpenBLAS idle threads (OPENBLAS_THREAD_TIMEOUT): reduce_sum rows %.3f ms right after a 512^3 "
      "matmul, %.3f ms right after a reduction (x%.2f); %.1f ms of CPU burnt in the 100 ms after a GEMM\n",
      gemm_then.median * 1e3, reduction_then.median * 1e3, gemm_then.median / reduction_then.median, burnt * 1e3);
  return sink == 12345.0f ? 1 : 0;
}
