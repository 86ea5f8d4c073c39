// einsum against a brute-force sum computed here in long double (every assignment of every label, the product of
// the operands' elements added into the output's), on both executors; its ellipsis against matmul's broadcasting;
// and its errors, named "einsum" with the caller's line.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::error_message;
using testing::random_tensor;

// The sum that "inputs->output" (letters only, explicit output) defines, over operands given as long doubles
// with their shapes.
std::vector<long double> brute_force(const std::vector<std::string>& inputs, const std::string& output,
                                     const std::vector<std::vector<long double>>& values,
                                     const std::vector<Shape>& shapes) {
  std::map<char, std::int64_t> sizes;
  for (std::size_t operand = 0; operand < inputs.size(); ++operand)
    for (std::size_t axis = 0; axis < inputs[operand].size(); ++axis)
      sizes[inputs[operand][axis]] = shapes[operand].dims()[axis];
  std::vector<char> labels;
  for (const auto& entry : sizes) labels.push_back(entry.first);
  std::int64_t output_count = 1;
  for (char label : output) output_count *= sizes[label];
  std::vector<long double> result(static_cast<std::size_t>(output_count), 0.0L);
  std::int64_t assignments = 1;
  for (char label : labels) assignments *= sizes[label];
  std::map<char, std::int64_t> value;
  // Row-major offset of `term`'s element at the current assignment.
  auto offset = [&](const std::string& term) {
    std::int64_t flat = 0;
    for (char label : term) flat = flat * sizes[label] + value[label];
    return static_cast<std::size_t>(flat);
  };
  for (std::int64_t assignment = 0; assignment < assignments; ++assignment) {
    std::int64_t rest = assignment;
    for (auto label = labels.rbegin(); label != labels.rend(); ++label) {
      value[*label] = rest % sizes[*label];
      rest /= sizes[*label];
    }
    long double product = 1.0L;
    for (std::size_t operand = 0; operand < inputs.size(); ++operand)
      product *= values[operand][offset(inputs[operand])];
    result[offset(output)] += product;
  }
  return result;
}

std::vector<std::string> split_terms(const std::string& left) {
  std::vector<std::string> terms(1);
  for (char c : left) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back() += c;
  }
  return terms;
}

std::vector<long double> as_long_double(const Tensor& x) {
  const std::vector<double> values = cast(x, DType::f64).to_vector<double>();
  return std::vector<long double>(values.begin(), values.end());
}

Tensor call_einsum(const std::string& subscripts, const std::vector<Tensor>& operands, bool jit) {
  switch (operands.size()) {
    case 1:
      return function([&](Tensor a) { return einsum(subscripts, {a}); }, {.jit_compile = jit})(operands[0]);
    case 2:
      return function(
          [&](Tensor a, Tensor b) {
            return einsum(subscripts, {a, b});
          },
          {.jit_compile = jit})(operands[0], operands[1]);
    default:
      return function(
          [&](Tensor a, Tensor b, Tensor c) {
            return einsum(subscripts, {a, b, c});
          },
          {.jit_compile = jit})(operands[0], operands[1], operands[2]);
  }
}

struct Case {
  std::string subscripts;  // as given to einsum
  std::string reference;   // letters only, explicit output: what brute_force computes
  std::vector<Shape> shapes;
};

// Each case's einsum, on both executors, equals the brute-force sum within the rounding of its terms.
void check(const Case& test, DType dtype) {
  std::vector<Tensor> operands;
  std::vector<std::vector<long double>> values;
  for (std::size_t i = 0; i < test.shapes.size(); ++i) {
    operands.push_back(random_tensor(dtype, test.shapes[i], 100 + i));
    values.push_back(as_long_double(operands.back()));
  }
  const std::size_t arrow = test.reference.find("->");
  const std::vector<long double> want =
      brute_force(split_terms(test.reference.substr(0, arrow)), test.reference.substr(arrow + 2), values, test.shapes);
  // Each output element sums at most this many products.
  std::int64_t terms = 1;
  for (const Shape& shape : test.shapes) terms *= std::max<std::int64_t>(1, shape.numel());
  const long double epsilon = dtype == DType::f32 ? 1.2e-7L : dtype == DType::f64 ? 2.3e-16L : 0.0L;
  for (bool jit : {false, true}) {
    const Tensor got = call_einsum(test.subscripts, operands, jit);
    EXPECT_EQ(got.dtype(), dtype) << test.subscripts;
    const std::vector<long double> result = as_long_double(got);
    ASSERT_EQ(result.size(), want.size()) << test.subscripts << (jit ? " JIT" : " standard");
    // The rounding of a sum of n terms: n epsilon times the sum of their magnitudes, bounded here by the operands'.
    long double magnitude = 1.0L;
    for (const auto& operand : values) {
      long double largest = 0.0L;
      for (long double v : operand) largest = std::max(largest, std::fabs(v));
      magnitude *= std::max(largest, 1.0L);
    }
    const long double tolerance = 4.0L * epsilon * static_cast<long double>(terms) * magnitude;
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(std::fabs(result[i] - want[i]), tolerance)
          << test.subscripts << (jit ? " JIT" : " standard") << " [" << i << "]: " << static_cast<double>(result[i])
          << ", want " << static_cast<double>(want[i]);
  }
}

