// Tests of the reference evaluator (every op, on small inputs whose answers
// are worked out by hand) and of compare().

#include "reference/reference_evaluator.h"
#include "reference/compare.h"

#include "ir/type_rules.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <vector>

namespace kiln::reference {
namespace {

using ir::Attributes;
using ir::Op;
using ir::ValueId;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::int64_t int32_min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

// A CPU array of `dtype` holding `data` (converted with static_cast).
runtime::Array make_array(DType dtype, const Shape& shape, const std::vector<double>& data) {
  runtime::Array array = runtime::allocate_array(dtype, shape);
  EXPECT_EQ(static_cast<std::int64_t>(data.size()), shape.numel());
  for (std::size_t i = 0; i < data.size(); ++i) {
    switch (dtype) {
      case DType::boolean: array.mutable_data<std::uint8_t>()[i] = data[i] != 0; break;
      case DType::i32: array.mutable_data<std::int32_t>()[i] = static_cast<std::int32_t>(data[i]); break;
      case DType::i64: array.mutable_data<std::int64_t>()[i] = static_cast<std::int64_t>(data[i]); break;
      case DType::f32: array.mutable_data<float>()[i] = static_cast<float>(data[i]); break;
      case DType::f64: array.mutable_data<double>()[i] = data[i]; break;
      case DType::bf16: array.mutable_data<std::uint16_t>()[i] = to_bfloat16(data[i]).bits; break;
      case DType::f16: array.mutable_data<std::uint16_t>()[i] = to_float16(data[i]).bits; break;
    }
  }
  return array;
}

runtime::Array make_integers(DType dtype, const Shape& shape, const std::vector<std::int64_t>& data) {
  runtime::Array array = runtime::allocate_array(dtype, shape);
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (dtype == DType::i32)
      array.mutable_data<std::int32_t>()[i] = static_cast<std::int32_t>(data[i]);
    else
      array.mutable_data<std::int64_t>()[i] = data[i];
  }
  return array;
}

// Builds a graph node by node; result types come from the IR's type rules
// (so every test graph is a valid one).
struct Builder {
  ir::Graph graph;
  std::vector<runtime::Array> inputs;

  ValueId input(runtime::Array array) {
    ValueId id = graph.add_parameter({array.dtype, array.shape});
    inputs.push_back(std::move(array));
    return id;
  }
  ValueId add(Op op, std::vector<ValueId> operands, Attributes attributes = {},
              std::optional<ir::Type> declared = std::nullopt) {
    std::vector<ir::Type> types;
    for (ValueId operand : operands) types.push_back(graph.type(operand));
    ir::Node node;
    node.op = op;
    node.operands = std::move(operands);
    node.attributes = std::move(attributes);
    node.type = declared ? *declared : ir::Type{};
    // Downstream of nonzero a dynamic declared shape is kept as declared.
    if (!declared || declared->shape.is_static())
      node.type = ir::infer_type(op, node.attributes, types, node.type, "test");
    return graph.add(std::move(node));
  }
  // Evaluates with `outputs` as the graph's outputs.
  std::vector<Value> run(std::vector<ValueId> outputs) {
    graph.outputs = std::move(outputs);
    return evaluate(graph, inputs);
  }
  Value run(ValueId output) { return run(std::vector<ValueId>{output})[0]; }
};

Attributes axes(std::vector<std::int64_t> list, bool keepdims = false) {
  Attributes attributes;
  attributes.axes = std::move(list);
  attributes.keepdims = keepdims;
  return attributes;
}
Attributes axis(std::int64_t value, bool keepdims = false) {
  Attributes attributes;
  attributes.axis = value;
  attributes.keepdims = keepdims;
  return attributes;
}

// Checks shape and float values (NaN == NaN): exactly, or within
// `relative` for results of libm functions, which may be an ulp or two off
// the correctly rounded value.
void expect_values(const Value& value, const Shape& shape, const std::vector<double>& expected, double relative = 0) {
  EXPECT_EQ(value.shape, shape) << value.shape.to_string();
  ASSERT_EQ(value.values.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i]))
      EXPECT_TRUE(std::isnan(value.values[i])) << "element " << i;
    else if (relative == 0 || std::isinf(expected[i]))
      EXPECT_EQ(value.values[i], expected[i]) << "element " << i;
    else
      EXPECT_NEAR(value.values[i], expected[i], relative * std::fabs(expected[i])) << "element " << i;
  }
}

