// Scans (cumsum, cumprod, cummax, cummin) on both executors against the float64 reference, for every dtype, axis
// and flag, on shapes where a kernel changes its path (rows shorter than, as long as and longer than the CUDA
// kernel's 32-element tile; one line; columns; empty axes); then the values users of TensorFlow, JAX and PyTorch
// rely on: exclusive and reverse as tf.math.cumsum has them, a NaN carried on, -0 kept, integer wraparound, the
// identities an exclusive scan starts with, bools counted in i32; and errors that name the op and the line.

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

// Every scan op with every combination of the flags, along `axis`.
std::vector<Tensor> all_scans(const Tensor& x, std::int64_t axis, bool with_sums) {
  std::vector<Tensor> results;
  for (const bool exclusive : {false, true})
    for (const bool reverse : {false, true}) {
      const ScanOptions options{.exclusive = exclusive, .reverse = reverse};
      if (with_sums) {
        results.push_back(cumsum(x, axis, options));
        results.push_back(cumprod(x, axis, options));
      }
      results.push_back(cummax(x, axis, options));
      results.push_back(cummin(x, axis, options));
    }
  return results;
}

TEST(Scan, EveryOpDtypeAxisAndFlagAgreesWithTheReference) {
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const Tensor x = random_tensor(dtype, {3, 37, 5}, 1);
    for (const std::int64_t axis : {0, 1, -1}) {
      const std::string label = std::string(to_string(dtype)) + " along axis " + std::to_string(axis);
      expect_agreement(
          label, [axis](Tensor x) { return all_scans(x, axis, true); }, x);
    }
  }
  // bool: the running maximum and minimum are any() and all() so far; sums and products count in i32.
  const Tensor flags = random_tensor(DType::f32, {4, 9}, 2) > 0.3f;
  expect_agreement(
      "bool", [](Tensor x) { return all_scans(x, 1, false); }, flags);
  expect_agreement(
      "bool counted",
      [](Tensor x) {
        return std::vector<Tensor>{cumsum(x, 1), cumprod(x, 0, {.reverse = true})};
      },
      flags);
}

TEST(Scan, RowsAndColumnsOfEveryLengthAroundTheTile) {
  std::uint64_t seed = 3;
  for (const Shape& shape : {Shape({1, 1}), Shape({70, 31}), Shape({70, 32}), Shape({33, 33}), Shape({2, 100}),
                             Shape({1, 1000}), Shape({65, 3, 2})}) {
    const Tensor x = random_tensor(DType::f32, shape, seed++);
    for (const std::int64_t axis : {0, -1})
      expect_agreement(
          shape.to_string() + " along axis " + std::to_string(axis),
          [axis](Tensor x) { return all_scans(x, axis, true); }, x);
  }
}

// On a transposed view the scanned axis is the input's other one: the kernel reads the view's own order.
TEST(Scan, TransposedAndBroadcastViews) {
  const Tensor x = random_tensor(DType::f32, {40, 24}, 10);
  expect_agreement(
      "transposed", [](Tensor x) { return all_scans(transpose(x), -1, true); }, x);
  const Tensor row = random_tensor(DType::f32, {24}, 11);
  expect_agreement(
      "broadcast",
      [](Tensor row) {
        return all_scans(broadcast_to(row, {5, 24}), 0, true);
      },
      row);
}

TEST(Scan, ZeroSizeDimensions) {
  for (const Shape& shape : {Shape({0, 5}), Shape({4, 0}), Shape({0})}) {
    const Tensor x = random_tensor(DType::f32, shape, 12);
    for (std::int64_t axis = 0; axis < shape.rank(); ++axis) {
      auto result = expect_agreement(
          shape.to_string() + " along axis " + std::to_string(axis),
          [axis](Tensor x) { return all_scans(x, axis, true); }, x);
      EXPECT_EQ(cumsum(x, axis).shape(), shape);
    }
  }
}

template <class T>
void expect_values(const std::string& what, const Tensor& actual, const std::vector<T>& expected) {
  const std::vector<T> got = actual.to_vector<T>();
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(expected[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
        continue;
      }
      EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i])) << what << " at " << i;
    }
    EXPECT_EQ(got[i], expected[i]) << what << " at " << i;
  }
}

// Eagerly (the standard kernels) and compiled.
template <class Body, class T>
void expect_both(const std::string& what, Body body, const Tensor& x, const std::vector<T>& expected) {
  expect_values(what + ", standard", body(x), expected);
  auto compiled = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  expect_values(what + ", JIT", compiled(x), expected);
}

