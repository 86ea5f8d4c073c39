// The composites of ops.h and nn.h against their definitions computed here in long double (or exactly), on both
// executors: beyond agreement between executors (tests/jit/differential_ops_test.cpp), that each is the function
// its name promises, at the inputs where a naive composition goes wrong (logsumexp of large or infinite values,
// argmin of the most negative integer or a NaN), and that bad arguments are reported under the composite's name.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::error_message;
using testing::random_tensor;

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

// Rows of `values` ([rows, width] row-major) reduced by `row_function`.
template <class RowFunction>
std::vector<long double> per_row(const std::vector<float>& values, std::size_t width, RowFunction row_function) {
  std::vector<long double> results;
  for (std::size_t start = 0; start < values.size(); start += width)
    results.push_back(
        row_function(std::vector<long double>(values.begin() + static_cast<std::ptrdiff_t>(start),
                                              values.begin() + static_cast<std::ptrdiff_t>(start + width))));
  return results;
}

long double logsumexp(const std::vector<long double>& row) {
  long double largest = -INFINITY;
  for (long double value : row) largest = std::fmax(largest, value);
  if (std::isinf(largest)) return largest;
  long double total = 0;
  for (long double value : row) total += std::exp(value - largest);
  return largest + std::log(total);
}

long double variance(const std::vector<long double>& row) {
  long double mean = 0, squares = 0;
  for (long double value : row) mean += value;
  mean /= static_cast<long double>(row.size());
  for (long double value : row) squares += (value - mean) * (value - mean);
  return squares / static_cast<long double>(row.size());
}

void expect_close(const std::vector<float>& got, const std::vector<long double>& want, long double relative,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << what << " [" << i << "]: " << got[i] << ", want " << static_cast<double>(want[i]);
      continue;
    }
    EXPECT_LE(std::fabs(got[i] - want[i]), relative * std::fabs(want[i]) + 1e-30L)
        << what << " [" << i << "]: " << got[i] << ", want " << static_cast<double>(want[i]);
  }
}

// Rows whose naive log(sum(exp(x))) overflows (values near 100 and 1000), underflows to log 0 (near -1000), holds
// +inf, -inf alone or NaN; and ordinary rows of odd widths.
TEST(Composites, LogSumExpOfLargeInfiniteAndOrdinaryRows) {
  const std::vector<float> values = {1000.0f, 999.0f, 998.5f,    -1000.0f, -1001.0f,  -999.5f,   90.0f,     100.0f,
                                     95.0f,   1.0f,   infinity,  -3.0f,    -infinity, -infinity, -infinity, 1.0f,
                                     nan,     2.0f,   -infinity, 0.5f,     -2.0f,     0.25f,     -0.75f,    3.5f};
  const std::size_t width = 3;
  const std::vector<long double> want = per_row(values, width, logsumexp);
  const Tensor x = from_vector(values, {8, 3});
  for (bool jit : {false, true}) {
    const auto compute = function([](Tensor x) { return reduce_logsumexp(x, {1}); }, {.jit_compile = jit});
    expect_close(compute(x).to_vector<float>(), want, 4e-7L, std::string("logsumexp ") + executor(jit));
  }
  // Over every axis, and with keepdims.
  const Tensor wide = random_tensor(DType::f32, {37, 129}, 5);
  const std::vector<long double> all = {logsumexp(per_row(wide.to_vector<float>(), 37 * 129, [](auto row) {
    std::vector<long double> copy(row);
    return logsumexp(copy);
  }))};
  for (bool jit : {false, true}) {
    const auto compute = function([](Tensor x) { return reduce_logsumexp(x, {}, true); }, {.jit_compile = jit});
    const Tensor result = compute(wide);
    EXPECT_EQ(result.shape(), Shape({1, 1}));
    expect_close(result.to_vector<float>(), all, 1e-6L, std::string("logsumexp of all ") + executor(jit));
  }
}

// The population variance, two-pass: rows with a mean of 1e4 and a spread of 1, where E[x^2] - E[x]^2 in float
// would keep no digit of the variance.
TEST(Composites, VarianceAndStandardDeviationOfRowsWithALargeMean) {
  std::vector<float> values = testing::random_floats(16 * 301, 9);
  for (float& value : values) value += 1e4f;
  const std::vector<long double> want = per_row(values, 301, variance);
  const Tensor x = from_vector(values, {16, 301});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{reduce_variance(x, {-1}), reduce_std(x, {-1})};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    expect_close(results[0].to_vector<float>(), want, 2e-4L, std::string("variance ") + executor(jit));
    std::vector<long double> deviations;
    for (long double value : want) deviations.push_back(std::sqrt(value));
    expect_close(results[1].to_vector<float>(), deviations, 1e-4L, std::string("std ") + executor(jit));
  }
}

