// Padding read in place (compiler/fusion.h: padding read in place): a loop kernel that reads a padded value reads the value under
// the padding where it lies and the padding's constant elsewhere, so pad() is never written out. Padding along a
// row axis is checked per row, along the inner axis lane by lane (the windows of a 1-channel image, a padded last
// axis, a transposed padded value). Each case runs through the standard executor, the JIT and the float64
// reference, counts the kernels and reads the fusion decisions.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool reads_in_place(const std::string& fused) {
  return fused.find(") in place: the constant where its index map falls on the padding") != std::string::npos;
}

nn::Pool2dOptions pool(std::int64_t window, std::int64_t stride) {
  return {
      .window = {window, window}, .strides = std::array<std::int64_t, 2>{stride, stride}, .padding = nn::Padding::same};
}

// Max and average pooling and a depthwise convolution with SAME padding: one loop kernel each, whatever side the
// padding falls on (stride 2 pads after only, stride 1 both sides), on channels of a vector and more, on one
// channel (the image's width is then the inner axis: its padding is checked lane by lane) and on odd sizes.
TEST(PaddingInPlace, PoolsAndDepthwiseConvolutionsAreOneKernel) {
  for (const Shape& shape : {Shape({2, 9, 11, 19}), Shape({2, 13, 10, 1}), Shape({1, 6, 40, 3})}) {
    const Tensor images = random_tensor(DType::f32, shape, 1);
    const Tensor filters = random_tensor(DType::f32, {3, 3, 1, shape[3]}, 2);
    for (const std::int64_t stride : {1, 2}) {
      const std::string label = shape.to_string() + " stride " + std::to_string(stride);
      auto max_pool = [stride](Tensor x) { return nn::max_pool2d(x, pool(3, stride)); };
      auto average_pool = [stride](Tensor x) { return nn::avg_pool2d(x, pool(3, stride)); };
      auto depthwise = [stride](Tensor x, Tensor w) {
        return nn::conv2d(x, w, {.strides = {stride, stride}, .padding = nn::Padding::same});
      };
      // With one channel the depthwise convolution is an ordinary one: its GEMM gathers the windows instead.
      const bool ordinary = shape[3] == 1;
      for (const auto& [result, in_place] :
           {std::pair{expect_agreement("max_pool2d " + label, max_pool, images), true},
            {expect_agreement("avg_pool2d " + label, average_pool, images), true},
            {expect_agreement("depthwise " + label, depthwise, images, filters), !ordinary}}) {
        EXPECT_EQ(result.jit.kernels_per_call, 1) << label << "\n" << result.fused;
        EXPECT_EQ(reads_in_place(result.fused), in_place) << label << "\n" << result.fused;
      }
    }
  }
}

// The last axis padded: rows read a window of the source and the constant around it, including rows wholly on
// the padding of another axis, a strided and a reversed slice of the padded value, and rows long enough to be cut
// into chunks.
TEST(PaddingInPlace, AlongTheInnerAxis) {
  for (const Shape& shape : {Shape({5, 13}), Shape({3, 40000}), Shape({7})}) {
    const Tensor x = random_tensor(DType::f32, shape, 3);
    const bool matrix = shape.rank() == 2;
    auto body = [matrix](Tensor x) {
      const Tensor padded = matrix ? pad(x, {{2, 1}, {3, 4}}, 2.5f) : pad(x, {{3, 4}}, 2.5f);
      const std::int64_t width = padded.shape()[padded.shape().rank() - 1];
      const Tensor every_other =
          matrix ? slice(padded, {{0, 1}, {padded.shape()[0], width}, {1, 2}}) : slice(padded, {{1}, {width}, {2}});
      const Tensor reversed = matrix ? slice(padded, {{0, width - 1}, {padded.shape()[0], -width - 1}, {1, -1}})
                                     : slice(padded, {{width - 1}, {-width - 1}, {-1}});
      return std::vector<Tensor>{exp(padded) * 0.5f, every_other + 1.0f, reversed - padded};
    };
    const testing::DifferentialResult result = expect_agreement("pad " + shape.to_string(), body, x);
    EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;
  }
}