void expect_integers(const Value& value, const Shape& shape, const std::vector<std::int64_t>& expected) {
  EXPECT_EQ(value.shape, shape) << value.shape.to_string();
  EXPECT_EQ(value.integers, expected);
  ASSERT_EQ(value.values.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(value.values[i], static_cast<double>(expected[i]));
}

// One unary op on a 1-D f64 input.
Value unary(Op op, DType dtype, const std::vector<double>& data) {
  Builder builder;
  ValueId x = builder.input(make_array(dtype, Shape({static_cast<std::int64_t>(data.size())}), data));
  return builder.run(builder.add(op, {x}));
}

Value binary(Op op, const runtime::Array& a, const runtime::Array& b) {
  Builder builder;
  ValueId x = builder.input(a), y = builder.input(b);
  return builder.run(builder.add(op, {x, y}));
}

Value cast(DType to, const runtime::Array& input) {
  Builder builder;
  ValueId x = builder.input(input);
  return builder.run(builder.add(Op::cast, {x}, {}, ir::Type{to, input.shape}));
}

// ---------------------------------------------------------------------------
// Sources.

TEST(ReferenceEvaluator, ParametersAreWidenedExactly) {
  Builder builder;
  ValueId f = builder.input(make_array(DType::f32, Shape({2}), {0.1, -3}));
  ValueId b = builder.input(make_array(DType::boolean, Shape({2}), {1, 0}));
  ValueId i = builder.input(make_integers(DType::i64, Shape({1}), {int64_max}));
  auto values = builder.run({f, b, i});
  expect_values(values[0], Shape({2}), {static_cast<double>(0.1f), -3});
  EXPECT_TRUE(values[0].integers.empty());
  EXPECT_TRUE(values[0].magnitudes.empty());
  expect_integers(values[1], Shape({2}), {1, 0});
  EXPECT_EQ(values[2].integers, std::vector<std::int64_t>{int64_max});
}

TEST(ReferenceEvaluator, Constants) {
  Builder builder;
  Attributes tenth;
  tenth.float_value = 0.1;
  Attributes big;
  big.int_value = (std::int64_t{1} << 32) + 5;
  ValueId f32 = builder.add(Op::constant, {}, tenth, ir::Type{DType::f32, Shape({2, 2})});
  ValueId f64 = builder.add(Op::constant, {}, tenth, ir::Type{DType::f64, Shape()});
  ValueId i32 = builder.add(Op::constant, {}, big, ir::Type{DType::i32, Shape({1})});
  ValueId boolean = builder.add(Op::constant, {}, big, ir::Type{DType::boolean, Shape({1})});
  auto values = builder.run({f32, f64, i32, boolean});
  // An f32 constant holds the float nearest its value.
  double tenth_f32 = static_cast<float>(0.1);
  expect_values(values[0], Shape({2, 2}), {tenth_f32, tenth_f32, tenth_f32, tenth_f32});
  expect_values(values[1], Shape(), {0.1});
  expect_integers(values[2], Shape({1}), {5});  // wraps to 32 bits
  expect_integers(values[3], Shape({1}), {1});
}

TEST(ReferenceEvaluator, Iota) {
  Builder builder;
  ValueId columns = builder.add(Op::iota, {}, axis(1), ir::Type{DType::i32, Shape({2, 3})});
  ValueId rows = builder.add(Op::iota, {}, axis(0), ir::Type{DType::f32, Shape({2, 3})});
  auto values = builder.run({columns, rows});
  expect_integers(values[0], Shape({2, 3}), {0, 1, 2, 0, 1, 2});
  expect_values(values[1], Shape({2, 3}), {0, 0, 0, 1, 1, 1});
}

// ---------------------------------------------------------------------------
// Unary elementwise.

TEST(ReferenceEvaluator, ExactFloatUnaryOps) {
  std::vector<double> x = {-1.5, -0.0, 2.5, nan};
  expect_values(unary(Op::neg, DType::f64, x), Shape({4}), {1.5, 0.0, -2.5, nan});
  expect_values(unary(Op::abs, DType::f64, x), Shape({4}), {1.5, 0.0, 2.5, nan});
  expect_values(unary(Op::sign, DType::f64, x), Shape({4}), {-1, 0, 1, nan});
  expect_values(unary(Op::square, DType::f64, x), Shape({4}), {2.25, 0, 6.25, nan});
  expect_values(unary(Op::relu, DType::f64, x), Shape({4}), {0, 0, 2.5, nan});
  expect_values(unary(Op::floor, DType::f64, x), Shape({4}), {-2, -0.0, 2, nan});
  expect_values(unary(Op::ceil, DType::f64, x), Shape({4}), {-1, -0.0, 3, nan});
}

TEST(ReferenceEvaluator, TranscendentalUnaryOps) {
  // Exact results to 17 digits; libm may be an ulp or two off them.
  constexpr double libm = 1e-15;
  expect_values(unary(Op::sin, DType::f64, {0, 1}), Shape({2}), {0, 0.8414709848078965}, libm);
  expect_values(unary(Op::cos, DType::f64, {0, 1}), Shape({2}), {1, 0.54030230586813977}, libm);
  expect_values(unary(Op::exp, DType::f64, {0, 1, -inf}), Shape({3}), {1, 2.7182818284590451, 0}, libm);
  expect_values(unary(Op::log, DType::f64, {1, 2, 0, -1}), Shape({4}), {0, 0.69314718055994529, -inf, nan}, libm);
  expect_values(unary(Op::tanh, DType::f64, {0, 1, inf}), Shape({3}), {0, 0.76159415595576485, 1}, libm);
  expect_values(unary(Op::sqrt, DType::f64, {4, 0, -1}), Shape({3}), {2, 0, nan}, libm);
  expect_values(unary(Op::rsqrt, DType::f64, {4, 0}), Shape({2}), {0.5, inf}, libm);
  expect_values(unary(Op::sigmoid, DType::f64, {0, 2, -inf, inf}), Shape({4}), {0.5, 0.88079707797788243, 0, 1}, libm);
  expect_values(unary(Op::erf, DType::f64, {0, 1, -inf}), Shape({3}), {0, 0.84270079294971487, -1}, libm);
  expect_values(unary(Op::erfc, DType::f64, {0, 1, 10, -inf, inf}), Shape({5}),
                {1, 0.15729920705028513, 2.088487583762545e-45, 2, 0}, libm);
}

TEST(ReferenceEvaluator, F32IsComputedInFloat64WithoutRounding) {
  Value sine = unary(Op::sin, DType::f32, {1});
  EXPECT_EQ(sine.dtype, DType::f32);
  EXPECT_EQ(sine.values[0], std::sin(1.0));
  EXPECT_NE(sine.values[0], static_cast<double>(static_cast<float>(std::sin(1.0))));
  // 1 + 2^-30 is not an f32, and the reference keeps it.
  Value sum =
      binary(Op::add, make_array(DType::f32, Shape(), {1}), make_array(DType::f32, Shape(), {std::ldexp(1.0, -30)}));
  EXPECT_EQ(sum.values[0], 1 + std::ldexp(1.0, -30));
}

TEST(ReferenceEvaluator, IntegerUnaryOpsWrap) {
  auto ints = [](std::vector<std::int64_t> data) {
    return make_integers(DType::i32, Shape({static_cast<std::int64_t>(data.size())}), data);
  };
  auto run = [](Op op, const runtime::Array& input) {
    Builder builder;
    ValueId x = builder.input(input);
    return builder.run(builder.add(op, {x}));
  };
  runtime::Array x = ints({int32_min, -7, 0, 65536, 46341});
  expect_integers(run(Op::neg, x), Shape({5}), {int32_min, 7, 0, -65536, -46341});
  expect_integers(run(Op::abs, x), Shape({5}), {int32_min, 7, 0, 65536, 46341});
  expect_integers(run(Op::sign, x), Shape({5}), {-1, -1, 0, 1, 1});
  // 65536^2 = 2^32 wraps to 0; 46341^2 = 2147488281 wraps to 2147488281 - 2^32.
  expect_integers(run(Op::square, x), Shape({5}), {0, 49, 0, 0, -2147479015});
  expect_integers(run(Op::relu, x), Shape({5}), {0, 0, 0, 65536, 46341});
  expect_integers(run(Op::floor, x), Shape({5}), {int32_min, -7, 0, 65536, 46341});
  expect_integers(run(Op::ceil, x), Shape({5}), {int32_min, -7, 0, 65536, 46341});
  expect_integers(run(Op::logical_not, make_array(DType::boolean, Shape({2}), {1, 0})), Shape({2}), {0, 1});
}

TEST(ReferenceEvaluator, CastFloatToIntegerTruncatesAndSaturates) {
  runtime::Array x = make_array(DType::f32, Shape({7}), {2.7, -2.7, 1e10, -1e10, nan, inf, -inf});
  expect_integers(cast(DType::i32, x), Shape({7}), {2, -2, int32_max, int32_min, 0, int32_max, int32_min});
  // 2^63 - 1024 is the largest double below 2^63.
  runtime::Array y = make_array(DType::f64, Shape({4}), {1e19, -1e19, 9223372036854774784.0, -9223372036854775808.0});
  expect_integers(cast(DType::i64, y), Shape({4}), {int64_max, int64_min, 9223372036854774784, int64_min});
}

TEST(ReferenceEvaluator, CastToBoolIsNonzero) {
  expect_integers(cast(DType::boolean, make_array(DType::f64, Shape({4}), {0, -0.0, 0.5, nan})), Shape({4}),
                  {0, 0, 1, 1});
  expect_integers(cast(DType::boolean, make_integers(DType::i64, Shape({3}), {0, -5, int64_min})), Shape({3}),
                  {0, 1, 1});
}

TEST(ReferenceEvaluator, CastBetweenIntegersWrapsAndToF32Rounds) {
  runtime::Array big = make_integers(DType::i64, Shape({3}), {(std::int64_t{1} << 32) + 7, std::int64_t{1} << 31, -1});
  expect_integers(cast(DType::i32, big), Shape({3}), {7, int32_min, -1});
  // 2^24 + 1 is the first integer f32 cannot hold; ties round to even.
  expect_values(cast(DType::f32, make_integers(DType::i64, Shape({1}), {16777217})), Shape({1}), {16777216});
  expect_values(cast(DType::f32, make_array(DType::f64, Shape({2}), {0.1, 1e300})), Shape({2}),
                {static_cast<double>(0.1f), inf});
  expect_values(cast(DType::f64, make_array(DType::boolean, Shape({2}), {1, 0})), Shape({2}), {1, 0});
}

// ---------------------------------------------------------------------------
// Binary elementwise.

TEST(ReferenceEvaluator, BroadcastingColumnPlusRow) {
  Value sum = binary(Op::add, make_array(DType::f32, Shape({3, 1}), {0, 10, 20}),
                     make_array(DType::f32, Shape({1, 4}), {1, 2, 3, 4}));
  expect_values(sum, Shape({3, 4}), {1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24});
  Value scaled =
      binary(Op::mul, make_array(DType::f64, Shape(), {3}), make_array(DType::f64, Shape({2, 2}), {1, 2, 3, 4}));
  expect_values(scaled, Shape({2, 2}), {3, 6, 9, 12});
  Value lower_rank = binary(Op::sub, make_array(DType::f64, Shape({2, 3}), {10, 20, 30, 40, 50, 60}),
                            make_array(DType::f64, Shape({3}), {1, 2, 3}));
  expect_values(lower_rank, Shape({2, 3}), {9, 18, 27, 39, 48, 57});
}

TEST(ReferenceEvaluator, FloatArithmetic) {
  auto f64 = [](std::vector<double> data) {
    return make_array(DType::f64, Shape({static_cast<std::int64_t>(data.size())}), data);
  };
  expect_values(binary(Op::div, f64({1, -1, 0, 7}), f64({0, 0, 0, 2})), Shape({4}), {inf, -inf, nan, 3.5});
  expect_values(binary(Op::pow, f64({2, 4, -8, 0, -2}), f64({10, 0.5, 1.0 / 3, 0, 3})), Shape({5}),
                {1024, 2, nan, 1, -8});
}

TEST(ReferenceEvaluator, MaximumAndMinimumPropagateNaN) {
  runtime::Array a = make_array(DType::f32, Shape({3}), {1, nan, -2});
  runtime::Array b = make_array(DType::f32, Shape({3}), {nan, 5, 3});
  expect_values(binary(Op::maximum, a, b), Shape({3}), {nan, nan, 3});
  expect_values(binary(Op::minimum, a, b), Shape({3}), {nan, nan, -2});
  expect_integers(binary(Op::maximum, make_array(DType::boolean, Shape({2}), {0, 1}),
                         make_array(DType::boolean, Shape({2}), {0, 0})),
                  Shape({2}), {0, 1});
}

TEST(ReferenceEvaluator, IntegerArithmeticWraps) {
  auto i32 = [](std::vector<std::int64_t> data) {
    return make_integers(DType::i32, Shape({static_cast<std::int64_t>(data.size())}), data);
  };
  expect_integers(binary(Op::add, i32({int32_max, -5}), i32({1, 3})), Shape({2}), {int32_min, -2});
  expect_integers(binary(Op::sub, i32({int32_min, 5}), i32({1, 8})), Shape({2}), {int32_max, -3});
  expect_integers(binary(Op::mul, i32({65536, -3}), i32({65536, 7})), Shape({2}), {0, -21});
  expect_integers(
      binary(Op::add, make_integers(DType::i64, Shape({1}), {int64_max}), make_integers(DType::i64, Shape({1}), {1})),
      Shape({1}), {int64_min});
}

TEST(ReferenceEvaluator, IntegerPow) {
  auto i32 = [](std::vector<std::int64_t> data) {
    return make_integers(DType::i32, Shape({static_cast<std::int64_t>(data.size())}), data);
  };
  // 2^31 and 2^32 wrap; negative exponents give 0 except for bases 1 and -1.
  expect_integers(binary(Op::pow, i32({3, 2, 2, -2, 0, 2, 1, -1, -1, 0}), i32({4, 31, 32, 3, 0, -1, -5, -3, -2, -1})),
                  Shape({10}), {81, int32_min, 0, -8, 1, 0, 1, -1, 1, 0});
  // 3^40 = 12157665459056928801 wraps past 2^63 to 3^40 - 2^64.
  expect_integers(
      binary(Op::pow, make_integers(DType::i64, Shape({1}), {3}), make_integers(DType::i64, Shape({1}), {40})),
      Shape({1}), {-6289078614652622815});
}

TEST(ReferenceEvaluator, Comparisons) {
  runtime::Array a = make_array(DType::f64, Shape({4}), {1, 2, 3, nan});
  runtime::Array b = make_array(DType::f64, Shape({4}), {2, 2, 2, nan});
  expect_integers(binary(Op::eq, a, b), Shape({4}), {0, 1, 0, 0});
  expect_integers(binary(Op::ne, a, b), Shape({4}), {1, 0, 1, 1});
  expect_integers(binary(Op::lt, a, b), Shape({4}), {1, 0, 0, 0});
  expect_integers(binary(Op::le, a, b), Shape({4}), {1, 1, 0, 0});
  expect_integers(binary(Op::gt, a, b), Shape({4}), {0, 0, 1, 0});
  expect_integers(binary(Op::ge, a, b), Shape({4}), {0, 1, 1, 0});
  // i64 values that doubles cannot tell apart.
  runtime::Array c = make_integers(DType::i64, Shape({1}), {int64_max});
  runtime::Array d = make_integers(DType::i64, Shape({1}), {int64_max - 1});
  expect_integers(binary(Op::gt, c, d), Shape({1}), {1});
}

TEST(ReferenceEvaluator, LogicalOps) {
  runtime::Array a = make_array(DType::boolean, Shape({4}), {0, 0, 1, 1});
  runtime::Array b = make_array(DType::boolean, Shape({4}), {0, 1, 0, 1});
  expect_integers(binary(Op::logical_and, a, b), Shape({4}), {0, 0, 0, 1});
  expect_integers(binary(Op::logical_or, a, b), Shape({4}), {0, 1, 1, 1});
}

TEST(ReferenceEvaluator, WhereBroadcastsAllThree) {
  Builder builder;
  ValueId condition = builder.input(make_array(DType::boolean, Shape({2, 1}), {1, 0}));
  ValueId x = builder.input(make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
  ValueId y = builder.input(make_array(DType::f32, Shape(), {-1}));
  expect_values(builder.run(builder.add(Op::where, {condition, x, y})), Shape({2, 3}), {1, 2, 3, -1, -1, -1});
}

// ---------------------------------------------------------------------------
// Reductions.

// 0..23 as f64[2,3,4] (element [i,j,k] = 12i + 4j + k).
ValueId iota_2x3x4(Builder& builder, DType dtype = DType::f64) {
  ValueId flat = builder.add(Op::iota, {}, axis(0), ir::Type{dtype, Shape({24})});
  return builder.add(Op::reshape, {flat}, {}, ir::Type{dtype, Shape({2, 3, 4})});
}

TEST(ReferenceEvaluator, ReductionsOverAxes0And2) {
  // For each j, the 8 elements 12i + 4j + k (i < 2, k < 4): sum 60 + 32j.
  Builder builder;
  ValueId x = iota_2x3x4(builder);
  ValueId sum = builder.add(Op::reduce_sum, {x}, axes({0, 2}));
  ValueId sum_keepdims = builder.add(Op::reduce_sum, {x}, axes({0, 2}, true));
  ValueId mean = builder.add(Op::reduce_mean, {x}, axes({0, 2}));
  ValueId max = builder.add(Op::reduce_max, {x}, axes({0, 2}));
  ValueId min = builder.add(Op::reduce_min, {x}, axes({0, 2}));
  ValueId one = builder.add(
      Op::constant, {},
      [] {
        Attributes a;
        a.float_value = 1;
        return a;
      }(),
      ir::Type{DType::f64, Shape()});
  ValueId prod = builder.add(Op::reduce_prod, {builder.add(Op::add, {x, one})}, axes({0, 2}));
  ValueId all = builder.add(Op::reduce_sum, {x}, axes({0, 1, 2}));
  auto values = builder.run({sum, sum_keepdims, mean, max, min, prod, all});
  expect_values(values[0], Shape({3}), {60, 92, 124});
  expect_values(values[1], Shape({1, 3, 1}), {60, 92, 124});
  expect_values(values[2], Shape({3}), {7.5, 11.5, 15.5});
  expect_values(values[3], Shape({3}), {15, 19, 23});
  expect_values(values[4], Shape({3}), {0, 4, 8});
  // (1*2*3*4)(13*14*15*16), (5*6*7*8)(17*18*19*20), (9*10*11*12)(21*22*23*24).
  expect_values(values[5], Shape({3}), {1048320, 195350400, 3029685120});
  expect_values(values[6], Shape(), {276});
}

TEST(ReferenceEvaluator, IntegerReductions) {
  Builder builder;
  ValueId x = iota_2x3x4(builder, DType::i32);
  ValueId sum = builder.add(Op::reduce_sum, {x}, axes({0, 2}));
  ValueId max = builder.add(Op::reduce_max, {x}, axes({1}));
  ValueId wrapping = builder.input(make_integers(DType::i32, Shape({2, 2}), {int32_max, 1, 65536, 65536}));
  ValueId wrapped_sum = builder.add(Op::reduce_sum, {wrapping}, axes({1}));
  ValueId wrapped_prod = builder.add(Op::reduce_prod, {wrapping}, axes({1}));
  auto values = builder.run({sum, max, wrapped_sum, wrapped_prod});
  expect_integers(values[0], Shape({3}), {60, 92, 124});
  expect_integers(values[1], Shape({2, 4}), {8, 9, 10, 11, 20, 21, 22, 23});
  expect_integers(values[2], Shape({2}), {int32_min, 131072});
  expect_integers(values[3], Shape({2}), {int32_max, 0});
}

TEST(ReferenceEvaluator, EmptyReductions) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f32, Shape({0, 3}), {}));
  ValueId i = builder.input(make_integers(DType::i32, Shape({0, 2}), {}));
  ValueId b = builder.input(make_array(DType::boolean, Shape({0}), {}));
  auto values = builder.run({builder.add(Op::reduce_sum, {x}, axes({0})), builder.add(Op::reduce_prod, {x}, axes({0})),
                             builder.add(Op::reduce_max, {x}, axes({0})), builder.add(Op::reduce_min, {x}, axes({0})),
                             builder.add(Op::reduce_mean, {x}, axes({0})), builder.add(Op::reduce_max, {i}, axes({0})),
                             builder.add(Op::reduce_min, {i}, axes({0})), builder.add(Op::reduce_sum, {i}, axes({0})),
                             builder.add(Op::reduce_max, {b}, axes({0})), builder.add(Op::reduce_min, {b}, axes({0})),
                             builder.add(Op::reduce_sum, {x}, axes({1}))});
  expect_values(values[0], Shape({3}), {0, 0, 0});
  expect_values(values[1], Shape({3}), {1, 1, 1});
  expect_values(values[2], Shape({3}), {-inf, -inf, -inf});
  expect_values(values[3], Shape({3}), {inf, inf, inf});
  expect_values(values[4], Shape({3}), {nan, nan, nan});
  expect_integers(values[5], Shape({2}), {int32_min, int32_min});
  expect_integers(values[6], Shape({2}), {int32_max, int32_max});
  expect_integers(values[7], Shape({2}), {0, 0});
  expect_integers(values[8], Shape(), {0});
  expect_integers(values[9], Shape(), {1});
  expect_values(values[10], Shape({0}), {});
}

