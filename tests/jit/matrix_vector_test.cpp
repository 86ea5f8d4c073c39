// Products with one column compiled as row reductions (compiler/matrix_vector.h): every form against the standard
// executor and the reference, and the plan they get.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

TEST(MatrixVectorJit, EveryFormOfAOneColumnProductIsARowReduction) {
  struct Case {
    std::string label;
    Shape left, right;
    MatmulOptions options;
  };
  const std::vector<Case> cases{
      {"matrix-vector", {37, 129}, {129}, {}},
      {"one column", {64, 33}, {33, 1}, {}},
      {"one row transposed", {5, 300}, {1, 300}, {.transpose_b = true}},
      {"batched rows", {3, 7, 17}, {17}, {}},
      {"batched one column", {2, 9, 40}, {40, 1}, {}},
      {"dot product", {65}, {65}, {}},
      {"nothing to sum", {6, 0}, {0}, {}},
      {"no rows", {0, 8}, {8, 1}, {}},
  };
  std::uint64_t seed = 1;
  for (const Case& each : cases) {
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
}

}  // namespace
}  // namespace kiln
