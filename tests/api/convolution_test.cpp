// conv2d, conv1d, max_pool2d and avg_pool2d (NHWC): against a direct float64 evaluation of their definitions written
// here (TensorFlow's semantics: "SAME" padding with the odd element after, pooling that leaves the padding out), on
// both executors, and the executors against the reference evaluator; odd sizes, strides, dilations, explicit
// padding, groups and depthwise filters, integers, empty batches and transposed inputs; the kernels the JIT makes of
// them; and their errors, which name the op and the line and leave a compiled function usable. Batch normalization
// (nn::moments, nn::batch_norm), the layer that follows a convolution, against its definition too.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

std::vector<double> values_of(const Tensor& x) { return cast(x, DType::f64).to_vector<double>(); }

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

// One spatial axis as the definitions see it: input size, window, stride, dilation and the padding before it.
struct Axis {
  std::int64_t size, window, stride = 1, dilation = 1, before = 0, after = 0;
  std::int64_t outputs() const { return (size + before + after - (window - 1) * dilation - 1) / stride + 1; }
};

// TensorFlow's SAME padding, computed here independently of kiln.
Axis same(std::int64_t size, std::int64_t window, std::int64_t stride, std::int64_t dilation = 1) {
  const std::int64_t outputs = (size + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>((outputs - 1) * stride + (window - 1) * dilation + 1 - size, 0);
  return {size, window, stride, dilation, total / 2, total - total / 2};
}

// The definition: result[n, i, j, o] = sum over taps (a, b) and the group's channels c of
// input[n, i s + a d - before, j s + b d - before, g C' + c] filters[a, b, c, o], g = o / (O / groups).
std::vector<double> direct_conv2d(const Tensor& input, const Tensor& filters, const Axis& height, const Axis& width) {
  const std::vector<double> x = values_of(input), w = values_of(filters);
  const std::int64_t batch = input.shape()[0], channels = input.shape()[3];
  const std::int64_t group_channels = filters.shape()[2], outputs = filters.shape()[3];
  const std::int64_t per_group = outputs / (channels / group_channels);
  std::vector<double> result;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t i = 0; i < height.outputs(); ++i)
      for (std::int64_t j = 0; j < width.outputs(); ++j)
        for (std::int64_t o = 0; o < outputs; ++o) {
          double sum = 0;
          for (std::int64_t a = 0; a < height.window; ++a)
            for (std::int64_t b = 0; b < width.window; ++b) {
              const std::int64_t row = i * height.stride + a * height.dilation - height.before;
              const std::int64_t column = j * width.stride + b * width.dilation - width.before;
              if (row < 0 || row >= height.size || column < 0 || column >= width.size) continue;
              for (std::int64_t c = 0; c < group_channels; ++c) {
                const std::int64_t channel = o / per_group * group_channels + c;
                sum +=
                    x[static_cast<std::size_t>(((n * height.size + row) * width.size + column) * channels + channel)] *
                    w[static_cast<std::size_t>(((a * width.window + b) * group_channels + c) * outputs + o)];
              }
            }
          result.push_back(sum);
        }
  return result;
}

enum class Pool { max, mean };

std::vector<double> direct_pool(const Tensor& input, const Axis& height, const Axis& width, Pool pool) {
  const std::vector<double> x = values_of(input);
  const std::int64_t batch = input.shape()[0], channels = input.shape()[3];
  std::vector<double> result;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t i = 0; i < height.outputs(); ++i)
      for (std::int64_t j = 0; j < width.outputs(); ++j)
        for (std::int64_t c = 0; c < channels; ++c) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int count = 0;
          for (std::int64_t a = 0; a < height.window; ++a)
            for (std::int64_t b = 0; b < width.window; ++b) {
              const std::int64_t row = i * height.stride + a - height.before;
              const std::int64_t column = j * width.stride + b - width.before;
              if (row < 0 || row >= height.size || column < 0 || column >= width.size) continue;
              const double value =
                  x[static_cast<std::size_t>(((n * height.size + row) * width.size + column) * channels + c)];
              best = std::isnan(best) || std::isnan(value) ? std::nan("") : std::max(best, value);
              sum += value;
              ++count;
            }
          result.push_back(pool == Pool::max ? best : sum / count);
        }
  return result;
}

