// Values that vary along a row but are computed from inputs every row reads alike (a bf16 layer_norm's scale and
// offset widened to f32, a bias scaled) are computed once per work range into a buffer
// one row long, which every row loads (row_kernel.cpp, choose_hoisted). These tests check the numbers against the
// standard executor and the float64 reference, and which kernels take that form.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether a kernel fills hoisted buffers (the functions here are named after this file: "hoisted_" alone would match).
bool hoists(const std::string& source) { return contains(source, "if (walked == begin) {"); }

template <class Body, class... Inputs>
std::string source_of(Body body, const Inputs&... inputs) {
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  return jit.get_compiler_ir(Stage::source, inputs...);
}

TEST(HoistedValues, ABf16LayerNormWidensItsScaleAndOffsetOnce) {
  // 37 columns: a partial vector at the end of every row and of the hoisted buffers.
  const Tensor x = random_tensor(DType::bf16, {23, 37}, 1);
  const Tensor gamma = random_tensor(DType::bf16, {37}, 2), beta = random_tensor(DType::bf16, {37}, 3);
  auto body = [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); };
  const auto result = expect_agreement("bf16 layer_norm 23x37", body, x, gamma, beta);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  const std::string source = source_of(body, x, gamma, beta);
  EXPECT_TRUE(hoists(source)) << source;
  // Both widened vectors are stored once and loaded by the last pass.
  EXPECT_EQ(source.find("widen_bf16(x1)"), source.rfind("widen_bf16(x1)")) << source;
  EXPECT_TRUE(contains(source, "load<float>(hoisted_")) << source;
}

TEST(HoistedValues, ABiasReadByAPassAndTheElementPass) {
  // A bf16 bias widened, scaled and shifted, read by a reduction's pass and by the element pass; the bias a strided
  // slice (its elements two apart), the rows from two axes. (An expensive value of the bias, an exp, is computed by
  // a kernel of its own and read from memory: the fusion planner does not recompute it per row.)
  const Tensor x = random_tensor(DType::f32, {3, 7, 29}, 4);
  const Tensor wide = random_tensor(DType::bf16, {58}, 5);
  auto body = [](Tensor x, Tensor wide) {
    Tensor bias = cast(slice(wide, {.start = {0}, .stop = {58}, .step = {2}}), DType::f32) * 0.5 + 1.0;
    Tensor shifted = x * bias;
    return shifted / reduce_sum(shifted, {2}, true);
  };
  const auto result = expect_agreement("a bf16 bias over 21 rows", body, x, wide);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  const std::string source = source_of(body, x, wide);
  ASSERT_TRUE(hoists(source)) << source;
  // Widened in the fill alone; the reduction's pass and the element pass load it.
  const std::size_t fill = source.find("if (walked == begin) {");
  EXPECT_EQ(source.find("widen_bf16("), source.rfind("widen_bf16(")) << source;
  EXPECT_GT(source.find("widen_bf16("), fill) << source;
  const std::size_t first_load = source.find("load<float>(hoisted_");
  EXPECT_NE(first_load, std::string::npos) << source;
  EXPECT_NE(source.find("load<float>(hoisted_", first_load + 1), std::string::npos) << source;
}

TEST(HoistedValues, ALoopKernelStoresAValueOfTheBiasAsAnOutput) {
  // The bias's value is itself an output broadcast over the rows, beside one that reads x.
  const Tensor x = random_tensor(DType::f32, {40, 19}, 13), bias = random_tensor(DType::f16, {19}, 14);
  auto body = [](Tensor x, Tensor bias) {
    Tensor widened = cast(bias, DType::f32) * 3.0;
    return std::vector<Tensor>{x + widened, broadcast_to(widened, x.shape()) - 1.0};
  };
  const auto result = expect_agreement("an f16 bias over 40 rows", body, x, bias);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(hoists(source_of(body, x, bias)));
}

TEST(HoistedValues, ValuesOfTheRowAndFewRowsAreNotHoisted) {
  // x's own exp changes from row to row; with under 16 rows, each thread's range has too few to share a buffer.
  const Tensor x = random_tensor(DType::f32, {40, 33}, 6), bias = random_tensor(DType::f32, {33}, 7);
  auto own = [](Tensor x) { return exp(x) * 3.0; };
  expect_agreement("exp of x", own, x);
  EXPECT_FALSE(hoists(source_of(own, x)));
  const Tensor few = random_tensor(DType::f32, {15, 33}, 8);
  auto biased = [](Tensor x, Tensor bias) { return x * (bias * 2.0); };
  expect_agreement("a bias over 15 rows", biased, few, bias);
  EXPECT_FALSE(hoists(source_of(biased, few, bias)));
  expect_agreement("a bias over 40 rows", biased, x, bias);
  EXPECT_TRUE(hoists(source_of(biased, x, bias)));
}

TEST(HoistedValues, EmptyRowsAndABroadcastScalar) {
  // Rows of no elements (the buffers hold none), and a rank-0 input whose exp is the same everywhere (it does not
  // vary along the row: a row value, never hoisted).
  const Tensor empty = random_tensor(DType::f32, {20, 0}, 9), bias = random_tensor(DType::f32, {0}, 10);
  auto biased = [](Tensor x, Tensor bias) { return x * (bias * 2.0); };
  expect_agreement("an empty bias over 20 empty rows", biased, empty, bias);
  const Tensor x = random_tensor(DType::f32, {20, 17}, 11), scalar = random_tensor(DType::f32, {}, 12);
  auto scaled = [](Tensor x, Tensor s) { return x * exp(s); };
  expect_agreement("exp of a scalar over 20 rows", scaled, x, scalar);
  EXPECT_FALSE(hoists(source_of(scaled, x, scalar)));
}

}  // namespace
}  // namespace kiln
