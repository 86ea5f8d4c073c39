// Loop kernels reading an input whose rows are the kernel's columns read it by strips: a group of rows and a
// block of columns at a time, each tile transposed in registers (codegen/cpu/transposed_strips.cpp). Each case
// runs through the standard executor, the JIT and the float64 reference; the sizes leave partial tiles, groups
// of rows cut short by the last row and groups that wrap around the last row axis.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <class Body, class... Inputs>
std::string source_of(Body body, const Inputs&... inputs) {
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  return jit.get_compiler_ir(Stage::source, inputs...);
}

TEST(TransposedStrips, TwoDimensionalTransposesOfEverySize) {
  auto sum = [](Tensor x, Tensor y) { return transpose(x) + y * 2; };
  // Small (index maps fused by the usual rule) and large (a strided transpose the fusion lets in); rows and
  // columns that are whole tiles, and ones that are not.
  for (const auto& [rows, columns] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 45}, {16, 16}, {64, 48}, {300, 200}, {257, 130}, {17, 1000}}) {
    const Tensor x = random_tensor(DType::f32, {columns, rows}, 1), y = random_tensor(DType::f32, {rows, columns}, 2);
    const std::string label = "transpose(x) + y * 2 over " + std::to_string(rows) + " x " + std::to_string(columns);
    const auto result = expect_agreement(label, sum, x, y);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << label << "\n" << result.fused;
    EXPECT_TRUE(contains(source_of(sum, x, y), "transpose_into_strip<float>(strip_x")) << label;
  }
}

TEST(TransposedStrips, EveryDtypeOfFourOrEightBytes) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const Tensor x = random_tensor(dtype, {70, 41}, 3), y = random_tensor(dtype, {41, 70}, 4);
    auto body = [](Tensor x, Tensor y) { return transpose(x) * y - transpose(x); };
    const auto result = expect_agreement("transpose of " + std::string(to_string(dtype)), body, x, y);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    EXPECT_TRUE(contains(source_of(body, x, y), "transpose_into_strip<")) << std::string(to_string(dtype));
  }
  // Booleans keep their gathers.
  const Tensor flags = random_tensor(DType::boolean, {70, 41}, 5), y = random_tensor(DType::f32, {41, 70}, 6);
  auto masked = [](Tensor flags, Tensor y) { return where(transpose(flags), y, 0.0); };
  expect_agreement("transpose of booleans", masked, flags, y);
  EXPECT_FALSE(contains(source_of(masked, flags, y), "transpose_into_strip<")) << "booleans";
}

TEST(TransposedStrips, BatchesAndOtherPermutations) {
  // A batch of swapped matrices: rows (batch, 33) do not collapse, and groups of 16 rows wrap from one matrix to
  // the next (filled element by element from each row's own coordinates).
  const Tensor batch = random_tensor(DType::f32, {3, 40, 33}, 7), bias = random_tensor(DType::f32, {40}, 8);
  auto swap = [](Tensor x, Tensor bias) { return exp(transpose(x, {0, 2, 1}) * 0.5) + bias; };
  auto result = expect_agreement("swapped batch", swap, batch, bias);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  const std::string source = source_of(swap, batch, bias);
  EXPECT_TRUE(contains(source, "element by element, each row from its own coordinates")) << source;
  // (1, 2, 0): the result's middle axis is the input's innermost, its last axis the input's first.
  const Tensor cube = random_tensor(DType::f32, {50, 6, 20}, 9);
  auto rotate = [](Tensor x) { return transpose(x, {1, 2, 0}) * 3.0 + 1.0; };
  result = expect_agreement("rotated axes", rotate, cube);
  EXPECT_TRUE(contains(source_of(rotate, cube), "transpose_into_strip<float>")) << result.fused;
  // The same input read transposed and in order, a reversed transposed axis, the transpose returned beside a
  // value computed from it.
  const Tensor square = random_tensor(DType::f32, {50, 50}, 10);
  expect_agreement(
      "x.T + x", [](Tensor x) { return transpose(x) + x; }, square);
  expect_agreement(
      "reversed rows of x.T",
      [](Tensor x) {
        return slice(transpose(x), {.start = {0, 49}, .stop = {50, -51}, .step = {1, -1}}) * 2.0;
      },
      square);
  result = expect_agreement(
      "x.T returned with 2 x.T", [](Tensor x) { return std::make_tuple(transpose(x), transpose(x) * 2.0); }, square);
}

TEST(TransposedStrips, TheSameBitsForOneThreadAndTwo) {
  const Tensor x = random_tensor(DType::f32, {333, 517}, 11), y = random_tensor(DType::f32, {517, 333}, 12);
  auto jit = function([](Tensor x, Tensor y) { return tanh(transpose(x)) * y; },
                      {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto [two, one] = testing::floats_with_two_threads_and_one([&] { return jit(x, y); });
  EXPECT_EQ(two, one);
}

}  // namespace
}  // namespace kiln
