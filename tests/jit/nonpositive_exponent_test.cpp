// An f32 exp of x minus a maximum of x kept along the reduced axes (softmax's and logsumexp's exponent) is at most 0
// or NaN, so the CPU JIT computes it without exp's upper clamp (RowKernel::exponent_is_nonpositive,
// exp_of_nonpositive): the same bits as exp with one instruction fewer per vector. These tests check those bits
// against the standard executor's exp, the results against the float64 reference, and which spellings qualify.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool takes_nonpositive_exp(const std::string& source) {
  return source.find("exp_of_nonpositive(") != std::string::npos;
}

template <class Body, class... Inputs>
std::string source_of(Body body, const Inputs&... inputs) {
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  return jit.get_compiler_ir(Stage::source, inputs...);
}

// Rows of 37 values (a partial vector at each row's end) spread over [-150, 150], so that x - max reaches below -104
// (exp is 0), the subnormal results (below about -87) and the normal ones; row 1 is masked with -inf but for one
// element, row 2 is all -inf, row 3 holds +inf (inf - inf is NaN), row 4 a NaN, row 5 a single finite value.
Tensor rows_with_extremes() {
  const std::int64_t rows = 7, columns = 37;
  std::vector<float> values = random_tensor(DType::f32, {rows, columns}, 11).to_vector<float>();
  for (float& value : values) value *= 60.0f;
  const float infinity = std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < columns; ++j) {
    if (j != 5) values[static_cast<std::size_t>(1 * columns + j)] = -infinity;
    values[static_cast<std::size_t>(2 * columns + j)] = -infinity;
    if (j != 0) values[static_cast<std::size_t>(5 * columns + j)] = -infinity;
  }
  values[static_cast<std::size_t>(3 * columns + 7)] = infinity;
  values[static_cast<std::size_t>(4 * columns + 30)] = std::numeric_limits<float>::quiet_NaN();
  return from_vector(values, Shape({rows, columns}));
}

TEST(NonpositiveExponent, ExpOfTheDifferenceFromTheRowMaximumHasExpsBits) {
  const Tensor x = rows_with_extremes();
  auto body = [](Tensor x) { return exp(x - reduce_max(x, {1}, true)); };
  auto standard = function(body);
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::vector<float> expected = standard(x).to_vector<float>(), got = jit(x).to_vector<float>();
  ASSERT_EQ(expected.size(), got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(expected[i]), std::bit_cast<std::uint32_t>(got[i]))
          << "element " << i << ": " << expected[i] << " against " << got[i];
    }
  }
  EXPECT_TRUE(takes_nonpositive_exp(source_of(body, x)));
}

TEST(NonpositiveExponent, SoftmaxAndAHandSpelledLogSumExpTakeIt) {
  const Tensor x = rows_with_extremes();
  auto softmax = [](Tensor x) { return nn::softmax(x, -1); };
  expect_agreement("softmax of rows with infinities and NaN", softmax, x);
  EXPECT_TRUE(takes_nonpositive_exp(source_of(softmax, x)));
  // Over the first axis, in bf16: the exponent is the widened f32 value minus its maximum.
  const Tensor half = random_tensor(DType::bf16, {19, 6}, 12);
  auto columns = [](Tensor x) {
    const Tensor maximum = reduce_max(x, {0}, true);
    return log(reduce_sum(exp(x - maximum), {0}, true)) + maximum;
  };
  expect_agreement("logsumexp over the first axis, bf16", columns, half);
  EXPECT_TRUE(takes_nonpositive_exp(source_of(columns, half)));
}

TEST(NonpositiveExponent, OtherDifferencesKeepTheClamp) {
  const Tensor x = random_tensor(DType::f32, {9, 21}, 13), y = random_tensor(DType::f32, {9, 21}, 14);
  // The maximum of another tensor: x - max(y) may be positive (and overflow).
  auto of_other = [](Tensor x, Tensor y) { return exp(60.0 * x - reduce_max(y, {1}, true)); };
  expect_agreement("exp of x minus another tensor's maximum", of_other, x, y);
  EXPECT_FALSE(takes_nonpositive_exp(source_of(of_other, x, y)));
  // The minimum: x - min(x) >= 0.
  auto of_minimum = [](Tensor x) { return exp(x - reduce_min(x, {1}, true)); };
  expect_agreement("exp of x minus its minimum", of_minimum, x);
  EXPECT_FALSE(takes_nonpositive_exp(source_of(of_minimum, x)));
  // The maximum subtracted from, not subtracted: max(x) - x >= 0.
  auto reversed = [](Tensor x) { return exp(reduce_max(x, {1}, true) - x); };
  expect_agreement("exp of the maximum minus x", reversed, x);
  EXPECT_FALSE(takes_nonpositive_exp(source_of(reversed, x)));
  // A maximum of f32 values rounded to bf16 may fall below them: x - round(max x) reaches 2^-8 |max x| (here ~1e28,
  // where exp is inf).
  auto rounded_maximum = [](Tensor x) {
    const Tensor large = x * 1e30;
    return exp(large - cast(cast(reduce_max(large, {1}, true), DType::bf16), DType::f32));
  };
  expect_agreement("exp of x minus its maximum rounded to bf16", rounded_maximum, x);
  EXPECT_FALSE(takes_nonpositive_exp(source_of(rounded_maximum, x)));
}

