// gather: slices picked by integer indices (NumPy's take, tf.gather, jnp.take), eagerly, in traced functions on
// both executors, through the reference evaluator, and its errors -- an index out of range is data, found when the
// op runs, and must leave the function usable.

#include "ir/parser.h"
#include "reference/reference_evaluator.h"
#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

// The expected result, element by element: params [outer, size, inner] read at [o, index, i].
std::vector<float> taken(const std::vector<float>& params, std::int64_t outer, std::int64_t size, std::int64_t inner,
                         const std::vector<std::int64_t>& indices) {
  std::vector<float> result;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t index : indices)
      for (std::int64_t i = 0; i < inner; ++i)
        result.push_back(params[static_cast<std::size_t>((o * size + (index < 0 ? index + size : index)) * inner + i)]);
  return result;
}

TEST(Gather, EmbeddingLookupPicksRowsAndNegativeIndicesCountFromTheEnd) {
  Tensor table = random_tensor(DType::f32, {7, 5}, 1);
  const std::vector<std::int64_t> tokens = {2, 0, 6, -1, 3, -7};
  Tensor looked_up = gather(table, from_vector(std::vector<std::int32_t>(tokens.begin(), tokens.end()), {2, 3}));
  EXPECT_EQ(looked_up.shape(), Shape({2, 3, 5}));
  EXPECT_EQ(looked_up.dtype(), DType::f32);
  EXPECT_EQ(looked_up.to_vector<float>(), taken(table.to_vector<float>(), 1, 7, 5, tokens));
}

TEST(Gather, AlongEveryAxisWithI64IndicesOfAnyRank) {
  Tensor params = random_tensor(DType::f32, {3, 4, 5}, 2);
  const std::vector<float> values = params.to_vector<float>();
  const std::vector<std::int64_t> sizes = {3, 4, 5};
  for (std::int64_t axis = 0; axis < 3; ++axis) {
    const std::int64_t size = sizes[static_cast<std::size_t>(axis)];
    const std::int64_t outer = axis == 0 ? 1 : axis == 1 ? 3 : 12, inner = axis == 0 ? 20 : axis == 1 ? 5 : 1;
    const std::vector<std::int64_t> indices = {size - 1, 0, -size, 1, 1};
    Tensor result = gather(params, from_vector(indices, {5}), axis - 3);  // negative axes count from the end
    std::vector<std::int64_t> dims = {3, 4, 5};
    dims[static_cast<std::size_t>(axis)] = 5;
    EXPECT_EQ(result.shape(), Shape(dims)) << "axis " << axis;
    EXPECT_EQ(result.to_vector<float>(), taken(values, outer, size, inner, indices)) << "axis " << axis;
  }
  // A rank-0 index drops the axis; an empty index list empties it.
  Tensor row = gather(params, from_vector(std::vector<std::int64_t>{2}, Shape()), 1);
  EXPECT_EQ(row.shape(), Shape({3, 5}));
  EXPECT_EQ(row.to_vector<float>(), taken(values, 3, 4, 5, {2}));
  Tensor none = gather(params, zeros({0, 2}, DType::i32), 2);
  EXPECT_EQ(none.shape(), Shape({3, 4, 0, 2}));
}

TEST(Gather, KeepsEveryDtypeOfParams) {
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f64}) {
    Tensor params = random_tensor(dtype, {6, 3}, 3);
    Tensor indices = from_vector(std::vector<std::int32_t>{5, 1, -2});
    Tensor result = gather(params, indices);
    EXPECT_EQ(result.dtype(), dtype);
    // Compared through f64, exact for these values.
    const std::vector<double> all = cast(params, DType::f64).to_vector<double>();
    const std::vector<double> got = cast(result, DType::f64).to_vector<double>();
    for (std::int64_t row = 0; row < 3; ++row)
      for (std::int64_t column = 0; column < 3; ++column) {
        const std::int64_t source = std::vector<std::int64_t>{5, 1, 4}[static_cast<std::size_t>(row)];
        EXPECT_EQ(got[static_cast<std::size_t>(row * 3 + column)], all[static_cast<std::size_t>(source * 3 + column)])
            << to_string(dtype);
      }
  }
}

TEST(Gather, LargeLookupMatchesRowCopies) {
  // Enough rows for several threads, a width that is not a multiple of any vector.
  Tensor table = random_tensor(DType::f32, {1000, 37}, 4);
  std::vector<std::int64_t> tokens;
  for (std::int64_t i = 0; i < 5000; ++i) tokens.push_back((i * 7919) % 1000 - (i % 3 == 0 ? 1000 : 0));
  Tensor result = gather(table, from_vector(tokens, {50, 100}));
  EXPECT_EQ(result.to_vector<float>(), taken(table.to_vector<float>(), 1, 1000, 37, tokens));
}

