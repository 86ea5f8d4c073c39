// take_along_axis (NumPy's and JAX's take_along_axis, torch.gather): elements picked along an axis at per-element
// indices, on both executors against the reference, for every dtype and axis, with broadcasting off the axis,
// negative and repeated indices and empty shapes; the picks users make with it (each row's maximum through argmax,
// the logit of each label); and its errors: an index out of range is data, found when the op runs, naming the op and
// the line, and the function stays usable.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

// Indices in [-size, size) of `shape`, from random integers.
Tensor indices_within(const Shape& shape, std::int64_t size, DType dtype, std::uint64_t seed) {
  const Tensor raw = random_tensor(DType::i64, shape, seed);
  Tensor wrapped = raw - floor(cast(raw, DType::f64) / static_cast<double>(2 * size)) * (2 * size) - size;
  return cast(wrapped, dtype);
}

TEST(TakeAlongAxis, EveryDtypeAndAxisAgreesWithTheReference) {
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean})
    for (const std::int64_t axis : {0, 1, 2}) {
      const Tensor values = random_tensor(dtype, {4, 5, 6}, 1);
      Shape index_shape({4, 5, 6});
      index_shape[static_cast<int>(axis)] = 3;
      const Tensor indices =
          indices_within(index_shape, values.shape()[static_cast<int>(axis)], axis == 1 ? DType::i32 : DType::i64, 2);
      expect_agreement(std::string(to_string(dtype)) + " along axis " + std::to_string(axis),
                       [axis](Tensor values, Tensor indices) { return take_along_axis(values, indices, axis); },
                       values, indices);
    }
}

TEST(TakeAlongAxis, BroadcastsOffTheAxisAndKeepsTheIndicesSizeOnIt) {
  const Tensor values = random_tensor(DType::f32, {4, 1, 6}, 3);
  const Tensor indices = from_vector(std::vector<std::int64_t>{5, -1, 0, 2, 2, -6}, {1, 3, 2});
  const Tensor result = take_along_axis(values, indices, 2);
  EXPECT_EQ(result.shape(), Shape({4, 3, 2}));
  const std::vector<float> got = result.to_vector<float>(), rows = values.to_vector<float>();
  const std::vector<std::int64_t> picks = {5, 5, 0, 2, 2, 0};  // -1 and -6 count from the end of 6
  for (std::size_t row = 0; row < 4; ++row)
    for (std::size_t j = 0; j < 6; ++j) EXPECT_EQ(got[row * 6 + j], rows[row * 6 + static_cast<std::size_t>(picks[j])]);
  expect_agreement(
      "broadcast", [](Tensor values, Tensor indices) { return take_along_axis(values, indices, -1); }, values,
      indices);
  // An empty index axis, and empty values off the axis.
  EXPECT_EQ(take_along_axis(values, zeros({4, 1, 0}, DType::i32), 2).shape(), Shape({4, 1, 0}));
  EXPECT_EQ(take_along_axis(zeros({0, 3}), zeros({0, 2}, DType::i64), 1).shape(), Shape({0, 2}));
}

// Each row's largest element through argmax with keepdims, and each example's logit of its label: one kernel
// around the picks (take_along_axis runs its standard kernel, as gather does).
TEST(TakeAlongAxis, PicksRowMaximaAndLabelLogits) {
  const Tensor logits = random_tensor(DType::f32, {37, 11}, 4);
  const Tensor labels = from_vector(std::vector<std::int32_t>{3, 0, 10, 7, -1}, {5, 1});
  auto maxima = function([](Tensor x) { return take_along_axis(x, argmax(x, -1, true), -1); },
                         {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::vector<float> picked = maxima(logits).to_vector<float>(),
                           largest = reduce_max(logits, {-1}).to_vector<float>();
  EXPECT_EQ(picked, largest);
  const Tensor five = slice(logits, {.stop = {5}});
  const std::vector<float> chosen = take_along_axis(five, labels, 1).to_vector<float>(), rows = five.to_vector<float>();
  const std::vector<std::size_t> columns = {3, 0, 10, 7, 10};
  for (std::size_t row = 0; row < 5; ++row) EXPECT_EQ(chosen[row], rows[row * 11 + columns[row]]) << row;
}

TEST(TakeAlongAxis, ErrorsNameTheOpAndTheLineAndTheFunctionStaysUsable) {
  const Tensor values = random_tensor(DType::f32, {2, 4}, 5);
  const Tensor bad = from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2});
  for (bool jit : {false, true}) {
    auto pick = function([](Tensor values, Tensor indices) { return take_along_axis(values, indices, 1); },
                         {.jit_compile = jit, .on_compile_failure = Fallback::none});
    try {
      pick(values, bad);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("take_along_axis: index 4 (element 3 of the indices) is out of range for axis 1 of size 4"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("take_along_axis_test.cpp"), std::string::npos) << message;
    }
    const Tensor good = from_vector(std::vector<std::int64_t>{1, 2, 3, -4}, {2, 2});
    EXPECT_EQ(pick(values, good).shape(), Shape({2, 2}));
  }
  EXPECT_THROW(take_along_axis(values, from_vector(std::vector<std::int64_t>{1}, {1}), 0), ShapeError);   // rank
  EXPECT_THROW(take_along_axis(values, zeros({3, 2}, DType::i64), 1), ShapeError);  // 3 against 2 off the axis
  EXPECT_THROW(take_along_axis(values, zeros({2, 2}), 1), DTypeError);              // float indices
  EXPECT_THROW(take_along_axis(values, zeros({2, 2}, DType::i64), 2), ShapeError);  // no axis 2
}