// `got` (standard and JIT) against the definition's values, relative to the sum of magnitudes a term could have.
template <class Body>
void expect_definition(const std::string& label, Body body, const std::vector<Tensor>& inputs,
                       const std::vector<double>& expected, const Shape& shape, double tolerance) {
  for (const bool jit : {false, true}) {
    auto compiled = function(body, {.jit_compile = jit, .on_compile_failure = Fallback::none});
    Tensor result;
    if constexpr (std::is_invocable_v<Body, Tensor>)
      result = compiled(inputs[0]);
    else
      result = compiled(inputs[0], inputs[1]);
    ASSERT_EQ(result.shape(), shape) << label;
    const std::vector<double> got = values_of(result);
    ASSERT_EQ(got.size(), expected.size()) << label;
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], tolerance * (1 + std::fabs(expected[i])))
          << label << " (" << executor(jit) << ") at element " << i;
  }
}

struct Conv2dCase {
  std::string label;
  Shape input, filters;
  nn::Conv2dOptions options;
  Axis height, width;  // the definition's view of the same geometry
};

void check_conv2d(const Conv2dCase& test, DType dtype, std::uint64_t seed) {
  const Tensor input = random_tensor(dtype, test.input, seed), filters = random_tensor(dtype, test.filters, seed + 1);
  const nn::Conv2dOptions options = test.options;
  auto body = [options](Tensor x, Tensor w) { return nn::conv2d(x, w, options); };
  const std::vector<double> expected = direct_conv2d(input, filters, test.height, test.width);
  const Shape shape({test.input[0], test.height.outputs(), test.width.outputs(), test.filters[3]});
  const std::string label = test.label + " " + std::string(to_string(dtype));
  expect_definition(label, body, {input, filters}, expected, shape, is_floating(dtype) ? 1e-4 : 0);
  expect_agreement(label, body, input, filters);
}

TEST(Convolution, Conv2dMatchesItsDefinition) {
  const std::vector<Conv2dCase> cases = {
      {"3x3 valid", {2, 7, 9, 3}, {3, 3, 3, 5}, {}, {7, 3}, {9, 3}},
      {"3x3 same, stride 2",
       {2, 7, 8, 3},
       {3, 3, 3, 4},
       {.strides = {2, 2}, .padding = nn::Padding::same},
       same(7, 3, 2),
       same(8, 3, 2)},
      {"2x4 same (odd padding after)",
       {1, 6, 7, 2},
       {2, 4, 2, 3},
       {.padding = nn::Padding::same},
       same(6, 2, 1),
       same(7, 4, 1)},
      {"dilated same",
       {1, 9, 10, 2},
       {3, 3, 2, 3},
       {.padding = nn::Padding::same, .dilations = {2, 3}},
       same(9, 3, 1, 2),
       same(10, 3, 1, 3)},
      {"explicit padding, strides (2, 3)",
       {2, 5, 8, 3},
       {3, 2, 3, 2},
       {.strides = {2, 3}, .explicit_padding = std::array<nn::PaddingPair, 2>{{{1, 2}, {0, 3}}}},
       {5, 3, 2, 1, 1, 2},
       {8, 2, 3, 1, 0, 3}},
      {"1x1, stride 2", {2, 5, 6, 4}, {1, 1, 4, 3}, {.strides = {2, 2}}, {5, 1, 2}, {6, 1, 2}},
      {"filter as large as the input", {3, 4, 5, 2}, {4, 5, 2, 3}, {}, {4, 4}, {5, 5}},
      {"depthwise", {2, 6, 7, 3}, {3, 3, 1, 3}, {.padding = nn::Padding::same}, same(6, 3, 1), same(7, 3, 1)},
      {"depthwise, 2 per channel, stride 2", {1, 7, 6, 3}, {3, 2, 1, 6}, {.strides = {2, 2}}, {7, 3, 2}, {6, 2, 2}},
      {"2 groups", {2, 6, 5, 4}, {3, 3, 2, 6}, {.padding = nn::Padding::same}, same(6, 3, 1), same(5, 3, 1)},
      {"3 groups, 1x1", {1, 4, 4, 6}, {1, 1, 2, 3}, {}, {4, 1}, {4, 1}},
      // More groups than api/convolution.cpp builds a product for each of: one batched product.
      {"20 groups", {1, 5, 6, 40}, {3, 3, 2, 20}, {.padding = nn::Padding::same}, same(5, 3, 1), same(6, 3, 1)},
      // Channels enough for the JIT's GEMM to read the taps where they lie (kernels/cpu/gemm_packing.h).
      {"3x3 same, 40 channels",
       {2, 9, 11, 40},
       {3, 3, 40, 24},
       {.padding = nn::Padding::same},
       same(9, 3, 1),
       same(11, 3, 1)},
      {"3x3 same, stride 2, 48 channels",
       {1, 9, 8, 48},
       {3, 3, 48, 20},
       {.strides = {2, 2}, .padding = nn::Padding::same},
       same(9, 3, 2),
       same(8, 3, 2)},
  };
  for (const Conv2dCase& test : cases) check_conv2d(test, DType::f32, 11);
  for (const Conv2dCase& test : {cases[1], cases[7], cases[9]}) {
    check_conv2d(test, DType::f64, 21);
    check_conv2d(test, DType::i32, 31);
  }
}