// argmin's first smallest element, for the extremes of every integer dtype (-x would overflow at the most
// negative), ties, -0 beside +0, and NaN, which NumPy, JAX and PyTorch count as the smallest.
TEST(Composites, ArgminOfExtremesTiesAndNaN) {
  const std::vector<std::int32_t> integers = {
      5, std::numeric_limits<std::int32_t>::max(), -7, -7, std::numeric_limits<std::int32_t>::min(), 3, 2,
      2, std::numeric_limits<std::int32_t>::max()};
  const std::vector<float> floats = {0.0f, -0.0f, 1.0f, 3.0f, nan, -infinity, -2.0f, -2.0f, 4.0f};
  const std::vector<std::int64_t> longs = {std::numeric_limits<std::int64_t>::max(),
                                           std::numeric_limits<std::int64_t>::min(), 0};
  for (bool jit : {false, true}) {
    const auto by_rows = function([](Tensor x) { return argmin(x, 1); }, {.jit_compile = jit});
    EXPECT_EQ(by_rows(from_vector(integers, {3, 3})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 1, 0}))
        << executor(jit);
    EXPECT_EQ(by_rows(from_vector(floats, {3, 3})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 0}))
        << executor(jit);
    EXPECT_EQ(by_rows(from_vector(longs, {1, 3})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1}))
        << executor(jit);
    const auto by_columns = function([](Tensor x) { return argmin(x, 0, true); }, {.jit_compile = jit});
    const Tensor columns = by_columns(from_vector(floats, {3, 3}));
    EXPECT_EQ(columns.shape(), Shape({1, 3}));
    EXPECT_EQ(columns.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 1, 1})) << executor(jit);
  }
  EXPECT_EQ(argmin(from_vector(std::vector<bool>{true, true, false, false}), 0).item<std::int64_t>(), 2);
}

// clip is minimum(maximum(x, low), high): NaN stays NaN, low > high gives high, bounds broadcast and promote.
TEST(Composites, ClipKeepsNaNAndTakesTheUpperBoundWhenTheyCross) {
  const Tensor x = from_vector(std::vector<float>{-3.0f, -0.5f, 0.25f, 2.0f, nan, infinity}, {2, 3});
  const Tensor lows = from_vector(std::vector<float>{-1.0f, 0.0f, 0.5f}, {3});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor lows) {
          return std::vector<Tensor>{clip(x, -1.0, 1.0), clip(x, 1.0, -1.0), clip(x, lows, lows + 1.0)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x, lows);
    const std::vector<float> plain = results[0].to_vector<float>(), crossed = results[1].to_vector<float>(),
                             bounded = results[2].to_vector<float>();
    const std::vector<float> want_plain = {-1.0f, -0.5f, 0.25f, 1.0f, nan, 1.0f};
    const std::vector<float> want_bounded = {-1.0f, 0.0f, 0.5f, 0.0f, nan, 1.5f};
    for (std::size_t i = 0; i < want_plain.size(); ++i) {
      const std::string where = std::string(executor(jit)) + " [" + std::to_string(i) + "]";
      if (std::isnan(want_plain[i])) {
        EXPECT_TRUE(std::isnan(plain[i]) && std::isnan(crossed[i]) && std::isnan(bounded[i])) << where;
        continue;
      }
      EXPECT_EQ(plain[i], want_plain[i]) << where;
      EXPECT_EQ(crossed[i], -1.0f) << where;
      EXPECT_EQ(bounded[i], want_bounded[i]) << where;
    }
  }
  const Tensor integers = from_vector(std::vector<std::int32_t>{-5, 0, 7});
  EXPECT_EQ(clip(integers, -2, 3).dtype(), DType::i32);
  EXPECT_EQ(clip(integers, -2, 3).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-2, 0, 3}));
}

TEST(Composites, StackAndSplitAreInverses) {
  const Tensor a = random_tensor(DType::f32, {2, 5}, 20), b = random_tensor(DType::f32, {2, 5}, 21);
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor a, Tensor b) {
          std::vector<Tensor> outputs = {stack({a, b}, 0), stack({a, b}, -1)};
          for (const Tensor& piece : split(stack({a, b}, 1), 2, 1)) outputs.push_back(squeeze(piece, {1}));
          for (const Tensor& piece : split_sizes(a, {2, -1, 1}, 1)) outputs.push_back(piece);
          return outputs;
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(a, b);
    ASSERT_EQ(results.size(), 7u);
    EXPECT_EQ(results[0].shape(), Shape({2, 2, 5}));
    EXPECT_EQ(results[1].shape(), Shape({2, 5, 2}));
    const std::vector<float> values_a = a.to_vector<float>(), values_b = b.to_vector<float>();
    const std::vector<float> first = results[0].to_vector<float>(), last = results[1].to_vector<float>();
    for (std::size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(first[i], values_a[i]) << executor(jit);
      EXPECT_EQ(first[10 + i], values_b[i]) << executor(jit);
      EXPECT_EQ(last[2 * i], values_a[i]) << executor(jit);
      EXPECT_EQ(last[2 * i + 1], values_b[i]) << executor(jit);
    }
    EXPECT_EQ(results[2].to_vector<float>(), values_a) << executor(jit);
    EXPECT_EQ(results[3].to_vector<float>(), values_b) << executor(jit);
    EXPECT_EQ(results[4].shape(), Shape({2, 2}));
    EXPECT_EQ(results[5].shape(), Shape({2, 2}));
    EXPECT_EQ(results[6].shape(), Shape({2, 1}));
    EXPECT_EQ(results[5].to_vector<float>(), (std::vector<float>{values_a[2], values_a[3], values_a[7], values_a[8]}));
  }
  EXPECT_EQ(stack({full({}, 1.0), full({}, 2.0)}).to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(stack({from_vector(std::vector<std::int32_t>{1}), from_vector(std::vector<double>{0.5})}).dtype(),
            DType::f64);
}