// A pick read by a kernel is computed in it (an index map whose gathered axis comes from the indices): once per row
// in a row kernel (a cross-entropy's logit of the label), or per element in a loop kernel, for every dtype, index
// dtype, axis and negative index, against the standard executor and the reference.
TEST(TakeAlongAxis, PicksInsideKernelsAgreeWithTheReference) {
  for (const DType dtype : {DType::f32, DType::f64})
    for (const DType index_dtype : {DType::i32, DType::i64}) {
      const Tensor logits = random_tensor(dtype, {37, 301}, 6);
      const Tensor labels = indices_within({37}, 301, index_dtype, 7);
      auto cross_entropy = [](Tensor logits, Tensor labels) {
        const Tensor largest = reduce_max(logits, {-1});
        const Tensor log_total = log(reduce_sum(exp(logits - expand_dims(largest, -1)), {-1})) + largest;
        return log_total - squeeze(take_along_axis(logits, expand_dims(labels, -1), -1), {-1});
      };
      const std::string label = std::string(to_string(dtype)) + " logits, " + std::string(to_string(index_dtype));
      auto result = expect_agreement("cross-entropy, " + label, cross_entropy, logits, labels);
      EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    }
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean})
    for (const std::int64_t axis : {0, 1, 2}) {
      const Tensor values = random_tensor(dtype, {4, 5, 19}, 8);
      Shape index_shape({4, 5, 19});
      index_shape[static_cast<int>(axis)] = 3;
      const Tensor indices = indices_within(index_shape, values.shape()[static_cast<int>(axis)], DType::i64, 9);
      const Tensor other = random_tensor(dtype == DType::boolean ? DType::f32 : dtype, index_shape, 10);
      auto picked_then_computed = [axis](Tensor values, Tensor indices, Tensor other) {
        const Tensor picked = take_along_axis(values, indices, axis);
        return picked.dtype() == DType::boolean ? where(picked, other, other * 2.0) : picked * 3 + other;
      };
      auto result = expect_agreement(std::string(to_string(dtype)) + " picked along axis " + std::to_string(axis),
                                     picked_then_computed, values, indices, other);
      EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    }
  // Indices computed in the kernel (an argmax's would be a library kernel; these are arithmetic on labels).
  const Tensor values = random_tensor(DType::f32, {64, 33}, 11);
  const Tensor labels = indices_within({64, 1}, 33, DType::i32, 12);
  auto shifted_labels = [](Tensor values, Tensor labels) {
    return take_along_axis(values, remainder(labels + 5, 33), 1) + reduce_sum(values, {1}, true);
  };
  auto result = expect_agreement("picked at computed indices", shifted_labels, values, labels);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

// An index out of range in a kernel's pick raises take_along_axis's ValueError after the kernel, naming the first
// bad element in the indices' order as the standard kernel does, however the threads shared the rows.
TEST(TakeAlongAxis, AnIndexOutOfRangeInAKernelIsTheSameError) {
  std::vector<std::int64_t> labels(4096, 1);
  for (std::size_t row = 1000; row < labels.size(); row += 7) labels[row] = 50;  // the first bad one at 1000
  labels[3000] = -51;
  const Tensor logits = random_tensor(DType::f32, {4096, 50}, 13);
  const Tensor bad = from_vector(labels, {4096});
  auto loss = [](Tensor logits, Tensor labels) {
    return reduce_logsumexp(logits, {-1}) - squeeze(take_along_axis(logits, expand_dims(labels, -1), -1), {-1});
  };
  std::string expected;
  for (bool jit : {false, true}) {
    auto function_of = function(loss, {.jit_compile = jit, .on_compile_failure = Fallback::none});
    try {
      function_of(logits, bad);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("take_along_axis: index 50 (element 1000 of the indices) is out of range for axis 1 of "
                             "size 50"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("take_along_axis_test.cpp"), std::string::npos) << message;
    }
    EXPECT_EQ(function_of(logits, from_vector(std::vector<std::int64_t>(4096, -50), {4096})).shape(), Shape({4096}));
    if (jit) {
      EXPECT_EQ(function_of.statistics().kernels_per_call, 1);
      EXPECT_EQ(function_of.statistics().fallbacks, 0);
    }
  }
}

}  // namespace
}  // namespace kiln
