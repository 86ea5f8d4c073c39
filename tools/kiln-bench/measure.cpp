#include "measure.h"

#include "kernels/cpu/blas.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln::bench {

Timing time_calls(const std::function<void()>& call, int runs, int warmup) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> times;
  for (int i = 0; i < std::max(runs, 1); ++i) {
    auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  std::size_t middle = times.size() / 2;
  double median = times.size() % 2 ? times[middle] : 0.5 * (times[middle - 1] + times[middle]);
  return {median, times.front(), times.back()};
}

namespace {

void copy_plain(const float* source, float* destination, std::int64_t count) {
  runtime::parallel_for(count, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    std::memcpy(destination + begin, source + begin, static_cast<std::size_t>(end - begin) * sizeof(float));
  });
}

// Non-temporal stores skip the read-for-ownership of the destination.
void copy_streaming(const float* source, float* destination, std::int64_t count) {
  runtime::parallel_for(count, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t i = begin;
    for (; i < end && (reinterpret_cast<std::uintptr_t>(destination + i) % 64) != 0; ++i) destination[i] = source[i];
#ifdef __AVX512F__
    for (; i + 16 <= end; i += 16) _mm512_stream_ps(destination + i, _mm512_loadu_ps(source + i));
#elif defined(__AVX__)
    for (; i + 8 <= end; i += 8) _mm256_stream_ps(destination + i, _mm256_loadu_ps(source + i));
#endif
    for (; i < end; ++i) destination[i] = source[i];
  });
  _mm_sfence();
}

}  // namespace

double copy_bandwidth(double footprint_bytes, int runs) {
  auto count = static_cast<std::int64_t>(footprint_bytes / 2 / sizeof(float));
  count = std::max<std::int64_t>(count, 1024);
  runtime::Array source = runtime::allocate_array(DType::f32, Shape({count}));
  runtime::Array destination = runtime::allocate_array(DType::f32, Shape({count}));
  float* in = source.mutable_data<float>();
  float* out = destination.mutable_data<float>();
  for (std::int64_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 1000);
  std::memset(out, 0, static_cast<std::size_t>(count) * sizeof(float));
  double bytes = 2.0 * static_cast<double>(count) * sizeof(float);
  int repeats = std::max(runs, 10);
  Timing plain = time_calls([&] { copy_plain(in, out, count); }, repeats);
  Timing streaming = time_calls([&] { copy_streaming(in, out, count); }, repeats);
  double best_ms = std::min(plain.median_ms, streaming.median_ms);
  return bytes / (best_ms * 1e-3);
}

Timing time_sgemm(const Tensor& a, const Tensor& b, int runs) {
  const auto& blas = kernels::cpu::blas::functions("kiln-bench");
  int m = static_cast<int>(a.shape()[0]), k = static_cast<int>(a.shape()[1]), n = static_cast<int>(b.shape()[1]);
  runtime::Array c = runtime::allocate_array(DType::f32, Shape({m, n}));
  const float* left = static_cast<const float*>(a.data());
  const float* right = static_cast<const float*>(b.data());
  float* out = c.mutable_data<float>();
  return time_calls(
      [&] {
        blas.sgemm(kernels::cpu::blas::row_major, kernels::cpu::blas::no_transpose, kernels::cpu::blas::no_transpose, m,
                   n, k, 1.0f, left, k, right, n, 0.0f, out, n);
      },
      runs);
}

}  // namespace kiln::bench