TEST(ReferenceEvaluator, MaxAndMinPropagateNaN) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f64, Shape({2, 3}), {1, nan, 3, -1, -2, -3}));
  auto values = builder.run({builder.add(Op::reduce_max, {x}, axes({1})), builder.add(Op::reduce_min, {x}, axes({1}))});
  expect_values(values[0], Shape({2}), {nan, -1});
  expect_values(values[1], Shape({2}), {nan, -3});
}

TEST(ReferenceEvaluator, ArgmaxFirstMaxAndNaN) {
  Builder builder;
  // Rows: a tie (first wins), a NaN after the max (NaN wins), two NaNs
  // (first wins), all -inf.
  ValueId x = builder.input(make_array(DType::f32, Shape({4, 3}), {5, 7, 7, 9, 1, nan, nan, 2, nan, -inf, -inf, -inf}));
  ValueId ints = builder.input(make_integers(DType::i64, Shape({2, 2}), {4, 4, 1, 6}));
  auto values = builder.run({builder.add(Op::argmax, {x}, axis(1)), builder.add(Op::argmax, {x}, axis(0, true)),
                             builder.add(Op::argmax, {ints}, axis(0))});
  expect_integers(values[0], Shape({4}), {1, 2, 0, 0});
  EXPECT_EQ(values[0].dtype, DType::i64);
  // Columns: {5,9,nan,-inf} -> 2, {7,1,2,-inf} -> 0, {7,nan,nan,-inf} -> 1.
  expect_integers(values[1], Shape({1, 3}), {2, 0, 1});
  expect_integers(values[2], Shape({2}), {0, 1});
}