// A padded axis merged with the axes after it into one row axis or into the inner loop (its coordinate is theirs
// divided by the sizes after it): a padded middle axis of a dense 3-D value, and one of a 4-D value whose last
// axis stays apart (a broadcast along it keeps the axes before it from merging with it).
TEST(PaddingInPlace, MergedWithTheAxesAfterIt) {
  const Tensor x = random_tensor(DType::f32, {3, 5, 6}, 14), y = random_tensor(DType::f32, {3, 8, 6}, 15);
  auto inner = [](Tensor x, Tensor y) { return pad(x, {{0, 0}, {2, 1}, {0, 0}}, -3.0f) * 2.0f + y; };
  const testing::DifferentialResult merged_inner = expect_agreement("merged into the inner loop", inner, x, y);
  EXPECT_EQ(merged_inner.jit.kernels_per_call, 1) << merged_inner.fused;
  EXPECT_TRUE(reads_in_place(merged_inner.fused)) << merged_inner.fused;
  const Tensor w = random_tensor(DType::f32, {4, 5, 6, 7}, 16), v = random_tensor(DType::f32, {7}, 17);
  auto row = [](Tensor w, Tensor v) { return pad(w, {{0, 0}, {1, 2}, {0, 0}, {0, 0}}, 0.25f) + v; };
  const testing::DifferentialResult merged_row = expect_agreement("merged into a row axis", row, w, v);
  EXPECT_EQ(merged_row.jit.kernels_per_call, 1) << merged_row.fused;
  EXPECT_TRUE(reads_in_place(merged_row.fused)) << merged_row.fused;
}

// Rows wholly inside the padded value or wholly on its padding (bounds along row axes only: the broadcast of v
// keeps the padded axis from merging with the next): a row on the padding reads a row of the constant that the
// module holds, one per type, constant and length, instead of testing a condition at each load; a row longer than
// 32 KiB keeps the condition. Both against the standard executor, an f32 and an i32 constant.
TEST(PaddingInPlace, RowsOnThePaddingReadARowOfTheConstant) {
  for (const auto& [dtype, width] :
       {std::pair{DType::f32, std::int64_t{100}}, {DType::f32, std::int64_t{9000}}, {DType::i32, std::int64_t{37}}}) {
    const Tensor x = random_tensor(dtype, {4, width}, 20), v = random_tensor(dtype, {width}, 21);
    auto body = [](Tensor x, Tensor v) { return pad(x, {{2, 1}, {0, 0}}, 3) * 2 + v; };
    const std::string label = std::string(to_string(dtype)) + " rows of " + std::to_string(width);
    const testing::DifferentialResult result = expect_agreement(label, body, x, v);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << label << "\n" << result.fused;
    EXPECT_TRUE(reads_in_place(result.fused)) << label << "\n" << result.fused;
    auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
    const std::string module = jit.get_compiler_ir(Stage::source, x, v);
    const std::size_t kernel = module.find("void kernel_0_items");
    ASSERT_NE(kernel, std::string::npos) << module;
    const std::string source = module.substr(kernel);  // the kernel, not the prelude
    const std::string row =
        std::string("constant_row<") + (dtype == DType::f32 ? "float" : "int32_t") + ", " + std::to_string(width) + ">";
    const bool fits = width * 4 <= 32 * 1024;
    EXPECT_EQ(source.find(row) != std::string::npos, fits) << label << "\n" << source;
    EXPECT_EQ(source.find("? load<") != std::string::npos, !fits) << label << "\n" << source;
  }
}