TEST(Convolution, Conv2dOfATransposedInputAndAnEmptyBatch) {
  // NCHW data viewed as NHWC.
  const Tensor planes = random_tensor(DType::f32, {2, 3, 6, 7}, 41),
               filters = random_tensor(DType::f32, {3, 3, 3, 4}, 42);
  const nn::Conv2dOptions options{.padding = nn::Padding::same};
  auto body = [options](Tensor x, Tensor w) { return nn::conv2d(transpose(x, {0, 2, 3, 1}), w, options); };
  expect_definition("transposed input", body, {planes, filters},
                    direct_conv2d(transpose(planes, {0, 2, 3, 1}), filters, same(6, 3, 1), same(7, 3, 1)),
                    Shape({2, 6, 7, 4}), 1e-4);
  expect_agreement("transposed input", body, planes, filters);

  const Tensor empty = zeros({0, 5, 5, 3});
  for (const bool jit : {false, true}) {
    auto compiled = function(
        [](Tensor x, Tensor w) {
          return nn::conv2d(x, w, {.strides = {2, 2}});
        },
        {.jit_compile = jit});
    EXPECT_EQ(compiled(empty, filters).shape(), Shape({0, 2, 2, 4}));
  }
  // An empty image with same padding has no outputs, as in TensorFlow.
  EXPECT_EQ(nn::conv2d(zeros({1, 0, 4, 3}), filters, {.padding = nn::Padding::same}).shape(), Shape({1, 0, 4, 4}));
}

TEST(Convolution, Conv1dIsAConvolutionOfOneRow) {
  const Tensor input = random_tensor(DType::f32, {3, 11, 4}, 51), filters = random_tensor(DType::f32, {3, 4, 5}, 52);
  for (const nn::Conv1dOptions& options :
       {nn::Conv1dOptions{}, nn::Conv1dOptions{.stride = 2, .padding = nn::Padding::same, .dilation = 2},
        nn::Conv1dOptions{.explicit_padding = nn::PaddingPair{2, 1}}}) {
    auto body = [options](Tensor x, Tensor w) { return nn::conv1d(x, w, options); };
    Axis width = options.padding == nn::Padding::same ? same(11, 3, options.stride, options.dilation)
                                                      : Axis{11, 3, options.stride, options.dilation};
    if (options.explicit_padding) std::tie(width.before, width.after) = *options.explicit_padding;
    const std::vector<double> expected =
        direct_conv2d(reshape(input, {3, 1, 11, 4}), reshape(filters, {1, 3, 4, 5}), {1, 1}, width);
    expect_definition("conv1d", body, {input, filters}, expected, Shape({3, width.outputs(), 5}), 1e-4);
    expect_agreement("conv1d", body, input, filters);
  }
}

