// Products with one column compiled as row reductions (compiler/matrix_vector.h): every form against the standard
// executor and the reference, and the plan they get.

#include "runtime/parallel.h"
#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;
using testing::same_bits;

struct ProductCase {
  std::string label;
  Shape left, right;
  MatmulOptions options;
};

// Each case in f32 and f64, its product scaled and shifted, against the standard executor and the float64 reference:
// no matmul left in the plan, and one kernel a call.
void expect_reductions(const std::vector<ProductCase>& cases, std::uint64_t seed) {
  for (const ProductCase& each : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const Tensor left = random_tensor(dtype, each.left, seed++), right = random_tensor(dtype, each.right, seed++);
      const MatmulOptions options = each.options;
      const testing::DifferentialResult result = expect_agreement(
          each.label, [options](const Tensor& a, const Tensor& b) { return matmul(a, b, options) * 2.0 + 1.0; }, left,
          right);
      EXPECT_EQ(result.fused.find("matmul"), std::string::npos) << each.label << "\n" << result.fused;
      EXPECT_EQ(result.jit.kernels_per_call, 1) << each.label << "\n" << result.fused;
    }
  }
}

TEST(MatrixVectorJit, EveryFormOfAOneColumnProductIsARowReduction) {
  expect_reductions({{"matrix-vector", {37, 129}, {129}, {}},
                     {"one column", {64, 33}, {33, 1}, {}},
                     {"one row transposed", {5, 300}, {1, 300}, {.transpose_b = true}},
                     {"batched rows", {3, 7, 17}, {17}, {}},
                     {"batched one column", {2, 9, 40}, {40, 1}, {}},
                     {"dot product", {65}, {65}, {}},
                     {"nothing to sum", {6, 0}, {0}, {}},
                     {"no rows", {0, 8}, {8, 1}, {}}},
                    1);
}

// A product with one row -- a layer applied to one example -- is a sum down the matrix's columns (or along its rows
// when it is transposed): one kernel reading the matrix once, where a GEMM with one row packed all of it first.
TEST(MatrixVectorJit, EveryFormOfAOneRowProductIsAReduction) {
  expect_reductions({{"vector times matrix", {129}, {129, 37}, {}},
                     {"one row", {1, 33}, {33, 64}, {}},
                     {"one row, odd sizes", {1, 1031}, {1031, 77}, {}},
                     {"one row, transposed matrix", {1, 300}, {5, 300}, {.transpose_b = true}},
                     {"vector times transposed matrix", {40}, {7, 40}, {.transpose_b = true}},
                     {"a batch of one", {1, 1, 17}, {17, 9}, {}},
                     {"one column too", {1, 20}, {20, 1}, {}},
                     {"nothing to sum", {1, 0}, {0, 6}, {}},
                     {"no columns", {1, 8}, {8, 0}, {}}},
                    40);
}

