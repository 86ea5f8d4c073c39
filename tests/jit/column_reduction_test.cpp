// Column kernels (fusion.h: a reduction whose reduced axes are a run before the kept last axis): a reduction over
// the axes before the last, with the producers of its input, as one kernel that walks the reduced rows a block of
// columns at a time. Each case runs through the standard executor, the JIT and the float64 reference.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool has_column_kernel(const testing::DifferentialResult& result) {
  return result.fused.find("(column over ") != std::string::npos;
}

TEST(ColumnReduction, EveryReductionOfAComputedValueOverTheLeadingAxis) {
  // 300 columns: four blocks of 64 and a partial one, whose last vector is partial too.
  const Tensor x = random_tensor(DType::f32, {257, 300}, 1);
  auto sums = [](Tensor x) {
    return std::vector<Tensor>{reduce_sum(exp(x * 0.5), {0}), reduce_mean(tanh(x), {0}, true), reduce_max(x * x, {0}),
                               reduce_min(sin(x), {0}, true), reduce_prod(1.0 + x * 0.01, {0})};
  };
  const auto result = expect_agreement("reductions over axis 0", sums, x);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;  // siblings over one nest: one pass for all five
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
}

TEST(ColumnReduction, MiddleAxesOuterAxesAndTheirCoordinates) {
  // A mean over the tokens of [batch, tokens, width] (sentence embeddings), with an operand broadcast along the
  // batch axis and one along the tokens: the outer coordinates and the middle loops address them.
  auto pool = [](Tensor x, Tensor positions, Tensor scale) { return reduce_mean(relu(x + positions) * scale, {1}); };
  auto result = expect_agreement("mean pool", pool, random_tensor(DType::f32, {5, 33, 70}, 2),
                                 random_tensor(DType::f32, {33, 70}, 3), random_tensor(DType::f32, {5, 1, 1}, 4));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  // Two reduced axes in the middle of rank 4, and two outer axes.
  auto middle = [](Tensor x) { return reduce_sum(square(x) - 1.0, {1, 2}, true); };
  result = expect_agreement("rank 4", middle, random_tensor(DType::f32, {3, 4, 5, 17}, 5));
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
}

TEST(ColumnReduction, TheInputStillWrittenWhereSomethingElseReadsIt) {
  // exp(x) summed over axis 0 and also returned: the column kernel writes it as it sums it.
  auto summed_and_returned = [](Tensor x) {
    const Tensor exponentials = exp(x * 0.5);
    return std::make_tuple(exponentials, reduce_sum(exponentials, {0}));
  };
  auto result =
      expect_agreement("exp written and summed", summed_and_returned, random_tensor(DType::f32, {129, 40}, 6));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
}