// silu(x) = x sigmoid(x), -0 below -87; leaky_relu's slope on the negatives only (-0 stays -0, as x >= 0 holds);
// rms_norm's rows against their definition.
TEST(Composites, SiluLeakyReluAndRmsNorm) {
  const std::vector<float> values = {-100.0f, -87.5f, -86.0f, -20.0f, -1.5f, -0.0f, 0.0f, 0.75f, 30.0f, nan};
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  std::vector<float> rows = testing::random_floats(6 * 67, 31);
  const std::vector<float> gamma_values = testing::random_floats(67, 32);
  const Tensor matrix = from_vector(rows, {6, 67}), gamma = from_vector(gamma_values, {67});
  std::vector<long double> want_norm;
  for (std::size_t row = 0; row < 6; ++row) {
    long double squares = 0;
    for (std::size_t i = 0; i < 67; ++i) squares += static_cast<long double>(rows[row * 67 + i]) * rows[row * 67 + i];
    const long double scale = 1 / std::sqrt(squares / 67 + 1e-6L);
    for (std::size_t i = 0; i < 67; ++i) want_norm.push_back(rows[row * 67 + i] * scale * gamma_values[i]);
  }
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor matrix, Tensor gamma) {
          return std::vector<Tensor>{nn::silu(x), nn::leaky_relu(x), nn::rms_norm(matrix, gamma)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x, matrix, gamma);
    const std::vector<float> silu = results[0].to_vector<float>(), leaky = results[1].to_vector<float>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::string where = std::string(executor(jit)) + ", x = " + std::to_string(values[i]);
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(silu[i]) && std::isnan(leaky[i])) << where;
        continue;
      }
      const long double value = values[i];
      if (value < -87) {
        EXPECT_TRUE(silu[i] == 0 && std::signbit(silu[i])) << where << ": " << silu[i];
      } else {
        const long double want = value / (1 + std::exp(-value));
        EXPECT_LE(std::fabs(silu[i] - want), 4e-7L * std::fabs(want)) << where << ": " << silu[i];
        EXPECT_EQ(std::signbit(silu[i]), std::signbit(values[i])) << where;
      }
      const float want_leaky = values[i] >= 0 ? values[i] : values[i] * 0.01f;
      EXPECT_EQ(leaky[i], want_leaky) << where;
      EXPECT_EQ(std::signbit(leaky[i]), std::signbit(values[i])) << where;
    }
    expect_close(results[2].to_vector<float>(), want_norm, 2e-6L, std::string("rms_norm ") + executor(jit));
  }
}

// softplus, log_sigmoid and elu against long double on inputs from -120 to 120: log(1 + e^x) there, whose tiny
// results (x far below 0) a naive composition rounds to 0 and whose large ones overflow e^x; elu's expm1 near 0.
TEST(Composites, SoftplusLogSigmoidAndEluAreAccurateFromTinyToLarge) {
  std::vector<float> values = {-120.0f, -87.5f, -86.5f, -40.0f, -30.0f, -1e-3f, -1e-6f,   -0.0f,     0.0f,
                               1e-6f,   1e-3f,  0.5f,   20.0f,  90.0f,  120.0f, infinity, -infinity, nan};
  for (int i = 0; i < 2000; ++i) values.push_back(-60.0f + 0.06f * static_cast<float>(i));
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{nn::softplus(x), nn::log_sigmoid(x), nn::elu(x), nn::elu(x, 0.5)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    const std::vector<float> softplus = results[0].to_vector<float>(), log_sigmoid = results[1].to_vector<float>(),
                             elu = results[2].to_vector<float>(), half_elu = results[3].to_vector<float>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const long double value = values[i];
      const std::string where = std::string(executor(jit)) + ", x = " + std::to_string(values[i]);
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(softplus[i]) && std::isnan(log_sigmoid[i]) && std::isnan(elu[i])) << where;
        continue;
      }
      // log(1 + e^x) = max(x, 0) + log1p(e^-|x|), in long double; 0 below -87 (nn.h).
      auto reference_softplus = [](long double v) {
        if (std::isinf(v)) return v > 0 ? v : 0.0L;
        return std::fmax(v, 0.0L) + std::log1p(std::exp(-std::fabs(v)));
      };
      const long double want_softplus = value < -87 ? 0.0L : reference_softplus(value);
      const long double want_log_sigmoid = -value < -87 ? 0.0L : -reference_softplus(-value);
      const long double want_elu = value > 0 ? value : std::expm1(value);
      const long double want_half_elu = value > 0 ? value : 0.5L * std::expm1(value);
      const std::vector<std::pair<float, long double>> pairs = {{softplus[i], want_softplus},
                                                                {log_sigmoid[i], want_log_sigmoid},
                                                                {elu[i], want_elu},
                                                                {half_elu[i], want_half_elu}};
      for (const auto& [got, want] : pairs) {
        if (std::isinf(want)) {
          EXPECT_EQ(got, want) << where;
        } else {
          EXPECT_LE(std::fabs(got - want), 4e-7L * std::fabs(want))
              << where << ": " << got << ", want " << static_cast<double>(want);
        }
      }
      if (value == 0) {
        EXPECT_EQ(std::signbit(elu[i]), std::signbit(values[i])) << where;
      }
    }
  }
}

