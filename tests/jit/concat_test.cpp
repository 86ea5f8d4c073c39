// Concats assembled in place (compiler/fusion_placement.cpp): the kernels computing a concat's operands write them into
// their slices of its buffer, and the concat copies only the rest. Each case runs through the standard executor,
// the JIT and the float64 reference, and counts the kernels.

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

TEST(ConcatInPlace, ComputedOperandsAreWrittenWhereTheConcatHasThem) {
  // Along the last axis (each operand's rows are strided slices of the result's) and along the first (each is a
  // block of rows); 37 x 19 and 37 x 6 leave partial vectors and a rows-across-lanes softmax (6 < 16 columns).
  const Tensor a = random_tensor(DType::f32, {37, 19}, 1), b = random_tensor(DType::f32, {37, 6}, 2);
  const Tensor c = random_tensor(DType::f32, {11, 19}, 3);
  auto last_axis = [](Tensor a, Tensor b) { return concat({exp(a), nn::softmax(b) * 2, sin(b)}, 1); };
  auto result = expect_agreement("along the last axis", last_axis, a, b);
  EXPECT_EQ(result.jit.kernels_per_call, 3) << result.fused;
  EXPECT_TRUE(contains(result.fused, "nothing is left to copy")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "at 19 along axis 1")) << result.fused;
  auto first_axis = [](Tensor a, Tensor c) { return concat({tanh(c), a * 3 + 1}, 0); };
  result = expect_agreement("along the first axis", first_axis, a, c);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  // The generated code stores the operands' rows 31 floats apart, the length of the result's rows.
  auto jit = function(last_axis, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::string source = jit.get_compiler_ir(Stage::source, a, b);
  EXPECT_TRUE(contains(source, "in %11: f32[37,31] from [0,0]")) << source;
  EXPECT_TRUE(contains(source, "(19 + 31 * c0)")) << source;
}

// A concat assembled whole inside another (a layout of phases merged along two axes, as a strided pool's gradient
// has): its operands' kernels write them where the outer concat has them, offset along both axes, and neither the
// inner concats nor a copy of them is left; three deep, in a loop's step, and not where the inner one is returned
// or keeps a parameter to copy.
TEST(ConcatInPlace, ConcatsOfConcatsAreAssembledInOneBuffer) {
  const Tensor a = random_tensor(DType::f32, {5, 3, 7}, 14), b = random_tensor(DType::f32, {5, 3, 4}, 15);
  auto nested = [](Tensor a, Tensor b) {
    const Tensor top = concat({exp(a), b * 2}, 2), bottom = concat({sin(a), b - 1}, 2);
    return concat({top, bottom}, 1);
  };
  auto result = expect_agreement("two concats along the columns in one along the rows", nested, a, b);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;  // a's two operands' kernel and b's
  EXPECT_TRUE(contains(result.fused, "3 concats assembled in place")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "at 3 along axis 1: the kernels computing its operands write them there"))
      << result.fused;
  auto jit = function(nested, {.jit_compile = true, .on_compile_failure = Fallback::none});
  // b - 1 lies in the bottom half (row 3 of 6) and in the right part (column 7 of 11).
  EXPECT_TRUE(contains(jit.get_compiler_ir(Stage::source, a, b), "f32[5,6,11] from [0,3,7]"))
      << jit.get_compiler_ir(Stage::source, a, b);

  auto three_deep = [](Tensor a, Tensor b) {
    const Tensor rows = concat({concat({exp(a), b * 2}, 2), concat({sin(a), b - 1}, 2)}, 1);
    return concat({rows, concat({concat({tanh(a), b * 3}, 2), concat({cos(a), b + 2}, 2)}, 1)}, 0);
  };
  result = expect_agreement("three deep", three_deep, a, b);
  EXPECT_TRUE(contains(result.fused, "7 concats assembled in place")) << result.fused;
  EXPECT_FALSE(contains(result.fused, "the rest is copied")) << result.fused;
  // b + 2: the second block of images, the bottom rows, the right columns.
  auto deep = function(three_deep, {.jit_compile = true, .on_compile_failure = Fallback::none});
  EXPECT_TRUE(contains(deep.get_compiler_ir(Stage::source, a, b), "f32[10,6,11] from [5,3,7]"))
      << deep.get_compiler_ir(Stage::source, a, b);

  auto looped = [](Tensor a, Tensor b) {
    return fori_loop(
        0, 3,
        [&b](const Tensor&, const Tensor& v) {
          const Tensor halves = concat({concat({exp(v) * 0.5, b}, 2), concat({v - 1, b * 0.25}, 2)}, 1);
          return slice(halves, {.stop = {5, 3, 7}}) + slice(halves, {.start = {0, 3, 0}, .stop = {5, 6, 7}});
        },
        a);
  };
  expect_agreement("in a loop's step", looped, a, b);

  // The inner concat is returned, or copies a parameter: it keeps its buffer, and the outer copies it.
  auto returned = [](Tensor a, Tensor b) {
    const Tensor top = concat({exp(a), b * 2}, 2);
    return std::vector<Tensor>{concat({top, concat({sin(a), b - 1}, 2)}, 1), top};
  };
  result = expect_agreement("an inner concat returned", returned, a, b);
  EXPECT_TRUE(contains(result.fused, "the rest is copied")) << result.fused;
  auto with_a_parameter = [](Tensor a, Tensor b) { return concat({concat({exp(a), b}, 2), concat({a, b}, 2)}, 1); };
  result = expect_agreement("inner concats copying parameters", with_a_parameter, a, b);
  EXPECT_FALSE(contains(result.fused, "it has no buffer of its own")) << result.fused;
}