TEST(Scan, ValuesAsTensorFlowGivesThem) {
  const Tensor x = from_vector<float>({1, 2, 3}, {3});
  expect_both(
      "cumsum", [](Tensor x) { return cumsum(x, 0); }, x, std::vector<float>{1, 3, 6});
  expect_both(
      "exclusive", [](Tensor x) { return cumsum(x, 0, {.exclusive = true}); }, x, std::vector<float>{0, 1, 3});
  expect_both(
      "reverse", [](Tensor x) { return cumsum(x, 0, {.reverse = true}); }, x, std::vector<float>{6, 5, 3});
  expect_both(
      "exclusive reverse", [](Tensor x) { return cumsum(x, 0, {.exclusive = true, .reverse = true}); }, x,
      std::vector<float>{5, 3, 0});
  expect_both(
      "cumprod", [](Tensor x) { return cumprod(x, -1); }, x, std::vector<float>{1, 2, 6});
  expect_both(
      "cumprod exclusive", [](Tensor x) { return cumprod(x, 0, {.exclusive = true}); }, x, std::vector<float>{1, 1, 2});
}

TEST(Scan, NanCarriesOnAndMinusZeroStays) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), infinity = std::numeric_limits<float>::infinity();
  const Tensor with_nan = from_vector<float>({1, nan, 3, -5}, {4});
  expect_both(
      "cummax", [](Tensor x) { return cummax(x, 0); }, with_nan, std::vector<float>{1, nan, nan, nan});
  expect_both(
      "cummin", [](Tensor x) { return cummin(x, 0); }, with_nan, std::vector<float>{1, nan, nan, nan});
  expect_both(
      "cummin reverse", [](Tensor x) { return cummin(x, 0, {.reverse = true}); }, with_nan,
      std::vector<float>{nan, nan, -5, -5});
  expect_both(
      "cumsum", [](Tensor x) { return cumsum(x, 0); }, with_nan, std::vector<float>{1, nan, nan, nan});
  expect_both(
      "exclusive identities",
      [](Tensor x) {
        return concat({cummax(x, 0, {.exclusive = true}), cummin(x, 0, {.exclusive = true})}, 0);
      },
      from_vector<float>({2, 1}, {2}), std::vector<float>{-infinity, 2, infinity, 2});
  expect_both(
      "a sum of -0 alone", [](Tensor x) { return cumsum(x, 0); }, from_vector<float>({-0.0f, 1}, {2}),
      std::vector<float>{-0.0f, 1});
}

TEST(Scan, IntegersWrapAndBoolsCount) {
  const std::int32_t largest = std::numeric_limits<std::int32_t>::max(),
                     lowest = std::numeric_limits<std::int32_t>::min();
  const Tensor x = from_vector<std::int32_t>({largest, 1, -3}, {3});
  expect_both(
      "cumsum", [](Tensor x) { return cumsum(x, 0); }, x, std::vector<std::int32_t>{largest, lowest, largest - 2});
  expect_both(
      "cummax exclusive", [](Tensor x) { return cummax(x, 0, {.exclusive = true}); }, x,
      std::vector<std::int32_t>{lowest, largest, largest});
  const Tensor flags = from_vector<bool>({true, false, true, true}, {4});
  EXPECT_EQ(cumsum(flags, 0).dtype(), DType::i32);
  expect_both(
      "bool cumsum", [](Tensor x) { return cumsum(x, 0); }, flags, std::vector<std::int32_t>{1, 1, 2, 3});
  expect_both(
      "bool cummin", [](Tensor x) { return cummin(x, 0); }, flags, std::vector<bool>{true, false, false, false});
}

TEST(Scan, ErrorsNameTheOpAndTheLine) {
  const Tensor scalar = from_vector<float>({1}, Shape());
  try {
    cumsum(scalar, 0);
    ADD_FAILURE() << "a scan of a scalar";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("cumsum"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("scan_test.cpp"), std::string::npos) << error.what();
  }
  const Tensor x = random_tensor(DType::f32, {2, 3}, 13);
  auto compiled = function([](Tensor x) { return cummax(x, 2); }, {.jit_compile = true});
  try {
    compiled(x);
    ADD_FAILURE() << "an axis out of range";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("cummax"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("scan_test.cpp"), std::string::npos) << error.what();
  }
  // The function stays usable: called with a rank-3 input, axis 2 exists.
  const Tensor cube = random_tensor(DType::f32, {2, 3, 4}, 14);
  EXPECT_EQ(compiled(cube).shape(), cube.shape());
}

}  // namespace
}  // namespace kiln
