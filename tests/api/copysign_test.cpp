// copysign: the magnitude of a with the sign of b (np.copysign, torch.copysign, jnp.copysign), on both executors:
// NumPy's documented examples, every pair of special values with the sign bits of zeros, infinities and NaNs
// read from the results, scalars on either side and integers promoted to float. (Random operands against the
// float64 reference: tests/jit/differential_ops_test.cpp; on CUDA: tests/cuda.)

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

// copysign(a, b) and copysign(b, a), each computed by one function (a fused kernel under the JIT).
std::vector<Tensor> both_ways(const Tensor& a, const Tensor& b, bool jit) {
  const auto compute = function(
      [](Tensor a, Tensor b) {
        return std::vector<Tensor>{copysign(a, b), copysign(b, a)};
      },
      {.jit_compile = jit});
  return compute(a, b);
}

TEST(Copysign, NumPysExamples) {
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor steps) {
          // np.copysign(1.3, -1) = -1.3; 1 / np.copysign(0, 1) = inf and 1 / np.copysign(0, -1) = -inf;
          // np.copysign([-1, 0, 1], -1.1) = [-1, -0, -1]; np.copysign([-1, 0, 1], np.arange(3) - 1) = [-1, 0, 1].
          return std::vector<Tensor>{copysign(full({}, 1.3, DType::f64), -1), 1.0 / copysign(zeros({}, DType::f32), 1),
                                     1.0 / copysign(zeros({}, DType::f32), -1), copysign(x, -1.1),
                                     copysign(x, steps - 1)};
        },
        {.jit_compile = jit});
    const Tensor x = from_vector(std::vector<std::int32_t>{-1, 0, 1}, {3});
    const auto results = compute(x, arange(3));
    const char* where = executor(jit);
    EXPECT_EQ(results[0].item<double>(), -1.3) << where;
    EXPECT_EQ(results[1].item<float>(), std::numeric_limits<float>::infinity()) << where;
    EXPECT_EQ(results[2].item<float>(), -std::numeric_limits<float>::infinity()) << where;
    ASSERT_EQ(results[3].dtype(), DType::f32) << where;  // integers compute in float, as NumPy's copysign
    const std::vector<float> negative = results[3].to_vector<float>();
    EXPECT_EQ(negative, (std::vector<float>{-1, 0, -1})) << where;
    EXPECT_TRUE(std::signbit(negative[1])) << where;  // -0
    const std::vector<float> signs = results[4].to_vector<float>();
    EXPECT_EQ(signs, (std::vector<float>{-1, 0, 1})) << where;
    EXPECT_FALSE(std::signbit(signs[1])) << where;  // copysign(0, 0) is +0
  }
}

// Every pair of special values: the result is |a| with b's sign bit, for zeros, infinities and NaNs alike (a NaN's
// sign bit is read and given; its payload stays a NaN).
template <class Float>
void expect_special_values(DType dtype) {
  const Float infinity = std::numeric_limits<Float>::infinity(), nan = std::numeric_limits<Float>::quiet_NaN();
  const std::vector<Float> specials = {Float(0),
                                       -Float(0),
                                       infinity,
                                       -infinity,
                                       nan,
                                       -nan,
                                       Float(1.5),
                                       Float(-2.25),
                                       std::numeric_limits<Float>::denorm_min(),
                                       -std::numeric_limits<Float>::max()};
  std::vector<Float> left, right;
  for (Float a : specials)
    for (Float b : specials) {
      left.push_back(a);
      right.push_back(b);
    }
  const auto size = static_cast<std::int64_t>(left.size());
  for (bool jit : {false, true}) {
    const auto results = both_ways(from_vector(left, {size}), from_vector(right, {size}), jit);
    const std::string what = std::string(to_string(dtype)) + " on the " + executor(jit) + " executor";
    ASSERT_EQ(results[0].dtype(), dtype) << what;
    const std::vector<Float> forward = results[0].template to_vector<Float>();
    const std::vector<Float> backward = results[1].template to_vector<Float>();
    for (std::size_t i = 0; i < left.size(); ++i) {
      const std::string pair = what + ": copysign(" + std::to_string(left[i]) + ", " + std::to_string(right[i]) + ")";
      EXPECT_EQ(std::signbit(forward[i]), std::signbit(right[i])) << pair;
      EXPECT_EQ(std::signbit(backward[i]), std::signbit(left[i])) << pair << " reversed";
      if (std::isnan(left[i])) {
        EXPECT_TRUE(std::isnan(forward[i])) << pair;
      } else {
        EXPECT_EQ(std::fabs(forward[i]), std::fabs(left[i])) << pair;
      }
    }
  }
}

TEST(Copysign, SpecialValuesAndSignBits) {
  expect_special_values<float>(DType::f32);
  expect_special_values<double>(DType::f64);
}

TEST(Copysign, ScalarsBroadcastingAndPromotion) {
  const Tensor x = from_vector(std::vector<float>{-2.5f, 3, -0.0f, 7}, {2, 2});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{copysign(x, -1), copysign(4, x), copysign(x, from_vector<float>({1, -1}, {2})),
                                     copysign(cast(x, DType::i64), 1), copysign(x, x > 0)};
        },
        {.jit_compile = jit});
    const auto results = compute(x);
    const char* where = executor(jit);
    EXPECT_EQ(results[0].to_vector<float>(), (std::vector<float>{-2.5f, -3, -0.0f, -7})) << where;
    EXPECT_TRUE(std::signbit(results[0].to_vector<float>()[2])) << where;
    EXPECT_EQ(results[1].to_vector<float>(), (std::vector<float>{-4, 4, -4, 4})) << where;
    EXPECT_EQ(results[2].to_vector<float>(), (std::vector<float>{2.5f, -3, 0, -7})) << where;
    ASSERT_EQ(results[3].dtype(), DType::f32) << where;
    EXPECT_EQ(results[3].to_vector<float>(), (std::vector<float>{2, 3, 0, 7})) << where;
    EXPECT_EQ(results[4].to_vector<float>(), (std::vector<float>{2.5f, 3, 0, 7})) << where;  // bools: 0 and 1
  }
}

}  // namespace
}  // namespace kiln
