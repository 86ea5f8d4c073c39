// Static arguments of kiln::function (kiln/static_arguments.h): values baked into the trace, one trace per value,
// the retrace warning naming the value, mixed orders, get_compiler_ir, nesting and kiln::grad.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::CapturedLog;
using testing::random_tensor;

// What may be an argument. Any other type stops the compilation of the call with a static_assert (in
// detail::check_argument) saying that an argument must be a Tensor, bool, an integer type, float, double, an enum or
// std::string; gtest cannot test a program that does not compile, so these check the traits that assert decides by.
enum class Mode { add, multiply };
static_assert(is_static_argument_v<bool> && is_static_argument_v<int> && is_static_argument_v<std::int64_t> &&
              is_static_argument_v<unsigned char> && is_static_argument_v<float> && is_static_argument_v<double>);
static_assert(is_static_argument_v<const float&> && is_static_argument_v<Mode> && is_static_argument_v<std::string>);
static_assert(is_static_argument_v<const char (&)[5]>, "a string literal is a std::string");
static_assert(!is_static_argument_v<long double>, "its padding bytes make a bit pattern meaningless");
static_assert(!is_static_argument_v<const char*> && !is_static_argument_v<int*>);
static_assert(!is_static_argument_v<std::vector<float>> && !is_static_argument_v<Tensor>);
static_assert(detail::is_function_argument<Tensor> && detail::is_function_argument<Gradients>);
static_assert(detail::is_function_argument<double> && !detail::is_function_argument<std::vector<Tensor>>);
static_assert(!detail::is_function_argument<void*> && !detail::is_function_argument<Shape>);

std::vector<float> values(const Tensor& tensor) { return tensor.to_vector<float>(); }

void expect_scaled(const Tensor& got, const Tensor& x, float scale, const std::string& label) {
  std::vector<float> result = values(got), input = values(x);
  ASSERT_EQ(result.size(), input.size()) << label;
  for (std::size_t i = 0; i < result.size(); ++i) EXPECT_FLOAT_EQ(result[i], input[i] * scale) << label << " " << i;
}

TEST(StaticArguments, ValuesAreBakedInOnTheStandardExecutorAndTheJit) {
  for (bool jit : {false, true}) {
    const std::string label = jit ? "jit" : "standard";
    std::atomic<int> body_runs = 0;
    auto scaled = function(
        [&](Tensor x, float scale) {
          body_runs += 1;
          return x * scale;
        },
        {.jit_compile = jit, .on_compile_failure = Fallback::none});
    Tensor x = random_tensor(DType::f32, {4, 5}, 1);
    expect_scaled(scaled(x, 0.5f), x, 0.5f, label);
    expect_scaled(scaled(x, 0.25f), x, 0.25f, label);
    expect_scaled(scaled(x, 0.5f), x, 0.5f, label + ", the first value again");
    EXPECT_EQ(body_runs, 2) << label;
    FunctionStatistics statistics = scaled.statistics();
    EXPECT_EQ(statistics.traces, 2) << label << ": one trace per value";
    EXPECT_EQ(statistics.calls, 3) << label;
    if (jit) {
      EXPECT_EQ(statistics.compiles + statistics.cache_hits, 2) << "one module per value";
    }

    // The value is a constant of the graph: the only parameter is the tensor.
    const std::string half = scaled.get_compiler_ir(Stage::traced, x, 0.5f);
    const std::string quarter = scaled.get_compiler_ir(Stage::traced, x, 0.25f);
    EXPECT_NE(half, quarter);
    EXPECT_NE(half.find("0.5"), std::string::npos) << half;
    EXPECT_NE(quarter.find("0.25"), std::string::npos) << quarter;
    EXPECT_EQ(scaled.statistics().traces, 2) << label << ": get_compiler_ir found both traces in the cache";
    if (jit) {
      EXPECT_NE(scaled.get_compiler_ir(Stage::fused, x, 0.25f).find("kernel"), std::string::npos);
    }
  }
}