// Reductions over the first axis whose results the kernel reads again are passes of one column kernel: softmax
// over axis 0 (the maximum, then the sum of exp(x - max), then the quotient), named and spelled by hand, in
// one kernel; a batch norm's two statistics in one kernel with the scale they give, stored per column for the
// normalizing loop kernel.
TEST(ColumnReduction, ResultsReadAgainAreLaterPassesOfOneKernel) {
  for (const Shape& shape : {Shape({129, 40}), Shape({7, 1000}), Shape({3, 17, 5}), Shape({2, 16})}) {
    auto softmax_columns = [](Tensor x) { return nn::softmax(x, -2); };
    auto result = expect_agreement("softmax over the axis before the last of " + shape.to_string(), softmax_columns,
                                   random_tensor(DType::f32, shape, 6));
    EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  }
  auto by_hand = [](Tensor x) {
    const Tensor exponentials = exp(x - reduce_max(x, {0}));
    return exponentials / reduce_sum(exponentials, {0});
  };
  auto result = expect_agreement("softmax axis 0 by hand", by_hand, random_tensor(DType::f64, {65, 33}, 7));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  // A batch norm: (x - mean) / sqrt(variance + eps), statistics over the batch.
  auto batch_norm = [](Tensor x, Tensor gamma) {
    const Tensor centered = x - reduce_mean(x, {0}, true);
    return centered * rsqrt(reduce_mean(square(centered), {0}, true) + 1e-5) * gamma;
  };
  result = expect_agreement("batch norm", batch_norm, random_tensor(DType::f32, {64, 48}, 7),
                            random_tensor(DType::f32, {48}, 8));
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  // The statistics returned per column too, and a value per column computed from them.
  auto statistics = [](Tensor x) {
    const Tensor mean = reduce_mean(x, {0});
    const Tensor deviation = sqrt(reduce_mean(square(x - mean), {0}) + 1e-3);
    return std::make_tuple(mean, deviation, deviation * 2.0 - mean);
  };
  result = expect_agreement("statistics", statistics, random_tensor(DType::f32, {300, 70}, 9));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

// A bias's gradient and its update, as a training step has them: the gradient is an element output that reads no
// pass's results, stored by the pass that sums it (no last pass reading the inputs again); beside it, an element
// output that reads the column mean is stored after the passes.
TEST(ColumnReduction, ElementOutputsThatReadNoResultsAreStoredByTheFirstPass) {
  auto update = [](Tensor x, Tensor dy, Tensor bias) {
    const Tensor gradient = where(x > 0.0, dy, 0.0) * x;
    const Tensor sum = reduce_sum(gradient, {0});
    return std::make_tuple(gradient, bias - 0.01 * sum / (sqrt(square(sum)) + 1e-3));
  };
  auto centered_too = [](Tensor x, Tensor dy, Tensor bias) {
    const Tensor gradient = where(x > 0.0, dy, 0.0) * x;
    const Tensor mean = reduce_mean(gradient, {0});
    return std::make_tuple(gradient, gradient - mean, bias - 0.01 * mean / (sqrt(square(mean)) + 1e-3));
  };
  for (const Shape& shape : {Shape({37, 45}), Shape({1030, 130}), Shape({2, 33}), Shape({0, 6})}) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      const Shape columns({shape[shape.rank() - 1]});
      const Tensor x = random_tensor(dtype, shape, 41), dy = random_tensor(dtype, shape, 42),
                   bias = random_tensor(dtype, columns, 43);
      const std::string name = shape.to_string() + " " + std::string(to_string(dtype));
      auto result = expect_agreement("bias gradient and update " + name, update, x, dy, bias);
      EXPECT_TRUE(has_column_kernel(result)) << result.fused;
      EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
      result = expect_agreement("and the centered gradient " + name, centered_too, x, dy, bias);
      EXPECT_TRUE(has_column_kernel(result)) << result.fused;
    }
  }
  const Tensor x = random_tensor(DType::f32, {300, 70}, 44), dy = random_tensor(DType::f32, {300, 70}, 45),
               bias = random_tensor(DType::f32, {70}, 46);
  const std::string source = function(update, {.jit_compile = true, .on_compile_failure = Fallback::none})
                                 .get_compiler_ir(Stage::source, x, dy, bias);
  EXPECT_NE(source.find("storing the element outputs that read no pass's results"), std::string::npos) << source;
  EXPECT_EQ(source.find("in a last pass"), std::string::npos) << source;
  const std::string both = function(centered_too, {.jit_compile = true, .on_compile_failure = Fallback::none})
                               .get_compiler_ir(Stage::source, x, dy, bias);
  EXPECT_NE(both.find("storing the element outputs that read no pass's results"), std::string::npos) << both;
  EXPECT_NE(both.find("in a last pass"), std::string::npos) << both;
}

