// Derivatives compiled by the JIT: every finite-difference case's vjp through kiln::function with jit_compile
// agrees with the standard executor's and the float64 reference's (support/differential.h), and a training step
// -- an MLP's loss, its gradients and the Adam update of every parameter -- traced as one kiln::function goes
// through the normal fusion pipeline into a few kernels.

#include "autodiff/gradient_check.h"
#include "support/differential.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <functional>
#include <iostream>

namespace kiln::testing {
namespace {

using Tensors = std::vector<Tensor>;

// The case's vjp as a function of its inputs and its outputs' cotangents (arguments, not captures: the reference
// evaluates the traced graph on the arguments), compared across executors.
template <std::size_t count>
void expect_vjp_agrees(const std::string& label, const FlatFunction& function, std::size_t inputs,
                       const Tensors& arguments) {
  auto pulled_back = [function, inputs](auto... values) {
    const Tensors all{values...};
    const auto split = all.begin() + static_cast<std::ptrdiff_t>(inputs);
    detail::VjpResult result = detail::vjp_call(function, Tensors(all.begin(), split), Location::current());
    return detail::pull_back(*result.pullback, Tensors(split, all.end()), Location::current());
  };
  [&]<std::size_t... index>(std::index_sequence<index...>) {
    expect_agreement(label, pulled_back, arguments.at(index)...);
  }
  (std::make_index_sequence<count>{});
}

void expect_compiled_vjp_agrees(const GradientCase& gradient_case) {
  const Tensors outputs = gradient_case.function(gradient_case.inputs);
  Tensors arguments = gradient_case.inputs;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    arguments.push_back(random::normal(outputs[i].shape(), {.seed = 5 + i, .dtype = outputs[i].dtype()}));
  const std::string& label = gradient_case.name;
  const std::size_t inputs = gradient_case.inputs.size();
  switch (arguments.size()) {
    case 2:
      return expect_vjp_agrees<2>(label, gradient_case.function, inputs, arguments);
    case 3:
      return expect_vjp_agrees<3>(label, gradient_case.function, inputs, arguments);
    case 4:
      return expect_vjp_agrees<4>(label, gradient_case.function, inputs, arguments);
    case 5:
      return expect_vjp_agrees<5>(label, gradient_case.function, inputs, arguments);
    case 6:
      return expect_vjp_agrees<6>(label, gradient_case.function, inputs, arguments);
    case 7:
      return expect_vjp_agrees<7>(label, gradient_case.function, inputs, arguments);
    case 8:
      return expect_vjp_agrees<8>(label, gradient_case.function, inputs, arguments);
    default:
      FAIL() << label << ": " << arguments.size() << " inputs and cotangents";
  }
}

class CompiledGradients : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CompiledGradients, AgreeWithTheStandardExecutorAndTheReference) {
  static const std::vector<GradientCase> cases = gradient_cases();
  expect_compiled_vjp_agrees(cases.at(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(EveryCase, CompiledGradients, ::testing::Range<std::size_t>(0, gradient_cases().size()),
                         gradient_case_test_name);

// ---- a training step ----------------------------------------------------------------------------------------

Tensor mlp_loss(Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor labels) {
  Tensor hidden = nn::relu(matmul(x, w1) + b1);
  return reduce_mean(nn::sparse_softmax_cross_entropy(matmul(hidden, w2) + b2, labels));
}

// Adam's update of one parameter at step 3 (bias corrections as constants), as optax and torch.optim.Adam.
std::array<Tensor, 3> adam(const Tensor& parameter, const Tensor& gradient, const Tensor& first, const Tensor& second) {
  constexpr double rate = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, step = 3;
  Tensor m = first * beta1 + gradient * (1 - beta1);
  Tensor v = second * beta2 + square(gradient) * (1 - beta2);
  Tensor m_hat = m / (1 - std::pow(beta1, step)), v_hat = v / (1 - std::pow(beta2, step));
  return {parameter - m_hat * rate / (sqrt(v_hat) + epsilon), m, v};
}

Tensors training_step(Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor m1, Tensor mb1, Tensor m2, Tensor mb2,
                      Tensor v1, Tensor vb1, Tensor v2, Tensor vb2, Tensor x, Tensor labels) {
  auto [loss, gradients] = value_and_grad(mlp_loss, {.argnums = {0, 1, 2, 3}})(w1, b1, w2, b2, x, labels);
  const Tensors parameters = {w1, b1, w2, b2}, first = {m1, mb1, m2, mb2}, second = {v1, vb1, v2, vb2};
  Tensors results = {loss}, firsts, seconds;
  for (std::size_t i = 0; i < 4; ++i) {
    auto [updated, m, v] = adam(parameters[i], gradients[i], first[i], second[i]);
    results.push_back(updated);
    firsts.push_back(m);
    seconds.push_back(v);
  }
  results.insert(results.end(), firsts.begin(), firsts.end());
  results.insert(results.end(), seconds.begin(), seconds.end());
  return results;
}

TEST(CompiledTrainingStep, MlpLossGradientsAndAdamInOneFunction) {
  const std::int64_t batch = 64, features = 32, hidden = 64, classes = 10;
  Tensors arguments = {random::normal({features, hidden}, {.seed = 1, .stddev = 0.2}),
                       random::normal({hidden}, {.seed = 2, .stddev = 0.1}),
                       random::normal({hidden, classes}, {.seed = 3, .stddev = 0.2}),
                       random::normal({classes}, {.seed = 4, .stddev = 0.1})};
  for (int copy = 0; copy < 2; ++copy)
    for (std::size_t i = 0; i < 4; ++i)
      arguments.push_back(copy == 0
                              ? random::normal(arguments[i].shape(), {.seed = 10 + i, .stddev = 0.01})
                              : random::uniform(arguments[i].shape(), {.seed = 20 + i, .low = 1e-4, .high = 1e-3}));
  arguments.push_back(random::normal({batch, features}, {.seed = 5}));
  arguments.push_back(
      cast(floor(random::uniform({batch}, {.seed = 6, .high = static_cast<double>(classes)})), DType::i64));
  const Tensors& a = arguments;

  const std::vector<std::string> names = {"loss", "w1",   "b1",   "w2",   "b2",   "m w1", "m b1",
                                          "m w2", "m b2", "v w1", "v b1", "v w2", "v b2"};
  DifferentialResult result = expect_named_agreement("MLP training step", names, training_step, a[0], a[1], a[2], a[3],
                                                     a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]);
  auto standard = function(training_step);
  standard(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]);
  const std::int64_t standard_kernels = standard.statistics().kernels_per_call;
  std::cout << "MLP training step: " << result.jit.kernels_per_call << " kernels compiled, " << standard_kernels
            << " on the standard executor\n";
  // The backward graph goes through the fusion pipeline like the forward: the 2 forward GEMMs and 3 backward ones
  // (the input's gradient is not needed) keep their epilogues (the first layer's bias and relu, whose mask the
  // backward reads from the relu's output; the Adam update of w1 and w2 in the GEMM that computes their gradient),
  // the loss and the softmax's backward are row kernels, the bias gradients column sums with b1's and b2's Adam
  // updates: 9 kernels on 2026-12-05, against 152 on the standard executor. The softmax's backward recomputes
  // exp(logits - max) from the logits instead of reading a copy the forward wrote (rematerialization).
  EXPECT_LE(result.jit.kernels_per_call, standard_kernels / 4) << result.fused;
  EXPECT_LE(result.jit.kernels_per_call, 9) << result.fused;
  bool relu_epilogue = false;
  for (std::size_t line = result.fused.find("\nkernel "); line != std::string::npos;
       line = result.fused.find("\nkernel ", line + 1)) {
    const std::string header = result.fused.substr(line, result.fused.find('\n', line + 1) - line);
    relu_epilogue = relu_epilogue || (header.find("(gemm over") != std::string::npos &&
                                      header.find(" add ") != std::string::npos && header.ends_with(" relu"));
  }
  EXPECT_TRUE(relu_epilogue) << result.fused;
  EXPECT_NE(result.fused.find("exp in each of the 2 kernels that read it"), std::string::npos) << result.fused;
}

// A dense layer's weight gradient over a batch of sequences: one GEMM whose depth runs through batch and tokens, not a
// product per batch item summed afterwards (which wrote batch x width x width partial products).
TEST(CompiledGradients, AWeightUnderABatchIsOneProductThroughTheBatch) {
  auto weight_gradient = [](Tensor x, Tensor w) {
    return grad([](Tensor x, Tensor w) { return reduce_sum(square(matmul(x, w))); }, {.argnums = {1}})(x, w);
  };
  const Tensor x = random::normal({4, 33, 24}, {.seed = 30}), w = random::normal({24, 17}, {.seed = 31});
  const DifferentialResult result = expect_agreement("dense weight gradient", weight_gradient, x, w);
  const std::string optimized = function(weight_gradient, {.jit_compile = true, .on_compile_failure = Fallback::none})
                                    .get_compiler_ir(Stage::optimized, x, w);
  EXPECT_EQ(optimized.find("reduce_sum"), std::string::npos) << optimized;
  EXPECT_NE(optimized.find("f32[132,24] reshape"), std::string::npos) << optimized;
}

// A stride-1 convolution's gradients gather their windows as the forward's product does: the filters' gradient is
// the windows' transpose times the output's cotangent, the windows gathered as the GEMM packs A^T (the forward's
// windows are gathered twice, never written); the input's gradient is the transposed convolution, one GEMM gathering
// the cotangent's windows (zeros where they leave it) times the filters' blocks side by side. Nothing with the
// windows' 9 x 5 channels is written: neither im2col nor the cotangent's product with the filters (col2im).
TEST(CompiledGradients, AConvolutionsGradientsGatherTheirWindows) {
  const Tensor x = random::normal({2, 9, 10, 5}, {.seed = 33}), filters = random::normal({3, 3, 5, 4}, {.seed = 34});
  // Same padding: the cotangent's windows are cropped paddings of it; valid: paddings (nothing to crop).
  for (const nn::Padding padding : {nn::Padding::same, nn::Padding::valid}) {
    auto gradients = [padding](Tensor x, Tensor filters) {
      return grad(
                 [padding](Tensor x, Tensor filters) {
                   return reduce_sum(square(nn::conv2d(x, filters, {.padding = padding})));
                 },
                 {.argnums = {0, 1}})(x, filters)
          .tensors();
    };
    const std::string label = padding == nn::Padding::same ? "same padding" : "valid";
    const DifferentialResult result = expect_agreement("convolution gradients, " + label, gradients, x, filters);
    std::size_t gathered = 0;
    for (std::size_t at = result.fused.find("gathers %"); at != std::string::npos;
         at = result.fused.find("gathers %", at + 1))
      ++gathered;
    EXPECT_EQ(gathered, 3) << label << "\n" << result.fused;
    EXPECT_NE(result.fused.find("reshape (9 parts) from %0 parameter"), std::string::npos) << label << "\n"
                                                                                           << result.fused;
    EXPECT_EQ(result.fused.find(",45]"), std::string::npos) << label << "\n" << result.fused;
    EXPECT_LE(result.jit.kernels_per_call, 4) << label << "\n" << result.fused;
  }
}

// A depthwise convolution's filter gradient: each tap's weights [channels, 1] broadcast over [batch, height, width,
// channels, 1] are summed over the positions with the size-1 axis dropped first, so the nine sums are column
// reductions in one kernel, not nine reductions in the standard executor (their kept axes were (channels, 1)).
TEST(CompiledGradients, ADepthwiseFilterGradientSumsInColumnKernels) {
  auto filter_gradient = [](Tensor x, Tensor filters) {
    return grad(
        [](Tensor x, Tensor filters) {
          return reduce_sum(square(nn::conv2d(x, filters, {.padding = nn::Padding::same})));
        },
        {.argnums = {1}})(x, filters);
  };
  const Tensor x = random::normal({2, 7, 6, 5}, {.seed = 35}), filters = random::normal({3, 3, 1, 5}, {.seed = 36});
  const DifferentialResult result = expect_agreement("depthwise filter gradient", filter_gradient, x, filters);
  for (std::size_t line = result.fused.find("\nkernel "); line != std::string::npos;
       line = result.fused.find("\nkernel ", line + 1)) {
    const std::string header = result.fused.substr(line + 1, result.fused.find('\n', line + 1) - line - 1);
    EXPECT_FALSE(header.find("(library over") != std::string::npos && header.ends_with("reduce_sum")) << result.fused;
  }
  EXPECT_NE(result.fused.find("(column over [2,7,6,5]"), std::string::npos) << result.fused;
  // The input gradient: the nine taps' scaled cotangents are summed where the padded cotangent lies, none of them
  // written (they were nine arrays of the input's size, 103 MB at [8,56,56,128]); its padded input is read in
  // place by the column kernel too.
  auto both = [](Tensor x, Tensor filters) {
    return grad(
        [](Tensor x, Tensor filters) {
          return reduce_sum(square(nn::conv2d(x, filters, {.padding = nn::Padding::same})));
        },
        {.argnums = {0, 1}})(x, filters);
  };
  const DifferentialResult gradients = expect_agreement("depthwise gradients", both, x, filters);
  std::size_t written = 0;  // values of the input's size written, kernel by kernel
  for (std::size_t line = gradients.fused.find("\n  writes "); line != std::string::npos;
       line = gradients.fused.find("\n  writes ", line + 1)) {
    const std::string writes = gradients.fused.substr(line, gradients.fused.find('\n', line + 1) - line);
    for (const std::string shape : {"f32[2,7,6,5]", "f32[2,7,6,5,1]"})
      for (std::size_t at = writes.find(shape + ","); at != std::string::npos; at = writes.find(shape + ",", at + 1))
        ++written;
    if (writes.ends_with("f32[2,7,6,5]") || writes.ends_with("f32[2,7,6,5,1]")) ++written;
  }
  // The forward's output's cotangent, in its two shapes, and the input gradient (12 before).
  EXPECT_LE(written, 3u) << gradients.fused;
  EXPECT_LE(gradients.jit.kernels_per_call, 4) << gradients.fused;
}

// The gradient of `loss` traced by kiln::function (where autodiff/products.cpp rewrites cotangents that nothing else
// reads yet; an eager call need not take the same rewrites) against central differences of `loss`, in float64 on
// the standard executor. The executors' agreement checks the rewritten graph against itself; this its calculus.
void expect_traced_gradient_matches_differences(const std::string& label, const std::function<Tensor(Tensor)>& loss,
                                                const Tensor& x) {
  auto traced = function([loss](Tensor x) { return grad(loss)(x); });
  const std::vector<double> gradient = traced(x).to_vector<double>(), values = x.to_vector<double>();
  const double step = 1e-6;
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::vector<double> up = values, down = values;
    up[i] += step;
    down[i] -= step;
    const double difference = (loss(from_vector<double>(up, x.shape())).item<double>() -
                               loss(from_vector<double>(down, x.shape())).item<double>()) /
                              (2 * step);
    ASSERT_NEAR(gradient[i], difference, 1e-6 * (1 + std::abs(difference))) << label << ", element " << i;
  }
}

TEST(CompiledGradients, TracedConvolutionAndPoolGradientsMatchCentralDifferences) {
  const auto strides = std::array<std::int64_t, 2>{2, 2};
  const Tensor filters = random::normal({3, 3, 2, 3}, {.seed = 37, .dtype = DType::f64});
  const Tensor wide_filters = random::normal({4, 4, 2, 3}, {.seed = 39, .dtype = DType::f64});
  // With same padding, windows of 5 (and filters of 4) over 6 and 8 rows pad one before: the padding's crop of the
  // phases' sum starts at phase 1, where the phases' neighbours differ (a window of 4 covers rows 2q and 2q + 1
  // alike, and would hide phases taken from the wrong side).
  for (const Shape& shape : {Shape{1, 6, 8, 2}, Shape{2, 5, 7, 2}}) {
    const Tensor x = random::normal(shape, {.seed = 38, .dtype = DType::f64});
    const std::string dims = shape.to_string();
    expect_traced_gradient_matches_differences(
        "avg_pool2d 5x5/2 " + dims,
        [strides](Tensor x) {
          return reduce_sum(
              sin(nn::avg_pool2d(x, {.window = {5, 5}, .strides = strides, .padding = nn::Padding::same})));
        },
        x);
    for (const std::array<std::int64_t, 2> window : {std::array<std::int64_t, 2>{5, 4}, {3, 3}})
      expect_traced_gradient_matches_differences(
          "max_pool2d " + std::to_string(window[0]) + "x" + std::to_string(window[1]) + "/2 " + dims,
          [strides, window](Tensor x) {
            return reduce_sum(
                square(nn::max_pool2d(x, {.window = window, .strides = strides, .padding = nn::Padding::same})));
          },
          x);
    for (const nn::Padding padding : {nn::Padding::same, nn::Padding::valid})
      expect_traced_gradient_matches_differences(
          "conv2d " + dims,
          [filters, padding](Tensor x) { return reduce_sum(sin(nn::conv2d(x, filters, {.padding = padding}))); }, x);
    // A depthwise convolution (a filter per channel): its input gradient pads the cotangent under each tap's
    // weights (pad_through: the scaled cotangent is never written before its padding).
    const Tensor depthwise_filters = random::normal({3, 3, 1, 2}, {.seed = 40, .dtype = DType::f64});
    for (const nn::Padding padding : {nn::Padding::same, nn::Padding::valid})
      expect_traced_gradient_matches_differences(
          "depthwise conv2d " + dims,
          [depthwise_filters, padding](Tensor x) {
            return reduce_sum(sin(nn::conv2d(x, depthwise_filters, {.padding = padding})));
          },
          x);
    // Two groups of two channels: a convolution per group, of a slice of the input's channels.
    const Tensor grouped_filters = random::normal({3, 2, 2, 4}, {.seed = 41, .dtype = DType::f64});
    expect_traced_gradient_matches_differences(
        "grouped conv2d " + dims,
        [grouped_filters](Tensor x) {
          return reduce_sum(sin(nn::conv2d(concat({x, x * x}, 3), grouped_filters, {.padding = nn::Padding::same})));
        },
        x);
    for (const Tensor& each : {filters, wide_filters})
      expect_traced_gradient_matches_differences(
          "conv2d strided " + dims + " by " + each.shape().to_string(),
          [each, strides](Tensor x) {
            return reduce_sum(sin(nn::conv2d(x, each, {.strides = strides, .padding = nn::Padding::same})));
          },
          x);
  }
}

// A strided pool's gradient: each window's cotangent placed at its phase of the [rows, stride] layout and the
// placements summed there, reading each through its padding; the padding's crop then takes each phase's rows from
// the crop's first element on (slice_of_phases: a kernel per phase, side by side, merged by a view), or the sum
// merged and cropped where the crop keeps no whole rows of phases. Placed one axis at a time, each window's
// placement took six kernels (49 in all for a 3x3 max pool of stride 2).
TEST(CompiledGradients, AStridedPoolsWindowsAreSummedInFewKernelsOfPhases) {
  struct Case {
    Shape shape;
    std::int64_t window;
  };
  // Paddings (0, 1) and (1, 1) along each axis: crops from phase 0 and phase 1; (1, 1) over 9 rows crops 9 of 12.
  for (const Case& each : {Case{{2, 9, 10, 3}, 3}, Case{{1, 8, 8, 5}, 3}, Case{{2, 8, 12, 3}, 4}}) {
    auto pool_gradient = [window = each.window](Tensor x) {
      return grad([window](Tensor x) {
        const nn::Pool2dOptions options{
            .window = {window, window}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same};
        return reduce_sum(square(nn::max_pool2d(x, options))) + reduce_sum(sin(nn::avg_pool2d(x, options)));
      })(x);
    };
    const Tensor x = random::normal(each.shape, {.seed = 32});
    const std::string label = "pool gradient " + each.shape.to_string() + ", window " + std::to_string(each.window);
    const DifferentialResult result = expect_agreement(label, pool_gradient, x);
    // The forward's windows with their cotangents, the phases' sums (or their sum), the merge.
    EXPECT_LE(result.jit.kernels_per_call, 4) << label << "\n" << result.fused;
  }
}

// A max pool between two convolutions, as a small CNN has it: its backward's masks run in the epilogue of the GEMM
// computing the pool's cotangent (the second convolution's input gradient), and that epilogue recomputes the
// windows and their running maxima from the padded input, read in place, instead of reading them back: the forward
// pool writes its result alone, not its nine windows and eight partial maxima (17 values of the pool's size,
// before), and the padded input is not written either.
TEST(CompiledGradients, AMaxPoolsBackwardRecomputesItsWindowsInTheProductsEpilogue) {
  auto gradients = [](Tensor x, Tensor filters1, Tensor filters2) {
    return grad(
        [](Tensor filters1, Tensor filters2, Tensor x) {
          const Tensor first = nn::relu(nn::conv2d(x, filters1, {.padding = nn::Padding::same}));
          const Tensor pooled = nn::max_pool2d(
              first, {.window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same});
          return reduce_sum(square(nn::relu(nn::conv2d(pooled, filters2, {.padding = nn::Padding::same}))));
        },
        {.argnums = {0, 1}})(filters1, filters2, x);
  };
  const Tensor x = random::normal({2, 9, 10, 3}, {.seed = 40});
  const Tensor filters1 = random::normal({3, 3, 3, 8}, {.seed = 41, .stddev = 0.3});
  const Tensor filters2 = random::normal({3, 3, 8, 16}, {.seed = 42, .stddev = 0.2});
  const DifferentialResult result = expect_agreement("max pool between convolutions", gradients, x, filters1, filters2);
  const std::string pooled = "f32[2,5,5,8]";
  std::size_t written = 0;  // values of the pool's size written to memory, kernel by kernel
  for (std::size_t line = result.fused.find("\n  writes "); line != std::string::npos;
       line = result.fused.find("\n  writes ", line + 1)) {
    const std::size_t end = result.fused.find('\n', line + 1);
    const std::string writes = result.fused.substr(line, end - line);
    for (std::size_t at = writes.find(pooled); at != std::string::npos; at = writes.find(pooled, at + 1)) ++written;
  }
  // The pool's result, and the nine masked cotangents the phases' kernel sums (26 before).
  EXPECT_LE(written, 10u) << result.fused;
  // The epilogue reads the first convolution's output through the pool's -inf padding where it lies: the padded
  // copy is never written.
  bool epilogue_reads_padding = false;
  for (std::size_t line = result.fused.find("\nkernel "); line != std::string::npos;
       line = result.fused.find("\nkernel ", line + 1)) {
    const std::size_t end = result.fused.find("\nkernel ", line + 1);
    const std::string kernel = result.fused.substr(line, end == std::string::npos ? std::string::npos : end - line);
    epilogue_reads_padding = epilogue_reads_padding || (kernel.find("(gemm over") != std::string::npos &&
                                                        kernel.find("with -inf) in place") != std::string::npos);
  }
  EXPECT_TRUE(epilogue_reads_padding) << result.fused;
  EXPECT_NE(result.fused.find("slice in each of the 2 kernels that read it: 0 flop/element"), std::string::npos)
      << result.fused;
}

}  // namespace
}  // namespace kiln::testing