// Rows one image position long (the filters, or the stride, keep the width from merging with the channels) whose
// last row axis is padded walk that axis in a loop within the row (d0), with the bounds along it checked per step:
// a depthwise convolution, a strided max pool and an average pool, padding on both sides (stride 1) and after only
// (stride 2), a row of the constant that fits and one that does not (300 x 32 floats).
TEST(PaddingInPlace, ShortRowsWalkTheirPaddedLastRowAxisInALoop) {
  for (const auto& [shape, stride] : {std::pair{Shape({2, 40, 9, 19}), std::int64_t{1}},
                                      {Shape({3, 50, 7, 17}), std::int64_t{2}},
                                      {Shape({1, 70, 300, 32}), std::int64_t{1}}}) {
    const Tensor images = random_tensor(DType::f32, shape, 30),
                 filters = random_tensor(DType::f32, {3, 3, 1, shape[3]}, 31);
    const std::string label = shape.to_string() + " stride " + std::to_string(stride);
    auto depthwise = [stride](Tensor x, Tensor w) {
      return nn::relu(nn::conv2d(x, w, {.strides = {stride, stride}, .padding = nn::Padding::same}) + 0.5f);
    };
    auto max_pool = [stride](Tensor x) { return nn::max_pool2d(x, pool(3, stride)); };
    auto average_pool = [stride](Tensor x) { return nn::avg_pool2d(x, pool(3, stride)); };
    auto loops_within_rows = [](const std::string& module) {
      return module.find("for (int64_t d0 = 0;", module.find("void kernel_0_items")) != std::string::npos;
    };
    const testing::DifferentialResult convolved = expect_agreement("depthwise " + label, depthwise, images, filters);
    EXPECT_EQ(convolved.jit.kernels_per_call, 1) << label << "\n" << convolved.fused;
    auto jit = [](auto body) { return function(body, {.jit_compile = true, .on_compile_failure = Fallback::none}); };
    EXPECT_TRUE(loops_within_rows(jit(depthwise).get_compiler_ir(Stage::source, images, filters))) << label;
    const testing::DifferentialResult pooled = expect_agreement("max_pool2d " + label, max_pool, images);
    EXPECT_EQ(pooled.jit.kernels_per_call, 1) << label << "\n" << pooled.fused;
    // With stride 1 a max pool's rows are whole image rows already: the width merges with the channels.
    EXPECT_EQ(loops_within_rows(jit(max_pool).get_compiler_ir(Stage::source, images)), stride == 2) << label;
    // The average's window sizes vary across the loop's steps, not along the channels: computed once per step,
    // before the inner loop.
    expect_agreement("avg_pool2d " + label, average_pool, images);
    const std::string averaged = jit(average_pool).get_compiler_ir(Stage::source, images);
    ASSERT_TRUE(loops_within_rows(averaged)) << label;
    const std::size_t step_begins = averaged.find("for (int64_t d0 = 0;", averaged.find("void kernel_0_items"));
    EXPECT_NE(averaged.substr(step_begins, averaged.find("auto step", step_begins) - step_begins).find("const vec<"),
              std::string::npos)
        << label << "\n"
        << averaged.substr(step_begins);
  }
}

// A padded value read transposed (its padded axis the kernel's inner one, elements far apart), broadcast, and
// padded on a computed value: the value under the padding comes from another kernel.
TEST(PaddingInPlace, TransposedBroadcastAndComputedSources) {
  const Tensor x = random_tensor(DType::f32, {6, 5}, 4), y = random_tensor(DType::f32, {5, 9}, 5);
  auto transposed = [](Tensor x, Tensor y) { return transpose(pad(x, {{1, 2}, {0, 0}}, -1.0f)) * y; };
  const testing::DifferentialResult read_transposed = expect_agreement("transposed", transposed, x, y);
  EXPECT_EQ(read_transposed.jit.kernels_per_call, 1) << read_transposed.fused;
  EXPECT_TRUE(reads_in_place(read_transposed.fused)) << read_transposed.fused;

  // Large enough for the kernel to read y^T through transposed strips, a block of columns at a time: the padded
  // load stays a load of its own (elements 70 floats apart), its window along the columns.
  const Tensor tall = random_tensor(DType::f32, {64, 40}, 18), wide = random_tensor(DType::f32, {70, 40}, 19);
  auto strips = [](Tensor x, Tensor y) { return transpose(pad(x, {{4, 2}, {0, 0}}, 1.5f)) - transpose(y); };
  const testing::DifferentialResult read_in_strips = expect_agreement("transposed, in strips", strips, tall, wide);
  EXPECT_EQ(read_in_strips.jit.kernels_per_call, 1) << read_in_strips.fused;
  EXPECT_TRUE(reads_in_place(read_in_strips.fused)) << read_in_strips.fused;

  const Tensor column = random_tensor(DType::f32, {4, 1, 3}, 6), rows = random_tensor(DType::f32, {4, 7, 5}, 7);
  auto broadcast = [](Tensor column, Tensor rows) { return pad(column, {{0, 0}, {0, 0}, {1, 1}}, 0.0f) + rows; };
  const testing::DifferentialResult read_broadcast = expect_agreement("broadcast", broadcast, column, rows);
  EXPECT_EQ(read_broadcast.jit.kernels_per_call, 1) << read_broadcast.fused;

  const Tensor images = random_tensor(DType::f32, {2, 7, 8, 16}, 8);
  auto computed = [](Tensor x) { return nn::max_pool2d(relu(x * 2.0f) - x, pool(3, 2)); };
  const testing::DifferentialResult read_computed = expect_agreement("computed", computed, images);
  EXPECT_EQ(read_computed.jit.kernels_per_call, 2) << read_computed.fused;
  EXPECT_TRUE(reads_in_place(read_computed.fused)) << read_computed.fused;
}

