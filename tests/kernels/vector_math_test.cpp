// Tests for src/kernels/cpu/vector_math.h: accuracy against double-precision std::
// functions (in ULPs of the float result), IEEE special values, denormals, values at
// the seams of range reductions and branch splits, scalar == vector bit identity, and
// the load/store/select/any helpers.
//
// Every f32v stays inside the always-inline calls of a kernel-style wrapper that takes
// pointers, so this file also builds without AVX-512 (-mavx2, baseline x86-64).

#include "kernels/vector_math_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace vm = kiln::vector_math;
namespace support = kiln::testing::vector_math;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kDenormMin = std::numeric_limits<float>::denorm_min();
constexpr float kFloatMin = std::numeric_limits<float>::min();
constexpr float kFloatMax = std::numeric_limits<float>::max();

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

using support::float_ulp_error;

// One function under test: a kLanes-lane kernel (pointer in, pointer out), the scalar
// overload, the double-precision reference and the ULP bounds.
struct Function {
  std::string name;
  void (*vector)(const float* in, float* out);
  float (*scalar)(float);
  double (*reference)(double);
  double contract_bound;  // promised by vector_math.h
  double measured_bound;  // the exhaustive maximum (docs/vector_math.md) plus a little:
                          // guards against silent accuracy regressions. With FMA only:
                          // without it polynomials round twice per step. The larger of
                          // the AVX-512 and the portable FMA implementation's maxima.
  double ulp_bound() const { return vm::kHardwareFma ? measured_bound : contract_bound; }
};

// clang-format off
#define KILN_TEST_FUNCTION(NAME, REFERENCE, CONTRACT, MEASURED)                           \
  Function{#NAME,                                                                        \
           [](const float* in, float* out) { vm::store(out, vm::NAME(vm::load(in))); }, \
           [](float x) { return vm::NAME(x); }, REFERENCE, CONTRACT, MEASURED}
// clang-format on

// The AVX-512 erfc (tables, 3.15 ULP every float) and the portable one (3.74).
#if defined(__AVX512F__)
constexpr double kErfcMeasuredBound = 3.2;
#else
constexpr double kErfcMeasuredBound = 3.8;
#endif

double reference_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

const std::vector<Function>& all_functions() {
  static const std::vector<Function> functions = {
      KILN_TEST_FUNCTION(
          sin, [](double x) { return std::sin(x); }, 2.0, 1.6),
      KILN_TEST_FUNCTION(
          cos, [](double x) { return std::cos(x); }, 2.0, 1.6),
      KILN_TEST_FUNCTION(
          exp, [](double x) { return std::exp(x); }, 2.0, 1.1),
      KILN_TEST_FUNCTION(
          log, [](double x) { return std::log(x); }, 2.0, 1.1),
      KILN_TEST_FUNCTION(
          tanh, [](double x) { return std::tanh(x); }, 4.0, 1.1),
      KILN_TEST_FUNCTION(
          erf, [](double x) { return std::erf(x); }, 4.0, 1.35),
      KILN_TEST_FUNCTION(
          erfc, [](double x) { return std::erfc(x); }, 4.0, kErfcMeasuredBound),
      KILN_TEST_FUNCTION(sigmoid, reference_sigmoid, 4.0, 3.1),
      KILN_TEST_FUNCTION(
          log1p, [](double x) { return std::log1p(x); }, 4.0, 1.5),
      KILN_TEST_FUNCTION(
          expm1, [](double x) { return std::expm1(x); }, 4.0, 2.4),
      KILN_TEST_FUNCTION(
          atan, [](double x) { return std::atan(x); }, 2.0, 1.45),
  };
  return functions;
}
#undef KILN_TEST_FUNCTION

const Function& function_named(const std::string& name) { return support::function_named(all_functions(), name); }

// Checks every input against the reference; reports the worst offender.
void expect_within_bound(const Function& function, const std::vector<float>& inputs, const std::string& what) {
  const std::vector<float> outputs = support::evaluate(function, inputs);
  const support::Worst worst = support::worst_error(function, inputs, outputs, float_ulp_error);
  EXPECT_LE(worst.error, function.ulp_bound())
      << function.name << " on " << what << ": x = " << inputs[worst.index] << " (bits 0x" << std::hex
      << bits_of(inputs[worst.index]) << std::dec << ") gives " << outputs[worst.index] << ", want "
      << function.reference(inputs[worst.index]);
}

