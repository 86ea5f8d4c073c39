// atan (a primitive) and the composites built on it and on exp, expm1, log and log1p (atan2, tan, asin, acos, sinh,
// cosh, asinh, acosh, atanh): against long double <cmath> in ULPs of the result, f32 and f64, on both executors,
// over ranges where a naive formula cancels (small arguments, arguments near +-1) or overflows (sinh and cosh just
// below their own overflow, asinh and acosh of huge arguments); C's special values, zeros' signs included; one
// kernel per composite in compiled functions; the executors against the reference evaluator.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

using Unary = std::function<Tensor(const Tensor&)>;
using Exact = std::function<long double(long double)>;

// |got - want| in units of the last place of `want` in `dtype` (denormal spacing below the normals); 0 when both
// are the same infinity or both NaN, infinite when only one is.
double ulp_error(double got, long double want, DType dtype) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got) ? 0 : infinity;
  // Beyond the dtype's largest finite value (and the half ULP above it), the rounded result is infinite.
  const long double largest =
      dtype == DType::f32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  const long double overflow = dtype == DType::f32 ? largest * (1 + 0x1p-25L) : largest;
  if (std::fabs(want) >= overflow) want = std::copysign(static_cast<long double>(infinity), want);
  if (std::isinf(want) || std::isinf(got)) return static_cast<long double>(got) == want ? 0 : infinity;
  const int digits = dtype == DType::f32 ? 24 : 53, lowest_exponent = dtype == DType::f32 ? -149 : -1074;
  int exponent = 0;
  std::frexp(static_cast<double>(want), &exponent);
  const long double ulp = std::ldexp(1.0L, std::max(exponent - digits, lowest_exponent));
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

// `count` values uniform in [low, high], and each of `extra`.
std::vector<double> spread(double low, double high, int count, std::uint32_t seed, std::vector<double> extra = {}) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  for (int i = 0; i < count; ++i) extra.push_back(uniform(generator));
  return extra;
}

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

// Every value of `function` over `inputs`, in `dtype`, on both executors, within `bound` ULPs of `exact` of the
// input as rounded to dtype; zeros keep the exact result's sign.
void expect_accurate(const std::string& name, const Unary& function, const Exact& exact,
                     const std::vector<double>& inputs, DType dtype, double bound) {
  const Tensor x = cast(from_vector(inputs, {static_cast<std::int64_t>(inputs.size())}), dtype);
  const std::vector<double> rounded = cast(x, DType::f64).to_vector<double>();
  for (const bool jit : {false, true}) {
    auto compiled = kiln::function([&](Tensor value) { return function(value); },
                                   {.jit_compile = jit, .on_compile_failure = Fallback::none});
    const std::vector<double> got = cast(compiled(x), DType::f64).to_vector<double>();
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const long double want = exact(rounded[i]);
      const double error = ulp_error(got[i], want, dtype);
      worst = std::max(worst, error);
      ASSERT_LE(error, bound) << name << "(" << rounded[i] << ") = " << got[i] << ", want " << static_cast<double>(want)
                              << " (" << to_string(dtype) << ", " << executor(jit) << ")";
      if (want == 0) {
        ASSERT_EQ(std::signbit(got[i]), std::signbit(static_cast<double>(want))) << name << "(" << rounded[i] << ")";
      }
    }
    ::testing::Test::RecordProperty(name + "_" + std::string(to_string(dtype)) + "_" + executor(jit) + "_worst_ulp",
                                    std::to_string(worst));
  }
}

struct Case {
  const char* name;
  Unary function;
  Exact exact;
  std::vector<double> inputs;
  double f32_bound, f64_bound;
};