// ---------------------------------------------------------------------------
// Matmul.

TEST(ReferenceEvaluator, Matmul2x3By3x2) {
  // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]]:
  //   1*7 + 2*9 + 3*11 = 58,  1*8 + 2*10 + 3*12 = 64,
  //   4*7 + 5*9 + 6*11 = 139, 4*8 + 5*10 + 6*12 = 154.
  std::vector<double> expected = {58, 64, 139, 154};
  Builder builder;
  ValueId a = builder.input(make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
  ValueId b = builder.input(make_array(DType::f32, Shape({3, 2}), {7, 8, 9, 10, 11, 12}));
  ValueId a_transposed = builder.input(make_array(DType::f32, Shape({3, 2}), {1, 4, 2, 5, 3, 6}));
  ValueId b_transposed = builder.input(make_array(DType::f32, Shape({2, 3}), {7, 9, 11, 8, 10, 12}));
  Attributes transpose_a, transpose_b, transpose_both;
  transpose_a.transpose_a = true;
  transpose_b.transpose_b = true;
  transpose_both.transpose_a = transpose_both.transpose_b = true;
  auto values = builder.run({builder.add(Op::matmul, {a, b}), builder.add(Op::matmul, {a_transposed, b}, transpose_a),
                             builder.add(Op::matmul, {a, b_transposed}, transpose_b),
                             builder.add(Op::matmul, {a_transposed, b_transposed}, transpose_both)});
  for (const Value& value : values) expect_values(value, Shape({2, 2}), expected);
  // The magnitude is the sum of |a||b| over the contraction.
  EXPECT_EQ(values[0].magnitudes, expected);
}

TEST(ReferenceEvaluator, MatmulBroadcastsBatchDimensions) {
  Builder builder;
  // Two 2x2 matrices: identity and [[0,1],[1,0]] (swap), times b.
  ValueId a = builder.input(make_array(DType::f64, Shape({2, 2, 2}), {1, 0, 0, 1, 0, 1, 1, 0}));
  ValueId b = builder.input(make_array(DType::f64, Shape({2, 2}), {1, 2, 3, 4}));
  ValueId b_batched = builder.input(make_array(DType::f64, Shape({1, 1, 2, 2}), {1, 2, 3, 4}));
  auto values = builder.run({builder.add(Op::matmul, {a, b}), builder.add(Op::matmul, {b_batched, a})});
  expect_values(values[0], Shape({2, 2, 2}), {1, 2, 3, 4, 3, 4, 1, 2});
  // b x identity = b; b x swap swaps b's columns.
  expect_values(values[1], Shape({1, 2, 2, 2}), {1, 2, 3, 4, 2, 1, 4, 3});
}

TEST(ReferenceEvaluator, IntegerMatmulWraps) {
  Builder builder;
  ValueId a = builder.input(make_integers(DType::i32, Shape({1, 2}), {65536, 3}));
  ValueId b = builder.input(make_integers(DType::i32, Shape({2, 1}), {65536, 5}));
  expect_integers(builder.run(builder.add(Op::matmul, {a, b})), Shape({1, 1}), {15});  // 2^32 + 15 wraps
}

// ---------------------------------------------------------------------------
// Shape ops.

TEST(ReferenceEvaluator, ReshapeKeepsRowMajorOrder) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
  expect_values(builder.run(builder.add(Op::reshape, {x}, {}, ir::Type{DType::f32, Shape({3, 2})})), Shape({3, 2}),
                {1, 2, 3, 4, 5, 6});
}