TEST(Einsum, MatchesTheBruteForceSum) {
  const std::vector<Case> cases = {
      {"ij,jk->ik", "ij,jk->ik", {{5, 7}, {7, 3}}},
      {"ij,jk", "ij,jk->ik", {{4, 6}, {6, 5}}},  // implicit output
      {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},  // attention's scores
      {"bhqk,bhkd->bqhd", "bhqk,bhkd->bqhd", {{2, 3, 4, 6}, {2, 3, 6, 5}}},  // and its output, heads merged
      {"ji,jk->ik", "ji,jk->ik", {{6, 4}, {6, 5}}},                          // matmul transposes a
      {"ij,kj->ik", "ij,kj->ik", {{4, 6}, {5, 6}}},                          // ... b
      {"ji,kj->ik", "ji,kj->ik", {{6, 4}, {5, 6}}},                          // ... both
      {"hbqd,bhkd->bhqk", "hbqd,bhkd->bhqk", {{3, 2, 4, 5}, {2, 3, 6, 5}}},  // batches in two orders
      {"bdq,bkd->qbk", "bdq,bkd->qbk", {{2, 5, 4}, {2, 6, 5}}},
      {"cab,bdca->d", "cab,bdca->d", {{2, 3, 4}, {4, 5, 2, 3}}},  // summed in two orders
      {"i,j->ij", "i,j->ij", {{4}, {3}}},                         // outer product: no matmul
      {"i,i->", "i,i->", {{9}, {9}}},
      {"ii->i", "ii->i", {{4, 4}}},
      {"ii", "ii->", {{5, 5}}},  // the trace
      {"iji->j", "iji->j", {{3, 2, 3}}},
      {"ijji->", "ijji->", {{2, 3, 3, 2}}},
      {"ij->ji", "ij->ji", {{3, 5}}},
      {"ba", "ba->ab", {{3, 5}}},  // implicit: alphabetical
      {"ij->", "ij->", {{3, 5}}},
      {"ij->j", "ij->j", {{3, 5}}},
      {"ij,k->i", "ij,k->i", {{3, 4}, {5}}},  // j and k summed alone
      {"ij,jk,kl->il", "ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}}},
      {"ab,bc,ca->", "ab,bc,ca->", {{3, 4}, {4, 5}, {5, 3}}},
      {"Ab,bC->AC", "Ab,bC->AC", {{3, 4}, {4, 2}}},
      {",ij->ji", ",ij->ji", {{}, {2, 3}}},                   // a rank-0 operand
      {" i j , j k -> i k ", "ij,jk->ik", {{3, 4}, {4, 2}}},  // spaces
      {"ij,jk->ik", "ij,jk->ik", {{0, 4}, {4, 3}}},           // zero-size dimensions
      {"ij,jk->ik", "ij,jk->ik", {{3, 0}, {0, 2}}},           // nothing to sum: zeros
      {"ij,jk->ik", "ij,jk->ik", {{33, 70}, {70, 17}}},       // odd sizes past one tile
  };
  for (const Case& test : cases) check(test, DType::f32);
  for (const Case& test : {cases[0], cases[3], cases[5], cases[14], cases[22]}) {
    check(test, DType::f64);
    check(test, DType::i32);  // exact
  }
}

// `...` broadcasts as matmul's batch axes do (1 against n, aligned on the right).
TEST(Einsum, EllipsisBroadcastsLikeMatmulBatches) {
  const Tensor a = random_tensor(DType::f32, {2, 1, 3, 4}, 1);
  const Tensor b = random_tensor(DType::f32, {5, 4, 2}, 2);
  for (bool jit : {false, true}) {
    const auto explicit_output = function(
        [](Tensor a, Tensor b) {
          return einsum("...ij,...jk->...ik", {a, b});
        },
        {.jit_compile = jit});
    const auto implicit_output = function(
        [](Tensor a, Tensor b) {
          return einsum("...ij,...jk", {a, b});
        },
        {.jit_compile = jit});
    const Tensor want = matmul(a, b);
    for (const Tensor& got : {explicit_output(a, b), implicit_output(a, b)}) {
      ASSERT_EQ(got.shape(), want.shape());
      const std::vector<float> got_values = got.to_vector<float>(), want_values = want.to_vector<float>();
      for (std::size_t i = 0; i < want_values.size(); ++i)
        EXPECT_NEAR(got_values[i], want_values[i], 1e-5f * (1.0f + std::fabs(want_values[i]))) << i;
    }
  }
  // A batch of diagonals, and an explicit output without `...`, which sums the ellipsis axes.
  const Tensor x = random_tensor(DType::f32, {2, 3, 4, 4}, 3);
  const std::vector<float> values = x.to_vector<float>();
  const std::vector<float> diagonals = einsum("...ii->...i", {x}).to_vector<float>();
  const std::vector<float> summed = einsum("...ij->j", {x}).to_vector<float>();
  ASSERT_EQ(diagonals.size(), 24u);
  ASSERT_EQ(summed.size(), 4u);
  for (int batch = 0; batch < 6; ++batch)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(diagonals[batch * 4 + i], values[batch * 16 + i * 5]);
  for (int j = 0; j < 4; ++j) {
    long double want = 0;
    for (int row = 0; row < 24; ++row) want += values[row * 4 + j];
    EXPECT_NEAR(summed[j], static_cast<double>(want), 1e-5);
  }
}

// Three or more operands contract the pair with the smallest result first: a matrix times a matrix times a vector
// is two matrix-vector products, whichever way round it is written.
TEST(Einsum, ChainsContractTheSmallestPairFirst) {
  const Tensor a = random_tensor(DType::f32, {64, 64}, 1), b = random_tensor(DType::f32, {64, 64}, 2);
  const Tensor v = random_tensor(DType::f32, {64}, 3);
  for (const char* subscripts : {"ij,jk,k->i", "k,ij,jk->i"}) {
    const bool vector_first = subscripts[0] == 'k';
    const auto chain = function([&](Tensor a, Tensor b, Tensor v) {
      return vector_first ? einsum(subscripts, {v, a, b}) : einsum(subscripts, {a, b, v});
    });
    const std::string traced = chain.get_compiler_ir(Stage::traced, a, b, v);
    EXPECT_EQ(traced.find("f32[64,64] matmul"), std::string::npos) << subscripts << "\n" << traced;
    const std::vector<float> got = chain(a, b, v).to_vector<float>();
    const std::vector<float> want = matmul(a, matmul(b, v)).to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3f * (1 + std::fabs(want[i])));
  }
}