// Integers and booleans, NaN and -0 as the padding, padding of an empty tensor (every element is padding), and a
// padding with two constants that differ (not pad()'s form: written out as before).
TEST(PaddingInPlace, DTypesSpecialConstantsAndEmptySources) {
  const Tensor integers = random_tensor(DType::i32, {3, 4, 5}, 9), longs = random_tensor(DType::i64, {3, 4, 5}, 10);
  auto integer_body = [](Tensor x) { return pad(x, {{1, 0}, {0, 2}, {0, 0}}, -7) * 3; };
  EXPECT_TRUE(reads_in_place(expect_agreement("i32", integer_body, integers).fused));
  EXPECT_TRUE(reads_in_place(expect_agreement("i64", integer_body, longs).fused));
  const Tensor wide = random_tensor(DType::f32, {4, 6}, 11);
  auto booleans = [](Tensor x) {
    return std::vector<Tensor>{
        logical_and(pad(gt(x, 0.0f), {{1, 1}, {0, 0}}, true), gt(pad(x, {{1, 1}, {0, 0}}, 1.0f), -0.5f)),
        logical_or(pad(gt(x, 0.0f), {{0, 0}, {2, 1}}, true), pad(gt(x, 1.0f), {{0, 0}, {1, 2}}, false))};
  };
  EXPECT_TRUE(reads_in_place(expect_agreement("bool", booleans, wide).fused));
  for (const float value : {std::numeric_limits<float>::quiet_NaN(), -0.0f}) {
    auto special = [value](Tensor x) { return pad(x, {{1, 1}, {2, 0}}, value) * -1.0f; };
    EXPECT_TRUE(reads_in_place(expect_agreement("pad with " + std::to_string(value), special, wide).fused));
  }
  const Tensor empty = random_tensor(DType::f32, {0, 3}, 12);
  auto all_padding = [](Tensor x) { return pad(x, {{2, 1}, {0, 0}}, 4.0f) + 1.0f; };
  expect_agreement("empty source", all_padding, empty);
  auto two_constants = [](Tensor x) {
    const Shape& shape = x.shape();
    return concat({full({1, shape[1]}, 1.0f), x, full({2, shape[1]}, 2.0f)}, 0) * 2.0f;
  };
  EXPECT_FALSE(reads_in_place(expect_agreement("two constants", two_constants, wide).fused));
}

// The padded value stays in memory where it is needed there: returned, read by a reduction kernel, or reshaped
// (they read it from memory); written anyway, it is read back by the loop kernels beside them too, as a value
// written for one kernel is read by the others rather than recomputed.
TEST(PaddingInPlace, ThePaddedValueStaysWhereItIsNeeded) {
  const Tensor x = random_tensor(DType::f32, {6, 8, 16}, 13);
  auto returned = [](Tensor x) {
    const Tensor padded = pad(x, {{1, 1}, {0, 0}, {0, 0}}, 0.5f);
    return std::vector<Tensor>{padded, sin(padded)};
  };
  const testing::DifferentialResult result = expect_agreement("returned", returned, x);
  EXPECT_FALSE(reads_in_place(result.fused)) << result.fused;
  auto reshaped = [](Tensor x) { return reshape(pad(x, {{1, 1}, {0, 0}, {0, 0}}, 2.0f), {-1}) * 2.0f; };
  const testing::DifferentialResult read_reshaped = expect_agreement("reshaped", reshaped, x);
  EXPECT_FALSE(reads_in_place(read_reshaped.fused)) << read_reshaped.fused;
  auto reduced = [](Tensor x) {
    const Tensor padded = pad(x, {{0, 0}, {2, 2}, {0, 0}}, 0.5f);
    return std::vector<Tensor>{reduce_sum(padded, {2}), padded * 3.0f};
  };
  expect_agreement("reduced", reduced, x);
}

