// Reduction kernels over rows shorter than a vector (classification logits: [batch, 10]) walk a group of `lanes`
// rows at a time, a row in each lane (row_kernel.cpp, rows_across_lanes). The numbers are checked against the
// standard executor and the float64 reference in DifferentialOps (ShortRowsAcrossLanes..., DivisionByRowSums...,
// RowsShorterThanAVectorOrJustPastOne); these tests check which kernels take that form and how they read.

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

std::string source_of_softmax(const Tensor& x) {
  auto softmax =
      function([](Tensor x) { return nn::softmax(x); }, {.jit_compile = true, .on_compile_failure = Fallback::none});
  return softmax.get_compiler_ir(Stage::source, x);
}

TEST(RowsAcrossLanes, ASoftmaxOverShortRowsPutsARowInEachLane) {
  const Tensor x = random_tensor(DType::f32, {100, 10}, 1);
  const auto result = expect_agreement("softmax of 100 x 10", [](Tensor x) { return nn::softmax(x); }, x);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  const std::string source = source_of_softmax(x);
  EXPECT_TRUE(contains(source, "row + l in lane l")) << source;
  // Element j of each row of the group, 10 elements apart, read once and kept for the later passes.
  EXPECT_TRUE(contains(source, "gather<float>(row_x0 + j, 10, group_rows)")) << source;
  EXPECT_TRUE(contains(source, "store<float>(cache_x0 + j * lanes, x0)")) << source;
  EXPECT_TRUE(contains(source, "scatter<float>(row_output")) << source;
  EXPECT_TRUE(contains(source, "has_normal_reciprocals(")) << source;
  EXPECT_FALSE(contains(source, "reduce_max(accumulator")) << "each lane holds its row's maximum\n" << source;
  EXPECT_TRUE(contains(source, "parallel_for((100 + lanes - 1) / lanes")) << source;
}

std::string source_of_layer_norm(const Tensor& x) {
  auto layer_norm = function([](Tensor x) { return nn::layer_norm(x); },
                             {.jit_compile = true, .on_compile_failure = Fallback::none});
  return layer_norm.get_compiler_ir(Stage::source, x);
}

TEST(RowsAcrossLanes, ShortRowsOrRowsOfAMaxUpToTwoVectorsAndEnoughOfThem) {
  auto across_lanes = [](const std::string& source) { return contains(source, "in lane l"); };
  // A max's tree is dear: rows of up to 31 elements go across lanes where a reduction is one.
  EXPECT_TRUE(across_lanes(source_of_softmax(random_tensor(DType::f32, {100, 31}, 2))));
  EXPECT_FALSE(across_lanes(source_of_softmax(random_tensor(DType::f32, {100, 32}, 3))));
  // Sums only: rows shorter than a vector.
  EXPECT_TRUE(across_lanes(source_of_layer_norm(random_tensor(DType::f32, {100, 15}, 4))));
  EXPECT_FALSE(across_lanes(source_of_layer_norm(random_tensor(DType::f32, {100, 16}, 5))));
  // Fewer rows than a group of 16 keep a vector per row.
  EXPECT_FALSE(across_lanes(source_of_softmax(random_tensor(DType::f32, {15, 10}, 6))));
}

TEST(RowsAcrossLanes, ATransposedInputHasTheGroupsRowsSideBySide) {
  // The rows of transpose(x) are the columns of x: a group's element j is 16 (8, 4) consecutive floats.
  auto sums = [](Tensor x) { return reduce_sum(transpose(x, {1, 0}) * 2, {1}); };
  const Tensor x = random_tensor(DType::f32, {7, 300}, 3);
  expect_agreement("row sums of a transposed input", sums, x);
  const std::string source =
      function(sums, {.jit_compile = true, .on_compile_failure = Fallback::none}).get_compiler_ir(Stage::source, x);
  EXPECT_TRUE(contains(source, "load<float>(row_x0 + j * 300, group_rows)")) << source;
  EXPECT_TRUE(contains(source, "store<float>(row_output")) << source;  // the group's sums side by side too
  EXPECT_FALSE(contains(source, "scatter<")) << source;
}

TEST(RowsAcrossLanes, TheSameBitsForOneThreadAndTwo) {
  const Tensor x = random_tensor(DType::f32, {1003, 7}, 4);
  auto jit = function([](Tensor x) { return nn::log_softmax(x); },
                      {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto [two, one] = testing::floats_with_two_threads_and_one([&] { return jit(x); });
  EXPECT_EQ(two, one);
}

}  // namespace
}  // namespace kiln
