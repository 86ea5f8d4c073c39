// scatter_add: gather's adjoint (torch.index_add, jnp's .at[].add), eagerly and in traced functions on both
// executors against the reference, rows named twice summed in index order, and its errors.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

// The expected result: operand [outer, size, inner] plus updates [outer, count, inner] at [o, index, i], in
// index order.
template <class T>
std::vector<T> added(std::vector<T> operand, const std::vector<T>& updates, std::int64_t outer, std::int64_t size,
                     std::int64_t inner, const std::vector<std::int64_t>& indices) {
  const auto count = static_cast<std::int64_t>(indices.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t index = indices[static_cast<std::size_t>(j)];
      for (std::int64_t i = 0; i < inner; ++i)
        operand[static_cast<std::size_t>((o * size + (index < 0 ? index + size : index)) * inner + i)] +=
            updates[static_cast<std::size_t>((o * count + j) * inner + i)];
    }
  return operand;
}

TEST(ScatterAdd, EmbeddingGradientSumsRowsNamedTwice) {
  const std::vector<std::int64_t> tokens = {2, 0, 2, -1, 2, 6};
  Tensor table = zeros({7, 5});
  Tensor rows = random_tensor(DType::f32, {2, 3, 5}, 1);
  Tensor sums = scatter_add(table, from_vector(std::vector<std::int32_t>(tokens.begin(), tokens.end()), {2, 3}), rows);
  EXPECT_EQ(sums.shape(), Shape({7, 5}));
  EXPECT_EQ(sums.to_vector<float>(), added(table.to_vector<float>(), rows.to_vector<float>(), 1, 7, 5, tokens));
}

TEST(ScatterAdd, AlongEveryAxisWithIntegersToo) {
  Tensor operand = random_tensor(DType::f64, {3, 4, 5}, 2);
  const std::vector<std::int64_t> sizes = {3, 4, 5};
  for (std::int64_t axis = 0; axis < 3; ++axis) {
    const std::int64_t size = sizes[static_cast<std::size_t>(axis)];
    const std::int64_t outer = axis == 0 ? 1 : axis == 1 ? 3 : 12, inner = axis == 0 ? 20 : axis == 1 ? 5 : 1;
    const std::vector<std::int64_t> indices = {size - 1, 0, -size, 1, 1};
    std::vector<std::int64_t> dims = {3, 4, 5};
    dims[static_cast<std::size_t>(axis)] = 5;
    Tensor updates = random_tensor(DType::f64, Shape(dims), 3 + static_cast<std::uint64_t>(axis));
    Tensor result = scatter_add(operand, from_vector(indices, {5}), updates, axis - 3);
    EXPECT_EQ(result.to_vector<double>(),
              added(operand.to_vector<double>(), updates.to_vector<double>(), outer, size, inner, indices))
        << "axis " << axis;
  }
  // Integers wrap; no indices leave the operand as it is.
  Tensor counts =
      scatter_add(full({3}, 2147483647, DType::i32), from_vector<std::int64_t>({1, 1}, {2}), ones({2}, DType::i32));
  EXPECT_EQ(counts.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2147483647, -2147483647, 2147483647}));
  EXPECT_EQ(scatter_add(operand, zeros({0}, DType::i32), zeros({3, 0, 5}, DType::f64), 1).to_vector<double>(),
            operand.to_vector<double>());
}

TEST(ScatterAdd, TracedOnBothExecutorsAgreesWithTheReference) {
  Tensor operand = random_tensor(DType::f32, {6, 33}, 4);
  Tensor updates = random_tensor(DType::f32, {4, 2, 33}, 5);
  Tensor indices = from_vector<std::int64_t>({5, 0, 5, 5, -6, 2, 3, 3}, {4, 2});
  expect_agreement(
      "scatter_add then tanh", [](Tensor x, Tensor u, Tensor i) { return tanh(scatter_add(x * 0.5, i, u * 2.0)); },
      operand, updates, indices);
}