TEST(Pooling, MaxAndAveragePoolsMatchTheirDefinitions) {
  const Tensor input = random_tensor(DType::f32, {2, 7, 9, 3}, 61);
  struct PoolCase {
    nn::Pool2dOptions options;
    Axis height, width;
  };
  const std::vector<PoolCase> cases = {
      {{}, {7, 2, 2}, {9, 2, 2}},
      {{.window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}}, {7, 3, 2}, {9, 3, 2}},
      {{.window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same},
       same(7, 3, 2),
       same(9, 3, 2)},
      {{.window = {2, 3}, .strides = std::array<std::int64_t, 2>{1, 1}, .padding = nn::Padding::same},
       same(7, 2, 1),
       same(9, 3, 1)},
  };
  for (const PoolCase& test : cases) {
    const nn::Pool2dOptions options = test.options;
    const Shape shape({2, test.height.outputs(), test.width.outputs(), 3});
    auto max_pool = [options](Tensor x) { return nn::max_pool2d(x, options); };
    auto average_pool = [options](Tensor x) { return nn::avg_pool2d(x, options); };
    expect_definition("max_pool2d", max_pool, {input}, direct_pool(input, test.height, test.width, Pool::max), shape,
                      0);
    expect_definition("avg_pool2d", average_pool, {input}, direct_pool(input, test.height, test.width, Pool::mean),
                      shape, 1e-6);
    expect_agreement("max_pool2d", max_pool, input);
    expect_agreement("avg_pool2d", average_pool, input);
  }
  // Integers keep their dtype through max pooling, padded with the lowest value (all negative here).
  const Tensor integers = neg(abs(random_tensor(DType::i64, {1, 5, 5, 2}, 62)));
  const nn::Pool2dOptions same_padding{.window = {3, 3}, .padding = nn::Padding::same};
  expect_definition(
      "max_pool2d i64", [same_padding](Tensor x) { return nn::max_pool2d(x, same_padding); }, {integers},
      direct_pool(integers, same(5, 3, 3), same(5, 3, 3), Pool::max), Shape({1, 2, 2, 2}), 0);
}

TEST(Pooling, MaxPoolCarriesNaN) {
  std::vector<float> values(16, 1.0f);
  values[5] = std::nanf("");
  const Tensor input = from_vector(values, {1, 4, 4, 1});
  for (const bool jit : {false, true}) {
    const std::vector<float> got =
        function([](Tensor x) { return nn::max_pool2d(x); }, {.jit_compile = jit})(input).to_vector<float>();
    ASSERT_EQ(got.size(), 4u);
    EXPECT_TRUE(std::isnan(got[0])) << (jit ? "JIT" : "standard");
    EXPECT_EQ(got[1], 1.0f);
  }
}

TEST(Convolution, TheJitFusesWindowsIntoFewKernels) {
  const Tensor images = random_tensor(DType::f32, {2, 16, 16, 8}, 71);
  auto kernels = [&](auto body, const Tensor& second) {
    auto compiled = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
    compiled(images, second);
    return compiled.statistics().kernels_per_call;
  };
  // Depthwise without padding: every tap an index map of the input, one loop kernel.
  EXPECT_EQ(kernels([](Tensor x, Tensor w) { return nn::conv2d(x, w); }, random_tensor(DType::f32, {3, 3, 1, 8}, 72)),
            1);
  // Max pooling then a pointwise convolution (a product with no windows to assemble): the pool, then the GEMM.
  EXPECT_EQ(kernels([](Tensor x, Tensor w) { return nn::conv2d(nn::max_pool2d(x), w); },
                    random_tensor(DType::f32, {1, 1, 8, 4}, 73)),
            2);
}

// A convolution's windows are never written out: the GEMM gathers them from the input (through its padding) as it
// packs its left operand, so the layer is one kernel -- with the bias and activation as the epilogue -- whatever
// the strides, dilations and padding, on an input computed by another kernel too.
TEST(Convolution, TheGemmGathersTheWindowsFromTheInput) {
  const Tensor images = random_tensor(DType::f32, {2, 9, 11, 6}, 74),
               filters = random_tensor(DType::f32, {3, 3, 6, 5}, 75);
  const Tensor bias = random_tensor(DType::f32, {5}, 76);
  const std::vector<std::pair<std::string, nn::Conv2dOptions>> geometries = {
      {"same", {.padding = nn::Padding::same}},
      {"valid, stride 2", {.strides = {2, 2}}},
      {"same, strides (2, 3), dilations (2, 1)",
       {.strides = {2, 3}, .padding = nn::Padding::same, .dilations = {2, 1}}},
      {"explicit padding (0, 4), (3, 1)", {.explicit_padding = std::array<nn::PaddingPair, 2>{{{0, 4}, {3, 1}}}}},
  };
  for (const auto& [label, options] : geometries) {
    auto layer = [options](Tensor x, Tensor w, Tensor b) { return nn::relu(nn::conv2d(x, w, options) + b); };
    const testing::DifferentialResult result = expect_agreement(label, layer, images, filters, bias);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << label << "\n" << result.fused;
    EXPECT_NE(result.fused.find("as the GEMM packs its rows: the operand is never written"), std::string::npos)
        << label << "\n"
        << result.fused;
  }
  // The input of the convolution is the loop kernel's output (exp of the images): the GEMM gathers from that.
  auto layer = [](Tensor x, Tensor w) { return nn::conv2d(exp(x), w, {.padding = nn::Padding::same}); };
  const testing::DifferentialResult result = expect_agreement("of a computed input", layer, images, filters);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  // A residual block: the second convolution gathers from the first one's output; a kernel per convolution.
  const Tensor second = random_tensor(DType::f32, {3, 3, 5, 6}, 77);
  auto block = [](Tensor x, Tensor w, Tensor v) {
    const Tensor hidden = nn::relu(nn::conv2d(x, w, {.padding = nn::Padding::same}));
    return nn::relu(nn::conv2d(hidden, v, {.padding = nn::Padding::same}) + x);
  };
  const testing::DifferentialResult residual = expect_agreement("residual block", block, images, filters, second);
  EXPECT_EQ(residual.jit.kernels_per_call, 2) << residual.fused;
}