TEST(Composites, AnyAllPadAndTile) {
  const Tensor x = from_vector(std::vector<float>{0.0f, -0.0f, 0.0f, 2.0f, 0.0f, nan, 1.0f, 3.0f, -1.0f}, {3, 3});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{reduce_any(x, {1}),
                                     reduce_all(x, {1}),
                                     reduce_any(x),
                                     reduce_all(x, {0}, true),
                                     reduce_any(slice(x, {.stop = {0}}), {0}),
                                     reduce_all(slice(x, {.stop = {0}}), {0}),
                                     pad(x, {{1, 0}, {0, 2}}, -7.0),
                                     tile(x, {2, 1}),
                                     tile(x, {2}),
                                     tile(x, {2, 1, 1}),
                                     tile(x, {0, 3})};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    const std::string where = executor(jit);
    EXPECT_EQ(results[0].to_vector<bool>(), (std::vector<bool>{false, true, true})) << where;
    EXPECT_EQ(results[1].to_vector<bool>(), (std::vector<bool>{false, false, true})) << where;
    EXPECT_EQ(results[2].item<bool>(), true) << where;
    EXPECT_EQ(results[3].shape(), Shape({1, 3})) << where;
    EXPECT_EQ(results[3].to_vector<bool>(), (std::vector<bool>{false, false, false})) << where;
    EXPECT_EQ(results[4].to_vector<bool>(), (std::vector<bool>{false, false, false})) << where;  // any of nothing
    EXPECT_EQ(results[5].to_vector<bool>(), (std::vector<bool>{true, true, true})) << where;     // all of nothing
    // pad: a row of -7 before, two columns of -7 after.
    EXPECT_EQ(results[6].shape(), Shape({4, 5})) << where;
    const std::vector<float> padded = results[6].to_vector<float>(), values = x.to_vector<float>();
    for (int row = 0; row < 4; ++row)
      for (int column = 0; column < 5; ++column) {
        const float got = padded[static_cast<std::size_t>(row * 5 + column)];
        if (row == 0 || column >= 3) {
          EXPECT_EQ(got, -7.0f) << where << " pad at " << row << ", " << column;
        } else {
          const float want = values[static_cast<std::size_t>((row - 1) * 3 + column)];
          EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << where << " pad at " << row << ", " << column;
        }
      }
    // tile: {2, 1} repeats the rows as a block; {2} the columns; {2, 1, 1} adds a leading axis; 0 empties an axis.
    EXPECT_EQ(results[7].shape(), Shape({6, 3})) << where;
    EXPECT_EQ(results[8].shape(), Shape({3, 6})) << where;
    EXPECT_EQ(results[9].shape(), Shape({2, 3, 3})) << where;
    EXPECT_EQ(results[10].shape(), Shape({0, 9})) << where;
    const std::vector<float> by_rows = results[7].to_vector<float>(), by_columns = results[8].to_vector<float>(),
                             stacked = results[9].to_vector<float>();
    for (std::size_t i = 0; i < 18; ++i) {
      const float from_rows = values[i % 9], from_columns = values[i / 6 * 3 + i % 3];
      EXPECT_TRUE(std::isnan(from_rows) ? std::isnan(by_rows[i]) : by_rows[i] == from_rows) << where << " " << i;
      EXPECT_TRUE(std::isnan(from_columns) ? std::isnan(by_columns[i]) : by_columns[i] == from_columns)
          << where << " " << i;
      EXPECT_TRUE(std::isnan(from_rows) ? std::isnan(stacked[i]) : stacked[i] == from_rows) << where << " " << i;
    }
  }
  EXPECT_THROW(pad(x, {{1, 1}}), ShapeError);
  EXPECT_THROW(pad(x, {{1, -1}, {0, 0}}), ValueError);
  EXPECT_THROW(tile(x, {-1, 1}), ValueError);
  EXPECT_EQ(pad(from_vector(std::vector<std::int32_t>{5}), {{2, 1}}, 9).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{9, 9, 5, 9}));
}

// Each element's bits: NaN as NaN, the sign of zero too.
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i])
                                    : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))
        << what << " [" << i << "]: " << got[i] << ", want " << want[i];
}

