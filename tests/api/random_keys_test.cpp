// Random values from keys (kiln::random::key, split, fold_in, bits, uniform, normal, bernoulli; nn::dropout):
// Philox's published answer, pure functions of the key, the same values on the standard executor and compiled
// (drawn inside the kernels that use them), the distributions' moments, dropout's gradient, and errors.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <set>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

double value_of(const Tensor& scalar) { return cast(scalar, DType::f64).to_vector<double>().at(0); }

// Random123's known answer for Philox-4x32-10, counter (0, 0, 0, 0) under key (0, 0): words 0x6627e8d5 and
// 0xe169c58d first, the second one high in random_bits.
TEST(RandomKeys, PhiloxGivesThePublishedAnswer) {
  const Tensor bits = random::bits(random::key(0), {1});
  EXPECT_EQ(static_cast<std::uint64_t>(bits.to_vector<std::int64_t>()[0]), 0xe169c58d6627e8d5ULL);
}

TEST(RandomKeys, DrawsArePureFunctionsOfTheKey) {
  const Tensor key = random::key(42);
  EXPECT_EQ(random::uniform(key, {5, 7}).to_vector<float>(), random::uniform(key, {5, 7}).to_vector<float>());
  EXPECT_NE(random::uniform(key, {5, 7}).to_vector<float>(),
            random::uniform(random::key(43), {5, 7}).to_vector<float>());
  // A draw of a larger shape starts with the smaller draw's values: element i draws counter i.
  const std::vector<std::int64_t> small = random::bits(key, {6}).to_vector<std::int64_t>();
  const std::vector<std::int64_t> large = random::bits(key, {2, 5}).to_vector<std::int64_t>();
  EXPECT_TRUE(std::equal(small.begin(), small.end(), large.begin()));
}

TEST(RandomKeys, DerivedKeysDifferFromEachOtherAndFromTheParentsDraws) {
  const Tensor key = random::key(7);
  std::set<std::int64_t> seen;
  for (const Tensor& child : random::split(key, 4)) {
    EXPECT_EQ(child.dtype(), DType::i64);
    EXPECT_EQ(child.shape(), Shape());
    seen.insert(child.to_vector<std::int64_t>()[0]);
  }
  for (std::int64_t step : {0, 1, 2}) seen.insert(random::fold_in(key, step).to_vector<std::int64_t>()[0]);
  for (std::int64_t drawn : random::bits(key, {8}).to_vector<std::int64_t>()) seen.insert(drawn);
  seen.insert(key.to_vector<std::int64_t>()[0]);
  EXPECT_EQ(seen.size(), 4u + 3u + 8u + 1u);
  EXPECT_EQ(random::fold_in(key, 5).to_vector<std::int64_t>(),
            random::fold_in(key, from_vector(std::vector<std::int32_t>{5}, Shape())).to_vector<std::int64_t>());
  EXPECT_TRUE(random::split(key, 0).empty());
}

// Mean and variance within 6 standard errors of the distribution's.
void expect_moments(const Tensor& values, double mean, double variance, const std::string& label) {
  const std::vector<double> data = cast(values, DType::f64).to_vector<double>();
  double sum = 0, squares = 0;
  for (double x : data) sum += x;
  const double sample_mean = sum / static_cast<double>(data.size());
  for (double x : data) squares += (x - sample_mean) * (x - sample_mean);
  const double sample_variance = squares / static_cast<double>(data.size() - 1);
  const double n = static_cast<double>(data.size());
  EXPECT_NEAR(sample_mean, mean, 6 * std::sqrt(variance / n)) << label;
  EXPECT_NEAR(sample_variance, variance, 6 * variance * std::sqrt(2 / n) + 1e-12) << label;
}

TEST(RandomKeys, UniformAndNormalHaveTheirMoments) {
  const std::vector<Tensor> keys = random::split(random::key(2026), 4);
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor unit = random::uniform(keys[0], {200003}, {.dtype = dtype});
    EXPECT_EQ(unit.dtype(), dtype);
    expect_moments(unit, 0.5, 1.0 / 12, "uniform " + std::string(to_string(dtype)));
    const Tensor wide = random::uniform(keys[1], {100000}, {.low = -3, .high = 5, .dtype = dtype});
    EXPECT_TRUE(value_of(reduce_min(wide)) >= -3 && value_of(reduce_max(wide)) < 5);
    expect_moments(random::normal(keys[2], {200003}, {.dtype = dtype}), 0, 1, "normal " + std::string(to_string(dtype)));
    expect_moments(random::normal(keys[3], {100000}, {.mean = 2, .stddev = 0.5, .dtype = dtype}), 2, 0.25,
                   "normal(2, 0.5)");
  }
  const Tensor coins = random::bernoulli(keys[0], 0.3, {100000});
  EXPECT_EQ(coins.dtype(), DType::boolean);
  expect_moments(cast(coins, DType::f64), 0.3, 0.3 * 0.7, "bernoulli(0.3)");
}