// A grouped convolution (several channels per group, up to 16 groups) is a convolution per group side by side: each
// group's GEMM gathers the windows of its channels where they lie. As one batched product, every window was written,
// then transposed, and the product transposed back (3x PyTorch's time at [8,56,56,128] in 4 groups).
TEST(Convolution, AGroupedConvolutionIsAGatheredProductPerGroup) {
  const Tensor images = random_tensor(DType::f32, {2, 9, 11, 12}, 78),
               filters = random_tensor(DType::f32, {3, 3, 4, 6}, 79);
  for (const nn::Conv2dOptions& options :
       {nn::Conv2dOptions{.padding = nn::Padding::same}, nn::Conv2dOptions{.strides = {2, 1}}}) {
    auto layer = [options](Tensor x, Tensor w) { return nn::conv2d(x, w, options); };
    const testing::DifferentialResult result = expect_agreement("3 groups", layer, images, filters);
    std::size_t gathered = 0;
    for (std::size_t at = result.fused.find("as the GEMM packs its rows: the operand is never written");
         at != std::string::npos;
         at = result.fused.find("as the GEMM packs its rows: the operand is never written", at + 1))
      ++gathered;
    EXPECT_EQ(gathered, 3u) << result.fused;
    EXPECT_EQ(result.fused.find("transpose"), std::string::npos) << result.fused;
  }
  // Many groups are one batched product, so that the first call does not compile kernels for each.
  const Tensor many = random_tensor(DType::f32, {2, 5, 6, 34}, 80),
               many_filters = random_tensor(DType::f32, {3, 3, 2, 17}, 81);
  auto layer = [](Tensor x, Tensor w) { return nn::conv2d(x, w, {.padding = nn::Padding::same}); };
  const testing::DifferentialResult batched = expect_agreement("17 groups", layer, many, many_filters);
  EXPECT_LE(batched.jit.kernels_per_call, 6) << batched.fused;
}

TEST(Convolution, BadArgumentsNameTheOpAndLeaveTheFunctionUsable) {
  const Tensor images = random_tensor(DType::f32, {1, 5, 5, 4}, 81),
               filters = random_tensor(DType::f32, {3, 3, 4, 2}, 82);
  EXPECT_THROW(nn::conv2d(reshape(images, {5, 5, 4}), filters), ShapeError);
  EXPECT_THROW(nn::conv2d(images, random_tensor(DType::f32, {3, 3, 3, 2}, 83)), ShapeError);  // 3 does not divide 4
  EXPECT_THROW(nn::conv2d(images, random_tensor(DType::f32, {3, 3, 2, 3}, 84)), ShapeError);  // 2 groups, 3 outputs
  EXPECT_THROW(nn::conv2d(images, cast(filters, DType::f64)), DTypeError);
  EXPECT_THROW(nn::conv2d(images, random_tensor(DType::f32, {6, 3, 4, 2}, 85)), ShapeError);  // taller than 5
  EXPECT_THROW(nn::conv2d(images, filters, {.strides = {0, 1}}), ShapeError);
  EXPECT_THROW(nn::conv2d(images, filters, {.dilations = {1, -2}}), ShapeError);
  EXPECT_THROW(nn::conv2d(images, filters, {.explicit_padding = std::array<nn::PaddingPair, 2>{{{-1, 0}, {0, 0}}}}),
               ShapeError);
  EXPECT_THROW(nn::max_pool2d(images, {.window = {0, 2}}), ShapeError);
  EXPECT_THROW(nn::avg_pool2d(cast(images, DType::i32)), DTypeError);
  EXPECT_THROW(nn::max_pool2d(cast(images, DType::boolean)), DTypeError);

  auto convolve = function([](Tensor x, Tensor w) { return nn::conv2d(x, w); }, {.jit_compile = true});
  try {
    convolve(images, random_tensor(DType::f32, {3, 3, 3, 2}, 86));
    ADD_FAILURE() << "a channel mismatch was accepted";
  } catch (const ShapeError& error) {
    EXPECT_EQ(error.op(), "conv2d");
    EXPECT_NE(error.location().find("convolution_test.cpp"), std::string::npos) << error.location();
  }
  EXPECT_EQ(convolve(images, filters).shape(), Shape({1, 3, 3, 2}));
}