TEST(StaticArguments, CppControlFlowOnAStaticValueIsDecidedPerValue) {
  auto repeated = function([](Tensor x, int times, bool negate) {
    Tensor y = x;
    for (int i = 1; i < times; ++i) y = y + x;
    return negate ? -y : y;
  });
  Tensor x = random_tensor(DType::f32, {6}, 2);
  expect_scaled(repeated(x, 3, false), x, 3, "3, false");
  expect_scaled(repeated(x, 3, true), x, -3, "3, true");
  expect_scaled(repeated(x, 1, false), x, 1, "1, false");
  expect_scaled(repeated(x, 3, true), x, -3, "3, true again");
  EXPECT_EQ(repeated.statistics().traces, 3);
  // Three adds for times = 4, none for times = 1: the loop is unrolled at trace time.
  auto count = [](const std::string& text, const std::string& word) {
    int found = 0;
    for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++found;
    return found;
  };
  EXPECT_EQ(count(repeated.get_compiler_ir(Stage::traced, x, 4, false), " add("), 3)
      << repeated.get_compiler_ir(Stage::traced, x, 4, false);
  EXPECT_EQ(count(repeated.get_compiler_ir(Stage::traced, x, 1, false), " add("), 0);
}

TEST(StaticArguments, OneTracePerDistinctValue) {
  std::atomic<int> body_runs = 0;
  auto shifted = function([&](Tensor x, std::int64_t shift) {
    body_runs += 1;
    return x + static_cast<double>(shift);
  });
  Tensor x = random_tensor(DType::f32, {3}, 3);
  for (int round = 0; round < 2; ++round)
    for (std::int64_t shift : {1, 2, 3}) {
      std::vector<float> got = values(shifted(x, shift)), input = values(x);
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], input[i] + static_cast<float>(shift));
    }
  EXPECT_EQ(body_runs, 3);
  EXPECT_EQ(shifted.statistics().traces, 3);
  EXPECT_EQ(shifted.statistics().calls, 6);
  shifted(random_tensor(DType::f32, {4}, 4), 1);
  EXPECT_EQ(shifted.statistics().traces, 4) << "a new shape with a known value still traces";
}

TEST(StaticArguments, FloatsCompareByBitPattern) {
  auto reciprocal_of = function([](Tensor x, double value) { return x * 0.0 + 1.0 / value; });
  Tensor x = random_tensor(DType::f32, {2}, 5);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(values(reciprocal_of(x, nan))[0]));
  EXPECT_TRUE(std::isnan(values(reciprocal_of(x, nan))[0]));
  EXPECT_EQ(reciprocal_of.statistics().traces, 1) << "NaN equals itself: no retrace per call";
  EXPECT_EQ(values(reciprocal_of(x, 0.0))[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(values(reciprocal_of(x, -0.0))[0], -std::numeric_limits<float>::infinity()) << "-0.0 is not 0.0";
  EXPECT_EQ(reciprocal_of.statistics().traces, 3);
}

TEST(StaticArguments, RetraceWarningNamesTheStaticArgumentAndBothValues) {
  CapturedLog log;
  auto scaled = function([](Tensor x, float scale) { return x * scale; }, {.name = "rescaler"});
  Tensor x = random_tensor(DType::f32, {3}, 6);
  for (float scale : {1.0f, 2.0f, 4.0f, 8.0f, 0.5f, 0.25f, 0.125f}) scaled(x, scale);
  EXPECT_EQ(log.count("rescaler"), 1) << "warns once";
  EXPECT_EQ(log.count("argument 1 (float) changed from 0.5 to 0.25"), 1);
  EXPECT_EQ(log.count("static (non-tensor) argument"), 1);
  EXPECT_EQ(scaled.statistics().traces, 7);
}

TEST(StaticArguments, RetraceWarningNamesTheTensorByItsPositionAmongAllArguments) {
  CapturedLog log;
  auto f = function([](bool flip, Tensor x) { return flip ? -x : x; }, {.name = "flipper", .retrace_warning_limit = 2});
  f(true, random_tensor(DType::f32, {1}, 7));
  f(true, random_tensor(DType::f32, {2}, 7));
  f(true, random_tensor(DType::f32, {3}, 7));
  EXPECT_EQ(log.count("argument 1 changed from f32[2] cpu to f32[3] cpu"), 1);
  EXPECT_EQ(log.count("shape or dtype"), 1);
}

TEST(StaticArguments, MixedOrders) {
  Tensor a = random_tensor(DType::f32, {2, 3}, 8), b = random_tensor(DType::f32, {2, 3}, 9);
  std::vector<float> av = values(a), bv = values(b);

  auto middle = function([](Tensor x, double s, Tensor y) { return x * s + y; }, {.jit_compile = true});
  std::vector<float> got = values(middle(a, 3.0, b));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], av[i] * 3 + bv[i]);
  EXPECT_EQ(middle.get_compiler_ir(Stage::traced, a, 3.0, b), middle.get_compiler_ir(Stage::traced, a, 3.0, b));
  EXPECT_EQ(middle.statistics().traces, 1) << "get_compiler_ir used the call's trace";

  auto first = function([](int k, Tensor x) { return x * static_cast<double>(k); });
  got = values(first(4, a));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], av[i] * 4);

  auto last = function([](Tensor x, Tensor y, bool subtract) { return subtract ? x - y : x + y; });
  got = values(last(a, b, true));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], av[i] - bv[i]);
  got = values(last(a, b, false));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], av[i] + bv[i]);

  auto only_statics = function([](double value, int count) { return full({count}, value); });
  EXPECT_EQ(values(only_statics(1.5, 3)), std::vector<float>({1.5f, 1.5f, 1.5f}));
  EXPECT_EQ(values(only_statics(2.5, 2)), std::vector<float>({2.5f, 2.5f}));
  EXPECT_EQ(only_statics.statistics().traces, 2);
}