// Where a block's reduced rows would not stay in the caches from one pass to the next (over 2 MiB at the widest
// block), the passes split the rows too: each pass a parallel loop folding blocks of rows into partial results, a
// combine per column, then the next pass. Odd sizes, partial vectors, outer axes, per-column outputs and values
// computed from them, element outputs stored by the first pass and by the last, f32 and f64.
TEST(ColumnReduction, TallColumnsSplitTheirRowsAmongTheItemsOfEachPass) {
  // Whether `body`'s generated source combines partial results of blocks of rows.
  auto split = [](auto body, auto... inputs) {
    return function(body, {.jit_compile = true, .on_compile_failure = Fallback::none})
               .get_compiler_ir(Stage::source, inputs...)
               .find("_combine(void* context") != std::string::npos;
  };
  auto softmax_first = [](Tensor x) { return nn::softmax(x, 0); };
  const Tensor tall = random_tensor(DType::f32, {1001, 1000}, 50);
  auto result = expect_agreement("softmax over 1001 rows", softmax_first, tall);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  EXPECT_TRUE(split(softmax_first, tall));
  auto log_softmax_middle = [](Tensor x) { return nn::log_softmax(x, 1); };
  const Tensor middle = random_tensor(DType::f32, {3, 700, 800}, 51);
  result = expect_agreement("log_softmax over the middle axis of [3, 700, 800]", log_softmax_middle, middle);
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  EXPECT_TRUE(split(log_softmax_middle, middle));
  auto statistics = [](Tensor x) {
    const Tensor mean = reduce_mean(x, {0});
    const Tensor deviation = sqrt(reduce_mean(square(x - mean), {0}) + 1e-3);
    return std::make_tuple(mean, deviation, deviation * 2.0 - mean, (x - mean) / deviation);
  };
  for (const DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = random_tensor(dtype, {2100, 300}, 52);
    result = expect_agreement("statistics over 2100 rows " + std::string(to_string(dtype)), statistics, x);
    EXPECT_TRUE(has_column_kernel(result)) << result.fused;
    EXPECT_TRUE(split(statistics, x));
  }
  // A training step's batch norm over [N, H, W, C] images: 40000 rows of 7 channels.
  auto batch_norm = [](Tensor x, Tensor gamma) {
    const Tensor centered = x - reduce_mean(x, {0, 1, 2}, true);
    return centered * rsqrt(reduce_mean(square(centered), {0, 1, 2}, true) + 1e-5) * gamma;
  };
  const Tensor images = random_tensor(DType::f32, {4, 100, 100, 7}, 53), gamma = random_tensor(DType::f32, {7}, 54);
  result = expect_agreement("batch norm of [4, 100, 100, 7]", batch_norm, images, gamma);
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  EXPECT_TRUE(split(batch_norm, images, gamma));
  auto centered_too = [](Tensor x, Tensor dy, Tensor bias) {
    const Tensor gradient = where(x > 0.0, dy, 0.0) * x;
    const Tensor mean = reduce_mean(gradient, {0});
    return std::make_tuple(gradient, gradient - mean, bias - 0.01 * mean / (sqrt(square(mean)) + 1e-3));
  };
  const Tensor x = random_tensor(DType::f32, {2100, 300}, 55), dy = random_tensor(DType::f32, {2100, 300}, 56),
               bias = random_tensor(DType::f32, {300}, 57);
  result = expect_agreement("a gradient stored by the first pass, centered by the last", centered_too, x, dy, bias);
  EXPECT_TRUE(split(centered_too, x, dy, bias));
  const std::string source = function(centered_too, {.jit_compile = true, .on_compile_failure = Fallback::none})
                                 .get_compiler_ir(Stage::source, x, dy, bias);
  EXPECT_NE(source.find("storing the element outputs that read no pass's results"), std::string::npos) << source;
  // Below the threshold the block's rows stay in the caches: one loop over the blocks, no combine.
  const Tensor shorter = random_tensor(DType::f32, {300, 1000}, 58);
  result = expect_agreement("softmax over 300 rows", softmax_first, shorter);
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  EXPECT_FALSE(split(softmax_first, shorter));
}

// Independent reductions over one nest share one pass over the rows, even when the user computed them apart:
// the gradients of a layer norm's scale and shift, sum(dy * xhat) and sum(dy) over the batch.
TEST(ColumnReduction, SiblingReductionsShareOnePass) {
  // Over every axis but the last ([batch, tokens, width] reduces the batch and the tokens).
  auto scale_and_shift = [](Tensor dy, Tensor normalized) {
    std::vector<std::int64_t> axes;
    for (std::int64_t axis = 0; axis + 1 < dy.rank(); ++axis) axes.push_back(axis);
    const Axes leading(axes);
    return std::make_tuple(reduce_sum(dy * normalized, leading), reduce_sum(dy, leading),
                           reduce_max(abs(dy), leading, true));
  };
  for (const Shape& shape : {Shape({256, 96}), Shape({2051, 33}), Shape({5, 9, 16})}) {
    auto result = expect_agreement("scale and shift gradients " + shape.to_string(), scale_and_shift,
                                   random_tensor(DType::f32, shape, 10), random_tensor(DType::f32, shape, 11));
    EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  }
}

