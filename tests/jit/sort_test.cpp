// sort, argsort and top_k (tf.sort / tf.argsort / tf.math.top_k, jnp.sort / jnp.argsort(stable=True), torch.sort
// (stable=True) / torch.topk): on both executors against the reference for every dtype, axis and direction; the
// order users rely on (NaN above every number, -0 equal to +0, ties in index order descending too, top_k's ties won
// by the lower index); empty axes, transposed operands, rows long and short around the kernels' paths; and the
// errors, eager and compiled, naming the op and the line, with the function usable after.

#include "support/differential.h"
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

using testing::expect_agreement;
using testing::random_tensor;

const std::vector<DType> every_dtype = {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean};

std::string label(DType dtype, std::int64_t axis, bool descending) {
  return std::string(to_string(dtype)) + " axis " + std::to_string(axis) + (descending ? " descending" : "");
}

// Integers in [-9, 9] and bools hold many ties: the reference's stable order decides those results exactly.
TEST(Sort, EveryDtypeAxisAndDirectionAgreesWithTheReference) {
  for (const DType dtype : every_dtype)
    for (const std::int64_t axis : {0, 1, 2, -1})
      for (const bool descending : {false, true}) {
        const Tensor x = random_tensor(dtype, {4, 5, 6}, 11);
        expect_agreement(
            "sort " + label(dtype, axis, descending),
            [=](Tensor x) {
              return std::tuple{sort(x, axis, descending), argsort(x, axis, descending)};
            },
            x);
      }
}

TEST(Sort, NanIsAboveEveryNumberAndZerosTie) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {nan, 1.5, -0.0, -inf, 0.0, nan, inf, -2.0, 0.0};
  for (const DType dtype : {DType::f32, DType::f64})
    for (const bool jit : {false, true}) {
      auto both = function(
          [](Tensor x, Tensor d) {
            return std::tuple{argsort(x), argsort(x, 0, true), sort(x - d)};
          },
          {.jit_compile = jit, .on_compile_failure = Fallback::none});
      const Tensor x = cast(from_vector(values), dtype);
      const auto [ascending, descending, sorted] = both(x, zeros({1}, dtype));
      // -0 (position 2) and the two +0 (4, 8) are equal: their order is their positions'.
      EXPECT_EQ(ascending.to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 7, 2, 4, 8, 1, 6, 0, 5}));
      EXPECT_EQ(descending.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 5, 6, 1, 2, 4, 8, 7, 3}));
      const std::vector<double> got = cast(sorted, DType::f64).to_vector<double>();
      EXPECT_EQ(got[0], -inf);
      EXPECT_EQ(got[1], -2.0);
      EXPECT_TRUE(std::signbit(got[2])) << "-0 keeps its place before the +0s and its sign";
      EXPECT_FALSE(std::signbit(got[3]));
      EXPECT_TRUE(std::isnan(got[7]) && std::isnan(got[8]));
      expect_agreement(
          std::string(to_string(dtype)) + " with NaNs",
          [](Tensor x) {
            return std::tuple{sort(x, 0, true), argsort(x), top_k(x, 4).indices};
          },
          x);
    }
}

TEST(Sort, EqualElementsKeepTheirIndexOrderBothWays) {
  const Tensor x = from_vector(std::vector<std::int32_t>{3, 1, 3, 1, 2, 3});
  EXPECT_EQ(argsort(x).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3, 4, 0, 2, 5}));
  EXPECT_EQ(argsort(x, -1, true).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 2, 5, 4, 1, 3}));
  EXPECT_EQ(sort(x, 0, true).to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 3, 3, 2, 1, 1}));
  const Tensor flags = from_vector(std::vector<bool>{true, false, true, false});
  EXPECT_EQ(argsort(flags).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3, 0, 2}));
  const Tensor extremes = from_vector(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max(), -1,
                                                                std::numeric_limits<std::int64_t>::min(), 0});
  EXPECT_EQ(argsort(extremes).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 1, 3, 0}));
}

// tf.math.top_k's contract: the k largest, largest first, a tie won by the lower index, NaN the largest.
TEST(TopK, PicksTheLargestFirstWithTiesToTheLowerIndex) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const bool jit : {false, true}) {
    auto largest = [jit](std::int64_t k) {
      return function([k](Tensor x) { return top_k(x, k); },
                      {.jit_compile = jit, .on_compile_failure = Fallback::none});
    };
    const Tensor x = from_vector(std::vector<float>{1, 5, 3, 5, 2, 5, 0, 4}, {2, 4});
    const TopK two = largest(2)(x);
    EXPECT_EQ(two.values.to_vector<float>(), (std::vector<float>{5, 5, 5, 4}));
    EXPECT_EQ(two.indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3, 1, 3}));
    EXPECT_EQ(two.indices.dtype(), DType::i64);
    EXPECT_EQ(largest(1)(x).indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1}));
    const TopK none = largest(0)(x);
    EXPECT_EQ(none.values.shape(), Shape({2, 0}));
    EXPECT_EQ(none.indices.shape(), Shape({2, 0}));
    EXPECT_EQ(largest(4)(x).indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3, 2, 0, 1, 3, 0, 2}));
    const auto [values, indices] = largest(2)(from_vector(std::vector<double>{1, nan, 7, nan}));
    EXPECT_EQ(indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3}));
    EXPECT_TRUE(std::isnan(values.to_vector<double>()[0]));
  }
  for (const DType dtype : every_dtype)
    for (const std::int64_t k : {0, 1, 3, 7})
      expect_agreement(
          "top_k " + std::string(to_string(dtype)) + " k " + std::to_string(k), [k](Tensor x) { return top_k(x, k); },
          random_tensor(dtype, {3, 5, 7}, 12));
}

