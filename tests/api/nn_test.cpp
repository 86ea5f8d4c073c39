// Numerics of the nn composites beyond agreement between the executors (tests/jit/differential_ops_test.cpp
// checks that): results against a long double evaluation of the function itself.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace kiln {
namespace {

// The tanh-form gelu 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
long double gelu_tanh_form(long double x, long double& twice_u) {
  twice_u = 2 * std::sqrt(2.0L / std::numbers::pi_v<long double>) * (x + 0.044715L * x * x * x);
  return x / (1 + std::exp(-twice_u));
}

// For large negative x, 1 + tanh(u) cancels in float: at x = -3 only ~12 bits are left, and from about x = -7.8 on
// it is 0 where gelu is 1e-20 and smaller. The relative error allowed is what float inputs to 2u's polynomial cost
// anyway (a few ULP of 2u, times |2u|, the condition number of e^(-2u)) plus a few ULP: so a result of 0, or
// half the digits, fails.
TEST(NeuralNetwork, GeluKeepsItsRelativeAccuracyWhere1PlusTanhCancels) {
  std::mt19937 generator(5);
  std::uniform_real_distribution<float> negative(-9.5f, -2.0f), moderate(-2.0f, 6.0f);
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) values.push_back(i % 4 == 3 ? moderate(generator) : negative(generator));
  const auto count = static_cast<std::int64_t>(values.size());
  const Tensor x = from_vector(values, {count});
  const auto gelu = [](Tensor input) { return nn::gelu(input); };
  for (const bool jit : {false, true}) {
    const std::vector<float> got = function(gelu, {.jit_compile = jit})(x).to_vector<float>();
    ASSERT_EQ(got.size(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      long double twice_u = 0;
      const long double want = gelu_tanh_form(values[i], twice_u);
      const long double allowed = (4 * std::fabs(twice_u) + 8) * 0x1p-23L;
      ASSERT_LE(std::fabs((got[i] - want) / want), allowed)
          << (jit ? "JIT" : "standard") << ": gelu(" << values[i] << ") = " << got[i] << ", want "
          << static_cast<double>(want);
    }
  }
}

// The erf form x Phi(x) = 0.5 x erfc(-x / sqrt 2): 0.5 x (1 + erf(x / sqrt 2)) cancels like 1 + tanh does (at
// x = -4 a float keeps ~12 bits, and from x = -5.9 it is 0). The argument -x / sqrt 2 is rounded to float, and
// erfc's relative condition number is ~x^2 there: so x^2 ULP plus a few.
TEST(NeuralNetwork, ExactGeluKeepsItsRelativeAccuracyWhere1PlusErfCancels) {
  std::mt19937 generator(6);
  std::uniform_real_distribution<float> negative(-12.5f, -2.0f), moderate(-2.0f, 6.0f);
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) values.push_back(i % 4 == 3 ? moderate(generator) : negative(generator));
  const auto count = static_cast<std::int64_t>(values.size());
  const Tensor x = from_vector(values, {count});
  const auto gelu = [](Tensor input) { return nn::gelu(input, nn::GeluApproximation::erf); };
  for (const bool jit : {false, true}) {
    const std::vector<float> got = function(gelu, {.jit_compile = jit})(x).to_vector<float>();
    ASSERT_EQ(got.size(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const long double value = values[i];
      const long double want = 0.5L * value * std::erfc(-value / std::numbers::sqrt2_v<long double>);
      const long double allowed = (value * value + 8) * 0x1p-23L;
      ASSERT_LE(std::fabs((got[i] - want) / want), allowed)
          << (jit ? "JIT" : "standard") << ": gelu(" << values[i] << ", erf) = " << got[i] << ", want "
          << static_cast<double>(want);
    }
  }
}

}  // namespace
}  // namespace kiln
