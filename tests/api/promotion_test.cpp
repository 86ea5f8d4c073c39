// dtype promotion, as documented in docs/guide.md: the lattice
// bool < i32 < i64 < f32 < f64, float math in f32 for integers, weakly typed
// C++ numbers, bool results of comparisons and logical ops.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::random_tensor;

Tensor of(DType dtype) { return random_tensor(dtype, {3}, 7); }

TEST(Promotion, BinaryOpsTakeTheLargerDtype) {
  const std::vector<DType> lattice = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};
  for (DType a : lattice)
    for (DType b : lattice) {
      if (a == DType::boolean && b == DType::boolean) continue;  // bool + bool is a DTypeError
      DType expected = a < b ? b : a;
      EXPECT_EQ((of(a) + of(b)).dtype(), expected) << to_string(a) << " + " << to_string(b);
      EXPECT_EQ(maximum(of(a), of(b)).dtype(), expected);
    }
}

TEST(Promotion, FloatMathComputesInF32ForIntegers) {
  for (DType dtype : {DType::boolean, DType::i32, DType::i64}) {
    EXPECT_EQ(sin(of(dtype)).dtype(), DType::f32);
    EXPECT_EQ(sqrt(of(dtype)).dtype(), DType::f32);
    EXPECT_EQ(reduce_mean(of(dtype)).dtype(), DType::f32);
  }
  EXPECT_EQ((of(DType::i32) / of(DType::i32)).dtype(), DType::f32);
  EXPECT_EQ((of(DType::i64) / of(DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(exp(of(DType::f64)).dtype(), DType::f64);
}

TEST(Promotion, CppNumbersAreWeaklyTyped) {
  EXPECT_EQ((of(DType::f32) * 2).dtype(), DType::f32);
  EXPECT_EQ((of(DType::f32) * 2.5).dtype(), DType::f32);
  EXPECT_EQ((of(DType::i32) * 2).dtype(), DType::i32);
  EXPECT_EQ((of(DType::i32) * 0.5).dtype(), DType::f32);
  EXPECT_EQ((of(DType::i64) + 1).dtype(), DType::i64);
  EXPECT_EQ((of(DType::boolean) + 1).dtype(), DType::i32);
  EXPECT_EQ((2 - of(DType::f64)).dtype(), DType::f64);
  std::vector<float> values = (of(DType::i32) * 0.5).to_vector<float>();
  std::vector<std::int32_t> integers = of(DType::i32).to_vector<std::int32_t>();
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_FLOAT_EQ(values[i], static_cast<float>(integers[i]) * 0.5f);
}

TEST(Promotion, ComparisonsLogicalOpsAndReductions) {
  EXPECT_EQ((of(DType::f32) < of(DType::i64)).dtype(), DType::boolean);
  EXPECT_EQ(logical_and(of(DType::i32), of(DType::f32)).dtype(), DType::boolean);
  EXPECT_EQ(logical_not(of(DType::f32)).dtype(), DType::boolean);
  EXPECT_EQ(reduce_sum(of(DType::boolean)).dtype(), DType::i32);
  EXPECT_EQ(reduce_max(of(DType::boolean)).dtype(), DType::boolean);
  EXPECT_EQ(argmax(of(DType::f32), 0).dtype(), DType::i64);
  EXPECT_EQ(where(of(DType::boolean), of(DType::i32), 1.5).dtype(), DType::f32);
  EXPECT_EQ(concat({of(DType::i32), of(DType::f64)}, 0).dtype(), DType::f64);
  EXPECT_EQ(matmul(random_tensor(DType::i32, {2, 3}, 1), random_tensor(DType::f32, {3, 2}, 2)).dtype(), DType::f32);
}

TEST(Promotion, BoolArithmeticIsADTypeError) {
  EXPECT_THROW(of(DType::boolean) + of(DType::boolean), DTypeError);
  EXPECT_THROW(neg(of(DType::boolean)), DTypeError);
}

}  // namespace
}  // namespace kiln