TEST(Sort, EmptyAxesAndRankOne) {
  for (const std::int64_t axis : {0, 1}) {
    EXPECT_EQ(sort(zeros({0, 3}), axis).shape(), Shape({0, 3}));
    EXPECT_EQ(argsort(zeros({3, 0}), axis).shape(), Shape({3, 0}));
    expect_agreement(
        "empty axis " + std::to_string(axis),
        [axis](Tensor x) {
          return std::tuple{sort(x, axis), argsort(x, axis)};
        },
        zeros({4, 0}));
  }
  EXPECT_EQ(top_k(zeros({0, 5}), 2).indices.shape(), Shape({0, 2}));
  EXPECT_EQ(top_k(zeros({3, 0}), 0).values.shape(), Shape({3, 0}));
  EXPECT_EQ(argsort(from_vector(std::vector<float>{2.5F})).to_vector<std::int64_t>(), std::vector<std::int64_t>{0});
  expect_agreement(
      "rank 1",
      [](Tensor x) {
        return std::tuple{sort(x), argsort(x, 0, true), top_k(x, 5).values};
      },
      random_tensor(DType::f32, {9}, 13));
}

// Operands the JIT hands over from a transpose or a fused loop, and along a middle axis.
TEST(Sort, TransposedAndComputedOperands) {
  const Tensor x = random_tensor(DType::f32, {6, 9, 5}, 14);
  expect_agreement(
      "transposed",
      [](Tensor x) {
        const Tensor turned = transpose(x, {2, 0, 1});
        return std::tuple{sort(turned, 1), argsort(turned, -1, true), top_k(turned, 3).indices};
      },
      x);
  expect_agreement(
      "computed", [](Tensor x) { return sort(exp(x) * 2.0 + 1.0, 1, true) - 1.0; }, x);
}

// Row lengths on both sides of the CPU's comparison / radix switch, odd sizes, long rows over several threads'
// tasks, top_k with k small (a selection) and large (a sort); 32-bit keys (f32, i32, bool: radix passes of packed
// key-index words, bools with three passes skipped) and 64-bit ones.
TEST(Sort, LongAndShortRowsAgreeWithTheReference) {
  for (const auto& dims :
       std::vector<std::vector<std::int64_t>>{{5, 63}, {3, 64}, {4, 65}, {7, 129}, {2, 4099}, {300, 17}})
    for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::boolean}) {
      const Tensor x = random_tensor(dtype, Shape(dims), 15);
      const std::int64_t n = dims.back();
      expect_agreement(
          std::string(to_string(dtype)) + " [" + std::to_string(dims[0]) + ", " + std::to_string(n) + "]",
          [n](Tensor x) {
            return std::tuple{sort(x, -1, true), argsort(x, 0), argsort(x), top_k(x, 8 < n ? 8 : n).indices,
                              top_k(x, n / 2).indices};
          },
          x);
    }
}

TEST(Sort, ErrorsNameTheOpAndTheLineAndTheFunctionStaysUsable) {
  auto expect_error = [](auto call, const std::string& wanted) {
    try {
      call();
      ADD_FAILURE() << "no error for " << wanted;
    } catch (const ShapeError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(wanted), std::string::npos) << message;
      EXPECT_NE(message.find("sort_test.cpp"), std::string::npos) << message;
    }
  };
  const Tensor scalar = from_vector(std::vector<float>{1.0F}, Shape());
  expect_error([&] { sort(scalar); }, "sort");
  expect_error([&] { argsort(scalar); }, "argsort");
  expect_error([&] { top_k(scalar, 1); }, "top_k");
  const Tensor x = random_tensor(DType::f32, {2, 4}, 16);
  expect_error([&] { sort(x, 2); }, "sort");
  expect_error([&] { argsort(x, -3); }, "argsort");
  expect_error([&] { top_k(x, 5); }, "k = 5 is outside [0, 4]");
  expect_error([&] { top_k(x, -1); }, "k = -1 is outside [0, 4]");
  for (const bool jit : {false, true}) {
    auto three = function([](Tensor x) { return top_k(x, 3).values; },
                          {.jit_compile = jit, .on_compile_failure = Fallback::none});
    expect_error([&] { three(random_tensor(DType::f32, {2, 2}, 17)); }, "k = 3 is outside [0, 2]");
    EXPECT_EQ(three(x).shape(), Shape({2, 3}));
    auto along =
        function([](Tensor x) { return sort(x, 1); }, {.jit_compile = jit, .on_compile_failure = Fallback::none});
    expect_error([&] { along(from_vector(std::vector<float>{3, 1, 2})); }, "sort");
    EXPECT_EQ(along(x).shape(), Shape({2, 4}));
  }
}

}  // namespace
}  // namespace kiln