TEST(StaticArguments, EnumsAndStrings) {
  auto combine = function([](Tensor x, Tensor y, Mode mode, const std::string& name) {
    if (name != "checked") throw std::runtime_error("unexpected name " + name);
    return mode == Mode::add ? x + y : x * y;
  });
  Tensor a = random_tensor(DType::f32, {4}, 10), b = random_tensor(DType::f32, {4}, 11);
  std::vector<float> av = values(a), bv = values(b);
  std::vector<float> sum = values(combine(a, b, Mode::add, "checked"));
  std::vector<float> product = values(combine(a, b, Mode::multiply, std::string("checked")));
  for (std::size_t i = 0; i < sum.size(); ++i) {
    EXPECT_FLOAT_EQ(sum[i], av[i] + bv[i]);
    EXPECT_FLOAT_EQ(product[i], av[i] * bv[i]);
  }
  combine(a, b, Mode::add, std::string("checked"));
  EXPECT_EQ(combine.statistics().traces, 2) << "a literal and a std::string of the same text are one value";
  EXPECT_THROW(combine(a, b, Mode::add, "other"), std::runtime_error);
}

TEST(StaticArguments, NestedFunctionsPassTheirValues) {
  auto inner = function([](Tensor x, float scale) { return x * scale; });
  auto outer = function([&](Tensor x, float scale) { return inner(x, scale) + inner(x, 2 * scale); });
  Tensor x = random_tensor(DType::f32, {5}, 12);
  expect_scaled(outer(x, 1.5f), x, 4.5f, "nested");
  EXPECT_EQ(inner.statistics().traces, 0) << "inlined into the outer trace";
}

TEST(StaticArguments, GradientsTakeStaticArgumentsThatArgnumsCount) {
  auto loss = [](Tensor w, float scale, Tensor x) { return reduce_sum(w * w * x) * scale; };
  Tensor w = random_tensor(DType::f32, {4}, 13), x = random_tensor(DType::f32, {4}, 14);
  std::vector<float> wv = values(w), xv = values(x);

  Tensor dw = grad(loss)(w, 3.0f, x);
  std::vector<float> got = values(dw);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], 6 * wv[i] * xv[i], 1e-5);

  auto [value, grads] = value_and_grad(loss, {.argnums = {2, 0}})(w, 0.5f, x);
  ASSERT_EQ(grads.size(), 2u);
  std::vector<float> dx = values(grads[0]), dw_half = values(grads[1]);
  for (std::size_t i = 0; i < dx.size(); ++i) {
    EXPECT_NEAR(dx[i], 0.5f * wv[i] * wv[i], 1e-5);
    EXPECT_NEAR(dw_half[i], wv[i] * xv[i], 1e-5);
  }

  try {
    grad(loss, {.argnums = {1}})(w, 3.0f, x);
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("argnums names argument 1, the static argument float 3"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(grad(loss, {.argnums = {3}})(w, 3.0f, x), ValueError) << "three arguments in all";

  // Compiled: a training step with its learning rate as a static value.
  auto step = function([&](Tensor w, Tensor x, float rate) { return w - grad(loss)(w, 1.0f, x) * rate; },
                       {.jit_compile = true});
  std::vector<float> stepped = values(step(w, x, 0.1f));
  for (std::size_t i = 0; i < stepped.size(); ++i) EXPECT_NEAR(stepped[i], wv[i] - 0.1f * 2 * wv[i] * xv[i], 1e-5);
  EXPECT_EQ(step.statistics().traces, 1);
}

}  // namespace
}  // namespace kiln
