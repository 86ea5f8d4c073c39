// Threads and repeated calls: one JIT function called from 8 threads with a
// mix of signatures compiles each signature exactly once and is always
// right; a product on OpenBLAS shared by two threads; 10,000 calls leave the
// allocator where they found it.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <atomic>
#include <cmath>
#include <thread>

namespace kiln {
namespace {

using testing::random_tensor;

TEST(JitConcurrency, EightThreadsMixedSignaturesCompileEachOnce) {
  std::atomic<int> traces = 0;
  auto f = function(
      [&](Tensor x) {
        traces += 1;
        return nn::softmax(x * 2.5) + 1;
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "concurrent"});
  std::vector<Tensor> inputs;
  for (int size = 1; size <= 4; ++size) inputs.push_back(random_tensor(DType::f32, {size, 37 + size}, 10 + size));
  std::vector<std::vector<float>> expected;
  for (const Tensor& input : inputs) expected.push_back((nn::softmax(input * 2.5) + 1).to_vector<float>());

  std::atomic<int> wrong = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int call = 0; call < 25; ++call) {
        std::size_t which = static_cast<std::size_t>((t * 7 + call) % 4);
        std::vector<float> got = f(inputs[which]).to_vector<float>();
        for (std::size_t i = 0; i < got.size(); ++i)
          if (std::abs(got[i] - expected[which][i]) > 1e-6f) wrong += 1;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(traces, 4);
  FunctionStatistics statistics = f.statistics();
  EXPECT_EQ(statistics.traces, 4);
  EXPECT_EQ(statistics.compiles + statistics.cache_hits, 4);
  EXPECT_EQ(statistics.fallbacks, 0);
  EXPECT_EQ(statistics.calls, 200);
}

// A product large and deep enough for OpenBLAS (kernels::cpu::prefers_openblas): OpenBLAS's calls and the
// epilogue's parallel_for from two threads at once.
// The threads' results must equal the first call's, which the standard executor checks.
TEST(JitConcurrency, TwoThreadsShareALargeDeepProduct) {
  auto body = [](Tensor x, Tensor y) {
    Tensor z = matmul(x, y);
    return std::vector<Tensor>{reduce_sum(nn::relu(z + sin(z))), z};
  };
  auto f = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "concurrent_product"});
  Tensor x = random_tensor(DType::f32, {1536, 1536}, 30), y = random_tensor(DType::f32, {1536, 1536}, 31);
  const std::vector<Tensor> first = f(x, y);
  const float expected_sum = first[0].item<float>();
  const std::vector<float> expected_product = first[1].to_vector<float>();
  const std::vector<Tensor> standard = function(body)(x, y);
  EXPECT_NEAR(expected_sum, standard[0].item<float>(), 1e-5 * std::abs(expected_sum));
  EXPECT_EQ(expected_product, standard[1].to_vector<float>());  // the same OpenBLAS call
  std::atomic<int> wrong = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int call = 0; call < 3; ++call) {
        const std::vector<Tensor> result = f(x, y);
        if (std::abs(result[0].item<float>() - expected_sum) > 1e-6f * std::abs(expected_sum)) wrong += 1;
        const std::vector<float> product = result[1].to_vector<float>();
        for (std::size_t i = 0; i < product.size(); ++i)
          if (std::abs(product[i] - expected_product[i]) > 1e-5f * (1.0f + std::abs(expected_product[i]))) wrong += 1;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(f.statistics().kernels_per_call, 1);
}

TEST(JitMemory, TenThousandCallsLeaveTheAllocatorWhereTheyFoundIt) {
  auto f = function([](Tensor x, Tensor y) { return std::pair<Tensor, Tensor>{nn::layer_norm(x * y), reduce_sum(exp(x))}; },
                    {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor x = random_tensor(DType::f32, {16, 33}, 1), y = random_tensor(DType::f32, {33}, 2);
  f(x, y);  // trace and compile first
  MemoryStatistics before = memory_statistics();
  for (int call = 0; call < 10000; ++call) f(x, y);
  MemoryStatistics after = memory_statistics();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.buffers_in_use, before.buffers_in_use);
}

TEST(StandardMemory, TenThousandCallsLeaveTheAllocatorWhereTheyFoundIt) {
  auto f = function([](Tensor x) { return nn::softmax(x) * 3; });
  Tensor x = random_tensor(DType::f32, {8, 9}, 3);
  f(x);
  MemoryStatistics before = memory_statistics();
  for (int call = 0; call < 10000; ++call) f(x);
  EXPECT_EQ(memory_statistics().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(memory_statistics().buffers_in_use, before.buffers_in_use);
}

}  // namespace
}  // namespace kiln
