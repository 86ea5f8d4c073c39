#include "measure.h"

#include "kernels/cpu/blas.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln::bench {

Timing time_calls(const std::function<void()>& call, int runs, int warmup) {
  return time_calls_between(call, runs, nullptr, warmup);
}

Timing time_calls_between(const std::function<void()>& call, int runs, const std::function<void()>& between,
                          int warmup) {
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> times;  // the timed calls only, as the article's loop would see them without `between`
  for (int i = 0; i < std::max(runs, 1); ++i) {
    // `between` streams through memory as large as the workload's, evicting its data from the caches; the peers
    // (bench/peers) time calls back to back, each finding what the one before left in cache. So does this: an
    // untimed call after `between` (a 16 MiB matrix that stays in L3 from one call to the next measured 25% slower
    // without it).
    if (i > 0 && between) call();
    auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (between) between();
  }
  return summarize(std::move(times));
}

Timing summarize(std::vector<double> times) {
  double total = 0;
  for (double time : times) total += time;
  std::sort(times.begin(), times.end());
  std::size_t middle = times.size() / 2;
  double median = times.size() % 2 ? times[middle] : 0.5 * (times[middle - 1] + times[middle]);
  return {median, times.front(), times.back(), total / static_cast<double>(times.size())};
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
  BandwidthSampler sampler(footprint_bytes);
  for (int i = 0; i < std::max(runs, 10); ++i) sampler.sample();
  return sampler.bandwidth();
}

BandwidthSampler::BandwidthSampler(double footprint_bytes) {
  count_ = std::max<std::int64_t>(static_cast<std::int64_t>(footprint_bytes / 2 / sizeof(float)), 1024);
  source_ = runtime::allocate_array(DType::f32, Shape({count_}));
  destination_ = runtime::allocate_array(DType::f32, Shape({count_}));
  float* in = source_.mutable_data<float>();
  for (std::int64_t i = 0; i < count_; ++i) in[i] = static_cast<float>(i % 1000);
  std::memset(destination_.mutable_raw(), 0, static_cast<std::size_t>(count_) * sizeof(float));
}

void BandwidthSampler::sample() {
  const float* in = source_.data<float>();
  float* out = destination_.mutable_data<float>();
  auto seconds = [](auto&& copy) {
    auto start = std::chrono::steady_clock::now();
    copy();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double best =
      std::min(seconds([&] { copy_plain(in, out, count_); }), seconds([&] { copy_streaming(in, out, count_); }));
  samples_.push_back(2.0 * static_cast<double>(count_) * sizeof(float) / best);
}

double BandwidthSampler::bandwidth() const {
  if (samples_.empty()) return 0;
  std::vector<double> sorted = samples_;
  std::sort(sorted.begin(), sorted.end());
  std::size_t middle = sorted.size() / 2;
  return sorted.size() % 2 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
}

Timing time_sgemm(const Tensor& a, const Tensor& b, int runs) {
  const auto& blas = kernels::cpu::blas::functions("kiln-bench");
  int m = static_cast<int>(a.shape()[0]), k = static_cast<int>(a.shape()[1]), n = static_cast<int>(b.shape()[1]);
  runtime::Array c = runtime::allocate_array(DType::f32, Shape({m, n}));
  const float* left = static_cast<const float*>(a.data());
  const float* right = static_cast<const float*>(b.data());
  float* out = c.mutable_data<float>();
  kernels::cpu::blas::sync_thread_count();
  return time_calls(
      [&] {
        blas.sgemm(kernels::cpu::blas::row_major, kernels::cpu::blas::no_transpose, kernels::cpu::blas::no_transpose, m,
                   n, k, 1.0f, left, k, right, n, 0.0f, out, n);
      },
      runs);
}

Timing time_gemm_bf16(const Tensor& a, const Tensor& b, int runs) {
  const std::int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  runtime::Array c = runtime::allocate_array(DType::f32, Shape({m, n}));
  const auto* left = static_cast<const std::uint16_t*>(a.data());
  const auto* right = static_cast<const std::uint16_t*>(b.data());
  float* out = c.mutable_data<float>();
  return time_calls([&] { kernels::cpu::gemm_bf16(m, n, k, left, k, false, right, n, false, out, n); }, runs);
}

double peak_sgemm_rate(int runs) {
  static const double rate = [runs] {
    constexpr std::int64_t n = 2048;
    Tensor a = random::normal({n, n}, {.seed = 101}), b = random::normal({n, n}, {.seed = 102});
    return 2.0 * n * n * n / (time_sgemm(a, b, runs).median_ms * 1e-3);
  }();
  return rate;
}

Timing time_attention_sgemms(const Tensor& q, const Tensor& k, const Tensor& v, int runs) {
  const auto& blas = kernels::cpu::blas::functions("kiln-bench");
  namespace cblas = kernels::cpu::blas;
  const int sequence = static_cast<int>(q.dim(-2)), head_size = static_cast<int>(q.dim(-1));
  const std::int64_t slices = q.numel() / (static_cast<std::int64_t>(sequence) * head_size);
  const std::int64_t slice_elements = static_cast<std::int64_t>(sequence) * head_size;
  const float* queries = static_cast<const float*>(q.data());
  const float* keys = static_cast<const float*>(k.data());
  const float* values = static_cast<const float*>(v.data());
  runtime::Array scores =
      runtime::allocate_array(DType::f32, Shape({slices, static_cast<std::int64_t>(sequence) * sequence}));
  runtime::Array output = runtime::allocate_array(DType::f32, Shape({slices, slice_elements}));
  float* score_data = scores.mutable_data<float>();
  float* output_data = output.mutable_data<float>();
  auto slice = [&](std::int64_t index) {
    float* s = score_data + index * sequence * sequence;
    blas.sgemm(cblas::row_major, cblas::no_transpose, cblas::transpose, sequence, sequence, head_size, 1.0f,
               queries + index * slice_elements, head_size, keys + index * slice_elements, head_size, 0.0f, s,
               sequence);
    blas.sgemm(cblas::row_major, cblas::no_transpose, cblas::no_transpose, sequence, head_size, sequence, 1.0f, s,
               sequence, values + index * slice_elements, head_size, 0.0f, output_data + index * slice_elements,
               head_size);
  };
  Timing parallel_heads = [&] {
    cblas::SingleThreadedScope single_threaded;
    return time_calls(
        [&] {
          runtime::parallel_for(slices, 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t index = begin; index < end; ++index) slice(index);
          });
        },
        runs);
  }();
  cblas::sync_thread_count();
  Timing heads_in_turn = time_calls(
      [&] {
        for (std::int64_t index = 0; index < slices; ++index) slice(index);
      },
      runs);
  return parallel_heads.median_ms <= heads_in_turn.median_ms ? parallel_heads : heads_in_turn;
}