// A GEMM's epilogue reads a padded value in place too, row by row as a loop kernel: padded along the rows and the
// columns (the epilogue sees column blocks of the product, so a bound along the columns falls inside some blocks),
// along the rows of an image flattened into the product's rows, with a 3-D product's batch axis, and a max pool's
// -inf padding under strided windows (the masks of its backward).
TEST(PaddingInPlace, GemmEpiloguesReadPaddingWhereTheValueLies) {
  const Tensor x = random_tensor(DType::f32, {37, 24}, 14), w = random_tensor(DType::f32, {24, 150}, 15);
  const Tensor y = random_tensor(DType::f32, {35, 141}, 16);
  auto both_axes = [](Tensor x, Tensor w, Tensor y) { return nn::relu(matmul(x, w) + pad(y, {{1, 1}, {6, 3}}, 0.5f)); };
  testing::DifferentialResult result = expect_agreement("rows and columns", both_axes, x, w, y);
  EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  // The epilogue's full reduction folds the padding's constant where the columns fall on it.
  auto reduced = [](Tensor x, Tensor w, Tensor y) { return reduce_sum(matmul(x, w) * pad(y, {{1, 1}, {6, 3}}, 0.5f)); };
  result = expect_agreement("a full reduction of the epilogue", reduced, x, w, y);
  EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;

  const Tensor images = random_tensor(DType::f32, {2, 7, 9, 16}, 17), filters = random_tensor(DType::f32, {16, 24}, 18);
  const Tensor residual = random_tensor(DType::f32, {2, 6, 7, 24}, 19);
  auto image_rows = [](Tensor images, Tensor filters, Tensor residual) {
    return matmul(images, filters) * pad(residual, {{0, 0}, {1, 0}, {0, 2}, {0, 0}}, -1.0f);
  };
  result = expect_agreement("image rows", image_rows, images, filters, residual);
  EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;

  const Tensor pooled_input = random_tensor(DType::f32, {2, 9, 11, 24}, 20);
  auto strided_windows = [](Tensor images, Tensor filters, Tensor pooled_input) {
    const Tensor padded = pad(pooled_input, {{0, 0}, {0, 1}, {1, 1}, {0, 0}}, -std::numeric_limits<float>::infinity());
    const Tensor window = slice(padded, {.start = {0, 0, 0, 0}, .stop = {2, 10, 12, 24}, .step = {1, 2, 2, 1}});
    const Tensor shifted = slice(padded, {.start = {0, 1, 2, 0}, .stop = {2, 10, 13, 24}, .step = {1, 2, 2, 1}});
    const Tensor product = matmul(slice(images, {.stop = {2, 5, 6, 16}}), filters);
    return std::vector<Tensor>{product * maximum(window, shifted), window + shifted};
  };
  result = expect_agreement("strided windows of a -inf padding", strided_windows, images, filters, pooled_input);
  EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;
}

// Column kernels (a reduction over axes before the kept last one) read a padded value in place too: padded along
// the reduced axes and the kept one, few rows and many (the passes split among threads), with elementwise ops
// before the sum, a depthwise convolution's filter gradient (the windows of the padded input times the
// cotangent, summed over the positions), and a maximum over a -inf padding.
TEST(PaddingInPlace, ColumnKernelsReadPaddingWhereTheValueLies) {
  for (const Shape& shape : {Shape{3, 5, 7, 20}, Shape{4, 61, 33, 9}, Shape{1, 2, 3, 40}}) {
    const Tensor x = random_tensor(DType::f32, shape, 21);
    auto sums = [](Tensor x) {
      const Tensor padded = pad(x, {{0, 0}, {1, 2}, {2, 1}, {0, 3}}, 0.25f);
      return std::vector<Tensor>{reduce_sum(exp(padded * 0.5f), {0, 1, 2}),
                                 reduce_max(pad(x, {{0, 0}, {1, 1}, {1, 1}, {0, 0}}, -1e30f), {0, 1})};
    };
    const testing::DifferentialResult result = expect_agreement("column sums " + shape.to_string(), sums, x);
    EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;
  }
  const Tensor images = random_tensor(DType::f32, {4, 23, 19, 24}, 22),
               cotangent = random_tensor(DType::f32, {4, 23, 19, 24}, 23);
  auto filter_gradient = [](Tensor images, Tensor cotangent) {
    const Tensor padded = pad(images, {{0, 0}, {1, 1}, {1, 1}, {0, 0}});
    std::vector<Tensor> taps;
    for (std::int64_t row = 0; row < 3; ++row)
      for (std::int64_t column = 0; column < 3; ++column)
        taps.push_back(reduce_sum(
            slice(padded, {.start = {0, row, column, 0}, .stop = {4, row + 23, column + 19, 24}}) * cotangent,
            {0, 1, 2}));
    return stack(taps, 0);
  };
  const testing::DifferentialResult result =
      expect_agreement("a depthwise filter gradient", filter_gradient, images, cotangent);
  EXPECT_TRUE(reads_in_place(result.fused)) << result.fused;
}

}  // namespace
}  // namespace kiln