// round (a primitive: halves to even, as NumPy, TF and torch; an f32 trick like (|x| + 2^23) - 2^23 depends on
// rounding that the float64 reference does not do), and the element composites: isnan, isinf, isfinite, trunc,
// reciprocal, logical_xor, nn::softsign, nn::l2_normalize.
TEST(Composites, RoundTruncElementTestsAndNormalization) {
  const std::vector<float> values = {-2.5f, -1.5f, -0.5f, -0.4f,      -0.0f, 0.0f, 0.49999997f, 0.5f,     1.5f,
                                     2.5f,  3.5f,  -7.7f, 8388607.5f, 1e10f, nan,  infinity,    -infinity};
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{round(x),    trunc(x),      isnan(x),        isinf(x),
                                     isfinite(x), reciprocal(x), nn::softsign(x), logical_xor(x > 0.0f, x < 1.0f)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    const std::string where = executor(jit);
    expect_bits(results[0].to_vector<float>(),
                {-2, -2, -0.0f, -0.0f, -0.0f, 0, 0, 0, 2, 2, 4, -8, 8388608, 1e10f, nan, infinity, -infinity},
                where + " round");
    expect_bits(results[1].to_vector<float>(),
                {-2, -1, -0.0f, -0.0f, -0.0f, 0, 0, 0, 1, 2, 3, -7, 8388607, 1e10f, nan, infinity, -infinity},
                where + " trunc");
    std::vector<bool> nans(values.size(), false), infinities(values.size(), false), finite(values.size(), true),
        exclusive(values.size());
    nans[14] = true;
    infinities[15] = infinities[16] = true;
    finite[14] = finite[15] = finite[16] = false;
    for (std::size_t i = 0; i < values.size(); ++i) exclusive[i] = (values[i] > 0) != (values[i] < 1);
    EXPECT_EQ(results[2].to_vector<bool>(), nans) << where;
    EXPECT_EQ(results[3].to_vector<bool>(), infinities) << where;
    EXPECT_EQ(results[4].to_vector<bool>(), finite) << where;
    EXPECT_EQ(results[7].to_vector<bool>(), exclusive) << where;
    std::vector<float> inverse, soft;
    for (float v : values) {
      inverse.push_back(1.0f / v);
      soft.push_back(v / (1.0f + std::fabs(v)));
    }
    soft[15] = std::numeric_limits<float>::quiet_NaN();  // inf / inf, as TensorFlow's
    soft[16] = std::numeric_limits<float>::quiet_NaN();
    expect_bits(results[5].to_vector<float>(), inverse, where + " reciprocal");
    expect_bits(results[6].to_vector<float>(), soft, where + " softsign");
  }
  const Tensor integers = from_vector(std::vector<std::int32_t>{-3, 0, 7}, {3});
  EXPECT_EQ(round(integers).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-3, 0, 7}));
  EXPECT_EQ(trunc(integers).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-3, 0, 7}));
  EXPECT_EQ(isnan(integers).to_vector<bool>(), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(isfinite(integers).to_vector<bool>(), (std::vector<bool>{true, true, true}));

  // l2_normalize: rows of unit length; a zero row stays zero (epsilon), in one row kernel.
  const Tensor rows = from_vector(std::vector<float>{3, 4, 0, 0, 1e-30f, 0}, {3, 2});
  for (bool jit : {false, true}) {
    const auto normalize = function([](Tensor x) { return nn::l2_normalize(x); }, {.jit_compile = jit});
    expect_bits(normalize(rows).to_vector<float>(), {0.6f, 0.8f, 0, 0, 1e-30f * 1e6f, 0},
                std::string(executor(jit)) + " l2_normalize");
    if (jit) {
      EXPECT_EQ(normalize.statistics().kernels_per_call, 1) << normalize.get_compiler_ir(Stage::fused, rows);
    }
  }
  EXPECT_THROW(nn::l2_normalize(rows, 2), ShapeError);
}