std::vector<Case> cases() {
  const std::vector<double> specials = {0.0, -0.0, infinity, -infinity, nan, 1e-30, -1e-30, 1e-300};
  auto with = [&](std::vector<double> values) {
    values.insert(values.end(), specials.begin(), specials.end());
    return values;
  };
  return {
      {"atan", [](const Tensor& x) { return atan(x); }, [](long double x) { return std::atan(x); },
       spread(-3, 3, 3000, 1, spread(-1e6, 1e6, 1000, 2, with({0.5, -0.5, 1, -1, 2.414213562373095, 1e30}))), 2, 2},
      {"tan", [](const Tensor& x) { return tan(x); }, [](long double x) { return std::tan(x); },
       spread(-1.5, 1.5, 3000, 3, spread(-100, 100, 1000, 4, with({1.5707963, -1.5707963}))), 5, 5},
      {"asin", [](const Tensor& x) { return asin(x); }, [](long double x) { return std::asin(x); },
       spread(-1, 1, 3000, 5, spread(0.999, 1, 500, 6, with({1, -1, 1.5, -2, 1e-20}))), 4, 4},
      {"acos", [](const Tensor& x) { return acos(x); }, [](long double x) { return std::acos(x); },
       spread(-1, 1, 3000, 7, spread(0.999, 1, 500, 8, spread(-1, -0.999, 500, 9, with({1, -1, 1.5, -2})))), 4, 4},
      {"sinh", [](const Tensor& x) { return sinh(x); }, [](long double x) { return std::sinh(x); },
       spread(-1, 1, 2000, 10, spread(-89.4, 89.4, 2000, 11, with({88, 88.5, 89, -89.3, 90, 1e-6, 1e300}))), 4, 4},
      {"cosh", [](const Tensor& x) { return cosh(x); }, [](long double x) { return std::cosh(x); },
       spread(-2, 2, 2000, 12, spread(-89.4, 89.4, 2000, 13, with({88, 88.5, 89, -89.3, 90, 1e300}))), 4, 4},
      {"asinh", [](const Tensor& x) { return asinh(x); }, [](long double x) { return std::asinh(x); },
       spread(-2, 2, 2000, 14, spread(-1e10, 1e10, 1000, 15, with({1e20, -1e38, 3e38, 1e-8}))), 4, 4},
      {"acosh", [](const Tensor& x) { return acosh(x); }, [](long double x) { return std::acosh(x); },
       spread(1, 3, 2000, 16, spread(1, 1.001, 500, 17, spread(1, 1e12, 1000, 18, with({1, 0.5, -1, 1e20, 3e38})))), 4,
       4},
      {"atanh", [](const Tensor& x) { return atanh(x); }, [](long double x) { return std::atanh(x); },
       spread(-1, 1, 3000, 19, spread(0.999, 1, 500, 20, spread(-1, -0.999, 500, 21, with({1, -1, 1.5, -2, 1e-9})))), 4,
       4},
  };
}

TEST(ElementaryFunctions, WithinTheirUlpBoundsOfTheExactFunction) {
  for (const Case& test : cases()) {
    expect_accurate(test.name, test.function, test.exact, test.inputs, DType::f32, test.f32_bound);
    expect_accurate(test.name, test.function, test.exact, test.inputs, DType::f64, test.f64_bound);
  }
}