TEST(ColumnReduction, IntegersDoublesAndEmptyShapes) {
  auto integer = [](Tensor x) { return std::make_tuple(reduce_sum(x * 3, {0}), reduce_max(-x, {0})); };
  auto result = expect_agreement("i32", integer, random_tensor(DType::i32, {77, 19}, 8));
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  expect_agreement("i64", integer, random_tensor(DType::i64, {9, 130}, 9));
  auto doubles = [](Tensor x) { return reduce_sum(exp(x), {0}); };
  expect_agreement("f64", doubles, random_tensor(DType::f64, {100, 65}, 10));
  // No rows to reduce (the identities: 0, and a mean of nothing), no columns, no outer index.
  auto mean = [](Tensor x) { return std::make_tuple(reduce_sum(exp(x), {0}), reduce_mean(exp(x), {1})); };
  expect_agreement("no rows", mean, random_tensor(DType::f32, {0, 0, 5}, 11));
  expect_agreement("no columns", mean, random_tensor(DType::f32, {3, 4, 0}, 12));
  expect_agreement("no outer index", mean, random_tensor(DType::f32, {3, 0, 6}, 13));
}

TEST(ColumnReduction, ALongColumnIsSummedInBlocks) {
  // 40000 positive terms per column and 16 outer indices (enough items for the threads without splitting the
  // rows): the rows still go in blocks of at most 512, their partials combined in order. (Summed one after
  // another, this size still met the reference's tolerance: 3.5e-6 expected against 1e-5; the blocks keep the
  // error's growth down for longer columns.)
  auto sums = [](Tensor x) { return std::make_tuple(reduce_sum(exp(x * 0.1), {1}), reduce_mean(exp(x * 0.1), {1})); };
  const auto result = expect_agreement("40000 rows", sums, random_tensor(DType::f32, {16, 40000, 5}, 16));
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
}

TEST(ColumnReduction, ACheapBodyWalksItsRowsInGroupsAndStreamsALargeOutput) {
  // A body without a transcendental walks 8 rows at a time; 2051 rows leave a partial last group (and 5 row
  // blocks), and the 2051 x 2048 floats of the element output (16.8 MB) go out as streaming stores.
  auto centered = [](Tensor x, Tensor shift) {
    const Tensor y = x * x - shift;
    return std::make_tuple(y, reduce_sum(y, {0}), reduce_max(y, {0}, true));
  };
  const Tensor x = random_tensor(DType::f32, {2051, 2048}, 17), shift = random_tensor(DType::f32, {2048}, 18);
  const auto result = expect_agreement("2051 x 2048", centered, x, shift);
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  auto jit = function(centered, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::string source = jit.get_compiler_ir(Stage::source, x, shift);
  EXPECT_NE(source.find("8 rows at a time"), std::string::npos) << source;
  EXPECT_NE(source.find("store_streaming<float>(row_output"), std::string::npos) << source;
  // A body with a transcendental walks one row at a time.
  const std::string exp_source = function([](Tensor x) { return reduce_sum(exp(x), {0}); }, {.jit_compile = true})
                                     .get_compiler_ir(Stage::source, x);
  EXPECT_EQ(exp_source.find("rows at a time"), std::string::npos) << exp_source;
}

TEST(ColumnReduction, LargeEnoughForEveryThreadAndEveryBlock) {
  // 1000 rows of 1000 columns: 16 blocks, a partial last one; a column's sum runs over the rows in order.
  auto sums = [](Tensor x) { return reduce_sum(sigmoid(x), {0}); };
  const auto result = expect_agreement("1000 x 1000", sums, random_tensor(DType::f32, {1000, 1000}, 14));
  EXPECT_TRUE(has_column_kernel(result)) << result.fused;
  // The same bits for one thread as for two.
  const Tensor x = random_tensor(DType::f32, {1000, 1000}, 15);
  auto jit = function(sums, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto [two, one] = testing::floats_with_two_threads_and_one([&] { return jit(x); });
  EXPECT_EQ(two, one);
}

}  // namespace
}  // namespace kiln