// A softmax's maximum needs no NaN of its own: a NaN element makes its exponential, the row's sum and so every
// output NaN, whatever the maximum is. The CPU JIT lets such a maximum pass over NaN (RowKernel::maximum_may_skip_nan,
// max_skipping_nan: one vmaxps); the outputs are the standard executor's, bit for bit, NaN where it has NaN.
bool skips_nan(const std::string& source) { return source.find("max_skipping_nan(") != std::string::npos; }

template <class Body>
void expect_same_bits(const std::string& label, Body body, const Tensor& x) {
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor standard = function(body)(x), compiled = jit(x);
  const std::vector<float> expected = standard.to_vector<float>(), got = compiled.to_vector<float>();
  ASSERT_EQ(expected.size(), got.size()) << label;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i]))
      EXPECT_TRUE(std::isnan(got[i])) << label << ": element " << i << " is " << got[i];
    else
      EXPECT_EQ(std::bit_cast<std::uint32_t>(expected[i]), std::bit_cast<std::uint32_t>(got[i]))
          << label << ": element " << i << ": " << expected[i] << " against " << got[i];
  }
}

TEST(MaximumSkippingNan, SoftmaxAndLogSoftmaxRowsWithNanAndInfinities) {
  const Tensor x = rows_with_extremes();
  auto softmax = [](Tensor x) { return nn::softmax(x, -1); };
  auto log_softmax = [](Tensor x) { return nn::log_softmax(x, -1); };
  expect_same_bits("softmax", softmax, x);
  expect_same_bits("log_softmax", log_softmax, x);
  EXPECT_TRUE(skips_nan(source_of(softmax, x)));
  EXPECT_TRUE(skips_nan(source_of(log_softmax, x)));
  // bf16 rows (softmax computes in f32 and rounds once), NaN in one.
  std::vector<float> values = random_tensor(DType::f32, {5, 40}, 15).to_vector<float>();
  values[2 * 40 + 17] = std::numeric_limits<float>::quiet_NaN();
  const Tensor half = cast(from_vector(values, Shape({5, 40})), DType::bf16);
  auto softmax_to_f32 = [](Tensor x) { return cast(nn::softmax(x, -1), DType::f32); };
  expect_same_bits("softmax of bf16", softmax_to_f32, half);
  EXPECT_TRUE(skips_nan(source_of(softmax_to_f32, half)));
  // Rows of 6 (a row in each lane, RowsAcrossLanes, which multiply by the sum's reciprocal: within two roundings of
  // the standard's quotient, not its bits): NaN, +inf and -inf rows among them.
  std::vector<float> short_rows = random_tensor(DType::f32, {40, 6}, 16).to_vector<float>();
  short_rows[3 * 6 + 2] = std::numeric_limits<float>::quiet_NaN();
  short_rows[9 * 6 + 5] = std::numeric_limits<float>::infinity();
  for (int j = 0; j < 6; ++j)
    short_rows[static_cast<std::size_t>(17 * 6 + j)] = -std::numeric_limits<float>::infinity();
  const Tensor narrow = from_vector(short_rows, Shape({40, 6}));
  expect_agreement("softmax of short rows", softmax, narrow);
  EXPECT_TRUE(skips_nan(source_of(softmax, narrow)));
}

TEST(MaximumSkippingNan, MaximaReadOtherwiseKeepTheirNan) {
  const Tensor x = rows_with_extremes();
  // exp(x - max) alone: with the maximum of the other elements a NaN row's finite elements would not be NaN.
  auto shifted = [](Tensor x) { return exp(x - reduce_max(x, {1}, true)); };
  // logsumexp: log(sum) + max (NaN either way, but the maximum is read beside the sum).
  auto logsumexp = [](Tensor x) { return reduce_logsumexp(x, {1}); };
  // The maximum returned, and an exponential divided by another row's sum.
  auto returned = [](Tensor x) {
    const Tensor maximum = reduce_max(x, {1}, true);
    return std::vector<Tensor>{exp(x - maximum) / reduce_sum(exp(x - maximum), {1}, true), maximum};
  };
  auto other_sum = [](Tensor x) {
    const Tensor e = exp(x - reduce_max(x, {1}, true));
    return e / reduce_sum(e, {0}, true) + reduce_sum(e, {1}, true);
  };
  expect_same_bits("exp of x minus its maximum", shifted, x);
  EXPECT_FALSE(skips_nan(source_of(shifted, x)));
  expect_agreement("logsumexp", logsumexp, x);
  EXPECT_FALSE(skips_nan(source_of(logsumexp, x)));
  expect_agreement("softmax beside its maximum", returned, x);
  EXPECT_FALSE(skips_nan(source_of(returned, x)));
  expect_agreement("divided by the column sums", other_sum, x);
  EXPECT_FALSE(skips_nan(source_of(other_sum, x)));
}

}  // namespace
}  // namespace kiln