TEST(ElementaryFunctions, Atan2QuadrantsAndTheSignsOfZeros) {
  const double pi = 3.14159265358979323846;
  // (y, x, C's atan2(y, x)) for the cases a quotient would get wrong.
  const std::vector<std::array<double, 3>> specials = {{0.0, 0.0, 0.0},
                                                       {-0.0, 0.0, -0.0},
                                                       {0.0, -0.0, pi},
                                                       {-0.0, -0.0, -pi},
                                                       {1, 0.0, pi / 2},
                                                       {-1, -0.0, -pi / 2},
                                                       {infinity, infinity, pi / 4},
                                                       {-infinity, -infinity, -3 * pi / 4},
                                                       {1, infinity, 0.0},
                                                       {-1, infinity, -0.0},
                                                       {1, -infinity, pi},
                                                       {-1, -infinity, -pi},
                                                       {infinity, 1, pi / 2},
                                                       {nan, 1, nan},
                                                       {1, nan, nan},
                                                       {1e-40, 1e38, 0.0},
                                                       {-3, -4, std::atan2(-3.0, -4.0)}};
  std::vector<double> ys, xs;
  for (const auto& [y, x, expected] : specials) {
    ys.push_back(y);
    xs.push_back(x);
  }
  // And random points of every quadrant and scale, with the exact angle in long double.
  std::mt19937 generator(31);
  std::uniform_real_distribution<double> coordinate(-1, 1), scale(-30, 30);
  for (int i = 0; i < 4000; ++i) {
    ys.push_back(coordinate(generator) * std::exp2(scale(generator)));
    xs.push_back(coordinate(generator) * std::exp2(scale(generator)));
  }
  for (const DType dtype : {DType::f32, DType::f64}) {
    const auto size = static_cast<std::int64_t>(ys.size());
    const Tensor y = cast(from_vector(ys, {size}), dtype), x = cast(from_vector(xs, {size}), dtype);
    const std::vector<double> y_rounded = cast(y, DType::f64).to_vector<double>(),
                              x_rounded = cast(x, DType::f64).to_vector<double>();
    for (const bool jit : {false, true}) {
      auto angle = function([](Tensor y, Tensor x) { return atan2(y, x); }, {.jit_compile = jit});
      const std::vector<double> got = cast(angle(y, x), DType::f64).to_vector<double>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const long double want = std::atan2(static_cast<long double>(y_rounded[i]), x_rounded[i]);
        ASSERT_LE(ulp_error(got[i], want, dtype), 4)
            << "atan2(" << y_rounded[i] << ", " << x_rounded[i] << ") = " << got[i] << " (" << executor(jit) << ")";
        if (want == 0) {
          ASSERT_EQ(std::signbit(got[i]), std::signbit(static_cast<double>(want)));
        }
      }
    }
  }
  // Integers compute in f32, and the operands broadcast.
  const Tensor angles =
      atan2(from_vector(std::vector<std::int32_t>{1, -1}, {2, 1}), from_vector(std::vector<double>{1, -1, 0}));
  EXPECT_EQ(angles.shape(), Shape({2, 3}));
  EXPECT_EQ(angles.dtype(), DType::f64);
  EXPECT_EQ(atan2(from_vector(std::vector<std::int32_t>{1}), from_vector(std::vector<std::int32_t>{1})).dtype(),
            DType::f32);
}

TEST(ElementaryFunctions, EachIsOneKernelAndAgreesWithTheReference) {
  const Tensor x = testing::random_uniform(DType::f32, {37, 29}, -0.99, 0.99, 41);
  const Tensor y = testing::random_tensor(DType::f32, {37, 29}, 42);
  const std::vector<std::pair<const char*, std::function<Tensor(Tensor, Tensor)>>> bodies = {
      {"atan", [](Tensor x, Tensor) { return atan(x * 3); }},
      {"atan2", [](Tensor x, Tensor y) { return atan2(y, x); }},
      {"tan", [](Tensor x, Tensor) { return tan(x); }},
      {"asin", [](Tensor x, Tensor) { return asin(x); }},
      {"acos", [](Tensor x, Tensor) { return acos(x); }},
      {"sinh", [](Tensor, Tensor y) { return sinh(y); }},
      {"cosh", [](Tensor, Tensor y) { return cosh(y); }},
      {"asinh", [](Tensor, Tensor y) { return asinh(y * 100); }},
      {"acosh", [](Tensor, Tensor y) { return acosh(abs(y) + 1); }},
      {"atanh", [](Tensor x, Tensor) { return atanh(x); }},
  };
  for (const auto& [name, body] : bodies) {
    const testing::DifferentialResult result = testing::expect_agreement(name, body, x, y);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << name << "\n" << result.fused;
  }
}

}  // namespace
}  // namespace kiln