// A label of size 1 in one operand broadcasts against the other's, summed or kept (torch.einsum's rule).
TEST(Einsum, LabelsOfSizeOneBroadcast) {
  const Tensor a = random_tensor(DType::f32, {3, 1}, 1), b = random_tensor(DType::f32, {4, 2}, 2);
  const Tensor row = random_tensor(DType::f32, {1, 5}, 3), column = random_tensor(DType::f32, {4, 1}, 4);
  for (bool jit : {false, true}) {
    // j: 1 against 4, summed: a[i, 0] times the sum of b's column k.
    const Tensor summed = function(
        [](Tensor a, Tensor b) {
          return einsum("ij,jk->ik", {a, b});
        },
        {.jit_compile = jit})(a, b);
    const Tensor want = mul(a, reduce_sum(b, {0}, true));
    ASSERT_EQ(summed.shape(), Shape({3, 2}));
    const std::vector<float> got = summed.to_vector<float>(), expected = want.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5f * (1 + std::fabs(expected[i])));
    // i: 1 against 4, kept: the product broadcast like row * column.
    const Tensor kept = function(
        [](Tensor row, Tensor column) {
          return einsum("ij,ik->ijk", {row, column});
        },
        {.jit_compile = jit})(row, column);
    ASSERT_EQ(kept.shape(), Shape({4, 5, 1}));
    const std::vector<float> r = row.to_vector<float>(), c = column.to_vector<float>(), k = kept.to_vector<float>();
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) EXPECT_EQ(k[i * 5 + j], r[j] * c[i]) << i << " " << j;
  }
}