TEST(ReferenceEvaluator, TransposePermutesAxes) {
  Builder builder;
  ValueId x = iota_2x3x4(builder);
  // Result axis i is input axis axes[i]: result[k,i,j] = x[i,j,k] = 12i + 4j + k.
  Value value = builder.run(builder.add(Op::transpose, {x}, axes({2, 0, 1})));
  std::vector<double> expected;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) expected.push_back(12 * i + 4 * j + k);
  expect_values(value, Shape({4, 2, 3}), expected);
  Builder matrix;
  ValueId m = matrix.input(make_array(DType::i32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
  expect_integers(matrix.run(matrix.add(Op::transpose, {m}, axes({1, 0}))), Shape({3, 2}), {1, 4, 2, 5, 3, 6});
}

TEST(ReferenceEvaluator, BroadcastTo) {
  Builder builder;
  ValueId row = builder.input(make_array(DType::f32, Shape({3}), {1, 2, 3}));
  ValueId column = builder.input(make_array(DType::f32, Shape({2, 1}), {7, 8}));
  auto values = builder.run({builder.add(Op::broadcast_to, {row}, {}, ir::Type{DType::f32, Shape({2, 3})}),
                             builder.add(Op::broadcast_to, {column}, {}, ir::Type{DType::f32, Shape({2, 3})})});
  expect_values(values[0], Shape({2, 3}), {1, 2, 3, 1, 2, 3});
  expect_values(values[1], Shape({2, 3}), {7, 7, 7, 8, 8, 8});
}

TEST(ReferenceEvaluator, SliceWithNegativeStep) {
  Builder builder;
  ValueId x = builder.add(Op::iota, {}, axis(0), ir::Type{DType::i64, Shape({5})});
  Attributes reverse_evens;
  reverse_evens.start = {4};
  reverse_evens.step = {-2};
  ValueId matrix = builder.input(make_array(DType::f32, Shape({3, 4}), {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}));
  // Rows 2, 1, 0 and columns 1, 3.
  Attributes rows_reversed;
  rows_reversed.start = {2, 1};
  rows_reversed.step = {-1, 2};
  auto values = builder.run({builder.add(Op::slice, {x}, reverse_evens, ir::Type{DType::i64, Shape({3})}),
                             builder.add(Op::slice, {matrix}, rows_reversed, ir::Type{DType::f32, Shape({3, 2})})});
  expect_integers(values[0], Shape({3}), {4, 2, 0});
  expect_values(values[1], Shape({3, 2}), {21, 23, 11, 13, 1, 3});
}

TEST(ReferenceEvaluator, Concat) {
  Builder builder;
  ValueId a = builder.input(make_array(DType::f32, Shape({2, 1}), {1, 2}));
  ValueId b = builder.input(make_array(DType::f32, Shape({2, 2}), {3, 4, 5, 6}));
  ValueId c = builder.input(make_array(DType::f32, Shape({1, 2}), {7, 8}));
  auto values = builder.run({builder.add(Op::concat, {a, b}, axis(1)), builder.add(Op::concat, {b, c, b}, axis(0))});
  expect_values(values[0], Shape({2, 3}), {1, 3, 4, 2, 5, 6});
  expect_values(values[1], Shape({5, 2}), {3, 4, 5, 6, 7, 8, 3, 4, 5, 6});
}

TEST(ReferenceEvaluator, ExpandDimsAndSqueeze) {
  Builder builder;
  ValueId x = builder.input(make_integers(DType::i32, Shape({2, 1, 3}), {1, 2, 3, 4, 5, 6}));
  auto values = builder.run({builder.add(Op::expand_dims, {x}, axis(3)), builder.add(Op::squeeze, {x}, axes({1}))});
  expect_integers(values[0], Shape({2, 1, 3, 1}), {1, 2, 3, 4, 5, 6});
  expect_integers(values[1], Shape({2, 3}), {1, 2, 3, 4, 5, 6});
}

// ---------------------------------------------------------------------------
// Host callbacks and data-dependent shapes.

// Doubles its f32 input; records what it was given.
class Doubler final : public ir::HostFunction {
 public:
  mutable std::vector<float> seen;
  DType result_dtype = DType::f32;
  runtime::Array call(std::span<const runtime::Array> inputs) const override {
    const runtime::Array& input = inputs[0];
    runtime::Array result = runtime::allocate_array(result_dtype, input.shape);
    for (std::int64_t i = 0; i < input.shape.numel(); ++i) {
      seen.push_back(input.data<float>()[i]);
      if (result_dtype == DType::f32) result.mutable_data<float>()[i] = 2 * input.data<float>()[i];
    }
    return result;
  }
};

TEST(ReferenceEvaluator, HostCallSeesArraysRoundedToTheirDtype) {
  Builder builder;
  auto doubler = std::make_shared<Doubler>();
  builder.graph.host_functions.push_back(doubler);
  ValueId x = builder.input(make_array(DType::f32, Shape({2}), {1, 3}));
  ValueId third = builder.add(Op::div, {x, builder.input(make_array(DType::f32, Shape(), {3}))});
  Attributes callback;
  callback.index = 0;
  Value value = builder.run(builder.add(Op::host_call, {third}, callback, ir::Type{DType::f32, Shape({2})}));
  // 1/3 reaches the callback as the nearest float.
  ASSERT_EQ(doubler->seen.size(), 2u);
  EXPECT_EQ(doubler->seen[0], 1.0f / 3.0f);
  expect_values(value, Shape({2}), {2 * static_cast<double>(1.0f / 3.0f), 2});

  doubler->result_dtype = DType::i32;
  EXPECT_THROW(evaluate(builder.graph, builder.inputs), ValueError);
}

TEST(ReferenceEvaluator, NonzeroAndItsDynamicShapeDownstream) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f32, Shape({2, 3}), {0, 1, 0, 2, -0.0, nan}));
  ValueId indices = builder.add(Op::nonzero, {x});
  EXPECT_EQ(builder.graph.type(indices).shape, Shape({Shape::dynamic, 2}));
  ValueId column_sums = builder.add(Op::reduce_sum, {indices}, axes({0}));
  ValueId doubled = builder.add(Op::add, {indices, indices}, {}, ir::Type{DType::i64, Shape({Shape::dynamic, 2})});
  ValueId as_float = builder.add(Op::cast, {indices}, {}, ir::Type{DType::f64, Shape({Shape::dynamic, 2})});
  auto values = builder.run({indices, column_sums, doubled, as_float});
  // Nonzero elements (NaN counts): [0,1], [1,0], [1,2].
  expect_integers(values[0], Shape({3, 2}), {0, 1, 1, 0, 1, 2});
  EXPECT_EQ(values[0].dtype, DType::i64);
  expect_integers(values[1], Shape({2}), {2, 3});
  expect_integers(values[2], Shape({3, 2}), {0, 2, 2, 0, 2, 4});
  expect_values(values[3], Shape({3, 2}), {0, 1, 1, 0, 1, 2});

  Builder none;
  ValueId zeros = none.input(make_array(DType::i32, Shape({4}), {0, 0, 0, 0}));
  expect_integers(none.run(none.add(Op::nonzero, {zeros})), Shape({0, 1}), {});
}