TEST(ScatterAdd, ErrorsNameTheOpAndTheLine) {
  Tensor operand = zeros({4, 3});
  const int line = __LINE__ + 2;
  try {
    scatter_add(operand, from_vector<std::int64_t>({1, 2}, {2}), zeros({3, 3}));
    ADD_FAILURE() << "no error for updates of the wrong shape";
  } catch (const ShapeError& error) {
    EXPECT_EQ(error.op(), "scatter_add");
    EXPECT_NE(error.detail().find("[2,3]"), std::string::npos) << error.what();
    EXPECT_NE(error.location().find("scatter_add_test.cpp:" + std::to_string(line)), std::string::npos);
  }
  EXPECT_THROW(scatter_add(operand, from_vector<float>({1, 2}, {2}), zeros({2, 3})), DTypeError);
  EXPECT_THROW(scatter_add(zeros({4}, DType::boolean), from_vector<std::int64_t>({1}, {1}), zeros({1}, DType::boolean)),
               DTypeError);
  try {
    scatter_add(operand, from_vector<std::int64_t>({1, 4}, {2}), zeros({2, 3}));
    ADD_FAILURE() << "no error for an index out of range";
  } catch (const ValueError& error) {
    EXPECT_EQ(error.op(), "scatter_add");
    EXPECT_NE(error.detail().find("index 4 (element 1 of the indices)"), std::string::npos) << error.what();
  }
}

// segment_sum: rows summed by segment in index order, empty segments 0, ids outside [0, n) dropped; traced on
// both executors and differentiated (the gradient of a segment's sum is its row of the cotangent, gathered).
TEST(SegmentSum, SumsRowsBySegmentAndDropsIdsOutOfRange) {
  const std::vector<std::int64_t> ids = {3, 0, 3, -1, 1, 7, 3};
  Tensor data = random_tensor(DType::f64, {7, 4}, 6);
  Tensor sums = segment_sum(data, from_vector<std::int32_t>({3, 0, 3, -1, 1, 7, 3}, {7}), 5);
  ASSERT_EQ(sums.shape(), Shape({5, 4}));
  std::vector<double> want(5 * 4, 0.0);
  const std::vector<double> rows = data.to_vector<double>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= 0 && ids[i] < 5)
      for (std::size_t c = 0; c < 4; ++c) want[static_cast<std::size_t>(ids[i]) * 4 + c] += rows[i * 4 + c];
  EXPECT_EQ(sums.to_vector<double>(), want);
  EXPECT_EQ(segment_sum(zeros({0, 2}), zeros({0}, DType::i64), 3).to_vector<float>(), std::vector<float>(6, 0.0f));

  Tensor segments = from_vector<std::int64_t>(ids, {7});
  expect_agreement(
      "segment_sum then exp", [](Tensor x, Tensor s) { return exp(segment_sum(x * 0.5, s, 5)); },
      cast(data, DType::f32), segments);
  auto loss = [](Tensor x, Tensor s, Tensor weights) { return reduce_sum(segment_sum(x, s, 5) * weights); };
  Tensor weights = random_tensor(DType::f64, {5, 4}, 7);
  const std::vector<double> gradient = grad(loss)(data, segments, weights).to_vector<double>();
  const std::vector<double> w = weights.to_vector<double>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t c = 0; c < 4; ++c)
      EXPECT_EQ(gradient[i * 4 + c], ids[i] >= 0 && ids[i] < 5 ? w[static_cast<std::size_t>(ids[i]) * 4 + c] : 0.0);

  EXPECT_THROW(segment_sum(data, from_vector<std::int64_t>({0, 1}, {2}), 5), ShapeError);
  EXPECT_THROW(segment_sum(data, cast(segments, DType::f32), 5), DTypeError);
  EXPECT_THROW(segment_sum(data, segments, -1), ValueError);
}

}  // namespace
}  // namespace kiln