using support::add_neighbours;
using support::Rng;

constexpr int kRandomCount = 1 << 18;

// ---- the metric itself ----------------------------------------------------------------

TEST(VectorMathUlp, MeasuresUnitsInTheLastPlace) {
  EXPECT_EQ(float_ulp_error(1.0f, 1.0), 0.0);
  EXPECT_EQ(float_ulp_error(std::nextafter(1.0f, 2.0f), 1.0), 1.0);
  EXPECT_EQ(float_ulp_error(std::nextafter(1.0f, 0.0f), 1.0), 0.5);  // ULP of 1 is 2^-23
  EXPECT_EQ(float_ulp_error(2 * kDenormMin, static_cast<double>(kDenormMin)), 1.0);
  EXPECT_EQ(float_ulp_error(0.0f, -0.0), 0.0);
  EXPECT_EQ(float_ulp_error(kInf, 1e39), 0.0);  // 1e39 rounds to +inf in float
  EXPECT_TRUE(std::isinf(float_ulp_error(kFloatMax, 1e39)));
  EXPECT_TRUE(std::isinf(float_ulp_error(kNaN, 1.0)));
  EXPECT_TRUE(std::isinf(float_ulp_error(1.0f, std::nan(""))));
  EXPECT_EQ(float_ulp_error(kNaN, std::nan("")), 0.0);
}

// ---- accuracy on random inputs ----------------------------------------------------------

struct RandomRange {
  const char* function;
  double low, high;  // low > high: all finite floats
};

class VectorMathRandom : public ::testing::TestWithParam<RandomRange> {};

TEST_P(VectorMathRandom, WithinUlpBound) {
  const RandomRange range = GetParam();
  const Function& function = function_named(range.function);
  const std::uint64_t seed =
      std::hash<std::string>{}(function.name) ^ static_cast<std::uint64_t>(static_cast<std::int64_t>(range.low));
  if (range.low > range.high) {
    expect_within_bound(function, support::all_finite<float>(kRandomCount, seed), "all finite floats");
  } else {
    char label[64];
    std::snprintf(label, sizeof label, "[%g, %g]", range.low, range.high);
    expect_within_bound(function, support::uniform<float>(range.low, range.high, kRandomCount, seed), label);
  }
}

constexpr double kAll = 1, kAllEnd = 0;
INSTANTIATE_TEST_SUITE_P(
    Ranges, VectorMathRandom,
    ::testing::Values(RandomRange{"sin", -3.2, 3.2}, RandomRange{"sin", -100, 100}, RandomRange{"sin", -1e5, 1e5},
                      RandomRange{"sin", -1e7, 1e7}, RandomRange{"sin", kAll, kAllEnd}, RandomRange{"cos", -3.2, 3.2},
                      RandomRange{"cos", -100, 100}, RandomRange{"cos", -1e5, 1e5}, RandomRange{"cos", -1e7, 1e7},
                      RandomRange{"cos", kAll, kAllEnd}, RandomRange{"exp", -1, 1}, RandomRange{"exp", -104, 89},
                      RandomRange{"exp", kAll, kAllEnd}, RandomRange{"log", 0, 2}, RandomRange{"log", 0.5, 1.5},
                      RandomRange{"log", 0, 1e6}, RandomRange{"log", kAll, kAllEnd}, RandomRange{"tanh", -1, 1},
                      RandomRange{"tanh", -10, 10}, RandomRange{"tanh", kAll, kAllEnd}, RandomRange{"erf", -1, 1},
                      RandomRange{"erf", -5, 5}, RandomRange{"erf", kAll, kAllEnd}, RandomRange{"erfc", -1, 1},
                      RandomRange{"erfc", -12, 12}, RandomRange{"erfc", 1, 10.1}, RandomRange{"erfc", kAll, kAllEnd},
                      RandomRange{"sigmoid", -20, 20}, RandomRange{"sigmoid", -110, 90},
                      RandomRange{"sigmoid", kAll, kAllEnd}, RandomRange{"log1p", -1e-6, 1e-6},
                      RandomRange{"log1p", -0.5, 1}, RandomRange{"log1p", -1, 0}, RandomRange{"log1p", 0, 1e6},
                      RandomRange{"log1p", kAll, kAllEnd}, RandomRange{"expm1", -1e-6, 1e-6},
                      RandomRange{"expm1", -1, 1}, RandomRange{"expm1", -20, 89}, RandomRange{"expm1", kAll, kAllEnd},
                      RandomRange{"atan", -0.6, 0.6}, RandomRange{"atan", -3, 3}, RandomRange{"atan", -1e4, 1e4},
                      RandomRange{"atan", kAll, kAllEnd}),
    [](const ::testing::TestParamInfo<RandomRange>& info) {
      return std::string(info.param.function) + "_" + std::to_string(info.index);
    });