TEST(BatchNorm, MomentsAndNormalizationMatchTheirDefinitions) {
  // Channels with a mean far from 0 (1000): a one-pass variance E[x^2] - E[x]^2 would lose it in f32.
  const Tensor images = add(random_tensor(DType::f32, {4, 5, 6, 3}, 91), 1000.0);
  const std::vector<double> values = values_of(images);
  std::vector<double> mean(3, 0), variance(3, 0);
  for (std::size_t i = 0; i < values.size(); ++i) mean[i % 3] += values[i] / 120;
  for (std::size_t i = 0; i < values.size(); ++i) variance[i % 3] += std::pow(values[i] - mean[i % 3], 2) / 120;
  const Tensor gamma = random_tensor(DType::f32, {3}, 92), beta = random_tensor(DType::f32, {3}, 93);
  const std::vector<double> scale = values_of(gamma), shift = values_of(beta);
  std::vector<double> normalized;
  for (std::size_t i = 0; i < values.size(); ++i)
    normalized.push_back((values[i] - mean[i % 3]) / std::sqrt(variance[i % 3] + 1e-5) * scale[i % 3] + shift[i % 3]);

  for (const bool jit : {false, true}) {
    auto statistics = function([](Tensor x) { return nn::moments(x, {0, 1, 2}); }, {.jit_compile = jit});
    const auto [batch_mean, batch_variance] = statistics(images);
    ASSERT_EQ(batch_mean.shape(), Shape({3}));
    for (std::size_t c = 0; c < 3; ++c) {
      EXPECT_NEAR(values_of(batch_mean)[c], mean[c], 1e-3) << executor(jit);
      EXPECT_NEAR(values_of(batch_variance)[c], variance[c], 1e-4 * variance[c]) << executor(jit);
    }
    auto training = function(
        [](Tensor x, Tensor gamma, Tensor beta) {
          const auto [mean, variance] = nn::moments(x, {0, 1, 2}, true);
          return nn::batch_norm(x, mean, variance, gamma, beta);
        },
        {.jit_compile = jit});
    const std::vector<double> got = values_of(training(images, gamma, beta));
    ASSERT_EQ(got.size(), normalized.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], normalized[i], 1e-3 * (1 + std::fabs(normalized[i]))) << executor(jit) << " at " << i;
  }
  EXPECT_EQ(nn::moments(images, {1, 2}, true).second.shape(), Shape({4, 1, 1, 3}));
  EXPECT_EQ(nn::moments(cast(images, DType::i32), {0}).first.dtype(), DType::f32);
  testing::expect_agreement(
      "batch_norm with given statistics",
      [](Tensor x, Tensor mean, Tensor variance, Tensor gamma) { return nn::batch_norm(x, mean, variance, gamma); },
      images, random_tensor(DType::f32, {3}, 94), abs(random_tensor(DType::f32, {3}, 95)), gamma);
}

// A convolution, batch normalization with given statistics and relu, as an inference graph has them: the
// normalization and relu are the product's epilogue, and only the per-channel factor is a kernel of its own.
TEST(BatchNorm, AfterAConvolutionIsTheProductsEpilogue) {
  const Tensor images = random_tensor(DType::f32, {2, 8, 8, 16}, 96),
               filters = random_tensor(DType::f32, {1, 1, 16, 8}, 97);
  const Tensor mean = random_tensor(DType::f32, {8}, 98), variance = abs(random_tensor(DType::f32, {8}, 99));
  auto layer = [](Tensor x, Tensor w, Tensor mean, Tensor variance) {
    return nn::relu(nn::batch_norm(nn::conv2d(x, w), mean, variance));
  };
  const testing::DifferentialResult result =
      testing::expect_agreement("conv, batch_norm, relu", layer, images, filters, mean, variance);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
}

}  // namespace
}  // namespace kiln