// tile of a rank-5 input: interleaving its axes with the repeats would pass the maximum rank, so it is tiled axis by
// axis (composite_ops.cpp). Element [i0..i4] of the result is input [i0 % d0, ..., i4 % d4].
TEST(Composites, TileOfManyAxesMatchesItsDefinition) {
  const Shape shape({2, 1, 3, 1, 2});
  const std::vector<std::int64_t> multiples = {1, 2, 1, 3, 2};
  const Tensor x = testing::random_tensor(DType::f32, shape, 50);
  const std::vector<float> values = x.to_vector<float>();
  for (bool jit : {false, true}) {
    const auto compute = function(
        [&](Tensor x) {
          return std::vector<Tensor>{tile(x, multiples), tile(x, {1, 1, 0, 1, 1})};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    ASSERT_EQ(results[0].shape(), Shape({2, 2, 3, 3, 4})) << executor(jit);
    EXPECT_EQ(results[1].shape(), Shape({2, 1, 0, 1, 2})) << executor(jit);
    const std::vector<float> tiled = results[0].to_vector<float>();
    const Shape& out = results[0].shape();
    for (std::int64_t flat = 0; flat < out.numel(); ++flat) {
      std::int64_t rest = flat, source = 0, stride = 1;
      for (int axis = out.rank() - 1; axis >= 0; --axis) {
        source += rest % out[axis] % shape[axis] * stride;
        rest /= out[axis];
        stride *= shape[axis];
      }
      ASSERT_EQ(tiled[static_cast<std::size_t>(flat)], values[static_cast<std::size_t>(source)])
          << executor(jit) << " at flat index " << flat;
    }
  }
}

// The activations against their definitions in long double, on -8 to 8 and beyond.
TEST(Composites, Relu6HardSigmoidHardSwishMishAndSelu) {
  std::vector<float> values = {-100.0f, -0.0f, 0.0f, 100.0f, 6.0f, -3.0f, 3.0f};
  for (int i = 0; i < 1601; ++i) values.push_back(-8.0f + 0.01f * static_cast<float>(i));
  const Tensor x = from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x) {
          return std::vector<Tensor>{nn::relu6(x), nn::hard_sigmoid(x), nn::hard_swish(x), nn::mish(x), nn::selu(x)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const long double v = values[i];
      const long double relu6 = std::fmin(std::fmax(v, 0.0L), 6.0L);
      const long double softplus = std::fmax(v, 0.0L) + std::log1p(std::exp(-std::fabs(v)));
      const long double selu = 1.0507009873554804934L * (v > 0 ? v : 1.6732632423543772848L * std::expm1(v));
      const long double hard_sigmoid = std::fmin(std::fmax(v + 3, 0.0L), 6.0L) / 6;
      const std::vector<long double> want = {relu6, hard_sigmoid, v * hard_sigmoid, v * std::tanh(softplus), selu};
      for (std::size_t k = 0; k < want.size(); ++k) {
        const float got = results[k].to_vector<float>()[i];
        EXPECT_LE(std::fabs(got - want[k]), 6e-7L * std::fabs(want[k]) + 1e-30L)
            << executor(jit) << " activation " << k << " at x = " << values[i] << ": " << got;
      }
    }
  }
}

// Cross-entropies against long double: logits up to +-200 (where naive softmax or sigmoid saturate to log 0), labels
// out of range giving NaN.
TEST(Composites, CrossEntropiesOfLargeLogitsAndOutOfRangeLabels) {
  const std::vector<float> logits = {200.0f, -200.0f, 0.5f, 1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 1.0f, 9.0f, 8.0f, 7.0f};
  const std::vector<std::int32_t> labels = {1, 3, 0, 4};
  std::vector<float> probabilities = {0.25f, 0.25f, 0.5f, 0.0f, 1.0f, 0.0f, 0.1f, 0.2f, 0.7f, 0.3f, 0.3f, 0.4f};
  const Tensor x = from_vector(logits, {4, 3}), y = from_vector(labels, {4}), p = from_vector(probabilities, {4, 3});
  const Tensor binary_logits = from_vector(std::vector<float>{-200.0f, -30.0f, -1.0f, 0.0f, 2.0f, 30.0f, 200.0f});
  const Tensor binary_labels = from_vector(std::vector<float>{1.0f, 0.0f, 0.25f, 1.0f, 0.0f, 1.0f, 0.0f});
  auto log_sum_exp_row = [&](std::size_t row) {
    std::vector<long double> values(logits.begin() + static_cast<std::ptrdiff_t>(3 * row),
                                    logits.begin() + static_cast<std::ptrdiff_t>(3 * row + 3));
    return logsumexp(values);
  };
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor y, Tensor p, Tensor z, Tensor t) {
          return std::vector<Tensor>{nn::sparse_softmax_cross_entropy(x, y), nn::softmax_cross_entropy(x, p),
                                     nn::sigmoid_cross_entropy(z, t)};
        },
        {.jit_compile = jit});
    const std::vector<Tensor> results = compute(x, y, p, binary_logits, binary_labels);
    const std::vector<float> sparse = results[0].to_vector<float>(), dense = results[1].to_vector<float>(),
                             binary = results[2].to_vector<float>();
    for (std::size_t row = 0; row < 4; ++row) {
      const std::string where = std::string(executor(jit)) + " row " + std::to_string(row);
      if (labels[row] >= 3) {
        EXPECT_TRUE(std::isnan(sparse[row])) << where << ": " << sparse[row];
      } else {
        const long double want = log_sum_exp_row(row) - logits[3 * row + static_cast<std::size_t>(labels[row])];
        EXPECT_LE(std::fabs(sparse[row] - want), 1e-6L * std::fabs(want) + 1e-6L) << where << ": " << sparse[row];
      }
      long double want_dense = 0;
      for (std::size_t k = 0; k < 3; ++k)
        want_dense += probabilities[3 * row + k] * (log_sum_exp_row(row) - logits[3 * row + k]);
      EXPECT_LE(std::fabs(dense[row] - want_dense), 1e-6L * std::fabs(want_dense) + 1e-6L)
          << where << ": " << dense[row];
    }
    const std::vector<float> z = binary_logits.to_vector<float>(), t = binary_labels.to_vector<float>();
    for (std::size_t i = 0; i < z.size(); ++i) {
      const long double v = z[i];
      const long double want = std::fmax(v, 0.0L) - v * t[i] + std::log1p(std::exp(-std::fabs(v)));
      EXPECT_LE(std::fabs(binary[i] - want), 4e-7L * std::fabs(want) + 1e-30L)
          << executor(jit) << " sigmoid_cross_entropy at " << z[i] << ": " << binary[i];
    }
  }
  EXPECT_THROW(nn::sparse_softmax_cross_entropy(x, from_vector(std::vector<float>{1, 2, 0, 1})), DTypeError);
  EXPECT_THROW(nn::sparse_softmax_cross_entropy(x, from_vector(std::vector<std::int32_t>{1, 2})), ShapeError);
}

// Bad arguments are errors under the composite's own name and the caller's line, and a function that hit one stays
// usable.
// log(e^a + e^b) where e^a overflows (1000), underflows (-1000), at equal and infinite operands, NaN, and ordinary
// values, against long double; integers compute in f32.
TEST(Composites, LogAddExpOfLargeEqualInfiniteAndOrdinaryValues) {
  const std::vector<float> a = {1000.0f, 1000.0f, -1000.0f, -infinity, infinity, infinity, -infinity, nan,
                                0.0f,    1e-20f,  88.0f,    -3.5f,     2.25f,    -0.75f,   17.0f};
  const std::vector<float> b = {1000.0f, -1000.0f, -1000.5f, -infinity, infinity, -infinity, 3.0f, 1.0f,
                                0.0f,    -1e-20f,  89.0f,    -3.25f,    -4.0f,    0.5f,      17.5f};
  std::vector<long double> want;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const long double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y))
      want.push_back(NAN);
    else if (x == y)
      want.push_back(x + std::log(2.0L));
    else
      want.push_back(std::fmax(x, y) + std::log1p(std::exp(-std::fabs(x - y))));
  }
  const auto size = static_cast<std::int64_t>(a.size());
  for (bool jit : {false, true}) {
    const auto compute = function([](Tensor x, Tensor y) { return logaddexp(x, y); }, {.jit_compile = jit});
    expect_close(compute(from_vector(a, {size}), from_vector(b, {size})).to_vector<float>(), want, 4e-7L,
                 std::string("logaddexp on the ") + executor(jit) + " executor");
    const Tensor integers = compute(from_vector(std::vector<std::int32_t>{3, -2}, {2}), full({}, 1, DType::i32));
    ASSERT_EQ(integers.dtype(), DType::f32);
    expect_close(integers.to_vector<float>(), {3 + std::log1p(std::exp(-2.0L)), 1 + std::log1p(std::exp(-3.0L))}, 4e-7L,
                 "logaddexp of integers");
  }
}

