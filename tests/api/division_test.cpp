// floor_divide, remainder (and operator %) and fmod: Python's and NumPy's results, written out here, on both
// executors -- the signs of the quotients and remainders, zero divisors, the lowest integer over -1, infinities,
// NaN and the signs of zero; scalars on either side, promotion, and bools refused under the op's name and line.
// (Random operands against the float64 reference: tests/jit/differential_ops_test.cpp and the kernels' tests.)

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::error_message;

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

// floor_divide, remainder and fmod of a and b, each computed by one function (a fused kernel under the JIT).
std::vector<Tensor> divide(const Tensor& a, const Tensor& b, bool jit) {
  const auto compute = function(
      [](Tensor a, Tensor b) {
        return std::vector<Tensor>{floor_divide(a, b), a % b, fmod(a, b)};
      },
      {.jit_compile = jit});
  return compute(a, b);
}

template <class T>
void expect_integers(DType dtype) {
  constexpr T lowest = std::numeric_limits<T>::lowest(), highest = std::numeric_limits<T>::max();
  // Python: -7 // 2 = -4, -7 % 2 = 1; C: fmod(-7, 2) = -1 (and the other sign pairs); 0 for zero divisors, as NumPy.
  const std::vector<T> a = {7, -7, 7, -7, 6, -6, 0, 5, -5, 0, lowest, lowest, highest, lowest, 1, -1};
  const std::vector<T> b = {2, 2, -2, -2, 3, 3, 4, 0, 0, 0, -1, 1, -1, 2, highest, highest};
  const std::vector<T> quotient = {3, -4, -4, 3, 2, -2, 0, 0, 0, 0, lowest, lowest, -highest, lowest / 2, 0, -1};
  const std::vector<T> remainder = {1, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, highest - 1};
  const std::vector<T> truncated = {1, -1, 1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, -1};
  const auto size = static_cast<std::int64_t>(a.size());
  for (bool jit : {false, true}) {
    const auto results = divide(cast(from_vector(a, {size}), dtype), cast(from_vector(b, {size}), dtype), jit);
    const std::string what = std::string(to_string(dtype)) + " on the " + executor(jit) + " executor";
    ASSERT_EQ(results[0].dtype(), dtype) << what;
    EXPECT_EQ(results[0].template to_vector<T>(), quotient) << "floor_divide, " << what;
    EXPECT_EQ(results[1].template to_vector<T>(), remainder) << "remainder, " << what;
    EXPECT_EQ(results[2].template to_vector<T>(), truncated) << "fmod, " << what;
  }
}

TEST(Division, IntegersRoundDownTakeTheDivisorsSignAndGiveZeroForZeroDivisors) {
  expect_integers<std::int32_t>(DType::i32);
  expect_integers<std::int64_t>(DType::i64);
}

// Equal, with NaN equal to NaN and the signs of zeros compared.
void expect_same_floats(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same =
        std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]);
    EXPECT_TRUE(same) << what << " [" << i << "]: " << got[i] << ", want " << want[i];
  }
}

TEST(Division, FloatsFollowNumPysDivmod) {
  const double infinity = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // Each row: a, b, a // b, a % b, fmod(a, b), as Python and NumPy give them (numbers exact in f32 and f64).
  const std::vector<std::vector<double>> rows = {
      {7.5, 2, 3, 1.5, 1.5},
      {-7.5, 2, -4, 0.5, -1.5},
      {7.5, -2, -4, -0.5, 1.5},
      {-7.5, -2, 3, -1.5, -1.5},
      {6, 3, 2, 0, 0},
      {-6, 3, -2, 0, -0.0},  // a zero remainder takes the divisor's sign; fmod's, the dividend's
      {6, -3, -2, -0.0, 0},
      {-0.0, 3, -0.0, 0, -0.0},  // a zero quotient takes the sign of a / b
      {0.0, -3, -0.0, -0.0, 0},
      {1, 0, infinity, nan, nan},
      {-1, 0, -infinity, nan, nan},
      {0, 0, nan, nan, nan},
      {infinity, 2, nan, nan, nan},
      {5, infinity, 0, 5, 5},
      {-5, infinity, -1, infinity, -5},
      {5, -infinity, -1, -infinity, 5},
      {nan, 2, nan, nan, nan},
      {2, nan, nan, nan, nan},
      {0.25, 0.5, 0, 0.25, 0.25},
      {-0.25, 0.5, -1, 0.25, -0.25},
  };
  std::vector<double> a, b, quotient, remainder, truncated;
  for (const auto& row : rows) {
    a.push_back(row[0]);
    b.push_back(row[1]);
    quotient.push_back(row[2]);
    remainder.push_back(row[3]);
    truncated.push_back(row[4]);
  }
  const auto size = static_cast<std::int64_t>(rows.size());
  for (DType dtype : {DType::f32, DType::f64}) {
    for (bool jit : {false, true}) {
      const auto results = divide(cast(from_vector(a, {size}), dtype), cast(from_vector(b, {size}), dtype), jit);
      const std::string what = std::string(to_string(dtype)) + " on the " + executor(jit) + " executor";
      expect_same_floats(cast(results[0], DType::f64).to_vector<double>(), quotient, "floor_divide, " + what);
      expect_same_floats(cast(results[1], DType::f64).to_vector<double>(), remainder, "remainder, " + what);
      expect_same_floats(cast(results[2], DType::f64).to_vector<double>(), truncated, "fmod, " + what);
    }
  }
}

