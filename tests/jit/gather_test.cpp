// GEMM operands gathered as they are packed (compiler/fusion.h: a GEMM's gathered operand): a matmul's left operand
// that is a concat, along its last axis, of slices of values in memory (and of such values themselves) is never
// written; the GEMM reads each part where it lies, through zero padding. Each case runs through the standard executor,
// the JIT and the float64 reference, counts the kernels and reads the fusion decisions.

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

bool gathers(const std::string& fused) {
  return fused.find("as the GEMM packs its rows: the operand is never written") != std::string::npos;
}

TEST(GatheredOperand, SlicesAndAParameterSideBySide) {
  const Tensor x = random_tensor(DType::f32, {6, 9, 10}, 1), y = random_tensor(DType::f32, {6, 9, 4}, 2);
  const Tensor w = random_tensor(DType::f32, {17, 7}, 3);
  auto body = [](Tensor x, Tensor y, Tensor w) {
    // Columns 2.. of x, then y, then columns ..5 of x: parts starting inside their source's rows, of odd widths.
    const Tensor left = concat({slice(x, {{0, 0, 2}, {6, 9, 10}}), y, slice(x, {{0, 0, 0}, {6, 9, 5}})}, 2);
    return matmul(left, w) * 2.0f;
  };
  const testing::DifferentialResult result = expect_agreement("slices and a parameter", body, x, y, w);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(gathers(result.fused)) << result.fused;
}

TEST(GatheredOperand, StridedSlicesOfLeadingAxes) {
  const Tensor x = random_tensor(DType::f32, {7, 10, 12}, 4), w = random_tensor(DType::f32, {24, 5}, 5);
  auto body = [](Tensor x, Tensor w) {
    const Tensor left =
        concat({slice(x, {{1, 0, 0}, {7, 9, 12}, {2, 3, 1}}), slice(x, {{0, 2, 0}, {5, 10, 12}, {2, 3, 1}})}, 2);
    return reduce_sum(relu(matmul(left, w)));
  };
  const testing::DifferentialResult result = expect_agreement("strided slices", body, x, w);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_TRUE(gathers(result.fused)) << result.fused;
}

// Zero padding is read as zeros where the parts fall on it; padding with another value is a concat in memory, and
// the parts are gathered from that.
TEST(GatheredOperand, ThroughZeroPaddingAndFromOtherPadding) {
  const Tensor x = random_tensor(DType::f32, {3, 8, 5}, 6), w = random_tensor(DType::f32, {15, 4}, 7);
  for (const float value : {0.0f, 1.5f}) {
    auto body = [value](Tensor x, Tensor w) {
      const Tensor padded = pad(x, {{0, 0}, {2, 1}, {0, 0}}, value);
      std::vector<Tensor> taps;
      for (std::int64_t tap = 0; tap < 3; ++tap) taps.push_back(slice(padded, {{0, tap, 0}, {3, tap + 9, 5}}));
      return matmul(concat(taps, 2), w);
    };
    const std::string label = "padding with " + std::to_string(value);
    const testing::DifferentialResult result = expect_agreement(label, body, x, w);
    EXPECT_TRUE(gathers(result.fused)) << label << "\n" << result.fused;
    EXPECT_EQ(result.fused.find("zeros where the parts fall outside") != std::string::npos, value == 0.0f)
        << label << "\n"
        << result.fused;
    if (value == 0.0f) {
      EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    }
  }
}

// A slice under the zero padding: the channels of a group, padded, then the taps (a grouped convolution spelled by
// hand). Keeping every axis but the last whole, it is gathered with the padding (the compiler looped forever on
// it once); cropping a padded axis, the padding's zeros would fall on the slice's operand, so it is not gathered.
TEST(GatheredOperand, ThroughASliceUnderTheZeroPadding) {
  const Tensor x = random_tensor(DType::f32, {2, 7, 6, 8}, 10), w = random_tensor(DType::f32, {27, 5}, 11);
  auto windows_product = [](const Tensor& source, const Tensor& w) {
    const Tensor padded = pad(source, {{0, 0}, {1, 1}, {1, 1}, {0, 0}});
    std::vector<Tensor> taps;
    const Shape& shape = source.shape();
    for (std::int64_t row = 0; row < 3; ++row)
      for (std::int64_t column = 0; column < 3; ++column)
        taps.push_back(slice(padded, {{0, row, column, 0}, {shape[0], row + shape[1], column + shape[2], shape[3]}}));
    return matmul(concat(taps, 3), w);
  };
  auto channels = [windows_product](Tensor x, Tensor w) {
    return windows_product(slice(x, {{0, 0, 0, 3}, {2, 7, 6, 6}}), w) * 2.0f;
  };
  const testing::DifferentialResult gathered = expect_agreement("channels of a group", channels, x, w);
  EXPECT_TRUE(gathers(gathered.fused)) << gathered.fused;
  EXPECT_EQ(gathered.jit.kernels_per_call, 1) << gathered.fused;
  auto rows = [windows_product](Tensor x, Tensor w) {
    return windows_product(slice(x, {{0, 1, 0, 3}, {2, 6, 6, 6}}), w);
  };
  const testing::DifferentialResult cropped = expect_agreement("rows cropped", rows, x, w);
  EXPECT_EQ(cropped.fused.find("(9 parts) from %0 parameter"), std::string::npos) << cropped.fused;
}