TEST(Gather, TracedOnBothExecutorsAgreesWithTheReference) {
  // An embedding lookup scaled and added to positions, normalized: a language model's first layer.
  auto embed = [](Tensor table, Tensor tokens, Tensor positions) {
    Tensor x = gather(table, tokens) * std::sqrt(16.0) + positions;
    return nn::layer_norm(x);
  };
  std::vector<std::int32_t> tokens;
  for (std::int32_t i = 0; i < 24; ++i) tokens.push_back((i * 11) % 50 - 25);
  expect_agreement("embedding", embed, random_tensor(DType::f32, {50, 16}, 5), from_vector(tokens, {2, 12}),
                   random_tensor(DType::f32, {12, 16}, 6));
  // Picking columns of a computed value (axis 1), and the gathered value feeding a reduction.
  auto pick_columns = [](Tensor x, Tensor columns) { return reduce_sum(gather(exp(x), columns, 1), {-1}); };
  expect_agreement("columns", pick_columns, random_tensor(DType::f32, {9, 13}, 7),
                   from_vector(std::vector<std::int64_t>{12, -13, 4, 4, 0}));
  // Gathered from a transposed parameter, with indices computed in the function.
  auto from_transposed = [](Tensor x, Tensor scores) { return gather(transpose(x), argmax(scores, 1)) + 1.0; };
  expect_agreement("transposed", from_transposed, random_tensor(DType::f32, {6, 10}, 8),
                   random_tensor(DType::f32, {4, 10}, 9));
}

TEST(Gather, ErrorsNameTheOpAndTheLine) {
  Tensor table = random_tensor(DType::f32, {4, 3}, 10);
  auto message_of = [](auto statement) -> std::string {
    try {
      statement();
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  const int line = __LINE__ + 1;
  std::string message = message_of([&] { gather(table, from_vector(std::vector<std::int32_t>{1, 4, 0})); });
  EXPECT_NE(message.find("kiln::ValueError: gather: index 4 (element 1 of the indices) is out of range for axis 0 of "
                         "size 4"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("gather_test.cpp:" + std::to_string(line)), std::string::npos) << message;
  EXPECT_NE(message_of([&] { gather(table, from_vector(std::vector<std::int64_t>{-5})); }).find("index -5"),
            std::string::npos);
  EXPECT_NE(message_of([&] { gather(table, from_vector(std::vector<float>{1})); })
                .find("kiln::DTypeError: gather: indices "
                      "must be i32 or i64, got f32"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              gather(full({}, 1.0), from_vector(std::vector<std::int32_t>{0}));
            }).find("kiln::ShapeError: gather: cannot gather from a rank-0 tensor"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              gather(table, from_vector(std::vector<std::int32_t>{0}), 2);
            }).find("kiln::ShapeError: gather: axis 2 is out of range for rank 2"),
            std::string::npos);
  // An empty axis has no index to give.
  EXPECT_NE(message_of([&] {
              gather(zeros({0, 3}), from_vector(std::vector<std::int32_t>{0}));
            }).find("index 0 (element 0 of the indices) is out of range for axis 0 of size 0"),
            std::string::npos);
}

TEST(Gather, AnIndexOutOfRangeInACompiledFunctionIsAnErrorAndTheFunctionStaysUsable) {
  const int line = __LINE__ + 1;
  auto lookup = [](Tensor table, Tensor tokens) { return tanh(gather(table, tokens) * 2.0); };
  Tensor table = random_tensor(DType::f32, {5, 8}, 11);
  for (bool jit : {false, true}) {
    auto compiled = function(lookup, {.jit_compile = jit, .on_compile_failure = Fallback::none});
    Tensor good = from_vector(std::vector<std::int32_t>{4, -5, 2}),
           bad = from_vector(std::vector<std::int32_t>{4, 5, 2});
    Tensor expected = tanh(gather(table, good) * 2.0);
    EXPECT_EQ(compiled(table, good).to_vector<float>(), expected.to_vector<float>());
    try {
      compiled(table, bad);
      ADD_FAILURE() << "no error (jit " << jit << ")";
    } catch (const ValueError& error) {
      EXPECT_EQ(error.op(), "gather");
      EXPECT_NE(error.detail().find("index 5 (element 1 of the indices)"), std::string::npos) << error.what();
      EXPECT_NE(error.location().find("gather_test.cpp:" + std::to_string(line)), std::string::npos) << error.what();
    }
    EXPECT_EQ(compiled(table, good).to_vector<float>(), expected.to_vector<float>()) << "jit " << jit;
    EXPECT_EQ(compiled.statistics().traces, 1) << "jit " << jit;
    EXPECT_EQ(compiled.statistics().fallbacks, 0) << "jit " << jit;
  }
}

TEST(Gather, PrintsParsesAndTheReferenceChecksItsIndices) {
  const std::string text = R"(func @lookup(%0: f32[4,3], %1: i64[2]) -> (f32[2,3]) {
  %2 = f32[2,3] gather(%0, %1) {axis=0}
  return %2
})";
  ir::Graph graph = ir::parse(text);
  auto array_of = []<class T>(const std::vector<T>& values, DType dtype) {
    runtime::Array array = runtime::allocate_array(dtype, Shape({static_cast<std::int64_t>(values.size())}));
    std::copy(values.begin(), values.end(), array.mutable_data<T>());
    return array;
  };
  const std::vector<float> values = random_tensor(DType::f32, {12}, 12).to_vector<float>();
  runtime::Array table = array_of(values, DType::f32);
  table.shape = Shape({4, 3});
  std::vector<runtime::Array> inputs = {table, array_of(std::vector<std::int64_t>{3, -4}, DType::i64)};
  std::vector<reference::Value> result = reference::evaluate(graph, inputs);
  ASSERT_EQ(result.size(), 1u);
  for (std::size_t column = 0; column < 3; ++column) {
    EXPECT_EQ(result[0].values[column], values[9 + column]);
    EXPECT_EQ(result[0].values[3 + column], values[column]);
  }
  inputs[1] = array_of(std::vector<std::int64_t>{0, 4}, DType::i64);
  EXPECT_THROW(reference::evaluate(graph, inputs), ValueError);
}

}  // namespace
}  // namespace kiln