// 0.1 is a little above a tenth, so 7 holds 69 of it and 0.0999... is left (Python: 7.0 // 0.1 == 69.0), where
// floor(7 / 0.1) rounds the quotient to 70 first; the remainder is exact.
TEST(Division, TheQuotientIsTheRealOneRoundedDownNotTheRoundedQuotient) {
  for (bool jit : {false, true}) {
    const auto f64 = divide(full({}, 7.0, DType::f64), full({}, 0.1, DType::f64), jit);
    EXPECT_EQ(f64[0].item<double>(), 69.0) << executor(jit);
    EXPECT_EQ(f64[1].item<double>(), 7.0 - 69 * static_cast<long double>(0.1)) << executor(jit);
    const auto f32 = divide(full({}, 7.0, DType::f32), full({}, 0.1, DType::f32), jit);
    EXPECT_EQ(f32[0].item<float>(), 69.0f) << executor(jit);
    EXPECT_EQ(f32[1].item<float>(), static_cast<float>(7.0L - 69 * static_cast<long double>(0.1f))) << executor(jit);
  }
}

TEST(Division, ScalarsBroadcastingAndPromotion) {
  const Tensor x = from_vector(std::vector<std::int32_t>{-7, -3, 0, 4, 9, 12}, {2, 3});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{x % 4,
                                     floor_divide(x, 4),
                                     floor_divide(20, x + 20),
                                     x % from_vector<std::int32_t>({5, -5, 3}, {3}),
                                     fmod(x, 2.5),
                                     x % 2.5};
        },
        {.jit_compile = jit});
    const auto results = compute(x);
    const char* where = executor(jit);
    EXPECT_EQ(results[0].to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, 0, 0, 1, 0})) << where;
    EXPECT_EQ(results[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{-2, -1, 0, 1, 2, 3})) << where;
    EXPECT_EQ(results[2].to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 1, 1, 0, 0, 0})) << where;
    EXPECT_EQ(results[3].to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, -3, 0, 4, -1, 0})) << where;
    ASSERT_EQ(results[4].dtype(), DType::f32) << where;  // an integer with a float scalar computes in f32
    EXPECT_EQ(results[4].to_vector<float>(), (std::vector<float>{-2, -0.5f, 0, 1.5f, 1.5f, 2})) << where;
    EXPECT_EQ(results[5].to_vector<float>(), (std::vector<float>{0.5f, 2, 0, 1.5f, 1.5f, 2})) << where;
  }
}

TEST(Division, ZeroSizeAndRankZero) {
  for (bool jit : {false, true}) {
    const auto results = divide(zeros({0, 3}, DType::f32), ones({3}, DType::f32), jit);
    EXPECT_EQ(results[1].shape(), Shape({0, 3})) << executor(jit);
    const auto scalars = divide(full({}, -9, DType::i64), full({}, 4, DType::i64), jit);
    EXPECT_EQ(scalars[0].item<std::int64_t>(), -3) << executor(jit);
    EXPECT_EQ(scalars[1].item<std::int64_t>(), 3) << executor(jit);
    EXPECT_EQ(scalars[2].item<std::int64_t>(), -1) << executor(jit);
  }
}

TEST(Division, BoolsAreRefusedUnderTheOpsNameAndLine) {
  const Tensor flags = from_vector(std::vector<bool>{true, false}, {2});
  EXPECT_THROW(floor_divide(flags, flags), DTypeError);
  EXPECT_THROW(fmod(flags, flags), DTypeError);
  const std::string line = "division_test.cpp:" + std::to_string(__LINE__ + 1);
  const std::string message = error_message([&] { (void)(flags % flags); });
  EXPECT_NE(message.find("remainder"), std::string::npos) << message;
  EXPECT_NE(message.find(line), std::string::npos) << message;
  // The process and the functions stay usable.
  EXPECT_EQ((full({}, 7, DType::i32) % 3).item<std::int32_t>(), 1);
}

}  // namespace
}  // namespace kiln