// Branches of products side by side (an Inception block's, a DenseNet's growth): each GEMM's epilogue stores its
// rows where the concat has them; the products themselves, which sgemm writes in C's layout, are copied.
TEST(ConcatInPlace, GemmEpiloguesWriteWhereTheConcatHasThem) {
  const Tensor x = random_tensor(DType::f32, {37, 24}, 16), w1 = random_tensor(DType::f32, {24, 20}, 17);
  const Tensor w2 = random_tensor(DType::f32, {24, 12}, 18), bias = random_tensor(DType::f32, {20}, 19);
  auto branches = [](Tensor x, Tensor w1, Tensor w2, Tensor bias) {
    return concat({nn::relu(matmul(x, w1) + bias), tanh(matmul(x, w2))}, 1);
  };
  auto result = expect_agreement("two epilogues", branches, x, w1, w2, bias);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_TRUE(contains(result.fused, "nothing is left to copy")) << result.fused;
  auto products = [](Tensor x, Tensor w1, Tensor w2) { return concat({matmul(x, w1), tanh(matmul(x, w2))}, 1); };
  result = expect_agreement("a product beside an epilogue", products, x, w1, w2);
  EXPECT_TRUE(contains(result.fused, "the rest is copied")) << result.fused;
}

TEST(ConcatInPlace, OperandsThatCannotBeWrittenThereAreCopied) {
  const Tensor a = random_tensor(DType::f32, {8, 5}, 4), b = random_tensor(DType::f32, {8, 3}, 5);
  // A value also returned, one read by another kernel from memory (a scan's standard kernel), and one given twice:
  // none is placed.
  auto unplaced = [](Tensor a, Tensor b) {
    const Tensor shifted = a - 1, exponential = exp(b), squared = b * b;
    return std::vector<Tensor>{concat({shifted, exponential, squared, squared}, 1), shifted, cumsum(exponential, 1)};
  };
  auto result = expect_agreement("operands that stay where they are", unplaced, a, b);
  EXPECT_FALSE(contains(result.fused, "assembled in place")) << result.fused;
  // A parameter beside a computed operand: the concat copies the parameter after the other is written in place.
  auto beside_a_parameter = [](Tensor a, Tensor b) { return concat({a, b * 2, a}, 1); };
  result = expect_agreement("a parameter beside a computed operand", beside_a_parameter, a, b);
  EXPECT_TRUE(contains(result.fused, "written into it by the kernels that compute them; the rest is copied"))
      << result.fused;
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
}

