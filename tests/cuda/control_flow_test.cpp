// Control flow on a GPU: cond, while_loop and scan with their regions compiled by the CUDA JIT (and run by the
// standard CUDA executor), against the CPU's standard executor on the same inputs.

#include "cuda/cuda_test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_same;
using testing::gpu;
using testing::random_tensor;

// Device math (tanh, the sigmoid) is a few ulps from the CPU's, and the loops carry it on: 256 ulps (1.5e-5).
// The body of every test: a while_loop carrying an i32 counter and a tensor, a cond in it, and a scan after it.
std::tuple<Tensor, Tensor, Tensor> looping(const Tensor& x, const Tensor& steps, const Tensor& sequence) {
  auto [value, count] = while_loop([&](const std::pair<Tensor, Tensor>& state) { return state.second < steps; },
                                   [&](const std::pair<Tensor, Tensor>& state) {
                                     const Tensor next = cond(
                                         state.second % 2 == 0, [&]() { return tanh(state.first * 1.5) + 0.25; },
                                         [&]() { return state.first * 0.5 - reduce_mean(state.first); });
                                     return std::pair<Tensor, Tensor>{next, state.second + 1};
                                   },
                                   std::pair<Tensor, Tensor>{x, zeros(Shape(), DType::i32)});
  auto [last, outputs] = scan(
      [](const Tensor& carry, const Tensor& element) {
        const Tensor next = nn::sigmoid(carry + element);
        return std::pair<Tensor, Tensor>{next, next * 2.0};
      },
      value, sequence, {.reverse = true});
  return {last, outputs, count};
}

TEST(CudaControlFlow, LoopsAndBranchesCompiledForTheGpuAgreeWithTheCpu) {
  KILN_REQUIRE_GPU();
  const Tensor x = random_tensor(DType::f32, {33, 5}, 1), sequence = random_tensor(DType::f32, {4, 33, 5}, 2);
  const auto body = [](const Tensor& a, const Tensor& steps, const Tensor& s) { return looping(a, steps, s); };
  auto cpu = function(body);
  auto compiled = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  auto standard = function(body);
  for (std::int32_t steps : {0, 3}) {
    const Tensor count = from_vector(std::vector<std::int32_t>{steps}, Shape());
    const auto [want_last, want_outputs, want_count] = cpu(x, count, sequence);
    for (auto* gpu_function : {&compiled, &standard}) {
      const auto [last, outputs, got_count] = (*gpu_function)(x.to(gpu), count.to(gpu), sequence.to(gpu));
      expect_same(want_count, got_count);
      expect_same(want_last, last, 256, "last carry");
      expect_same(want_outputs, outputs, 256, "stacked outputs");
    }
  }
  EXPECT_EQ(compiled.statistics().fallbacks, 0);
}

}  // namespace
}  // namespace kiln