// ---------------------------------------------------------------------------
// Magnitudes, graphs, errors.

TEST(ReferenceEvaluator, MagnitudesMeasureTheCondition) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f64, Shape({3}), {1e8, 1, -1e8}));
  ValueId sum = builder.add(Op::reduce_sum, {x}, axes({0}));
  ValueId mean = builder.add(Op::reduce_mean, {x}, axes({0}));
  ValueId moved = builder.add(Op::expand_dims, {sum}, axis(0));
  ValueId plus_one = builder.add(Op::add, {sum, builder.input(make_array(DType::f64, Shape(), {1}))});
  ValueId negated = builder.add(Op::neg, {x});
  auto values = builder.run({sum, mean, moved, plus_one, negated});
  expect_values(values[0], Shape(), {1});
  EXPECT_EQ(values[0].magnitudes, std::vector<double>{2e8 + 1});
  EXPECT_EQ(values[1].magnitudes, std::vector<double>{(2e8 + 1) / 3});
  EXPECT_EQ(values[2].magnitudes, std::vector<double>{2e8 + 1});
  // |result| + E(sum) + E(1) = 2 + (2e8 + 1) + 0.
  EXPECT_EQ(values[3].magnitudes, std::vector<double>{2e8 + 3});
  // neg of a parameter is exact: no magnitudes.
  EXPECT_TRUE(values[4].magnitudes.empty());
}

TEST(ReferenceEvaluator, OutputsMayRepeatAndIntermediatesAreFreed) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f64, Shape({2}), {1, 2}));
  ValueId y = builder.add(Op::neg, {x});
  ValueId z = builder.add(Op::mul, {y, y});
  auto values = builder.run({z, x, z});
  expect_values(values[0], Shape({2}), {1, 4});
  expect_values(values[1], Shape({2}), {1, 2});
  expect_values(values[2], Shape({2}), {1, 4});
}

TEST(ReferenceEvaluator, RejectsInputsThatDoNotMatchTheParameters) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f32, Shape({2}), {1, 2}));
  builder.graph.outputs = {x};
  std::vector<runtime::Array> none;
  EXPECT_THROW(evaluate(builder.graph, none), ValueError);
  std::vector<runtime::Array> wrong_dtype = {make_array(DType::f64, Shape({2}), {1, 2})};
  EXPECT_THROW(evaluate(builder.graph, wrong_dtype), ValueError);
  std::vector<runtime::Array> wrong_shape = {make_array(DType::f32, Shape({3}), {1, 2, 3})};
  EXPECT_THROW(evaluate(builder.graph, wrong_shape), ValueError);
}

