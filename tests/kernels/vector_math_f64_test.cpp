// Tests for src/kernels/cpu/vector_math_f64.h: accuracy against long double references
// (in ULPs of the double result) on random inputs and at the seams of the range
// reductions and branch splits, IEEE special values, denormals, and scalar == vector
// bit identity. x86-64's long double carries 11 more bits than double and glibc's long
// double functions are within an ULP or two of it: a reference good to ~0.001 ULP of a
// double.
//
// Every f64v stays inside the always-inline calls of a kernel-style wrapper that
// takes pointers, as in vector_math_test.cpp.

#include "kernels/vector_math_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace vm = kiln::vector_math;
namespace support = kiln::testing::vector_math;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kDenormMin = std::numeric_limits<double>::denorm_min();
constexpr double kDoubleMax = std::numeric_limits<double>::max();

std::uint64_t bits_of(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Error of `got` in units of the last place of the double nearest to `want` (2^-1074
// in the denormal range); infinite when NaN-ness or infinity does not match.
double ulp_error(double got, long double want) {
  const double rounded = static_cast<double>(want);
  if (std::isnan(rounded) || std::isnan(got)) {
    return std::isnan(rounded) && std::isnan(got) ? 0.0 : kInf;
  }
  if (std::isinf(rounded) || std::isinf(got)) return rounded == got ? 0.0 : kInf;
  int exponent = 0;
  std::frexp(rounded, &exponent);
  const long double ulp = std::ldexp(1.0L, std::max(exponent - 1, -1022) - 52);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

struct Function {
  std::string name;
  void (*vector)(const double* in, double* out);
  double (*scalar)(double);
  long double (*reference)(long double);
  double contract_bound;  // promised by vector_math_f64.h
  double measured_bound;  // the maxima measured on this file's inputs plus a little (FMA
                          // builds; without FMA the polynomials round twice per step)
  double ulp_bound() const { return vm::kHardwareFma ? measured_bound : contract_bound; }
};

// clang-format off
#define KILN_TEST_FUNCTION(NAME, REFERENCE, CONTRACT, MEASURED)                           \
  Function{#NAME,                                                                        \
           [](const double* in, double* out) { vm::store(out, vm::NAME(vm::load(in))); }, \
           [](double x) { return vm::NAME(x); }, REFERENCE, CONTRACT, MEASURED}
// clang-format on

const std::vector<Function>& all_functions() {
  static const std::vector<Function> functions = {
      KILN_TEST_FUNCTION(
          sin, [](long double x) { return sinl(x); }, 2.0, 1.2),
      KILN_TEST_FUNCTION(
          cos, [](long double x) { return cosl(x); }, 2.0, 1.2),
      KILN_TEST_FUNCTION(
          exp, [](long double x) { return expl(x); }, 2.0, 1.0),
      KILN_TEST_FUNCTION(
          log, [](long double x) { return logl(x); }, 2.0, 0.9),
      KILN_TEST_FUNCTION(
          tanh, [](long double x) { return tanhl(x); }, 4.0, 1.6),
      KILN_TEST_FUNCTION(
          erf, [](long double x) { return erfl(x); }, 4.0, 1.4),
      KILN_TEST_FUNCTION(
          erfc, [](long double x) { return erfcl(x); }, 4.0, 1.4),
      KILN_TEST_FUNCTION(
          sigmoid, [](long double x) { return 1.0L / (1.0L + expl(-x)); }, 4.0, 2.4),
      KILN_TEST_FUNCTION(
          log1p, [](long double x) { return log1pl(x); }, 4.0, 1.5),
      KILN_TEST_FUNCTION(
          expm1, [](long double x) { return expm1l(x); }, 4.0, 2.4),
      KILN_TEST_FUNCTION(
          atan, [](long double x) { return atanl(x); }, 2.0, 1.4),
  };
  return functions;
}
#undef KILN_TEST_FUNCTION

const Function& function_named(const std::string& name) { return support::function_named(all_functions(), name); }

void expect_within_bound(const Function& function, const std::vector<double>& inputs, const std::string& what) {
  const std::vector<double> outputs = support::evaluate(function, inputs);
  const support::Worst worst = support::worst_error(function, inputs, outputs, ulp_error);
  EXPECT_LE(worst.error, function.ulp_bound())
      << function.name << " on " << what << ": x = " << inputs[worst.index] << " (bits 0x" << std::hex
      << bits_of(inputs[worst.index]) << std::dec << ") gives " << outputs[worst.index] << ", want "
      << static_cast<double>(function.reference(inputs[worst.index]));
}

using support::add_neighbours;

constexpr int kRandomCount = 1 << 17;

TEST(VectorMathF64Ulp, MeasuresUnitsInTheLastPlace) {
  EXPECT_EQ(ulp_error(1.0, 1.0L), 0.0);
  EXPECT_EQ(ulp_error(std::nextafter(1.0, 2.0), 1.0L), 1.0);
  EXPECT_EQ(ulp_error(std::nextafter(1.0, 0.0), 1.0L), 0.5);  // the ULP of 1 is 2^-52
  EXPECT_EQ(ulp_error(2 * kDenormMin, static_cast<long double>(kDenormMin)), 1.0);
  EXPECT_EQ(ulp_error(kInf, 1e309L), 0.0);  // rounds to inf in double
  EXPECT_TRUE(std::isinf(ulp_error(kDoubleMax, 1e309L)));
  EXPECT_TRUE(std::isinf(ulp_error(kNaN, 1.0L)));
  EXPECT_EQ(ulp_error(kNaN, static_cast<long double>(kNaN)), 0.0);
}

struct RandomRange {
  const char* function;
  double low, high;  // low > high: all finite doubles
};

class VectorMathF64Random : public ::testing::TestWithParam<RandomRange> {};

TEST_P(VectorMathF64Random, WithinUlpBound) {
  const RandomRange range = GetParam();
  const Function& function = function_named(range.function);
  const std::uint64_t seed = std::hash<std::string>{}(function.name) ^ bits_of(range.low);
  if (range.low > range.high) {
    expect_within_bound(function, support::all_finite<double>(kRandomCount, seed), "all finite doubles");
  } else {
    expect_within_bound(function, support::uniform<double>(range.low, range.high, kRandomCount, seed),
                        "[" + std::to_string(range.low) + ", " + std::to_string(range.high) + "]");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, VectorMathF64Random,
    ::testing::Values(RandomRange{"sin", 1, 0}, RandomRange{"sin", -10, 10}, RandomRange{"sin", -6e5, 6e5},
                      RandomRange{"cos", 1, 0}, RandomRange{"cos", -10, 10}, RandomRange{"cos", -6e5, 6e5},
                      RandomRange{"exp", 1, 0}, RandomRange{"exp", -746, 710}, RandomRange{"exp", -1, 1},
                      RandomRange{"log", 1, 0}, RandomRange{"log", 0, 4}, RandomRange{"tanh", 1, 0},
                      RandomRange{"tanh", -25, 25}, RandomRange{"tanh", -1, 1}, RandomRange{"erf", 1, 0},
                      RandomRange{"erf", -7, 7}, RandomRange{"erf", -1.5, 1.5}, RandomRange{"erfc", 1, 0},
                      RandomRange{"erfc", -30, 30}, RandomRange{"erfc", 0.5, 1.5}, RandomRange{"erfc", 1, 27.5},
                      RandomRange{"erfc", 26, 27.3}, RandomRange{"sigmoid", 1, 0}, RandomRange{"sigmoid", -40, 40},
                      RandomRange{"sigmoid", -760, -600}, RandomRange{"log1p", 1, 0}, RandomRange{"log1p", -1e-9, 1e-9},
                      RandomRange{"log1p", -1, 1}, RandomRange{"expm1", 1, 0}, RandomRange{"expm1", -1e-9, 1e-9},
                      RandomRange{"expm1", -1, 1}, RandomRange{"expm1", -40, 710}, RandomRange{"atan", 1, 0},
                      RandomRange{"atan", -0.6, 0.6}, RandomRange{"atan", -3, 3}, RandomRange{"atan", -1e6, 1e6}),
    [](const ::testing::TestParamInfo<RandomRange>& info) {
      return std::string(info.param.function) + "_" + std::to_string(info.index);
    });

TEST(VectorMathF64Special, ValuesAsMathH) {
  for (const Function& function : all_functions()) {
    for (const double x : {0.0, -0.0, kInf, -kInf, kNaN, -kNaN, kDenormMin, -kDenormMin, kDoubleMax, -kDoubleMax}) {
      const double got = function.scalar(x);
      const double want = static_cast<double>(function.reference(x));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << function.name << "(" << x << ") = " << got;
      } else {
        EXPECT_EQ(got, want) << function.name << "(" << x << ")";
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << function.name << "(" << x << "): the sign of " << got;
      }
    }
  }
  EXPECT_EQ(vm::log(0.0), -kInf);
  EXPECT_EQ(vm::log(-0.0), -kInf);
  EXPECT_TRUE(std::isnan(vm::log(-1.0)));
  EXPECT_EQ(vm::exp(-kInf), 0.0);
  EXPECT_EQ(vm::sigmoid(-kInf), 0.0);
  EXPECT_EQ(vm::sigmoid(kInf), 1.0);
  EXPECT_EQ(vm::erfc(0.0), 1.0);
  EXPECT_EQ(vm::erfc(-0.0), 1.0);
  EXPECT_EQ(vm::erfc(-kInf), 2.0);
  EXPECT_EQ(bits_of(vm::erfc(kInf)), bits_of(0.0));  // +0
  EXPECT_TRUE(std::isnan(vm::erfc(kNaN)));
  EXPECT_EQ(vm::log1p(-1.0), -kInf);
  EXPECT_TRUE(std::isnan(vm::log1p(-1.5)));
  EXPECT_EQ(vm::expm1(-40.0), -1.0);
}

TEST(VectorMathF64Seams, SinCosNearMultiplesOfPiOver2AndTheSlowPath) {
  std::vector<double> inputs;
  for (int k = 1; k < 300000; k = k < 300 ? k + 1 : k + 97) {
    const double x = k * 1.5707963267948966;
    add_neighbours(inputs, x, 2);
    add_neighbours(inputs, -x, 1);
  }
  for (int k = -41; k <= 41; k += 2) add_neighbours(inputs, k * 0.7853981633974483, 20);  // quadrant borders
  add_neighbours(inputs, 0x1p19, 200);  // lanes above take libm, lanes below the vector code
  add_neighbours(inputs, -0x1p19, 200);
  for (const double big : {1e6, 1e22, 1e300, kDoubleMax}) add_neighbours(inputs, big, 10);
  for (const char* name : {"sin", "cos"}) {
    const Function& function = function_named(name);
    expect_within_bound(function, inputs, "near multiples of pi/2 and the slow path");
  }
}

TEST(VectorMathF64Seams, ExpAroundReductionAndRangeLimits) {
  std::vector<double> inputs;
  for (int n = -1075; n <= 1024; n += 7) {  // where round(x / ln2) flips
    add_neighbours(inputs, (n + 0.5) * 0.6931471805599453, 2);
  }
  add_neighbours(inputs, 709.782712893384, 200);    // the largest finite result
  add_neighbours(inputs, -708.3964185322641, 200);  // results become denormal
  add_neighbours(inputs, -745.1332191019411, 200);  // the smallest denormal result
  add_neighbours(inputs, 710, 5);                   // the clamps
  add_neighbours(inputs, -746, 5);
  expect_within_bound(function_named("exp"), inputs, "reduction and range limits");
}

TEST(VectorMathF64Seams, LogAroundTheMantissaSplitAndOne) {
  std::vector<double> inputs;
  for (int e = -1074; e <= 1023; e += 3) {
    add_neighbours(inputs, std::ldexp(0.7071067811865476, e), 2);
    add_neighbours(inputs, std::ldexp(1.0, e), 2);
  }
  add_neighbours(inputs, 1.0, 3000);                                // log(x) ~ x - 1: relative accuracy near 1
  add_neighbours(inputs, std::numeric_limits<double>::min(), 100);  // the denormal border
  expect_within_bound(function_named("log"), inputs, "around the mantissa split and 1");
}

TEST(VectorMathF64Seams, TanhErfSigmoidAroundTheirSplits) {
  std::vector<double> inputs;
  for (const double split : {0.625, 1.0, 6.0, 22.0, 19.06, 5.9, 1e-8}) {
    add_neighbours(inputs, split, 2000);
    add_neighbours(inputs, -split, 2000);
  }
  for (const char* name : {"tanh", "erf", "sigmoid"}) {
    expect_within_bound(function_named(name), inputs, "around the splits");
  }
}

TEST(VectorMathF64Seams, ErfcAroundItsSplitsAndIntoTheDenormals) {
  std::vector<double> inputs;
  // The small path's end (0.5), the pieces' border (2.5), and 1, where erfc is 0.157 (the
  // small path would have lost 3.7 ULP there); e^-x^2 scaled in two steps past sqrt(704);
  // erfc denormal from 26.5433 and rounded to 0 from 27.2260 (half the smallest
  // denormal); the clamp at 27.25.
  for (const double split : {0.5, 2.5, 1.0, 26.5329983228432, 26.5432584542510, 27.2260171111084, 27.25}) {
    add_neighbours(inputs, split, 2000);
    add_neighbours(inputs, -split, 200);
  }
  expect_within_bound(function_named("erfc"), inputs, "around the splits and into the denormals");
  // Down through the denormals: erfc(27) = 5.2e-319, 1.05e5 times the smallest denormal.
  const double tiny = vm::erfc(27.0);
  EXPECT_GT(tiny, 0.0);
  EXPECT_LT(tiny, std::numeric_limits<double>::min());
  EXPECT_LE(ulp_error(tiny, erfcl(27.0L)), function_named("erfc").ulp_bound());
  EXPECT_EQ(vm::erfc(27.23), 0.0);         // 0.40 of the smallest denormal
  EXPECT_EQ(vm::erfc(27.22), kDenormMin);  // 0.69 of it
}

// ---- pow (float, computed in double) ----------------------------------------------------

// A vector of pows at a time through the vector path, the tail through a partial vector.
std::vector<float> vector_pow(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> out(x.size());
  constexpr std::size_t lanes = vm::kLanes;
  for (std::size_t i = 0; i < x.size(); i += lanes) {
    const int count = static_cast<int>(std::min(lanes, x.size() - i));
    vm::store_partial(out.data() + i,
                      vm::pow(vm::load_partial(x.data() + i, count), vm::load_partial(y.data() + i, count)), count);
  }
  return out;
}

TEST(VectorMathPow, CorrectlyRoundedOnRandomArguments) {
  // Positive bases to powers in [-20, 20], and negative bases to integer powers.
  std::vector<float> x = support::uniform<float>(0, 10, kRandomCount, 31),
                     y = support::uniform<float>(-20, 20, kRandomCount, 32);
  const std::vector<float> negative = support::uniform<float>(-10, 0, kRandomCount / 4, 33);
  for (const float base : negative) {
    x.push_back(base);
    y.push_back(std::round(y[x.size() % y.size()]));
  }
  const std::vector<float> got = vector_pow(x, y);
  double worst = 0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double error = support::float_ulp_error(got[i], static_cast<double>(powl(x[i], y[i])));
    if (!(error <= worst)) {
      worst = error;
      worst_index = i;
    }
  }
  // 0.5 plus the reference's own error: correctly rounded except within 2e-14 of a midpoint.
  EXPECT_LE(worst, 0.5001) << "pow(" << x[worst_index] << ", " << y[worst_index] << ") = " << got[worst_index];
}

TEST(VectorMathPow, SpecialValuesAsPowf) {
  const float infinity = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> specials = {0.0f,  -0.0f, infinity, -infinity, nan,  1e-40f, -1e-40f, 3.4e38f,
                                       -1.0f, 1.0f,  -0.5f,    0.5f,      2.0f, 3.0f,   -3.0f,   0.25f};
  for (const float x : specials)
    for (const float y : specials) {
      const float got = vm::pow(x, y), want = std::pow(x, y);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "pow(" << x << ", " << y << ") = " << got;
      } else {
        EXPECT_EQ(got, want) << "pow(" << x << ", " << y << ")";
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << "pow(" << x << ", " << y << "): the sign of " << got;
      }
    }
  EXPECT_EQ(vm::pow(-2.0f, 3.0f), -8.0f);
  EXPECT_EQ(vm::pow(-2.0f, 0x1p25f), infinity);  // an even integer: positive
  EXPECT_TRUE(std::isnan(vm::pow(-2.0f, 0.5f)));
  EXPECT_EQ(vm::pow(1e10f, 10.0f), infinity);   // overflow
  EXPECT_EQ(vm::pow(0.5f, 149.0f), 0x1p-149f);  // the smallest denormal, exactly
}

TEST(VectorMathPow, SquareIsXTimesX) {
  // The JIT rewrites pow(x, 2) to square(x): the standard executor's pow must agree.
  for (const float x : support::all_finite<float>(1 << 16, 34)) {
    const float got = vm::pow(x, 2.0f), want = x * x;
    ASSERT_EQ(bits_of(static_cast<double>(got)), bits_of(static_cast<double>(want))) << x;
  }
}

TEST(VectorMathPow, CubeIsCorrectlyRounded) {
  // gelu's x^3 takes the short path (x * x * x in double): every float, overflow and
  // denormal results included, rounds as x^3 does.
  for (const float x : support::all_finite<float>(1 << 18, 35)) {
    const float got = vm::pow(x, 3.0f);
    const long double exact = static_cast<long double>(x) * x * x;  // within 2^-64 of x^3
    if (std::isinf(got)) {
      ASSERT_GE(fabsl(exact), 0x1.ffffffp127L) << x;  // past the midpoint above FLT_MAX
    } else {
      ASSERT_LE(support::float_ulp_error(got, static_cast<double>(exact)), 0.5001) << x;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << x;
    }
  }
}

TEST(VectorMathPow, SquareRootIsTheInstruction) {
  // pow(x, 0.5) takes sqrt, correctly rounded, so it equals the correctly rounded x^y
  // (special values are SpecialValuesAsPowf's); pow(x, -1), through the general path,
  // is 1 / x all the same.
  for (const float x : support::all_finite<float>(1 << 16, 38)) {
    const float root = vm::pow(x, 0.5f), reciprocal = vm::pow(x, -1.0f);
    if (x < 0) {
      ASSERT_TRUE(std::isnan(root)) << x;
    } else {
      ASSERT_EQ(bits_of(static_cast<double>(root)), bits_of(static_cast<double>(std::sqrt(x)))) << x;
    }
    ASSERT_EQ(bits_of(static_cast<double>(reciprocal)), bits_of(static_cast<double>(1.0f / x))) << x;
  }
}

TEST(VectorMathPow, LanesAgreeWhateverTheirNeighboursExponents) {
  // A vector of 2s, 3s and 0.5s skips the general path, a mixed one selects per lane: each
  // lane's result must not depend on which way its vector went.
  const std::vector<float> x = support::uniform<float>(-30, 30, 4096, 36);
  std::vector<float> y = support::uniform<float>(-8, 8, x.size(), 37);
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (i % 3 == 0) y[i] = 2.0f;
    if (i % 5 == 0) y[i] = 3.0f;
    if (i % 7 == 0) y[i] = 0.5f;
    if (i % 11 == 0) y[i] = -1.0f;
    if (x[i] < 0) y[i] = std::round(y[i]);
  }
  const std::vector<float> got = vector_pow(x, y);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float alone = vm::pow(x[i], y[i]);  // a uniform vector
    ASSERT_EQ(bits_of(static_cast<double>(got[i])), bits_of(static_cast<double>(alone)))
        << "pow(" << x[i] << ", " << y[i] << ")";
  }
}

TEST(VectorMathF64Scalar, IdenticalBitsToTheVectorLanes) {
  std::vector<double> inputs = support::all_finite<double>(4096, 7);
  const std::vector<double> moderate = support::uniform<double>(-30, 30, 4096, 8);
  inputs.insert(inputs.end(), moderate.begin(), moderate.end());
  for (const Function& function : all_functions()) {
    const std::vector<double> outputs = support::evaluate(function, inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(bits_of(outputs[i]), bits_of(function.scalar(inputs[i])))
          << function.name << "(" << inputs[i] << ") depends on the other lanes";
    }
  }
}

}  // namespace