// Bad subscripts and shapes are errors named "einsum" with the caller's line; the function that hit one stays
// usable.
TEST(Einsum, BadArgumentsAreErrorsNamingEinsumAndTheLine) {
  const Tensor a = random_tensor(DType::f32, {3, 4}, 1), b = random_tensor(DType::f32, {5, 2}, 2);
  EXPECT_THROW(einsum("ij,jk->ik", {a}), ValueError);                                 // two terms, one operand
  EXPECT_THROW(einsum("ij->ik", {a}), ValueError);                                    // k is in no operand
  EXPECT_THROW(einsum("ij->ii", {a}), ValueError);                                    // an output label twice
  EXPECT_THROW(einsum("i1->i", {a}), ValueError);                                     // not a letter
  EXPECT_THROW(einsum("i......->i", {a}), ValueError);                                // two ellipses
  EXPECT_THROW(einsum("ijk->i", {a}), ShapeError);                                    // rank 2, three labels
  EXPECT_THROW(einsum("ii->i", {a}), ShapeError);                                     // a diagonal of 3 x 4
  EXPECT_THROW(einsum("ii->i", {random_tensor(DType::f32, {1, 4}, 6)}), ShapeError);  // 1 broadcasts only across
  EXPECT_THROW(einsum("ij,jk->ik", {a, b}), ShapeError);                              // j: 4 against 5
  EXPECT_THROW(einsum("...i,...i->...", {random_tensor(DType::f32, {2, 3}, 4), random_tensor(DType::f32, {4, 3}, 5)}),
               ShapeError);  // ellipsis 2 against 4
  EXPECT_THROW(einsum("", {}), ValueError);
  EXPECT_THROW(einsum("ij->", {gt(a, 0.0)}), DTypeError);
  const std::string line = "einsum_test.cpp:" + std::to_string(__LINE__ + 1);
  const std::string message = error_message([&] { einsum("ij,jk->ik", {a, b}); });
  EXPECT_NE(message.find("einsum:"), std::string::npos) << message;
  EXPECT_NE(message.find("label j"), std::string::npos) << message;
  EXPECT_NE(message.find(line), std::string::npos) << message;

  const auto product = function([](Tensor x, Tensor y) { return einsum("ij,jk->ik", {x, y}); }, {.jit_compile = true});
  EXPECT_THROW(product(a, b), ShapeError);
  const Tensor c = random_tensor(DType::f32, {4, 2}, 3);
  EXPECT_EQ(product(a, c).shape(), Shape({3, 2}));
}

// A contraction is one matmul per pair of operands, transposed by matmul where the labels' order allows: the JIT
// makes attention's scores one kernel, and a dense layer one kernel with its epilogue.
TEST(Einsum, ProductsAreOneKernel) {
  const Tensor q = random_tensor(DType::f32, {2, 3, 8, 16}, 1), k = random_tensor(DType::f32, {2, 3, 8, 16}, 2);
  const auto scores = function(
      [](Tensor q, Tensor k) {
        return einsum("bhqd,bhkd->bhqk", {q, k});
      },
      {.jit_compile = true});
  scores(q, k);
  EXPECT_EQ(scores.statistics().kernels_per_call, 1) << scores.get_compiler_ir(Stage::fused, q, k);
  // A dense layer written as einsum is the JIT's GEMM with its bias and activation as the epilogue.
  const Tensor x = random_tensor(DType::f32, {6, 16}, 3), w = random_tensor(DType::f32, {24, 16}, 4);
  const Tensor bias = random_tensor(DType::f32, {24}, 5);
  const auto dense = function(
      [](Tensor x, Tensor w, Tensor bias) {
        return nn::relu(einsum("ij,kj->ik", {x, w}) + bias);
      },
      {.jit_compile = true});
  const Tensor result = dense(x, w, bias);
  EXPECT_EQ(dense.statistics().kernels_per_call, 1) << dense.get_compiler_ir(Stage::fused, x, w, bias);
  const std::vector<float> got = result.to_vector<float>();
  const std::vector<float> want = nn::relu(matmul(x, w, {.transpose_b = true}) + bias).to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])));
}

}  // namespace
}  // namespace kiln