// NumPy's documented examples of isclose (f64), infinities, integers and broadcasting, on both executors.
TEST(Composites, IsCloseAndAllCloseAsNumPy) {
  struct Case {
    std::vector<double> a, b;
    double rtol, atol;
    bool equal_nan;
    std::vector<bool> want;
  };
  const double inf = std::numeric_limits<double>::infinity(), not_a_number = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {{1e10, 1e-7}, {1.00001e10, 1e-8}, 1e-5, 1e-8, false, {true, false}},
      {{1e10, 1e-8}, {1.00001e10, 1e-9}, 1e-5, 1e-8, false, {true, true}},
      {{1e10, 1e-8}, {1.0001e10, 1e-9}, 1e-5, 1e-8, false, {false, true}},
      {{1.0, not_a_number}, {1.0, not_a_number}, 1e-5, 1e-8, false, {true, false}},
      {{1.0, not_a_number}, {1.0, not_a_number}, 1e-5, 1e-8, true, {true, true}},
      {{1e-8, 1e-7}, {0.0, 0.0}, 1e-5, 1e-8, false, {true, false}},
      {{1e-100, 1e-7}, {0.0, 0.0}, 1e-5, 0.0, false, {false, false}},
      {{1e-10, 1e-10}, {1e-20, 0.0}, 1e-5, 1e-8, false, {true, true}},
      {{1e-10, 1e-10}, {1e-20, 0.999999e-10}, 1e-5, 0.0, false, {false, true}},
      {{inf, inf, -inf, inf, 1.0}, {inf, -inf, -inf, 1e308, inf}, 1e-5, 1e-8, false, {true, false, true, false, false}},
  };
  for (bool jit : {false, true}) {
    for (const Case& test : cases) {
      const auto compute = function(
          [&test](Tensor x, Tensor y) {
            return std::vector<Tensor>{isclose(x, y, test.rtol, test.atol, test.equal_nan),
                                       allclose(x, y, test.rtol, test.atol, test.equal_nan)};
          },
          {.jit_compile = jit});
      const auto size = static_cast<std::int64_t>(test.a.size());
      const auto results = compute(from_vector(test.a, {size}), from_vector(test.b, {size}));
      EXPECT_EQ(results[0].to_vector<bool>(), test.want) << "isclose, " << executor(jit) << ", a[0] " << test.a[0];
      const bool every = std::all_of(test.want.begin(), test.want.end(), [](bool close) { return close; });
      EXPECT_EQ(results[1].item<bool>(), every) << "allclose, " << executor(jit) << ", a[0] " << test.a[0];
    }
    const auto compute = function([](Tensor x, Tensor y) { return isclose(x, y); }, {.jit_compile = jit});
    const Tensor integers =
        compute(from_vector(std::vector<std::int32_t>{1, 2}, {2}), from_vector(std::vector<std::int32_t>{1, 3}, {2}));
    EXPECT_EQ(integers.to_vector<bool>(), (std::vector<bool>{true, false})) << executor(jit);
    const Tensor rows = compute(from_vector(std::vector<float>{1, 2, 3, 1, 2.00001f, 3.1f}, {2, 3}),
                                from_vector(std::vector<float>{1, 2, 3}, {3}));
    EXPECT_EQ(rows.shape(), Shape({2, 3})) << executor(jit);
    EXPECT_EQ(rows.to_vector<bool>(), (std::vector<bool>{true, true, true, true, true, false})) << executor(jit);
  }
  const Tensor two = from_vector(std::vector<float>{1, 2}, {2}), three = from_vector(std::vector<float>{1, 2, 3}, {3});
  for (const char* name : {"isclose", "allclose", "logaddexp"}) {
    const std::string line = "composites_test.cpp:" + std::to_string(__LINE__ + 3);
    const std::string message = error_message([&] {
      const std::string op = name;
      (void)(op == "isclose" ? isclose(two, three) : op == "allclose" ? allclose(two, three) : logaddexp(two, three));
    });
    EXPECT_NE(message.find(std::string(name) + ":"), std::string::npos) << message;
    EXPECT_NE(message.find(line), std::string::npos) << message;
  }
}