TEST(ReferenceEvaluator, RejectsMalformedNodesInsteadOfCrashing) {
  auto run_node = [](ir::Node node) {
    Builder builder;
    ValueId x = builder.input(make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
    node.operands = {x};
    builder.graph.outputs = {builder.graph.add(std::move(node))};
    return evaluate(builder.graph, builder.inputs);
  };
  ir::Node out_of_range;
  out_of_range.op = Op::reduce_sum;
  out_of_range.attributes.axes = {5};
  out_of_range.type = {DType::f32, Shape({2})};
  EXPECT_THROW(run_node(out_of_range), ShapeError);
  ir::Node wrong_type;
  wrong_type.op = Op::sin;
  wrong_type.type = {DType::i32, Shape({2, 3})};
  EXPECT_THROW(run_node(wrong_type), InternalError);
  ir::Node short_slice;
  short_slice.op = Op::slice;
  short_slice.attributes.start = {0};
  short_slice.attributes.step = {1};
  short_slice.type = {DType::f32, Shape({2, 3})};
  EXPECT_THROW(run_node(short_slice), ShapeError);
  ir::Node forward_reference;
  forward_reference.op = Op::neg;
  forward_reference.type = {DType::f32, Shape({2, 3})};
  Builder builder;
  builder.input(make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6}));
  forward_reference.operands = {2};
  builder.graph.outputs = {builder.graph.add(forward_reference)};
  EXPECT_THROW(evaluate(builder.graph, builder.inputs), InternalError);
}

TEST(ReferenceEvaluator, ToArrayRoundsToTheDtype) {
  Value value;
  value.dtype = DType::f32;
  value.shape = Shape({2});
  value.values = {0.1, 1e300};
  runtime::Array array = to_array(value);
  EXPECT_EQ(array.data<float>()[0], 0.1f);
  EXPECT_EQ(array.data<float>()[1], std::numeric_limits<float>::infinity());
}

// ---------------------------------------------------------------------------
// compare().

Value expected_f32(const Shape& shape, std::vector<double> data, std::vector<double> magnitudes = {}) {
  Value value;
  value.dtype = DType::f32;
  value.shape = shape;
  value.values = std::move(data);
  value.magnitudes = std::move(magnitudes);
  return value;
}

TEST(Compare, ExactMatchPasses) {
  Comparison result = compare(make_array(DType::f32, Shape({2, 2}), {1, 2, 3, 4}),
                              expected_f32(Shape({2, 2}), {1, 2, 3, 4}), Tolerance{});
  EXPECT_TRUE(result.ok) << result.message;
  EXPECT_EQ(result.mismatches, 0);
  EXPECT_NE(result.message.find("all 4 elements"), std::string::npos) << result.message;
}

TEST(Compare, UlpsAreCountedInTheActualDtype) {
  float one_up = std::nextafter(1.0f, 2.0f);
  runtime::Array actual = make_array(DType::f32, Shape({2}), {1, one_up});
  Value expected = expected_f32(Shape({2}), {1, 1});
  EXPECT_TRUE(compare(actual, expected, {.ulps = 1}).ok);
  Comparison strict = compare(actual, expected, Tolerance{});
  EXPECT_FALSE(strict.ok);
  EXPECT_EQ(strict.max_ulps, 1);
  // The expected value is rounded to f32 first: 1 + 2^-30 is 1.
  EXPECT_TRUE(compare(make_array(DType::f32, Shape(), {1}), expected_f32(Shape(), {1 + std::ldexp(1.0, -30)}), {}).ok);
  // Across zero: -min_subnormal to +min_subnormal is 2 ulps; -0 equals +0.
  float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(compare(make_array(DType::f32, Shape(), {-tiny}), expected_f32(Shape(), {tiny}), {}).max_ulps, 2);
  EXPECT_TRUE(compare(make_array(DType::f32, Shape(), {-0.0}), expected_f32(Shape(), {0.0}), {}).ok);
}

TEST(Compare, FailureMessageNamesTheFirstBadElement) {
  runtime::Array actual = make_array(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5.5, 6});
  Comparison result = compare(actual, expected_f32(Shape({2, 3}), {1, 2, 3, 4, 5, 6.001}), {.relative = 1e-3});
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.mismatches, 1);
  EXPECT_NE(result.message.find("1 of 6 elements"), std::string::npos) << result.message;
  EXPECT_NE(result.message.find("first at [1,1]: actual 5.5, expected 5"), std::string::npos) << result.message;
  EXPECT_NE(result.message.find("ulps"), std::string::npos) << result.message;
  EXPECT_NE(result.message.find("relative 0.1"), std::string::npos) << result.message;
  EXPECT_DOUBLE_EQ(result.max_absolute_error, 0.5);
}

TEST(Compare, RelativeToleranceUsesTheMagnitude) {
  // A sum that cancels to 1 from terms of size 1e8: an error of 500 is
  // 5e-6 of the condition.
  runtime::Array actual = make_array(DType::f32, Shape(), {501});
  EXPECT_TRUE(compare(actual, expected_f32(Shape(), {1}, {2e8}), {.relative = 1e-5}).ok);
  Comparison without = compare(actual, expected_f32(Shape(), {1}), {.relative = 1e-5});
  EXPECT_FALSE(without.ok);
  Comparison too_far =
      compare(make_array(DType::f32, Shape(), {5001}), expected_f32(Shape(), {1}, {2e8}), {.relative = 1e-5});
  EXPECT_FALSE(too_far.ok);
  EXPECT_NE(too_far.message.find("magnitude 2e+08"), std::string::npos) << too_far.message;
}

TEST(Compare, AbsoluteTolerance) {
  runtime::Array actual = make_array(DType::f64, Shape(), {1e-9});
  Value expected = from_array(make_array(DType::f64, Shape(), {0}));
  EXPECT_TRUE(compare(actual, expected, {.absolute = 1e-8}).ok);
  EXPECT_FALSE(compare(actual, expected, {.relative = 0.5, .ulps = 4}).ok);
}

TEST(Compare, NaNAndInfinities) {
  auto check = [](double actual, double expected, const Tolerance& tolerance = {.relative = 1, .ulps = 1e9}) {
    return compare(make_array(DType::f32, Shape(), {actual}), expected_f32(Shape(), {expected}), tolerance);
  };
  EXPECT_TRUE(check(nan, nan).ok);
  EXPECT_TRUE(check(-nan, nan, {}).ok);
  Comparison one_side = check(1, nan);
  EXPECT_FALSE(one_side.ok);
  EXPECT_NE(one_side.message.find("NaN on one side only"), std::string::npos) << one_side.message;
  EXPECT_FALSE(check(nan, 1).ok);
  EXPECT_TRUE(check(inf, inf, {}).ok);
  EXPECT_FALSE(check(-inf, inf).ok);
  EXPECT_FALSE(check(inf, 3e38).ok);
  EXPECT_FALSE(check(3e38, inf).ok);
  // A float64 value beyond the f32 range is an f32 infinity.
  EXPECT_TRUE(check(inf, 1e39, {}).ok);
}

