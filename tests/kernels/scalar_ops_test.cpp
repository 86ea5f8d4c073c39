// The scalar meanings of the elementwise ops (kernels/scalar_ops.h): each takes exactly the dtypes its type rule
// admits (the kernels build an op for every dtype it takes), and the functions with a formula of kiln's own give
// the results they stand for. What each op computes is tested through the kernels (elementwise_test.cpp) and both
// executors (tests/api, tests/jit/differential_ops_test.cpp).

#include "ir/type_rules.h"
#include "kernels/scalar_dispatch.h"

#include <gtest/gtest.h>
#include <kiln/error.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::ir::Op;
namespace ir = kiln::ir;
namespace scalar = kiln::scalar;

bool type_rule_admits(Op op, DType dtype) {
  const std::vector<ir::Type> operands(static_cast<std::size_t>(ir::info(op).arity), ir::Type{dtype, kiln::Shape({3})});
  try {
    ir::infer_type(op, {}, operands, {}, "test");
    return true;
  } catch (const kiln::DTypeError&) {
    return false;
  }
}

TEST(ScalarOps, EachTakesTheDtypesItsTypeRuleAdmits) {
  int checked = 0;
  for (int index = 0; index < ir::op_count; ++index) {
    const Op op = static_cast<Op>(index);
    if (ir::info(op).meaning != ir::Meaning::scalar) continue;
    for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64}) {
      const bool takes = kiln::visit_dtype(dtype, [&]<class T>() {
        return kiln::kernels::visit_scalar_op<1>(
                   op, [](auto function) { return kiln::kernels::accepts<decltype(function), T>; }) ||
               kiln::kernels::visit_scalar_op<2>(
                   op, [](auto function) { return kiln::kernels::accepts<decltype(function), T, T>; });
      });
      EXPECT_EQ(takes, type_rule_admits(op, dtype)) << ir::name(op) << " on " << kiln::to_string(dtype);
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

// round's float formula (from floor, in any rounding mode and under any compiler) against the C library's
// round-to-nearest-even, on random bit patterns (NaNs, infinities, subnormals, halves and integers among them).
template <class Float, class Bits>
void check_round(int count) {
  std::mt19937_64 random(7);
  std::vector<Float> values = {Float(0.5),       Float(1.5),     Float(2.5),
                               Float(-0.5),      Float(-2.5),    Float(-0.4),
                               Float(0.0),       -Float(0.0),    Float(4503599627370495.5),
                               Float(8388607.5), Float(-8388609)};
  for (int i = 0; i < count; ++i) values.push_back(std::bit_cast<Float>(static_cast<Bits>(random())));
  for (int i = 0; i < count; ++i)
    values.push_back(static_cast<Float>(std::uniform_int_distribution<int>(-99, 99)(random)) / 2);
  for (Float x : values) {
    const Float expected = std::nearbyint(x), actual = scalar::round{}(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(actual));
    } else {
      EXPECT_EQ(std::bit_cast<Bits>(actual), std::bit_cast<Bits>(expected)) << x;
    }
  }
}
TEST(ScalarOps, RoundIsTiesToEven) {
  check_round<float, std::uint32_t>(200000);
  check_round<double, std::uint64_t>(200000);
}

TEST(ScalarOps, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto bits = [](float x) { return std::bit_cast<std::uint32_t>(x); };
  EXPECT_EQ(bits(scalar::relu{}(-0.0f)), bits(0.0f));
  EXPECT_TRUE(std::isnan(scalar::relu{}(nan)));
  EXPECT_EQ(bits(scalar::maximum{}(-0.0f, 0.0f)), bits(0.0f));
  EXPECT_EQ(bits(scalar::maximum{}(0.0f, -0.0f)), bits(-0.0f));
  EXPECT_TRUE(std::isnan(scalar::minimum{}(1.0f, nan)));
  EXPECT_EQ(bits(scalar::sign{}(-0.0f)), bits(-0.0f));
  EXPECT_EQ(scalar::sign{}(-inf), -1.0f);
  EXPECT_EQ(bits(scalar::abs{}(-0.0f)), bits(0.0f));
  EXPECT_EQ(scalar::neg{}(std::numeric_limits<std::int32_t>::min()), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(scalar::pow{}(std::int64_t{3}, std::int64_t{4}), 81);
  EXPECT_EQ(scalar::pow{}(std::int32_t{-1}, std::int32_t{-3}), -1);
  EXPECT_EQ(scalar::floor_divide{}(-7, 2), -4);
  EXPECT_EQ(scalar::remainder{}(-7, 2), 1);
  EXPECT_EQ(scalar::floor_divide{}(7.0, 0.1), 69.0);
  EXPECT_EQ(scalar::right_shift{}(-8, 40), -1);
  EXPECT_EQ(scalar::left_shift{}(1, 32), 0);
  EXPECT_EQ(scalar::convert<std::int32_t>{}(nan), 0);
  EXPECT_EQ(scalar::convert<std::int32_t>{}(3e9f), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(scalar::convert<std::uint8_t>{}(nan), 1);
}

}  // namespace
