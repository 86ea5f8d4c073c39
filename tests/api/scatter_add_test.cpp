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

}  // namespace
}  // namespace kiln