TEST(Compare, ShapeAndDtypeMustMatch) {
  Comparison shape = compare(make_array(DType::f32, Shape({3, 2}), {1, 2, 3, 4, 5, 6}),
                             expected_f32(Shape({2, 3}), {1, 2, 3, 4, 5, 6}), {.relative = 1});
  EXPECT_FALSE(shape.ok);
  EXPECT_EQ(shape.message, "shape mismatch: actual [3,2], expected [2,3]");
  Comparison dtype = compare(make_array(DType::f64, Shape({1}), {1}), expected_f32(Shape({1}), {1}), {.relative = 1});
  EXPECT_FALSE(dtype.ok);
  EXPECT_EQ(dtype.message, "dtype mismatch: actual f64, expected f32");
}

TEST(Compare, IntegersAndBoolsAreExact) {
  Value expected = from_array(make_integers(DType::i64, Shape({2}), {int64_max, 3}));
  EXPECT_TRUE(compare(make_integers(DType::i64, Shape({2}), {int64_max, 3}), expected, {}).ok);
  Comparison off = compare(make_integers(DType::i64, Shape({2}), {int64_max - 1, 3}), expected, {.relative = 1});
  EXPECT_FALSE(off.ok);
  EXPECT_NE(off.message.find("actual 9223372036854775806, expected 9223372036854775807"), std::string::npos)
      << off.message;

  runtime::Array bools = make_array(DType::boolean, Shape({2}), {1, 0});
  bools.mutable_data<std::uint8_t>()[0] = 2;
  Comparison bad_byte = compare(bools, from_array(make_array(DType::boolean, Shape({2}), {1, 0})), {});
  EXPECT_FALSE(bad_byte.ok);
  EXPECT_NE(bad_byte.message.find("a bool byte must be 0 or 1"), std::string::npos) << bad_byte.message;
}

TEST(Compare, DefaultTolerances) {
  auto exact = [](const Tolerance& t) { return t.relative == 0 && t.absolute == 0 && t.ulps == 0; };
  EXPECT_TRUE(exact(default_tolerance(Op::sin, DType::i32)));
  EXPECT_TRUE(exact(default_tolerance(Op::reduce_sum, DType::i64)));
  EXPECT_TRUE(exact(default_tolerance(Op::neg, DType::f32)));
  EXPECT_TRUE(exact(default_tolerance(Op::transpose, DType::f32)));
  EXPECT_TRUE(exact(default_tolerance(Op::reduce_max, DType::f64)));
  EXPECT_EQ(default_tolerance(Op::add, DType::f32).ulps, 0);
  EXPECT_EQ(default_tolerance(Op::add, DType::f32).absolute, std::numeric_limits<float>::min());
  EXPECT_EQ(default_tolerance(Op::sin, DType::f32).ulps, 4);
  EXPECT_EQ(default_tolerance(Op::tanh, DType::f64).ulps, 8);
  EXPECT_EQ(default_tolerance(Op::reduce_sum, DType::f32).relative, 1e-5);
  EXPECT_EQ(default_tolerance(Op::matmul, DType::f64).relative, 1e-12);

  // A flushed subnormal passes an inexact op's tolerance.
  EXPECT_TRUE(compare(make_array(DType::f32, Shape(), {0}), expected_f32(Shape(), {1e-40}),
                      default_tolerance(Op::exp, DType::f32))
                  .ok);
}

TEST(Compare, GraphTolerance) {
  Builder builder;
  ValueId x = builder.input(make_array(DType::f32, Shape({2, 2}), {1, 2, 3, 4}));
  ValueId moved = builder.add(Op::transpose, {builder.add(Op::neg, {x})}, axes({1, 0}));
  ValueId sine = builder.add(Op::sin, {moved});
  ValueId reshaped = builder.add(Op::reshape, {sine}, {}, ir::Type{DType::f32, Shape({4})});
  ValueId sum = builder.add(Op::reduce_sum, {sine}, axes({0, 1}));
  ValueId count = builder.add(Op::nonzero, {x});
  const ir::Graph& graph = builder.graph;
  Tolerance exact = graph_tolerance(graph, moved);
  EXPECT_EQ(exact.relative + exact.absolute + exact.ulps, 0);
  EXPECT_EQ(graph_tolerance(graph, sine).ulps, 4);
  EXPECT_EQ(graph_tolerance(graph, reshaped).ulps, 4);
  EXPECT_EQ(graph_tolerance(graph, sum).relative, 1e-5);
  EXPECT_EQ(graph_tolerance(graph, count).ulps, 0);
}

// The seed experiment, matmul -> z + sin(z) -> relu -> reduce_sum, on random
// inputs: a float32 "executor" with a different summation order passes the
// graph tolerance, and one with a 1e-3 error does not.
TEST(Compare, SeedGraphAgainstAFloat32Executor) {
  constexpr int n = 24, k = 64;
  std::mt19937 generator(7);
  std::normal_distribution<float> normal;
  std::vector<double> a_data(n * k), b_data(k * n);
  for (double& v : a_data) v = normal(generator);
  for (double& v : b_data) v = normal(generator);
  Builder builder;
  ValueId a = builder.input(make_array(DType::f32, Shape({n, k}), a_data));
  ValueId b = builder.input(make_array(DType::f32, Shape({k, n}), b_data));
  ValueId z = builder.add(Op::matmul, {a, b});
  ValueId activated = builder.add(Op::relu, {builder.add(Op::add, {z, builder.add(Op::sin, {z})})});
  ValueId total = builder.add(Op::reduce_sum, {activated}, axes({0, 1}));
  auto values = builder.run({activated, total});

  // float32 throughout, contraction in reverse order, rows summed pairwise.
  std::vector<float> relu(n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      float dot = 0;
      for (int p = k - 1; p >= 0; --p)
        dot += static_cast<float>(a_data[i * k + p]) * static_cast<float>(b_data[p * n + j]);
      float value = dot + std::sin(dot);
      relu[i * n + j] = value > 0 ? value : 0;
    }
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    float row = 0;
    for (int j = n - 1; j >= 0; --j) row += relu[i * n + j];
    sum += row;
  }
  runtime::Array actual_activated =
      make_array(DType::f32, Shape({n, n}), std::vector<double>(relu.begin(), relu.end()));
  Comparison elementwise = compare(actual_activated, values[0], graph_tolerance(builder.graph, activated));
  EXPECT_TRUE(elementwise.ok) << elementwise.message;
  Comparison reduced =
      compare(make_array(DType::f32, Shape(), {sum}), values[1], graph_tolerance(builder.graph, total));
  EXPECT_TRUE(reduced.ok) << reduced.message;
  // Honest float32 errors are far inside the bound (measured: ~2e-9 of the
  // magnitude, which is ~30x the result here: sum of |a||b| terms).
  EXPECT_LT(reduced.max_relative_error, 1e-7);
  Comparison wrong =
      compare(make_array(DType::f32, Shape(), {sum * (1 + 1e-3)}), values[1], graph_tolerance(builder.graph, total));
  EXPECT_FALSE(wrong.ok);
}

}  // namespace
}  // namespace kiln::reference