Timing time_block_sgemms(std::int64_t tokens, std::int64_t width, std::int64_t heads, std::int64_t hidden, int runs) {
  const auto& blas = kernels::cpu::blas::functions("kiln-bench");
  namespace cblas = kernels::cpu::blas;
  const int t = static_cast<int>(tokens), d = static_cast<int>(width), f = static_cast<int>(hidden);
  const int head = static_cast<int>(width / heads);
  // Operands of every product: random, so no kernel meets zeros or denormals.
  auto matrix = [seed = std::uint64_t{200}](std::int64_t rows, std::int64_t columns) mutable {
    return random::normal({rows, columns}, {.seed = seed++, .stddev = 0.05});
  };
  const Tensor x = matrix(tokens, width), weights = matrix(width, width), up = matrix(width, hidden),
               down = matrix(hidden, width), hidden_values = matrix(tokens, hidden);
  runtime::Array projections = runtime::allocate_array(DType::f32, Shape({4, tokens, width}));
  runtime::Array scores = runtime::allocate_array(DType::f32, Shape({tokens, tokens}));
  runtime::Array out = runtime::allocate_array(DType::f32, Shape({tokens, hidden}));
  float* q = projections.mutable_data<float>();
  float *k = q + tokens * width, *v = k + tokens * width, *attended = v + tokens * width;
  auto sgemm = [&](bool transpose_b, int m, int n, int depth, const float* a, int lda, const float* b, int ldb,
                   float* c, int ldc) {
    blas.sgemm(cblas::row_major, cblas::no_transpose, transpose_b ? cblas::transpose : cblas::no_transpose, m, n, depth,
               1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  };
  const float* input = static_cast<const float*>(x.data());
  const float* square = static_cast<const float*>(weights.data());
  cblas::sync_thread_count();
  return time_calls(
      [&] {
        for (float* projection : {q, k, v}) sgemm(false, t, d, d, input, d, square, d, projection, d);
        for (int h = 0; h < heads; ++h) {
          sgemm(true, t, t, head, q + h * head, d, k + h * head, d, scores.mutable_data<float>(), t);
          sgemm(false, t, head, t, scores.data<float>(), t, v + h * head, d, attended + h * head, d);
        }
        sgemm(false, t, d, d, attended, d, square, d, q, d);
        sgemm(false, t, f, d, input, d, static_cast<const float*>(up.data()), f, out.mutable_data<float>(), f);
        sgemm(false, t, d, f, static_cast<const float*>(hidden_values.data()), f,
              static_cast<const float*>(down.data()), d, k, d);
      },
      runs);
}

}  // namespace kiln::bench