TEST(ConcatInPlace, AConcatReadByLaterKernelsAndReturnedThroughAView) {
  const Tensor a = random_tensor(DType::f32, {6, 4, 5}, 6), b = random_tensor(DType::f32, {6, 2, 5}, 7);
  auto body = [](Tensor a, Tensor b) {
    const Tensor joined = concat({a * 0.5, exp(b)}, 1);  // the middle axis: blocks of 4 and 2 rows of 5
    return std::vector<Tensor>{reshape(joined, {6, 30}), relu(joined) + 1, reduce_max(joined, {1})};
  };
  const auto result = expect_agreement("a middle-axis concat read afterwards", body, a, b);
  EXPECT_TRUE(contains(result.fused, "nothing is left to copy")) << result.fused;
}

TEST(ConcatInPlace, EveryDtypeAndEmptyOperands) {
  for (DType dtype : {DType::f64, DType::i32, DType::i64, DType::boolean}) {
    const Tensor a = random_tensor(dtype, {9, 4}, 8), b = random_tensor(dtype, {9, 7}, 9);
    const Tensor empty = random_tensor(dtype, {9, 0}, 10);
    auto body = [](Tensor a, Tensor b, Tensor empty) {
      if (a.dtype() == DType::boolean) return concat({logical_not(a), empty, logical_and(b, b)}, 1);
      return concat({a * 3, empty, maximum(b, b * 2)}, 1);
    };
    const auto result = expect_agreement("concat of " + std::string(to_string(dtype)), body, a, b, empty);
    EXPECT_TRUE(contains(result.fused, "assembled in place")) << result.fused;
  }
}

// kiln-fuzz (seed 240, graphs 58 and 846): an operand one element wide along the concat axis ([3, 1] into [3, 2])
// has its kernel's inner loop on the axis before, whose elements lie a row of the result apart; they were stored
// side by side, over the other operand's elements.
TEST(ConcatInPlace, OperandsOneElementWide) {
  const Tensor a = random_tensor(DType::i64, {3, 1}, 11), b = random_tensor(DType::f32, {40, 1}, 12);
  const Tensor flags = random_tensor(DType::boolean, {2, 1}, 13);
  expect_agreement(
      "i64 columns",
      [](Tensor a) {
        return concat({a * 494, a + 500}, 1);
      },
      a);
  expect_agreement(
      "f32 columns",
      [](Tensor b) {
        return concat({b * 2, exp(b), b}, 1);
      },
      b);
  expect_agreement(
      "bool columns",
      [](Tensor flags) {
        return concat({flags, logical_not(flags)}, 1);
      },
      flags);
}

// Elementwise ops of a concat run in one loop kernel that reads the concat piecewise (compiler/concat_pieces.cpp):
// its space runs as boxes, each reading one operand, and the concat is never written.
TEST(ConcatPieces, ElementwiseOpsAfterAConcatReadItPiecewise) {
  const Tensor a = random_tensor(DType::f32, {300, 130}, 14), b = random_tensor(DType::f32, {300, 101}, 15);
  const Tensor row = random_tensor(DType::f32, {231}, 16), column = random_tensor(DType::f32, {300, 1}, 17);
  auto activation = [](Tensor a, Tensor b, Tensor row, Tensor column) {
    return relu(concat({a, b}, 1)) * row + column;
  };
  auto result = expect_agreement("relu(concat(a, b)) * row + column", activation, a, b, row, column);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(contains(result.fused, "run as 2 boxes")) << result.fused;
  // A comparison and a cast change the dtype on the way; along axis 0 with the operands computed in their boxes.
  auto flags = [](Tensor a) {
    const Tensor stacked = concat({exp(a), a * 2, a}, 0);
    return cast(stacked > 0.5, DType::i32) * 3;
  };
  result = expect_agreement("cast(concat(...) > 0.5) * 3", flags, a);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(contains(result.fused, "run as 3 boxes")) << result.fused;
  // The rotation of rotary position embeddings: q * cos + concat(-x2, x1) * sin over [batch, tokens, heads, 128].
  const Tensor q = random_tensor(DType::f32, {2, 64, 4, 128}, 18);
  const Tensor cosine = random_tensor(DType::f32, {64, 1, 128}, 19), sine = random_tensor(DType::f32, {64, 1, 128}, 20);
  auto rotary = [](Tensor q, Tensor cosine, Tensor sine) {
    const Tensor x1 = slice(q, {.start = {0, 0, 0, 0}, .stop = {2, 64, 4, 64}});
    const Tensor x2 = slice(q, {.start = {0, 0, 0, 64}, .stop = {2, 64, 4, 128}});
    return q * cosine + concat({-x2, x1}, 3) * sine;
  };
  result = expect_agreement("rotary embedding", rotary, q, cosine, sine);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(contains(result.fused, "piecewise")) << result.fused;
}

