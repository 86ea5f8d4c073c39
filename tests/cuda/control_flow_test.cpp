// Control flow on a GPU: cond, while_loop and scan with their regions compiled by the CUDA JIT (and run by the
// standard CUDA executor), against the CPU's standard executor on the same inputs.

#include "cuda/cuda_test_support.h"
#include "support/recurrent_gradients.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>

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

// Within `tolerance` of the largest |expected| element (sums of products, whose near-zero elements cancel: an
// ulp measure per element would be too strict).
void expect_close(const Tensor& expected, const Tensor& actual, double tolerance, const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const std::vector<double> want = expected.to_vector<double>(), got = actual.to(Device::cpu()).to_vector<double>();
  double largest = 0;
  for (double value : want) largest = std::max(largest, std::fabs(value));
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(want[i], got[i], tolerance * largest) << what << " element " << i;
}

// A training step through a scan on the GPU: the forward scan stacking carries and products, the reversed scan of
// the step's VJP, the weights' cotangents summed after the loop as one product each (src/autodiff/control_rules.h).
TEST(CudaControlFlow, GradientsThroughAScanAgreeWithTheCpu) {
  KILN_REQUIRE_GPU();
  // Full f32 products (TF32, the GPU's default, keeps 10 mantissa bits: 1e-3 apart from the CPU's).
  struct FullPrecision {
    bool previous = config::allow_tf32.exchange(false);
    ~FullPrecision() { config::allow_tf32 = previous; }
  } full_precision;
  const Tensor h0 = random_tensor(DType::f32, {8, 16}, 3), xs = random_tensor(DType::f32, {5, 8, 16}, 4);
  const Tensor w = random_tensor(DType::f32, {16, 16}, 5) * 0.25, u = random_tensor(DType::f32, {16, 16}, 6) * 0.25;
  const auto body = [](const Tensor& h, const Tensor& sequence, const Tensor& input_weight,
                       const Tensor& state_weight) {
    return testing::recurrent_loss_and_gradients(h, sequence, input_weight, state_weight);
  };
  auto cpu = function(body);
  auto compiled = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto [want_value, want_w, want_u] = cpu(h0, xs, w, u);
  const auto [value, gradient_w, gradient_u] = compiled(h0.to(gpu), xs.to(gpu), w.to(gpu), u.to(gpu));
  expect_close(want_value, value, 1e-5, "loss");
  expect_close(want_w, gradient_w, 1e-5, "gradient of w");
  expect_close(want_u, gradient_u, 1e-5, "gradient of u");
  EXPECT_EQ(compiled.statistics().fallbacks, 0);
}

}  // namespace
}  // namespace kiln