// ---- special values ----------------------------------------------------------------------

// Exact expected results; NaN means "any NaN", zeros are compared with their sign.
struct Special {
  const char* function;
  float input;
  float expected;
};

class VectorMathExactSpecial : public ::testing::TestWithParam<Special> {};

TEST_P(VectorMathExactSpecial, ExactResult) {
  const Special special = GetParam();
  const Function& function = function_named(special.function);
  float in[vm::kLanes], out[vm::kLanes];
  std::fill(in, in + vm::kLanes, 0.5f);
  constexpr int lane = vm::kLanes / 2 - 1;  // a lane in the middle, next to ordinary values
  in[lane] = special.input;
  function.vector(in, out);
  const float scalar = function.scalar(special.input);
  if (std::isnan(special.expected)) {
    EXPECT_TRUE(std::isnan(out[lane])) << special.function << "(" << special.input << ") = " << out[lane];
    EXPECT_TRUE(std::isnan(scalar));
  } else {
    EXPECT_EQ(bits_of(out[lane]), bits_of(special.expected))
        << special.function << "(" << special.input << ") = " << out[lane] << ", want " << special.expected;
    EXPECT_EQ(bits_of(scalar), bits_of(special.expected));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Values, VectorMathExactSpecial,
    ::testing::Values(
        // sin / cos
        Special{"sin", 0.0f, 0.0f}, Special{"sin", -0.0f, -0.0f}, Special{"sin", kNaN, kNaN},
        Special{"sin", kInf, kNaN}, Special{"sin", -kInf, kNaN}, Special{"sin", kDenormMin, kDenormMin},
        Special{"sin", -kDenormMin, -kDenormMin}, Special{"sin", 1e-30f, 1e-30f}, Special{"cos", 0.0f, 1.0f},
        Special{"cos", -0.0f, 1.0f}, Special{"cos", kNaN, kNaN}, Special{"cos", kInf, kNaN},
        Special{"cos", -kInf, kNaN}, Special{"cos", kDenormMin, 1.0f},
        // exp
        Special{"exp", 0.0f, 1.0f}, Special{"exp", -0.0f, 1.0f}, Special{"exp", kNaN, kNaN}, Special{"exp", kInf, kInf},
        Special{"exp", -kInf, 0.0f}, Special{"exp", 89.0f, kInf}, Special{"exp", 1000.0f, kInf},
        Special{"exp", kFloatMax, kInf}, Special{"exp", -104.0f, 0.0f}, Special{"exp", -1000.0f, 0.0f},
        Special{"exp", -kFloatMax, 0.0f}, Special{"exp", kDenormMin, 1.0f},
        // log
        Special{"log", 1.0f, 0.0f}, Special{"log", 0.0f, -kInf}, Special{"log", -0.0f, -kInf},
        Special{"log", -1.0f, kNaN}, Special{"log", -kDenormMin, kNaN}, Special{"log", -kInf, kNaN},
        Special{"log", kInf, kInf}, Special{"log", kNaN, kNaN},
        // tanh
        Special{"tanh", 0.0f, 0.0f}, Special{"tanh", -0.0f, -0.0f}, Special{"tanh", kInf, 1.0f},
        Special{"tanh", -kInf, -1.0f}, Special{"tanh", kNaN, kNaN}, Special{"tanh", 20.0f, 1.0f},
        Special{"tanh", -1e30f, -1.0f}, Special{"tanh", kDenormMin, kDenormMin},
        Special{"tanh", -kDenormMin, -kDenormMin}, Special{"tanh", 1e-30f, 1e-30f},
        // erf
        Special{"erf", 0.0f, 0.0f}, Special{"erf", -0.0f, -0.0f}, Special{"erf", kInf, 1.0f},
        Special{"erf", -kInf, -1.0f}, Special{"erf", kNaN, kNaN}, Special{"erf", 5.0f, 1.0f},
        Special{"erf", -1e30f, -1.0f},
        // erfc
        Special{"erfc", 0.0f, 1.0f}, Special{"erfc", -0.0f, 1.0f}, Special{"erfc", kInf, 0.0f},
        Special{"erfc", -kInf, 2.0f}, Special{"erfc", kNaN, kNaN}, Special{"erfc", 10.1f, 0.0f},
        Special{"erfc", 1e30f, 0.0f}, Special{"erfc", -10.0f, 2.0f}, Special{"erfc", -1e30f, 2.0f},
        Special{"erfc", kDenormMin, 1.0f},
        // sigmoid
        Special{"sigmoid", 0.0f, 0.5f}, Special{"sigmoid", -0.0f, 0.5f}, Special{"sigmoid", kInf, 1.0f},
        Special{"sigmoid", -kInf, 0.0f}, Special{"sigmoid", kNaN, kNaN}, Special{"sigmoid", 100.0f, 1.0f},
        Special{"sigmoid", kFloatMax, 1.0f}, Special{"sigmoid", -200.0f, 0.0f}, Special{"sigmoid", -kFloatMax, 0.0f},
        // log1p
        Special{"log1p", 0.0f, 0.0f}, Special{"log1p", -0.0f, -0.0f}, Special{"log1p", -1.0f, -kInf},
        Special{"log1p", -1.5f, kNaN}, Special{"log1p", -kInf, kNaN}, Special{"log1p", kInf, kInf},
        Special{"log1p", kNaN, kNaN}, Special{"log1p", kDenormMin, kDenormMin},
        Special{"log1p", -kDenormMin, -kDenormMin}, Special{"log1p", 1e-30f, 1e-30f},
        // expm1
        Special{"expm1", 0.0f, 0.0f}, Special{"expm1", -0.0f, -0.0f}, Special{"expm1", kInf, kInf},
        Special{"expm1", -kInf, -1.0f}, Special{"expm1", kNaN, kNaN}, Special{"expm1", 89.0f, kInf},
        Special{"expm1", kFloatMax, kInf}, Special{"expm1", -20.0f, -1.0f}, Special{"expm1", -kFloatMax, -1.0f},
        Special{"expm1", kDenormMin, kDenormMin}, Special{"expm1", -kDenormMin, -kDenormMin},
        Special{"expm1", 1e-30f, 1e-30f},
        // atan: the floats nearest pi/2 and pi/4
        Special{"atan", 0.0f, 0.0f}, Special{"atan", -0.0f, -0.0f}, Special{"atan", kInf, 1.57079637f},
        Special{"atan", -kInf, -1.57079637f}, Special{"atan", kNaN, kNaN}, Special{"atan", kFloatMax, 1.57079637f},
        Special{"atan", -kFloatMax, -1.57079637f}, Special{"atan", 1.0f, 0.785398185f},
        Special{"atan", -1.0f, -0.785398185f}, Special{"atan", kDenormMin, kDenormMin},
        Special{"atan", -kDenormMin, -kDenormMin}, Special{"atan", 1e-30f, 1e-30f}),
    [](const ::testing::TestParamInfo<Special>& info) {
      return std::string(info.param.function) + "_" + std::to_string(info.index);
    });

TEST(VectorMathSpecial, EveryNaNPropagates) {
  // NaNs with random payloads, both signs, quiet and signaling: bit tricks on the
  // exponent field must never turn one into a number.
  Rng rng{1234};
  std::vector<float> inputs;
  for (int i = 0; i < 100000; ++i) {
    const auto payload = static_cast<std::uint32_t>(rng.next() & 0x7fffffu) | 1u;
    inputs.push_back(from_bits(0x7f800000u | payload | (i % 2 ? 0x80000000u : 0u)));
  }
  for (const Function& function : all_functions()) {
    const std::vector<float> outputs = support::evaluate(function, inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_TRUE(std::isnan(outputs[i]))
          << function.name << "(NaN 0x" << std::hex << bits_of(inputs[i]) << ") = " << outputs[i];
    }
  }
}

TEST(VectorMathSpecial, TinyArgumentsAreRelativelyAccurate) {
  // tanh(x) and sin(x) round to x, erf(x) to 2x/sqrt(pi), for |x| far below 2^-12; erfc(x) to 1 - 2x/sqrt(pi).
  for (const float x : {1e-5f, -1e-5f, 3e-8f, 1e-20f, 1e-38f}) {
    EXPECT_EQ(vm::tanh(x), x);
    EXPECT_EQ(vm::sin(x), x);
    EXPECT_LE(float_ulp_error(vm::erf(x), std::erf(static_cast<double>(x))), 1.0) << x;
    EXPECT_LE(float_ulp_error(vm::erfc(x), std::erfc(static_cast<double>(x))), 1.0) << x;
  }
}

TEST(VectorMathSpecial, ResultsStayInsideTheirRange) {
  // |tanh|, |erf| <= 1, erfc in [0, 2] and sigmoid in [0, 1] everywhere, including just below
  // saturation where a rational approximation could overshoot.
  std::vector<float> inputs = support::uniform<float>(-12, 12, kRandomCount, 7);
  for (float x = 0.5f; x < 12.0f; x = std::nextafter(x, kInf) + 1e-4f) inputs.push_back(x);
  for (const std::string name : {"tanh", "erf", "erfc", "sigmoid"}) {
    const Function& function = function_named(name);
    const std::vector<float> outputs = support::evaluate(function, inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float low = name == "sigmoid" || name == "erfc" ? 0.0f : -1.0f, high = name == "erfc" ? 2.0f : 1.0f;
      ASSERT_TRUE(outputs[i] >= low && outputs[i] <= high) << name << "(" << inputs[i] << ") = " << outputs[i];
    }
  }
}

// ---- denormals -----------------------------------------------------------------------------

TEST(VectorMathDenormals, DenormalInputs) {
  std::vector<float> inputs;
  Rng rng{99};
  for (int i = 0; i < 100000; ++i) {
    const auto mantissa = static_cast<std::uint32_t>(rng.next() & 0x7fffffu);
    inputs.push_back(from_bits(mantissa | (i % 2 ? 0x80000000u : 0u)));
  }
  for (std::uint32_t bits = 1; bits < 64; ++bits) inputs.push_back(from_bits(bits));
  inputs.push_back(from_bits(0x7fffffu));  // largest denormal
  inputs.push_back(kFloatMin);
  for (const Function& function : all_functions()) {
    expect_within_bound(function, inputs, "denormal inputs");
  }
}

TEST(VectorMathDenormals, DenormalResults) {
  // exp and sigmoid results fall into the denormal range for x in about [-104, -87.3].
  const std::vector<float> inputs = support::uniform<float>(-104, -87, kRandomCount, 5);
  expect_within_bound(function_named("exp"), inputs, "exp with denormal results");
  expect_within_bound(function_named("sigmoid"), inputs, "sigmoid with denormal results");
  // The smallest results: exp(x) rounds to 2^-149 or to 0 around x = -103.97.
  std::vector<float> edge;
  add_neighbours(edge, -103.972084f, 2000);
  add_neighbours(edge, -87.3365479f, 2000);  // exp(x) = FLT_MIN
  expect_within_bound(function_named("exp"), edge, "exp at the denormal edges");
  expect_within_bound(function_named("sigmoid"), edge, "sigmoid at the denormal edges");
}

// ---- seams of the range reductions and branch splits ---------------------------------------

TEST(VectorMathSeams, SinCosNearMultiplesOfPiOver2) {
  // The float nearest to k pi/2 and its neighbours: there sin or cos is tiny and the
  // Cody-Waite reduction must keep its relative accuracy (the hardest case for it).
  std::vector<float> inputs;
  for (int k = 1; k < 90000; k = k < 200 ? k + 1 : k + 7) {
    const float x = static_cast<float>(k * 1.5707963267948966);
    add_neighbours(inputs, x, 2);
    add_neighbours(inputs, -x, 1);
  }
  expect_within_bound(function_named("sin"), inputs, "near multiples of pi/2");
  expect_within_bound(function_named("cos"), inputs, "near multiples of pi/2");
  // Near 0 and at the quadrant boundaries +-pi/4 (odd multiples).
  std::vector<float> boundaries;
  for (int k = -41; k <= 41; k += 2) {
    add_neighbours(boundaries, static_cast<float>(k * 0.7853981633974483), 50);
  }
  expect_within_bound(function_named("sin"), boundaries, "near odd multiples of pi/4");
  expect_within_bound(function_named("cos"), boundaries, "near odd multiples of pi/4");
}

TEST(VectorMathSeams, SinCosAroundTheSlowPathThreshold) {
  // Lanes above 2^17 take the per-lane double path; mixed vectors must keep the fast
  // lanes' results, and both sides of the threshold must be accurate.
  std::vector<float> inputs;
  add_neighbours(inputs, 131072.0f, 300);
  add_neighbours(inputs, -131072.0f, 300);
  for (const float big : {1e6f, 1e10f, 1e20f, 1e30f, kFloatMax, -kFloatMax, 3.4e38f}) {
    add_neighbours(inputs, big, 20);
  }
  const std::vector<float> mixed = support::uniform<float>(-2e5, 2e5, kRandomCount, 11);
  inputs.insert(inputs.end(), mixed.begin(), mixed.end());
  for (const char* name : {"sin", "cos"}) {
    const Function& function = function_named(name);
    expect_within_bound(function, inputs, "around the slow-path threshold");
    const std::vector<float> outputs = support::evaluate(function, inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(bits_of(outputs[i]), bits_of(function.scalar(inputs[i])))
          << name << "(" << inputs[i] << ") depends on the other lanes";
    }
  }
}

TEST(VectorMathSeams, ExpNearReductionAndOverflowBoundaries) {
  std::vector<float> inputs;
  for (int n = -149; n <= 128; ++n) {  // x near (n + 1/2) ln2, where n = round(x/ln2) flips
    add_neighbours(inputs, static_cast<float>((n + 0.5) * 0.6931471805599453), 3);
    add_neighbours(inputs, static_cast<float>(n * 0.6931471805599453), 3);
  }
  add_neighbours(inputs, 88.7228394f, 500);  // largest x with a finite result
  add_neighbours(inputs, 89.0f, 5);          // the clamp
  add_neighbours(inputs, -104.0f, 5);
  expect_within_bound(function_named("exp"), inputs, "reduction and overflow boundaries");
  // The overflow threshold is exact: the largest x whose exp rounds to a finite float
  // gives a finite result, the next float gives inf.
  float last_finite = 88.0f;
  while (std::isfinite(static_cast<float>(std::exp(std::nextafter(last_finite, kInf))))) {
    last_finite = std::nextafter(last_finite, kInf);
  }
  EXPECT_TRUE(std::isfinite(vm::exp(last_finite))) << last_finite;
  EXPECT_EQ(vm::exp(std::nextafter(last_finite, kInf)), kInf);
}

TEST(VectorMathSeams, LogAroundTheMantissaSplit) {
  std::vector<float> inputs;
  for (int e = -149; e <= 127; ++e) {  // around sqrt(1/2) 2^e and 2^e
    add_neighbours(inputs, std::ldexp(0.70710678f, e), 3);
    add_neighbours(inputs, std::ldexp(1.0f, e), 3);
  }
  add_neighbours(inputs, 1.0f, 3000);  // log(x) ~ x - 1: relative accuracy near 1
  add_neighbours(inputs, kFloatMin, 100);
  add_neighbours(inputs, kFloatMax, 100);
  expect_within_bound(function_named("log"), inputs, "around the mantissa split");
}

TEST(VectorMathSeams, TanhErfSigmoidAroundTheirSplits) {
  std::vector<float> inputs;
  for (const float split : {0.75f, 1.0f, 3.93f, 9.0f, 9.0109f, 10.0f, 0.5493f}) {
    add_neighbours(inputs, split, 3000);
    add_neighbours(inputs, -split, 3000);
  }
  expect_within_bound(function_named("tanh"), inputs, "around the splits");
  expect_within_bound(function_named("erf"), inputs, "around the splits");
  expect_within_bound(function_named("sigmoid"), inputs, "around the splits");
}

// erfc's portable pieces meet at |x| = 1 and 2; the AVX-512 tables' intervals change width at 1, 3 and 7 (and
// split [0, 1) at 1/8, 3/8, ...); its results turn denormal from 9.19, e^(-x^2) itself from 9.35, and round to 0
// from 10.06 (its clamp is 10.1; 9 for negative x).
TEST(VectorMathSeams, ErfcAroundItsSplitsAndItsUnderflow) {
  std::vector<float> inputs;
  for (const float split :
       {0.125f, 0.375f, 0.875f, 1.0f, 2.0f, 2.75f, 3.0f, 7.0f, 9.0f, 9.19f, 9.345f, 10.06f, 10.1f}) {
    add_neighbours(inputs, split, 3000);
    add_neighbours(inputs, -split, 3000);
  }
  expect_within_bound(function_named("erfc"), inputs, "around the splits");
}

// ---- scalar == vector -----------------------------------------------------------------------

TEST(VectorMathScalar, IdenticalBitsToTheVectorLanes) {
  std::vector<float> inputs = support::all_finite<float>(kRandomCount, 21);
  const std::vector<float> moderate = support::uniform<float>(-12, 12, kRandomCount, 22);
  inputs.insert(inputs.end(), moderate.begin(), moderate.end());
  for (const float special : {0.0f, -0.0f, kInf, -kInf, kNaN, kDenormMin, 1e5f, 2e5f}) {
    inputs.push_back(special);
  }
  inputs.push_back(1.0f);  // an odd count: the last vector goes through load_partial
  for (const Function& function : all_functions()) {
    const std::vector<float> outputs = support::evaluate(function, inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float scalar = function.scalar(inputs[i]);
      if (std::isnan(scalar) && std::isnan(outputs[i])) continue;
      ASSERT_EQ(bits_of(scalar), bits_of(outputs[i]))
          << function.name << "(" << inputs[i] << "): scalar " << scalar << ", vector " << outputs[i];
    }
  }
}

// ---- helpers ---------------------------------------------------------------------------------

TEST(VectorMathHelpers, LoadAndStoreAreUnaligned) {
  float buffer[vm::kLanes + 1];
  for (int i = 0; i <= vm::kLanes; ++i) buffer[i] = static_cast<float>(i);
  const vm::f32v value = vm::load(buffer + 1);
  for (int lane = 0; lane < vm::kLanes; ++lane) EXPECT_EQ(value[lane], lane + 1.0f);
  float out[vm::kLanes + 1] = {};
  vm::store(out + 1, value);
  EXPECT_EQ(out[0], 0.0f);
  for (int lane = 0; lane < vm::kLanes; ++lane) EXPECT_EQ(out[lane + 1], lane + 1.0f);
}

TEST(VectorMathHelpers, PartialLoadAndStoreTouchOnlyCountElements) {
  for (int count = 0; count <= vm::kLanes; ++count) {
    // The source is exactly `count` floats long (a separate allocation, so reading past
    // it would be caught by sanitizers) and the destination has sentinels after it.
    std::vector<float> source(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) source[static_cast<std::size_t>(i)] = 10.0f + i;
    const vm::f32v value = vm::load_partial(source.data(), count);
    for (int lane = 0; lane < vm::kLanes; ++lane) {
      EXPECT_EQ(value[lane], lane < count ? 10.0f + lane : 0.0f) << count << " " << lane;
    }
    float destination[vm::kLanes];
    std::fill(destination, destination + vm::kLanes, -1.0f);
    vm::store_partial(destination, vm::broadcast(7.0f), count);
    for (int i = 0; i < vm::kLanes; ++i) {
      EXPECT_EQ(destination[i], i < count ? 7.0f : -1.0f) << count << " " << i;
    }
  }
}

TEST(VectorMathHelpers, BroadcastSelectAny) {
  const vm::f32v minus_zero = vm::broadcast(-0.0f);
  for (int lane = 0; lane < vm::kLanes; ++lane) EXPECT_EQ(bits_of(minus_zero[lane]), 0x80000000u);
  float ramp[vm::kLanes];
  for (int i = 0; i < vm::kLanes; ++i) ramp[i] = static_cast<float>(i);
  const vm::f32v x = vm::load(ramp);
  const vm::f32v chosen = vm::select(x < 5.0f, vm::broadcast(1.0f), vm::broadcast(2.0f));
  for (int lane = 0; lane < vm::kLanes; ++lane) EXPECT_EQ(chosen[lane], lane < 5 ? 1.0f : 2.0f);
  EXPECT_FALSE(vm::any(x > 100.0f));
  EXPECT_FALSE(vm::any(x != x));
  for (int lane = 0; lane < vm::kLanes; ++lane) {  // each single lane is seen
    EXPECT_TRUE(vm::any(x == static_cast<float>(lane))) << lane;
  }
  vm::i32v mask = {};
  EXPECT_FALSE(vm::any(mask));
  mask[vm::kLanes - 1] = 1;  // any nonzero lane counts as true
  EXPECT_TRUE(vm::any(mask));
}

}  // namespace