// Reads that are not plain: a reversed concat, a concat broadcast over a larger space, a transposed one, concats
// of concats, operands that are empty or one element wide, and a concat read by two kernels.
TEST(ConcatPieces, ReversedBroadcastTransposedAndNestedReads) {
  const Tensor a = random_tensor(DType::f32, {37, 5}, 31), b = random_tensor(DType::f32, {37, 11}, 32);
  const Tensor c = random_tensor(DType::f32, {37, 1}, 33), wide = random_tensor(DType::f32, {9, 37, 17}, 34);
  const Tensor empty = random_tensor(DType::f32, {37, 0}, 35);
  auto reversed = [](Tensor a, Tensor b, Tensor c) {
    return exp(flip(concat({a, b, c}, 1), {1})) - concat({c, b, a}, 1);
  };
  auto result = expect_agreement("flip(concat) - concat", reversed, a, b, c);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  auto broadcast = [](Tensor a, Tensor b, Tensor c, Tensor wide) { return wide * concat({sqrt(abs(a)), b, c * 3}, 1); };
  result = expect_agreement("wide * concat", broadcast, a, b, c, wide);
  // The concat is read 9 times per element: the square root (more than a flop) is written by a kernel of its own
  // rather than recomputed 9 times, and c * 3 is recomputed.
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_TRUE(contains(result.fused, "recomputed 9 times")) << result.fused;
  EXPECT_TRUE(contains(result.fused, "piecewise")) << result.fused;
  auto transposed = [](Tensor a, Tensor b, Tensor c) { return transpose(concat({a * 2, b, c}, 1), {1, 0}) + 1; };
  expect_agreement("transpose(concat)", transposed, a, b, c);
  auto nested = [](Tensor a, Tensor b, Tensor c, Tensor empty) {
    return tanh(concat({concat({a, empty, c}, 1), b, concat({c, c}, 1)}, 1));
  };
  result = expect_agreement("concat of concats", nested, a, b, c, empty);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  auto two_readers = [](Tensor a, Tensor b) {
    const Tensor joined = concat({a, b}, 1);
    return std::vector<Tensor>{exp(joined), reduce_sum(joined * joined, {0})};
  };
  expect_agreement("a concat read by a loop kernel and a column reduction", two_readers, a, b);
  const Tensor scalar_rows = random_tensor(DType::f32, {1, 3}, 36), more_rows = random_tensor(DType::f32, {2, 3}, 37);
  auto rows = [](Tensor x, Tensor y) { return concat({x, y, x}, 0) * 2 - 1; };
  expect_agreement("rows", rows, scalar_rows, more_rows);
}

TEST(ConcatPieces, EveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const Tensor a = random_tensor(dtype, {256, 200}, 21), b = random_tensor(dtype, {256, 56}, 22);
    auto body = [](Tensor a, Tensor b) { return maximum(concat({a, b}, 1), concat({b, a}, 1)) - 1; };
    const auto result = expect_agreement("concat of " + std::string(to_string(dtype)), body, a, b);
    EXPECT_TRUE(contains(result.fused, "run as 3 boxes")) << result.fused;
  }
}

}  // namespace
}  // namespace kiln
