// The op table's per-op facts beyond the IR (ir/ops.def): where each op's meaning on one element lives, its cost
// for the fusion planner and its accuracy for the reference comparisons.

#include "ir/op.h"
#include "reference/compare.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::ir::Accuracy;
using kiln::ir::Meaning;
using kiln::ir::Op;
namespace ir = kiln::ir;

std::vector<Op> every_op() {
  std::vector<Op> ops;
  for (int index = 0; index < ir::op_count; ++index) ops.push_back(static_cast<Op>(index));
  return ops;
}

// Every elementwise op but where (a select) and cast (a conversion, to a dtype it takes as an argument) is a
// function of its elements, written once; every other op has kernels of its own, and no cost per element but
// take_along_axis's, which the scheduler puts in kernels (a pick).
TEST(OpTable, ElementwiseOpsHaveAMeaningOfOneElement) {
  for (Op op : every_op()) {
    const std::string name(ir::name(op));
    if (!ir::is_elementwise(op)) {
      EXPECT_EQ(ir::info(op).meaning, Meaning::own) << name;
      EXPECT_EQ(ir::flops_per_element(op), op == Op::take_along_axis ? 2 : 0) << name;
    } else if (op == Op::where || op == Op::cast) {
      EXPECT_EQ(ir::info(op).meaning, Meaning::own) << name;
    } else {
      EXPECT_NE(ir::info(op).meaning, Meaning::own) << name;
      EXPECT_TRUE(ir::info(op).arity == 1 || ir::info(op).arity == 2) << name;
    }
  }
  // math: each device's math library (vector_math.h on the CPU); floats only, one operand.
  for (Op op : every_op()) {
    if (ir::info(op).meaning == Meaning::math) {
      EXPECT_EQ(ir::info(op).arity, 1) << ir::name(op);
    }
  }
}

// The planner's costs (they were compiler/fusion.cpp's cost_per_element): a transcendental, integer division and
// NumPy's float divmod 20; a division or square root 4; any other elementwise op 1.
TEST(OpTable, FlopsPerElement) {
  std::set<Op> transcendental;
  for (Op op : every_op()) {
    if (ir::is_transcendental_op(op)) transcendental.insert(op);
  }
  EXPECT_EQ(transcendental, (std::set<Op>{Op::sin, Op::cos, Op::exp, Op::log, Op::tanh, Op::erf, Op::erfc, Op::log1p,
                                          Op::expm1, Op::atan, Op::sigmoid, Op::pow}));
  for (Op op : transcendental) EXPECT_EQ(ir::flops_per_element(op), 20) << ir::name(op);
  for (Op op : {Op::floor_divide, Op::remainder, Op::fmod}) EXPECT_EQ(ir::flops_per_element(op), 20) << ir::name(op);
  for (Op op : {Op::div, Op::sqrt, Op::rsqrt}) EXPECT_EQ(ir::flops_per_element(op), 4) << ir::name(op);
  for (Op op : {Op::add, Op::neg, Op::maximum, Op::eq, Op::where, Op::cast, Op::left_shift, Op::relu})
    EXPECT_EQ(ir::flops_per_element(op), 1) << ir::name(op);
  for (Op op : {Op::reduce_sum, Op::matmul, Op::reshape, Op::parameter, Op::concat})
    EXPECT_EQ(ir::flops_per_element(op), 0) << ir::name(op);
}

// The accuracy column, and the tolerance compare.cpp makes of it.
TEST(OpTable, AccuracyGivesTheTolerance) {
  auto ulps = [](Op op) {
    const Accuracy accuracy = ir::accuracy(op);
    EXPECT_EQ(accuracy.kind, Accuracy::Kind::ulps) << ir::name(op);
    return accuracy.ulps;
  };
  EXPECT_EQ(ulps(Op::add), 0);
  EXPECT_EQ(ulps(Op::fmod), 0);
  EXPECT_EQ(ulps(Op::sqrt), 1);
  EXPECT_EQ(ulps(Op::floor_divide), 1);
  EXPECT_EQ(ulps(Op::div), 2);
  EXPECT_EQ(ulps(Op::exp), 4);
  EXPECT_EQ(ulps(Op::pow), 8);
  for (Op op : {Op::neg, Op::relu, Op::maximum, Op::eq, Op::where, Op::cast, Op::reshape, Op::reduce_max})
    EXPECT_EQ(ir::accuracy(op).kind, Accuracy::Kind::exact) << ir::name(op);
  for (Op op : {Op::reduce_sum, Op::reduce_prod, Op::cumsum, Op::matmul})
    EXPECT_EQ(ir::accuracy(op).kind, Accuracy::Kind::reassociated) << ir::name(op);

  using kiln::reference::default_tolerance;
  EXPECT_EQ(default_tolerance(Op::exp, DType::f32).ulps, 4);
  EXPECT_EQ(default_tolerance(Op::exp, DType::f32).absolute, static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(default_tolerance(Op::relu, DType::f64).absolute, 0);
  EXPECT_EQ(default_tolerance(Op::matmul, DType::f32).relative, 1e-5);
  EXPECT_EQ(default_tolerance(Op::exp, DType::i32).ulps, 0);  // integers are exact
}

}  // namespace