// The operand stays in memory where it must: returned too.
TEST(GatheredOperand, NotWhereTheOperandIsNeededInMemory) {
  const Tensor x = random_tensor(DType::f32, {4, 6, 8}, 8), w = random_tensor(DType::f32, {8, 3}, 9);
  auto returned = [](Tensor x, Tensor w) {
    const Tensor left = concat({slice(x, {{0, 0, 0}, {4, 6, 4}}), slice(x, {{0, 0, 4}, {4, 6, 8}})}, 2);
    return std::vector<Tensor>{matmul(left, w), left};
  };
  EXPECT_FALSE(gathers(expect_agreement("returned", returned, x, w).fused));
  auto strided_columns = [](Tensor x, Tensor w) {
    const Tensor left =
        concat({slice(x, {{0, 0, 0}, {4, 6, 8}, {1, 1, 2}}), slice(x, {{0, 0, 1}, {4, 6, 8}, {1, 1, 2}})}, 2);
    return matmul(left, w);
  };
  // Strided along the columns, the slices are no views: their loop kernel writes them, and the GEMM gathers those.
  const testing::DifferentialResult strided = expect_agreement("strided columns", strided_columns, x, w);
  EXPECT_EQ(strided.jit.kernels_per_call, 2) << strided.fused;
  EXPECT_NE(strided.fused.find(" slice as the GEMM packs its rows"), std::string::npos) << strided.fused;
}

// Transposed, the concat's rows are the product's depth: a matrix, or the rows of a batch numbered as one axis by a
// reshape (a convolution's filter gradient, the windows' transpose times the cotangent), through zero padding.
TEST(GatheredOperand, TransposedAsAMatrixOrThroughAReshapeOfItsRows) {
  const Tensor right = random_tensor(DType::f32, {6, 5}, 11), wide = random_tensor(DType::f32, {6, 8}, 12);
  auto transposed = [](Tensor x, Tensor w) {
    const Tensor left = concat({slice(x, {{0, 0}, {6, 2}}), slice(x, {{0, 3}, {6, 7}})}, 1);
    return matmul(left, w, {.transpose_a = true});
  };
  const testing::DifferentialResult matrix = expect_agreement("transposed", transposed, wide, right);
  EXPECT_TRUE(gathers(matrix.fused)) << matrix.fused;
  EXPECT_EQ(matrix.jit.kernels_per_call, 1) << matrix.fused;
  const Tensor x = random_tensor(DType::f32, {3, 7, 5}, 15), cotangent = random_tensor(DType::f32, {21, 11}, 16);
  auto rows_transposed = [](Tensor x, Tensor c) {
    const Tensor padded = pad(x, {{0, 0}, {1, 1}, {0, 0}});
    std::vector<Tensor> taps;
    for (std::int64_t tap = 0; tap < 3; ++tap) taps.push_back(slice(padded, {{0, tap, 0}, {3, tap + 7, 5}}));
    return matmul(reshape(concat(taps, 2), {21, 15}), c, {.transpose_a = true});
  };
  const testing::DifferentialResult rows = expect_agreement("rows transposed", rows_transposed, x, cotangent);
  EXPECT_TRUE(gathers(rows.fused)) << rows.fused;
  EXPECT_EQ(rows.jit.kernels_per_call, 1) << rows.fused;
}

// One concat that two products read as their left operands (one of them through a reshape, transposed) is gathered
// by each; read by a loop kernel too, it is written once and both products read it.
TEST(GatheredOperand, SharedByTwoProductsUnlessAKernelReadsIt) {
  const Tensor x = random_tensor(DType::f32, {2, 6, 4}, 17), w = random_tensor(DType::f32, {12, 3}, 18);
  const Tensor c = random_tensor(DType::f32, {12, 5}, 19);
  auto windows = [](const Tensor& x) {
    const Tensor padded = pad(x, {{0, 0}, {1, 1}, {0, 0}});
    std::vector<Tensor> taps;
    for (std::int64_t tap = 0; tap < 3; ++tap) taps.push_back(slice(padded, {{0, tap, 0}, {2, tap + 6, 4}}));
    return concat(taps, 2);
  };
  auto shared = [windows](Tensor x, Tensor w, Tensor c) {
    const Tensor left = windows(x);
    return std::vector<Tensor>{matmul(left, w), matmul(reshape(left, {12, 12}), c, {.transpose_a = true})};
  };
  const testing::DifferentialResult both = expect_agreement("shared", shared, x, w, c);
  EXPECT_EQ(both.jit.kernels_per_call, 2) << both.fused;
  EXPECT_NE(both.fused.find("gathers %"), both.fused.rfind("gathers %")) << both.fused;
  auto also_read = [windows](Tensor x, Tensor w, Tensor c) {
    const Tensor left = windows(x);
    return std::vector<Tensor>{matmul(left, w), matmul(reshape(left, {12, 12}), c, {.transpose_a = true}),
                               reduce_sum(exp(left))};
  };
  const testing::DifferentialResult written = expect_agreement("also read", also_read, x, w, c);
  EXPECT_FALSE(gathers(written.fused)) << written.fused;
}

TEST(GatheredOperand, EmptyRowsAndEmptyParts) {
  const Tensor w = random_tensor(DType::f32, {9, 3}, 13);
  for (const std::int64_t batch : {0, 2}) {
    auto body = [batch](Tensor x, Tensor w) {
      const Tensor left = concat({slice(x, {{0, 0, 2}, {batch, 4, 2}}), slice(x, {{0, 0, 0}, {batch, 4, 9}})}, 2);
      return matmul(left, w) + 1.0f;
    };
    const Tensor x = random_tensor(DType::f32, {batch, 4, 9}, 14);
    const testing::DifferentialResult result = expect_agreement("batch " + std::to_string(batch), body, x, w);
    EXPECT_TRUE(gathers(result.fused)) << result.fused;
  }
}

}  // namespace
}  // namespace kiln