TEST(Composites, BadArgumentsNameTheCompositeAndTheLine) {
  const Tensor x = random_tensor(DType::f32, {4, 6}, 40);
  const std::string line = "composites_test.cpp:" + std::to_string(__LINE__ + 1);
  const std::string stacked = error_message([&] { stack({x, transpose(x)}); });
  EXPECT_NE(stacked.find("stack:"), std::string::npos) << stacked;
  EXPECT_NE(stacked.find("f32[6,4]"), std::string::npos) << stacked;
  EXPECT_NE(stacked.find(line), std::string::npos) << stacked;
  EXPECT_THROW(stack({}), ValueError);
  EXPECT_THROW(stack({x}, 3), ShapeError);
  const std::string divided = error_message([&] { split(x, 4, 1); });
  EXPECT_NE(divided.find("split:"), std::string::npos) << divided;
  EXPECT_NE(divided.find("does not divide into 4"), std::string::npos) << divided;
  EXPECT_THROW(split_sizes(x, {2, 2}, 1), ShapeError);
  EXPECT_THROW(split_sizes(x, {-1, -1}, 1), ValueError);
  EXPECT_THROW(split_sizes(x, {7, -1}, 1), ShapeError);
  EXPECT_THROW(split(x, 0), ValueError);
  EXPECT_THROW(split(full({}, 1.0), 1), ShapeError);
  EXPECT_NE(error_message([&] { argmin(x, 2); }).find("argmin:"), std::string::npos);
  EXPECT_NE(error_message([&] {
              argmin(zeros({0, 3}), 0);
            }).find("argmin: argmin of an empty axis"),
            std::string::npos);
  EXPECT_NE(error_message([&] {
              reduce_logsumexp(x, {1, -1});
            }).find("reduce_logsumexp: an axis is repeated"),
            std::string::npos);
  EXPECT_NE(error_message([&] { reduce_variance(x, {5}); }).find("reduce_variance:"), std::string::npos);
  EXPECT_NE(error_message([&] { nn::rms_norm(full({}, 1.0)); }).find("rms_norm: needs rank >= 1"), std::string::npos);
  EXPECT_NE(error_message([&] { clip(Tensor(), 0, 1); }).find("clip:"), std::string::npos);

  auto stacked_rows = function([](Tensor a, Tensor b) { return stack({a, b}); }, {.jit_compile = true});
  EXPECT_THROW(stacked_rows(x, transpose(x)), ShapeError);
  EXPECT_EQ(stacked_rows(x, x * 2.0).shape(), Shape({2, 4, 6}));
}

// flip, roll, tril and triu move or keep elements: exact, on both executors, at the shapes and arguments where an
// off-by-one would show (odd sizes, shifts beyond the size and negative, diagonals off the matrix, empty axes).
TEST(Composites, FlipRollAndTrianglesMoveElementsAsDefined) {
  const Tensor x = random_tensor(DType::f32, {2, 3, 5}, 60);
  const std::vector<float> v = x.to_vector<float>();
  auto at = [&](std::int64_t a, std::int64_t b, std::int64_t c) {
    return v[static_cast<std::size_t>(a * 15 + b * 5 + c)];
  };
  for (bool jit : {false, true}) {
    const auto flipped = function([](Tensor x) { return flip(x, {0, -1}); }, {.jit_compile = jit})(x);
    const auto flipped_all = function([](Tensor x) { return flip(x); }, {.jit_compile = jit})(x);
    ASSERT_EQ(flipped.shape(), x.shape());
    const std::vector<float> f = flipped.to_vector<float>(), g = flipped_all.to_vector<float>();
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < 3; ++b)
        for (std::int64_t c = 0; c < 5; ++c) {
          EXPECT_EQ(f[static_cast<std::size_t>(a * 15 + b * 5 + c)], at(1 - a, b, 4 - c)) << executor(jit);
          EXPECT_EQ(g[static_cast<std::size_t>(a * 15 + b * 5 + c)], at(1 - a, 2 - b, 4 - c)) << executor(jit);
        }
    for (std::int64_t shift : {0, 1, 3, 5, 7, -1, -6}) {
      const std::vector<float> r =
          function([shift](Tensor x) { return roll(x, shift, 2); }, {.jit_compile = jit})(x).to_vector<float>();
      for (std::int64_t a = 0; a < 2; ++a)
        for (std::int64_t b = 0; b < 3; ++b)
          for (std::int64_t c = 0; c < 5; ++c)
            EXPECT_EQ(r[static_cast<std::size_t>(a * 15 + b * 5 + ((c + shift) % 5 + 5) % 5)], at(a, b, c))
                << executor(jit) << " shift " << shift;
    }
    for (std::int64_t diagonal : {0, 1, -1, 4, -3, 9}) {
      const std::vector<float> lower =
          function([diagonal](Tensor x) { return tril(x, diagonal); }, {.jit_compile = jit})(x).to_vector<float>();
      const std::vector<float> upper =
          function([diagonal](Tensor x) { return triu(x, diagonal); }, {.jit_compile = jit})(x).to_vector<float>();
      for (std::int64_t a = 0; a < 2; ++a)
        for (std::int64_t i = 0; i < 3; ++i)
          for (std::int64_t j = 0; j < 5; ++j) {
            const std::size_t k = static_cast<std::size_t>(a * 15 + i * 5 + j);
            EXPECT_EQ(lower[k], j <= i + diagonal ? at(a, i, j) : 0.0f) << executor(jit) << " tril " << diagonal;
            EXPECT_EQ(upper[k], j >= i + diagonal ? at(a, i, j) : 0.0f) << executor(jit) << " triu " << diagonal;
          }
    }
  }
  // Integers keep their dtype; empty axes stay empty; a causal mask's triangle fuses with what reads it.
  const Tensor counts = from_vector(std::vector<std::int32_t>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(tril(counts).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 0, 3, 4}));
  EXPECT_EQ(roll(zeros({0, 3}), 2, 0).shape(), Shape({0, 3}));
  EXPECT_EQ(flip(zeros({3, 0})).shape(), Shape({3, 0}));
  const auto masked =
      function([](Tensor scores) { return nn::softmax(triu(scores, 1) - scores); }, {.jit_compile = true});
  masked(x);
  EXPECT_EQ(masked.statistics().kernels_per_call, 1) << masked.get_compiler_ir(Stage::fused, x);
  EXPECT_THROW(tril(zeros({4})), ShapeError);
  EXPECT_THROW(roll(x, 1, 3), ShapeError);
  EXPECT_THROW(flip(x, {0, 0}), ShapeError);
  EXPECT_NE(error_message([&] { triu(full({}, 1.0)); }).find("triu:"), std::string::npos);
}

}  // namespace
}  // namespace kiln
