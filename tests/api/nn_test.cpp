// Numerics of the nn composites beyond agreement between the executors (tests/jit/differential_ops_test.cpp
// checks that): results against a long double evaluation of the function itself.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

// The tanh-form gelu 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
long double gelu_tanh_form(long double x, long double& twice_u) {
  twice_u = 2 * std::sqrt(2.0L / std::numbers::pi_v<long double>) * (x + 0.044715L * x * x * x);
  return x / (1 + std::exp(-twice_u));
}

// 4096 inputs: three in four in [lowest, -2], where 1 + tanh or 1 + erf cancels, the rest in [-2, 6].
std::vector<float> mostly_negative(float lowest, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> negative(lowest, -2.0f), moderate(-2.0f, 6.0f);
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) values.push_back(i % 4 == 3 ? moderate(generator) : negative(generator));
  return values;
}

struct Expected {
  long double value, relative_error_allowed;
};

// `gelu` on `values` with the standard executor and the JIT, each result within the relative error that
// `expected` allows of its value.
template <class Gelu, class Reference>
void expect_relatively_accurate(Gelu gelu, const std::vector<float>& values, Reference expected) {
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (const bool jit : {false, true}) {
    const Tensor result = function(gelu, {.jit_compile = jit})(x);
    const std::vector<float> got = result.to_vector<float>();
    ASSERT_EQ(got.size(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Expected want = expected(values[i]);
      ASSERT_LE(std::fabs((got[i] - want.value) / want.value), want.relative_error_allowed)
          << (jit ? "JIT" : "standard") << ": gelu(" << values[i] << ") = " << got[i] << ", want "
          << static_cast<double>(want.value);
    }
  }
}

// For large negative x, 1 + tanh(u) cancels in float: at x = -3 only ~12 bits are left, and from about x = -7.8 on
// it is 0 where gelu is 1e-20 and smaller. The relative error allowed is what float inputs to 2u's polynomial cost
// anyway (a few ULP of 2u, times |2u|, the condition number of e^(-2u)) plus a few ULP: so a result of 0, or
// half the digits, fails.
TEST(NeuralNetwork, GeluKeepsItsRelativeAccuracyWhere1PlusTanhCancels) {
  expect_relatively_accurate([](Tensor input) { return nn::gelu(input); }, mostly_negative(-9.5f, 5),
                             [](float x) {
                               long double twice_u = 0;
                               const long double value = gelu_tanh_form(x, twice_u);
                               return Expected{value, (4 * std::fabs(twice_u) + 8) * 0x1p-23L};
                             });
}

// The erf form x Phi(x) = 0.5 x erfc(-x / sqrt 2): 0.5 x (1 + erf(x / sqrt 2)) cancels like 1 + tanh does (at
// x = -4 a float keeps ~12 bits, and from x = -5.9 it is 0). The argument -x / sqrt 2 is rounded to float, and
// erfc's relative condition number is ~x^2 there: so x^2 ULP plus a few.
TEST(NeuralNetwork, ExactGeluKeepsItsRelativeAccuracyWhere1PlusErfCancels) {
  expect_relatively_accurate([](Tensor input) { return nn::gelu(input, nn::GeluApproximation::erf); },
                             mostly_negative(-12.5f, 6),
                             [](float x) {
                               const long double value = x;
                               return Expected{0.5L * value * std::erfc(-value / std::numbers::sqrt2_v<long double>),
                                               (value * value + 8) * 0x1p-23L};
                             });
}

// Below the normal floats gelu is -0 (nn.cpp: every subnormal intermediate would cost a microcode assist): from
// x = -9.97 in the tanh form (2u < -87), from x = -12.87 in the erf form (-x / sqrt 2 > 9.1), where the exact
// result is below 2e-37 and 5e-37 in magnitude; just above, it keeps its relative accuracy (the tests above),
// and large positive inputs give x.
TEST(NeuralNetwork, GeluIsMinusZeroWhereItsResultWouldBeBelowTheNormalFloats) {
  const std::vector<float> values = {-10.0f, -10.5f, -12.9f, -13.0f, -50.0f, -1e4f, -3e38f, -INFINITY,
                                     50.0f,  1e4f,   3e38f,  INFINITY, NAN};
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (const bool jit : {false, true}) {
    const std::vector<float> tanh_form = function([](Tensor x) { return nn::gelu(x); }, {.jit_compile = jit})(x)
                                             .to_vector<float>();
    const std::vector<float> erf_form =
        function([](Tensor x) { return nn::gelu(x, nn::GeluApproximation::erf); }, {.jit_compile = jit})(x)
            .to_vector<float>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float value = values[i];
      const std::string where = std::string(jit ? "JIT" : "standard") + ", x = " + std::to_string(value);
      if (std::isnan(value)) {
        EXPECT_TRUE(std::isnan(tanh_form[i]) && std::isnan(erf_form[i])) << where;
      } else if (value > 0) {
        EXPECT_EQ(tanh_form[i], value) << where;
        EXPECT_EQ(erf_form[i], value) << where;
      } else {
        EXPECT_TRUE(tanh_form[i] == 0 && std::signbit(tanh_form[i])) << where << ": " << tanh_form[i];
        if (value <= -12.9f) {
          EXPECT_TRUE(erf_form[i] == 0 && std::signbit(erf_form[i])) << where << ": " << erf_form[i];
        }
      }
    }
    // Just above the limit of the erf form, a normal result: 0.5 x erfc(-x / sqrt 2) at x = -12.8 is -4.3e-37.
    EXPECT_LT(erf_form[1], 0.0f) << "erf form at -10.5";
  }
}

TEST(NeuralNetwork, OneHotMarksTheIndexAndZeroesRowsOutOfRange) {
  const std::vector<std::int64_t> labels = {2, 0, 3, -1, 4, 1};
  for (DType index_dtype : {DType::i32, DType::i64})
    for (bool jit : {false, true}) {
      auto encode = function([](Tensor indices) { return nn::one_hot(indices, 4, DType::f64); }, {.jit_compile = jit});
      const Tensor result = encode(cast(from_vector(labels, {2, 3}), index_dtype));
      EXPECT_EQ(result.shape(), Shape({2, 3, 4}));
      EXPECT_EQ(result.dtype(), DType::f64);
      std::vector<double> expected;
      for (std::int64_t label : labels)
        for (std::int64_t column = 0; column < 4; ++column) expected.push_back(label == column ? 1.0 : 0.0);
      EXPECT_EQ(result.to_vector<double>(), expected) << (jit ? "JIT" : "standard");
    }
  EXPECT_EQ(nn::one_hot(from_vector(std::vector<std::int32_t>{1}), 3, DType::boolean).to_vector<bool>(),
            (std::vector<bool>{false, true, false}));
  EXPECT_EQ(nn::one_hot(from_vector(std::vector<std::int32_t>{1, 2}), 0).shape(), Shape({2, 0}));
  EXPECT_THROW(nn::one_hot(from_vector(std::vector<float>{1}), 3), DTypeError);
  EXPECT_THROW(nn::one_hot(from_vector(std::vector<std::int32_t>{1}), -1), ValueError);
}

}  // namespace
}  // namespace kiln