// Rows walked a group at a time (codegen/cpu/row_groups.cpp) sum in the order of a row walked alone: each row of a
// product has the bits of the same row's product on its own, whatever the group, the leftover rows and the threads.
TEST(MatrixVectorJit, RowsWalkedInGroupsSumAsARowAlone) {
  struct Case {
    std::string label;
    Shape left;
  };
  const std::vector<Case> cases{
      {"long rows", {97, 2048}},
      {"depth not a multiple of the vectors", {67, 131}},
      {"depth 64", {50, 64}},
      {"batched rows", {3, 41, 200}},
  };
  const int original_threads = runtime::thread_count();
  std::uint64_t seed = 40;
  for (const Case& each : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const std::int64_t depth = each.left[each.left.rank() - 1];
      const std::int64_t rows = each.left.numel() / depth;
      const Tensor left = random_tensor(dtype, each.left, seed++), vector = random_tensor(dtype, {depth}, seed++);
      const Tensor matrix = reshape(left, {rows, depth});
      auto product = function([](const Tensor& a, const Tensor& x) { return matmul(a, x); },
                              {.jit_compile = true, .on_compile_failure = Fallback::none});
      const std::string source = product.get_compiler_ir(Stage::source, left, vector);
      EXPECT_NE(source.find("group_rows"), std::string::npos) << each.label << "\n" << source;
      for (int threads : {1, 2}) {
        runtime::set_thread_count(threads);
        const Tensor whole = reshape(product(left, vector), {rows});
        for (std::int64_t row = 0; row < rows; ++row) {
          const Tensor alone = product(slice(matrix, {.start = {row, 0}, .stop = {row + 1, depth}}), vector);
          EXPECT_TRUE(same_bits(reshape(slice(whole, {.start = {row}, .stop = {row + 1}}), {1}), alone))
              << each.label << " " << to_string(dtype) << ", row " << row << " of " << rows << ", " << threads
              << " thread(s)";
        }
      }
      runtime::set_thread_count(original_threads);
      expect_agreement(
          each.label + " with a row value after the sum",
          [](const Tensor& a, const Tensor& x, const Tensor& bias) { return maximum(matmul(a, x) * bias, 0.5); },
          matrix, vector, random_tensor(dtype, {rows}, seed++));
    }
  }
}

// A product inside a loop: its odd iterations walk the rows backward (row_walk.cpp), groups and leftovers alike.
TEST(MatrixVectorJit, RowGroupsInALoop) {
  const Tensor matrix = random_tensor(DType::f32, {131, 131}, 60) * (1.0 / 16.0);
  const Tensor start = random_tensor(DType::f32, {131}, 61);
  const testing::DifferentialResult result = expect_agreement(
      "power iterations",
      [](const Tensor& a, const Tensor& x) {
        return fori_loop(
            0, 5, [&](const Tensor&, const Tensor& v) { return tanh(matmul(a, v)) + v * 0.5; }, x);
      },
      matrix, start);
  EXPECT_EQ(result.fused.find("matmul"), std::string::npos) << result.fused;
}

TEST(MatrixVectorJit, ATransposedMatrixOrSeveralColumnsStayProducts) {
  const Tensor left = random_tensor(DType::f32, {40, 30}, 20);
  const testing::DifferentialResult transposed = expect_agreement(
      "transposed matrix", [](const Tensor& a, const Tensor& b) { return matmul(a, b, {.transpose_a = true}); }, left,
      random_tensor(DType::f32, {40}, 21));
  EXPECT_NE(transposed.fused.find("matmul"), std::string::npos) << transposed.fused;
  const testing::DifferentialResult columns = expect_agreement(
      "two columns", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, left,
      random_tensor(DType::f32, {30, 2}, 22));
  EXPECT_NE(columns.fused.find("matmul"), std::string::npos) << columns.fused;
  // Two rows, a row of a transposed left operand, a batch of rows against a batch of matrices: GEMMs.
  const testing::DifferentialResult rows = expect_agreement(
      "two rows", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, random_tensor(DType::f32, {2, 30}, 23),
      random_tensor(DType::f32, {30, 40}, 24));
  EXPECT_NE(rows.fused.find("matmul"), std::string::npos) << rows.fused;
  const testing::DifferentialResult transposed_row = expect_agreement(
      "transposed row", [](const Tensor& a, const Tensor& b) { return matmul(a, b, {.transpose_a = true}); },
      random_tensor(DType::f32, {30, 1}, 25), random_tensor(DType::f32, {30, 40}, 26));
  EXPECT_NE(transposed_row.fused.find("matmul"), std::string::npos) << transposed_row.fused;
  const testing::DifferentialResult batched = expect_agreement(
      "batched matrices", [](const Tensor& a, const Tensor& b) { return matmul(a, b); },
      random_tensor(DType::f32, {1, 30}, 27), random_tensor(DType::f32, {3, 30, 40}, 28));
  EXPECT_NE(batched.fused.find("matmul"), std::string::npos) << batched.fused;
}

}  // namespace
}  // namespace kiln