TEST(RandomKeys, CompiledDrawsEqualTheStandardExecutorsBitForBit) {
  const Tensor key = random::key(99);
  const Tensor x = random_tensor(DType::f32, {33, 65}, 3);
  auto draws = [](Tensor key, Tensor x) {
    const std::vector<Tensor> keys = random::split(key, 3);
    return std::vector<Tensor>{random::bits(keys[0], {4, 9}), random::uniform(keys[1], {17}, {.low = -1, .high = 2}),
                               nn::dropout(x, 0.25, keys[2]), random::bernoulli(random::fold_in(key, 3), 0.5, {2, 3})};
  };
  auto standard = function(draws, {.name = "draws"});
  auto compiled = function(draws, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "draws"});
  const std::vector<Tensor> want = standard(key, x), got = compiled(key, x);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(want[0].to_vector<std::int64_t>(), got[0].to_vector<std::int64_t>());
  EXPECT_EQ(want[1].to_vector<float>(), got[1].to_vector<float>());
  EXPECT_EQ(want[2].to_vector<float>(), got[2].to_vector<float>());
  EXPECT_EQ(cast(want[3], DType::i32).to_vector<std::int32_t>(), cast(got[3], DType::i32).to_vector<std::int32_t>());
  // Eager draws are the same values.
  EXPECT_EQ(random::bits(random::split(key, 3)[0], {4, 9}).to_vector<std::int64_t>(), want[0].to_vector<std::int64_t>());
  // And the standard executor, the JIT and the float64 reference agree on a normal draw.
  expect_agreement("normal", [](Tensor key) { return random::normal(key, {5, 31}, {.mean = 1, .stddev = 3}); }, key);
}

TEST(RandomKeys, DropoutDrawsItsMaskInTheKernelThatAppliesIt) {
  auto layer = [](Tensor x, Tensor w, Tensor key) { return nn::dropout(relu(x * w + 1.0), 0.1, key); };
  auto compiled = function(layer, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor x = random_tensor(DType::f32, {64, 100}, 1), w = random_tensor(DType::f32, {100}, 2);
  compiled(x, w, random::key(5));
  EXPECT_EQ(compiled.statistics().kernels_per_call, 1)
      << compiled.get_compiler_ir(Stage::fused, x, w, random::key(5));
}

TEST(RandomKeys, DropoutKeepsOneMinusRateScaledAndItsGradientIsTheMask) {
  const Tensor x = add(random_tensor(DType::f64, {300, 101}, 4), 3.0);  // away from 0: a kept element is not 0
  const Tensor key = random::key(11);
  const Tensor dropped = nn::dropout(x, 0.4, key);
  const std::vector<double> in = x.to_vector<double>(), out = dropped.to_vector<double>();
  std::int64_t kept = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0) continue;
    ++kept;
    EXPECT_DOUBLE_EQ(out[i], in[i] / 0.6);
  }
  const double fraction = static_cast<double>(kept) / static_cast<double>(in.size());
  EXPECT_NEAR(fraction, 0.6, 6 * std::sqrt(0.24 / static_cast<double>(in.size())));
  // d sum(dropout(x)) / dx: 1 / (1 - rate) where kept, 0 where dropped; compiled as well.
  auto loss = [](Tensor x, Tensor key) { return reduce_sum(nn::dropout(x, 0.4, key)); };
  const Tensor expected = where(ne(dropped, 0.0), full(x.shape(), 1 / 0.6, DType::f64), 0.0);
  EXPECT_EQ(grad(loss)(x, key).to_vector<double>(), expected.to_vector<double>());
  auto compiled = function(grad(loss), {.jit_compile = true, .on_compile_failure = Fallback::none});
  EXPECT_EQ(compiled(x, key).to_vector<double>(), expected.to_vector<double>());
  EXPECT_EQ(nn::dropout(x, 0, key).to_vector<double>(), in);
  EXPECT_EQ(value_of(reduce_max(abs(nn::dropout(x, 1, key)))), 0.0);
}

TEST(RandomKeys, EmptyAndRankZeroShapes) {
  const Tensor key = random::key(1);
  EXPECT_EQ(random::uniform(key, {0, 3}).shape(), Shape({0, 3}));
  EXPECT_EQ(random::normal(key, {}).shape(), Shape());
  EXPECT_EQ(random::bits(key, {}).to_vector<std::int64_t>(), random::bits(key, {1}).to_vector<std::int64_t>());
}

TEST(RandomKeys, ErrorsNameTheFunctionAndKeepTheProcessUsable) {
  const Tensor key = random::key(1);
  EXPECT_THROW(random::uniform(from_vector(std::vector<float>{1}, Shape()), {3}), DTypeError);
  EXPECT_THROW(random::uniform(from_vector(std::vector<std::int64_t>{1, 2}, Shape({2})), {3}), ShapeError);
  EXPECT_THROW(random::uniform(key, {3}, {.dtype = DType::i32}), DTypeError);
  EXPECT_THROW(random::uniform(key, {3}, {.low = 1, .high = 1}), ValueError);
  EXPECT_THROW(random::normal(key, {3}, {.stddev = -1}), ValueError);
  EXPECT_THROW(random::bernoulli(key, 1.5, {3}), ValueError);
  EXPECT_THROW(nn::dropout(random_tensor(DType::f32, {3}, 1), 1.5, key), ValueError);
  EXPECT_THROW(random::split(key, -1), ValueError);
  try {
    random::uniform(key, {3}, {.dtype = DType::i64});
    FAIL() << "no error";
  } catch (const DTypeError& error) {
    EXPECT_NE(std::string(error.what()).find("random::uniform"), std::string::npos) << error.what();
  }
  EXPECT_EQ(random::uniform(key, {3}).shape(), Shape({3}));
}

}  // namespace
}  // namespace kiln
