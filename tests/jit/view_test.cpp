// Reshapes of values in memory are views (KernelKind::view): no kernel, no
// copy, the operand's buffer read with the new shape -- returned, read by later
// kernels, chained, or of a parameter -- and the buffer stays untouched as long
// as a view of it is read.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

TEST(Views, AReshapeOfAComputedValueIsNoKernel) {
  Tensor x = random_tensor(DType::f32, {24, 40}, 1);
  auto result = expect_agreement(
      "reshape(exp(x))",
      [](Tensor t) {
        return reshape(exp(t), {48, 20});
      },
      x);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(contains(result.fused, "1 kernel and 1 view (no copy)")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "kernel 1 (view over [48,20]): %2 reshape")) << result.fused;
  // Returned through the view: the exp is written straight into the returned buffer, not into the arena.
  EXPECT_TRUE(contains(result.fused, "arena: 0 bytes per call")) << result.fused;
}

TEST(Views, ViewsReadByLaterKernelsChainedAndReturned) {
  Tensor x = random_tensor(DType::f32, {12, 2, 16}, 2), w = random_tensor(DType::f32, {32, 8}, 3);
  // transpose -> reshape (a view of the transpose's copy) -> matmul, as attention's heads are merged; the
  // flattened copy also returned, and reshaped again (simplify joins the first two reshapes).
  auto merge_heads = [](Tensor t, Tensor weights) {
    Tensor merged = reshape(transpose(exp(t), {1, 0, 2}), {24, 16});
    Tensor flat = reshape(merged, {12, 32});
    return std::make_tuple(matmul(flat, weights), flat, reshape(flat, {384}));
  };
  auto result = expect_agreement("views of a transpose", merge_heads, x, w);
  EXPECT_TRUE(contains(result.fused, "2 kernels and 2 views (no copy)")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "view over [12,32]")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "view over [384]")) << result.fused;
  EXPECT_EQ(result.jit.kernels_per_call, 2);
}

TEST(Views, AViewKeepsItsBufferAliveWhileItIsRead) {
  // exp(x) goes to the arena and the second matmul reads it through a view, after cos(y) -- as large, also in
  // the arena -- was written and read by the first matmul: were exp's bytes free after the view, cos(y) would
  // take them and the second matmul would read cosines.
  Tensor x = random_tensor(DType::f32, {16, 64}, 4), y = random_tensor(DType::f32, {16, 64}, 5),
         w1 = random_tensor(DType::f32, {32, 8}, 6), w2 = random_tensor(DType::f32, {32, 8}, 7);
  auto body = [](Tensor a, Tensor b, Tensor first_weights, Tensor second_weights) {
    Tensor v = reshape(exp(a), {32, 32});
    Tensor c = matmul(reshape(cos(b), {32, 32}), second_weights);
    return matmul(v, first_weights) + c;
  };
  auto result = expect_agreement("a view read late", body, x, y, w1, w2);
  EXPECT_TRUE(contains(result.fused, "4 kernels and 2 views (no copy)")) << result.fused;
}

TEST(Views, AReshapeOfAParameterReturnedSharesItsBuffer) {
  Tensor x = random_tensor(DType::f32, {6, 10}, 7);
  auto jit = function(
      [](Tensor t) {
        return std::make_tuple(reshape(t, {60}), reshape(t, {3, 20}) * 2.0);
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none});
  auto [flat, doubled] = jit(x);
  EXPECT_EQ(flat.shape(), Shape({60}));
  EXPECT_EQ(flat.to_vector<float>(), x.to_vector<float>());
  std::vector<float> expected = x.to_vector<float>();
  for (float& value : expected) value *= 2;
  EXPECT_EQ(doubled.to_vector<float>(), expected);
  EXPECT_EQ(jit.statistics().kernels_per_call, 1) << jit.get_compiler_ir(Stage::fused, x);
}

}  // namespace
}  // namespace kiln
