// The IR text format: golden text, round trips for every op, parse errors
// with their positions, and a mutation loop showing that no input makes the
// parser do anything but return a graph or throw kiln::ParseError.

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/type_rules.h"
#include "ir/verifier.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace kiln::ir {
namespace {

Type type(DType dtype, std::initializer_list<std::int64_t> dims) { return {dtype, Shape(dims)}; }

// ---- Graph equality, field by field so a failure says what differs ----

void expect_same_attributes(const Attributes& a, const Attributes& b, const std::string& where) {
  EXPECT_EQ(a.index, b.index) << where;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.float_value), std::bit_cast<std::uint64_t>(b.float_value))
      << where << ": float_value " << a.float_value << " vs " << b.float_value;
  EXPECT_EQ(a.int_value, b.int_value) << where;
  EXPECT_EQ(a.axis, b.axis) << where;
  EXPECT_EQ(a.axes, b.axes) << where;
  EXPECT_EQ(a.keepdims, b.keepdims) << where;
  EXPECT_EQ(a.start, b.start) << where;
  EXPECT_EQ(a.step, b.step) << where;
  EXPECT_EQ(a.transpose_a, b.transpose_a) << where;
  EXPECT_EQ(a.transpose_b, b.transpose_b) << where;
  // Catches a field added to Attributes but not to the checks above (NaN
  // aside, which == cannot compare).
  if (!std::isnan(a.float_value)) {
    EXPECT_TRUE(a == b) << where;
  }
}

void expect_same_graph(const Graph& expected, const Graph& actual, bool with_locations) {
  EXPECT_EQ(expected.name, actual.name);
  EXPECT_EQ(expected.parameters, actual.parameters);
  EXPECT_EQ(expected.outputs, actual.outputs);
  EXPECT_EQ(expected.host_functions.size(), actual.host_functions.size());
  ASSERT_EQ(expected.nodes.size(), actual.nodes.size());
  for (std::size_t i = 0; i < expected.nodes.size(); ++i) {
    const Node& a = expected.nodes[i];
    const Node& b = actual.nodes[i];
    std::string where = "node %" + std::to_string(i);
    EXPECT_EQ(a.op, b.op) << where;
    EXPECT_EQ(a.type, b.type) << where << ": " << a.type.to_string() << " vs " << b.type.to_string();
    EXPECT_EQ(a.operands, b.operands) << where;
    expect_same_attributes(a.attributes, b.attributes, where);
    EXPECT_EQ(b.location, with_locations ? a.location : std::string()) << where;
  }
}

// ---- One sample graph per op ----

struct Sample {
  std::vector<Type> operands;  // become the graph's parameters
  Attributes attributes;
  Type declared;  // the result type of has_declared_type ops
};

Attributes axis_attributes(std::int64_t axis) {
  Attributes attributes;
  attributes.axis = axis;
  return attributes;
}
Attributes axes_attributes(std::vector<std::int64_t> axes, bool keepdims = false) {
  Attributes attributes;
  attributes.axes = std::move(axes);
  attributes.keepdims = keepdims;
  return attributes;
}
Attributes float_constant(double value) {
  Attributes attributes;
  attributes.float_value = value;
  return attributes;
}
Attributes int_constant(std::int64_t value) {
  Attributes attributes;
  attributes.int_value = value;
  return attributes;
}

// Keyed by op; a new op in ops.def fails EveryOpRoundTrips until it gets a
// sample here.
std::map<Op, std::vector<Sample>> samples() {
  const Type f32_23 = type(DType::f32, {2, 3});
  std::map<Op, std::vector<Sample>> table;
  table[Op::parameter] = {{{f32_23}, {}, {}}, {{type(DType::boolean, {})}, {}, {}}};
  table[Op::constant] = {
      {{}, float_constant(0.5), type(DType::f32, {})},
      {{}, float_constant(-0.0), type(DType::f32, {2})},
      {{}, float_constant(std::numeric_limits<double>::quiet_NaN()), type(DType::f64, {})},
      {{}, float_constant(std::numeric_limits<double>::infinity()), type(DType::f64, {})},
      {{}, float_constant(-std::numeric_limits<double>::infinity()), type(DType::f32, {1})},
      {{}, float_constant(0.1), type(DType::f64, {})},
      {{}, float_constant(static_cast<double>(0.1f)), type(DType::f32, {})},
      {{}, float_constant(1e300), type(DType::f64, {})},
      {{}, float_constant(std::numeric_limits<double>::denorm_min()), type(DType::f64, {})},
      {{}, float_constant(-123456789.25), type(DType::f64, {})},
      {{}, int_constant(-3), type(DType::i64, {2, 2})},
      {{}, int_constant(std::numeric_limits<std::int64_t>::min()), type(DType::i64, {})},
      {{}, int_constant(std::numeric_limits<std::int32_t>::max()), type(DType::i32, {3})},
      {{}, int_constant(1), type(DType::boolean, {})},
      {{}, int_constant(0), type(DType::boolean, {0})},
  };
  table[Op::iota] = {{{}, axis_attributes(1), type(DType::i64, {3, 4})}};
  for (Op op : {Op::neg, Op::abs, Op::sign, Op::square, Op::relu, Op::floor, Op::ceil, Op::round})
    table[op] = {{{f32_23}, {}, {}}, {{type(DType::i32, {5})}, {}, {}}};
  for (Op op : {Op::sin, Op::cos, Op::exp, Op::log, Op::tanh, Op::sqrt, Op::rsqrt, Op::sigmoid, Op::erf, Op::erfc,
                Op::log1p, Op::expm1, Op::atan})
    table[op] = {{{f32_23}, {}, {}}, {{type(DType::f64, {})}, {}, {}}};
  table[Op::logical_not] = {{{type(DType::boolean, {4})}, {}, {}}};
  table[Op::bitwise_not] = {{{type(DType::i32, {5})}, {}, {}}, {{type(DType::boolean, {4})}, {}, {}}};
  table[Op::cast] = {{{f32_23}, {}, type(DType::i64, {2, 3})}, {{type(DType::boolean, {})}, {}, type(DType::f64, {})}};
  for (Op op : {Op::add, Op::sub, Op::mul, Op::pow, Op::floor_divide, Op::remainder, Op::fmod})
    table[op] = {{{f32_23, type(DType::f32, {3})}, {}, {}}, {{type(DType::i64, {}), type(DType::i64, {4})}, {}, {}}};
  for (Op op : {Op::bitwise_and, Op::bitwise_or, Op::bitwise_xor})
    table[op] = {{{type(DType::i32, {2, 1}), type(DType::i32, {1, 5})}, {}, {}},
                 {{type(DType::boolean, {3}), type(DType::boolean, {3})}, {}, {}}};
  for (Op op : {Op::left_shift, Op::right_shift})
    table[op] = {{{type(DType::i32, {2, 3}), type(DType::i32, {3})}, {}, {}},
                 {{type(DType::i64, {}), type(DType::i64, {4})}, {}, {}}};
  table[Op::div] = {{{f32_23, f32_23}, {}, {}}};
  table[Op::random_bits] = {{{type(DType::i64, {}), type(DType::i64, {2, 3})}, {}, {}}};
  table[Op::copysign] = {{{f32_23, type(DType::f32, {3})}, {}, {}},
                         {{type(DType::f64, {}), type(DType::f64, {4})}, {}, {}}};
  for (Op op : {Op::maximum, Op::minimum}) table[op] = {{{type(DType::i32, {2, 1}), type(DType::i32, {1, 5})}, {}, {}}};
  for (Op op : {Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge}) table[op] = {{{f32_23, f32_23}, {}, {}}};
  for (Op op : {Op::logical_and, Op::logical_or})
    table[op] = {{{type(DType::boolean, {3}), type(DType::boolean, {3})}, {}, {}}};
  table[Op::where] = {{{type(DType::boolean, {2, 3}), f32_23, type(DType::f32, {})}, {}, {}}};
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_min, Op::reduce_prod})
    table[op] = {{{type(DType::f32, {2, 3, 4})}, axes_attributes({0, 2}, true), {}},
                 {{type(DType::f32, {2, 3, 4})}, axes_attributes({1}, false), {}},
                 {{f32_23}, axes_attributes({}, false), {}}};
  {
    Attributes attributes = axis_attributes(1);
    attributes.keepdims = true;
    for (Op op : {Op::argmax, Op::argmin})
      table[op] = {{{f32_23}, axis_attributes(1), {}}, {{type(DType::i32, {4, 5, 6})}, attributes, {}}};
  }
  {
    Attributes exclusive = axis_attributes(1), reverse = axis_attributes(0), both = axis_attributes(2);
    exclusive.exclusive = true;
    reverse.reverse = true;
    both.exclusive = both.reverse = true;
    for (Op op : {Op::cumsum, Op::cumprod, Op::cummax, Op::cummin})
      table[op] = {{{f32_23}, axis_attributes(1), {}},
                   {{f32_23}, exclusive, {}},
                   {{type(DType::i64, {4, 5})}, reverse, {}},
                   {{type(DType::f64, {2, 3, 4})}, both, {}}};
  }
  {
    Attributes descending = axis_attributes(0);
    descending.descending = true;
    for (Op op : {Op::sort, Op::argsort})
      table[op] = {{{f32_23}, axis_attributes(1), {}},
                   {{type(DType::i32, {4, 5})}, descending, {}},
                   {{type(DType::boolean, {3})}, axis_attributes(0), {}}};
    Attributes three, none;
    three.k = 3;
    table[Op::top_k] = {{{f32_23}, three, {}}, {{type(DType::f64, {2, 0})}, none, {}}};
  }
  {
    Attributes transposed;
    transposed.transpose_b = true;
    Attributes both;
    both.transpose_a = both.transpose_b = true;
    table[Op::matmul] = {{{f32_23, type(DType::f32, {3, 4})}, {}, {}},
                         {{f32_23, type(DType::f32, {5, 3})}, transposed, {}},
                         {{type(DType::f64, {7, 3, 2}), type(DType::f64, {1, 4, 3})}, both, {}}};
  }
  table[Op::reshape] = {{{f32_23}, {}, type(DType::f32, {3, 2})}, {{f32_23}, {}, type(DType::f32, {6, 1, 1})}};
  table[Op::transpose] = {{{type(DType::f32, {2, 3, 4})}, axes_attributes({2, 0, 1}), {}},
                          {{type(DType::i64, {})}, axes_attributes({}), {}}};
  table[Op::broadcast_to] = {{{type(DType::f32, {3})}, {}, type(DType::f32, {2, 3})}};
  {
    Attributes strided;
    strided.start = {1, 0};
    strided.step = {2, 3};
    Attributes reversed;
    reversed.start = {9};
    reversed.step = {-1};
    table[Op::slice] = {{{type(DType::f32, {10, 8})}, strided, type(DType::f32, {4, 3})},
                        {{type(DType::i32, {10})}, reversed, type(DType::i32, {10})}};
  }
  table[Op::concat] = {
      {{f32_23, type(DType::f32, {2, 5}), type(DType::f32, {2, 1})}, axis_attributes(1), {}},
      {{type(DType::boolean, {4})}, axis_attributes(0), {}},
  };
  table[Op::gather] = {
      {{type(DType::f32, {7, 3}), type(DType::i32, {2, 4})}, axis_attributes(0), {}},
      {{type(DType::boolean, {2, 5, 3}), type(DType::i64, {})}, axis_attributes(1), {}},
  };
  table[Op::take_along_axis] = {
      {{type(DType::f32, {7, 3}), type(DType::i32, {2, 3})}, axis_attributes(0), {}},
      {{type(DType::i64, {2, 5, 3}), type(DType::i64, {2, 1, 3})}, axis_attributes(1), {}},
  };
  table[Op::scatter_add] = {
      {{type(DType::f32, {7, 3}), type(DType::i32, {2, 4}), type(DType::f32, {2, 4, 3})}, axis_attributes(0), {}},
      {{type(DType::i64, {2, 5, 3}), type(DType::i64, {}), type(DType::i64, {2, 3})}, axis_attributes(1), {}},
  };
  table[Op::expand_dims] = {{{f32_23}, axis_attributes(2), {}}, {{type(DType::f32, {})}, axis_attributes(0), {}}};
  table[Op::squeeze] = {{{type(DType::f32, {1, 3, 1})}, axes_attributes({0, 2}), {}}};
  {
    Attributes first;
    first.index = 0;
    Attributes third;
    third.index = 2;
    table[Op::host_call] = {{{type(DType::f32, {2}), type(DType::i64, {3})}, first, type(DType::f32, {5})},
                            {{}, third, type(DType::i32, {})}};
  }
  table[Op::nonzero] = {{{type(DType::f32, {5, 2})}, {}, {}}};
  return table;
}

class NullHostFunction : public HostFunction {
 public:
  runtime::Array call(std::span<const runtime::Array>) const override { return {}; }
};

Graph sample_graph(Op op, const Sample& sample) {
  Graph graph;
  graph.name = "sample_" + std::string(name(op));
  for (const Type& operand : sample.operands) graph.add_parameter(operand);
  if (op == Op::parameter) {
    graph.outputs = graph.parameters;
    return graph;
  }
  Node node;
  node.op = op;
  node.operands = graph.parameters;
  node.attributes = sample.attributes;
  node.type = infer_type(op, sample.attributes, sample.operands, sample.declared, "");
  graph.outputs.push_back(graph.add(std::move(node)));
  if (op == Op::host_call)
    graph.host_functions.resize(static_cast<std::size_t>(sample.attributes.index + 1),
                                std::make_shared<NullHostFunction>());
  return graph;
}

TEST(PrinterParserTest, EveryOpRoundTrips) {
  std::map<Op, std::vector<Sample>> table = samples();
  for (int index = 0; index < op_count; ++index) {
    auto op = static_cast<Op>(index);
    if (is_control(op)) continue;  // nodes with regions: tests/ir/control_flow_ir_test.cpp
    auto found = table.find(op);
    if (found == table.end() || found->second.empty()) {
      ADD_FAILURE() << "no round-trip sample for op '" << name(op)
                    << "': add one to samples() in tests/ir/printer_parser_test.cpp";
      continue;
    }
    for (std::size_t i = 0; i < found->second.size(); ++i) {
      SCOPED_TRACE(std::string(name(op)) + " sample " + std::to_string(i));
      Graph graph = sample_graph(op, found->second[i]);
      ASSERT_NO_THROW(verify(graph));
      std::string text = print(graph);
      SCOPED_TRACE(text);
      Graph parsed;
      ASSERT_NO_THROW(parsed = parse(text));
      expect_same_graph(graph, parsed, false);
      EXPECT_EQ(print(parsed), text);

      // With locations, on every node (parameters included).
      for (int id = 0; id < graph.size(); ++id)
        graph.node(id).location = "dir \"x\"\\f" + std::to_string(id) + ".cpp:" + std::to_string(10 + id);
      std::string located = print(graph, {.locations = true});
      ASSERT_NO_THROW(parsed = parse(located));
      expect_same_graph(graph, parsed, true);
      EXPECT_EQ(print(parsed, {.locations = true}), located);
      EXPECT_EQ(print(parsed), text);  // locations only when asked for
    }
  }
}

// The seed experiment: matmul -> z + sin(z) -> relu -> reduce_sum.
Graph seed_graph() {
  Graph graph;
  graph.name = "seed";
  ValueId x = graph.add_parameter(type(DType::f32, {4, 4}));
  ValueId y = graph.add_parameter(type(DType::f32, {4, 4}));
  auto add = [&](Op op, std::vector<ValueId> operands, Type result, Attributes attributes = {}) {
    Node node;
    node.op = op;
    node.operands = std::move(operands);
    node.type = std::move(result);
    node.attributes = std::move(attributes);
    return graph.add(std::move(node));
  };
  ValueId z = add(Op::matmul, {x, y}, type(DType::f32, {4, 4}));
  ValueId s = add(Op::sin, {z}, type(DType::f32, {4, 4}));
  ValueId sum = add(Op::add, {z, s}, type(DType::f32, {4, 4}));
  ValueId relu = add(Op::relu, {sum}, type(DType::f32, {4, 4}));
  ValueId reduced = add(Op::reduce_sum, {relu}, type(DType::f32, {}), axes_attributes({0, 1}));
  graph.outputs = {reduced};
  return graph;
}

constexpr const char* seed_text = R"(func @seed(%0: f32[4,4], %1: f32[4,4]) -> (f32[]) {
  %2 = f32[4,4] matmul(%0, %1) {transpose_a=false, transpose_b=false}
  %3 = f32[4,4] sin(%2)
  %4 = f32[4,4] add(%2, %3)
  %5 = f32[4,4] relu(%4)
  %6 = f32[] reduce_sum(%5) {axes=[0,1], keepdims=false}
  return %6
}
)";

TEST(PrinterParserTest, SeedGraphGoldenText) {
  Graph graph = seed_graph();
  verify(graph);
  EXPECT_EQ(print(graph), seed_text);
  expect_same_graph(graph, parse(seed_text), false);
}

TEST(PrinterParserTest, LocationsArePrintedOnlyWhenAsked) {
  Graph graph = seed_graph();
  graph.node(3).location = "model.cpp:12";
  graph.node(0).location = "model.cpp:3";
  EXPECT_EQ(print(graph), seed_text);
  std::string located = print(graph, {.locations = true});
  EXPECT_NE(located.find("func @seed(%0: f32[4,4] loc(\"model.cpp:3\"), %1: f32[4,4]) -> (f32[]) {\n"),
            std::string::npos)
      << located;
  EXPECT_NE(located.find("  %3 = f32[4,4] sin(%2) loc(\"model.cpp:12\")\n"), std::string::npos) << located;
  expect_same_graph(graph, parse(located), true);
}

TEST(PrinterParserTest, ConstantSpellings) {
  auto constant_text = [](Type result, Attributes attributes) {
    Graph graph;
    graph.name = "c";
    Node node;
    node.op = Op::constant;
    node.type = std::move(result);
    node.attributes = std::move(attributes);
    graph.outputs = {graph.add(std::move(node))};
    std::string text = print(graph);
    std::size_t begin = text.find("constant(");
    return text.substr(begin, text.find(')', begin) + 1 - begin);
  };
  EXPECT_EQ(constant_text(type(DType::f32, {}), float_constant(0.5)), "constant(0.5)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(0.1)), "constant(0.1)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(-0.0)), "constant(-0)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(1.0)), "constant(1)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(1e20)), "constant(1e+20)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(std::nan(""))), "constant(nan)");
  EXPECT_EQ(constant_text(type(DType::f64, {}), float_constant(-std::nan(""))), "constant(nan)");
  EXPECT_EQ(constant_text(type(DType::f32, {}), float_constant(HUGE_VAL)), "constant(inf)");
  EXPECT_EQ(constant_text(type(DType::f32, {}), float_constant(-HUGE_VAL)), "constant(-inf)");
  EXPECT_EQ(constant_text(type(DType::i64, {2, 2}), int_constant(-3)), "constant(-3)");
  EXPECT_EQ(constant_text(type(DType::boolean, {}), int_constant(1)), "constant(true)");
  EXPECT_EQ(constant_text(type(DType::boolean, {}), int_constant(0)), "constant(false)");
}

TEST(PrinterParserTest, OutputsParametersAndNames) {
  // No outputs, no parameters.
  Graph empty;
  empty.name = "nothing";
  EXPECT_EQ(print(empty), "func @nothing() -> () {\n  return\n}\n");
  expect_same_graph(empty, parse(print(empty)), false);

  // Several outputs, one returned twice, a parameter returned directly.
  Graph graph = seed_graph();
  graph.outputs = {6, 2, 6, 0};
  std::string text = print(graph);
  EXPECT_NE(text.find(") -> (f32[], f32[4,4], f32[], f32[4,4]) {\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  return %6, %2, %6, %0\n}\n"), std::string::npos) << text;
  expect_same_graph(graph, parse(text), false);

  // Names that are not plain identifiers are quoted.
  for (std::string name : {"", "operator()", "with space", "a\"b\\c", "tab\tnewline\n\x01", "name.v2-x_y"}) {
    Graph named;
    named.name = name;
    std::string named_text = print(named);
    Graph parsed = parse(named_text);
    EXPECT_EQ(parsed.name, name) << named_text;
    EXPECT_EQ(print(parsed), named_text);
  }
  Graph quoted;
  quoted.name = "operator()";
  EXPECT_EQ(print(quoted), "func @\"operator()\"() -> () {\n  return\n}\n");
}

TEST(PrinterParserTest, DynamicDimensions) {
  const char* text = R"(func @dyn(%0: f32[5,2]) -> (i64[?,2]) {
  %1 = i64[?,2] nonzero(%0)
  return %1
}
)";
  Graph graph = parse(text);
  EXPECT_EQ(graph.type(1).shape[0], Shape::dynamic);
  EXPECT_EQ(print(graph), text);
}

TEST(PrinterParserTest, WhitespaceAndCommentsAreFlexible) {
  const char* text =
      "# the seed experiment\n"
      "  func   @seed ( %0 :f32 [ 4 , 4 ] ,%1: f32[4,4]# first\n"
      ")->(f32[]){%2=f32[4,4]matmul(%0,%1){transpose_a = false,transpose_b=false}\n"
      "\t%3 = f32[4,4] sin( %2 )   # a comment\r\n"
      "%4 = f32[4,4] add(%2,\n %3) %5 = f32[4,4] relu(%4)\n"
      "%6 = f32[] reduce_sum(%5) { axes = [ 0 , 1 ] , keepdims = false } loc ( \"m.cpp:1\" )\n"
      "return %6 } # trailing comment";
  Graph graph = parse(text);
  EXPECT_EQ(graph.node(6).location, "m.cpp:1");
  graph.node(6).location.clear();
  EXPECT_EQ(print(graph), seed_text);
}

TEST(PrinterParserTest, HostCallTableGetsPlaceholders) {
  const char* text = R"(func @host(%0: f32[2]) -> (f32[2]) {
  %1 = f32[2] host_call(%0) {callback=3}
  return %1
}
)";
  Graph graph = parse(text);
  ASSERT_EQ(graph.host_functions.size(), 4u);
  for (const auto& function : graph.host_functions) EXPECT_EQ(function, nullptr);
}

// ---- Parse errors ----

struct ErrorCase {
  const char* name;
  std::string text;
  const char* position;  // "line:column"
  const char* fragment;  // part of the message
};

std::string header(const std::string& body, const std::string& outputs = "f32[4]") {
  return "func @g(%0: f32[4], %1: i32[4]) -> (" + outputs + ") {\n" + body + "}\n";
}

TEST(PrinterParserTest, ParseErrorsSayWhereAndWhat) {
  const std::vector<ErrorCase> cases = {
      {"unknown op", header("  %2 = f32[4] frobnicate(%0)\n  return %2\n"), "2:15", "unknown op 'frobnicate'"},
      {"bad dtype", header("  %2 = u8[4] neg(%0)\n  return %2\n"), "2:8", "unknown dtype 'u8'"},
      {"bad dtype in header", "func @g(%0: float[4]) -> () {\n  return\n}\n", "1:13", "unknown dtype 'float'"},
      {"wrong arity", header("  %2 = f32[4] add(%0)\n  return %2\n"), "2:3", "expects 2 operands, has 1"},
      {"wrong arity unary", header("  %2 = f32[4] neg(%0, %0)\n  return %2\n"), "2:3", "%2 (neg): expects 1"},
      {"use before definition", header("  %2 = f32[4] neg(%3)\n  %3 = f32[4] neg(%0)\n  return %2\n"), "2:19",
       "%3 is used before it is defined"},
      {"self reference", header("  %2 = f32[4] neg(%2)\n  return %2\n"), "2:19", "used before it is defined"},
      {"return undefined", header("  return %7\n"), "2:10", "%7 is not defined"},
      {"type mismatch with inference", header("  %2 = f32[4,1] neg(%0)\n  return %2\n"), "2:3",
       "%2 (neg): has type f32[4,1], but its operands give f32[4]"},
      {"dtype rule", header("  %2 = f32[4] add(%0, %1)\n  return %2\n"), "2:3", "operands must have one dtype"},
      {"header output mismatch", header("  %2 = f32[4] neg(%0)\n  return %1\n"), "3:10",
       "%1 has type i32[4], but the header declares output 0 as f32[4]"},
      {"output count", header("  return %0, %0\n"), "2:3", "declares 1 outputs, but return has 2"},
      {"unterminated body", "func @g(%0: f32[4]) -> (f32[4]) {\n  return %0\n", "3:1",
       "expected '}' to close the function body, got end of input"},
      {"unterminated attributes",
       header("  %2 = f32[] reduce_sum(%0) {axes=[0], keepdims=false\n  return %2\n", "f32[]"), "3:3",
       "expected '}' to close the attributes of reduce_sum, got 'return'"},
      {"unterminated list", header("  %2 = f32[] reduce_sum(%0) {axes=[0 keepdims=false}\n", "f32[]"), "2:38",
       "expected ',' or ']' in the list 'axes', got 'keepdims'"},
      {"unterminated string", header("  %2 = f32[4] neg(%0) loc(\"a.cpp\n  return %2\n"), "2:27",
       "unterminated string"},
      {"garbage bytes", std::string("\x01\xff\xfe garbage", 11), "1:1",
       "expected 'func' to start a function, got byte 0x01"},
      {"empty input", "", "1:1", "expected 'func' to start a function, got end of input"},
      {"rank 9", "func @g(%0: f32[1,1,1,1,1,1,1,1,1]) -> () {\n  return\n}\n", "1:33", "rank exceeds the maximum 8"},
      {"huge dimension", "func @g(%0: f32[99999999999999999999]) -> () {\n  return\n}\n", "1:17",
       "integer 99999999999999999999 is out of range"},
      {"huge value number", header("  %99999999999999999999 = f32[4] neg(%0)\n"), "2:3", "is too large"},
      {"huge constant", header("  %2 = i64[] constant(9223372036854775808)\n  return %2\n", "i64[]"), "2:23",
       "out of range"},
      {"huge float constant", header("  %2 = f64[] constant(1e999)\n  return %2\n", "f64[]"), "2:23",
       "float constant 1e999 is out of range"},
      {"i32 constant range", header("  %2 = i32[] constant(2147483648)\n  return %2\n", "i32[]"), "2:3",
       "does not fit in 32 bits"},
      {"elements overflow", "func @g(%0: f32[4294967296,4294967296]) -> () {\n  return\n}\n", "1:9",
       "more than 2^63-1 elements"},
      {"duplicate ids", header("  %2 = f32[4] neg(%0)\n  %2 = f32[4] neg(%0)\n  return %2\n"), "3:3",
       "%2 is already defined (duplicate value); expected %3"},
      {"skipped id", header("  %3 = f32[4] neg(%0)\n  return %3\n"), "2:3",
       "expected %2 (values are numbered consecutively), got %3"},
      {"parameter numbering", "func @g(%1: f32[4]) -> () {\n  return\n}\n", "1:9", "expected %0"},
      {"parameter in body", header("  %2 = f32[4] parameter()\n  return %2\n"), "2:15",
       "parameters are declared in the function header"},
      {"missing return", header("  %2 = f32[4] neg(%0)\n"), "3:1", "missing 'return' before '}'"},
      {"missing attributes", header("  %2 = f32[] reduce_sum(%0)\n  return %2\n", "f32[]"), "3:3",
       "expected '{' to open the attributes of reduce_sum {axes=..., keepdims=...}"},
      {"attributes out of order", header("  %2 = f32[] reduce_sum(%0) {keepdims=false, axes=[0]}\n", "f32[]"), "2:30",
       "expected attribute 'axes' of reduce_sum"},
      {"attributes on a plain op", header("  %2 = f32[4] neg(%0) {axis=0}\n  return %2\n"), "2:23",
       "neg takes no attributes"},
      {"bad axes", header("  %2 = f32[] reduce_sum(%0) {axes=[1], keepdims=false}\n  return %2\n", "f32[]"), "2:3",
       "axis 1 is out of range for rank 1"},
      {"list too long", header("  %2 = f32[] reduce_sum(%0) {axes=[0,0,0,0,0,0,0,0,0], keepdims=false}\n", "f32[]"),
       "2:52", "more than 8 entries"},
      {"bool constant spelling", header("  %2 = bool[] constant(1)\n  return %2\n", "bool[]"), "2:24",
       "expected 'true' or 'false' for a bool constant, got '1'"},
      {"float constant spelling", header("  %2 = f32[] constant(one)\n  return %2\n", "f32[]"), "2:23",
       "for a float constant, got 'one'"},
      {"negative dimension", "func @g(%0: f32[-1]) -> () {\n  return\n}\n", "1:17", "dimension -1 is negative"},
      {"callback limit", header("  %2 = f32[4] host_call(%0) {callback=65536}\n  return %2\n"), "2:39",
       "callback index 65536 exceeds the limit 65535"},
      {"trailing text", header("  return %0\n") + "func", "4:1", "expected end of input after the function"},
      {"loc after return", header("  return %0 loc(\"x\")\n"), "2:13", "expected '}' to close the function body"},
      {"bad escape", header("  %2 = f32[4] neg(%0) loc(\"a\\q\")\n  return %2\n"), "2:29",
       "unknown escape in a string"},
      {"control byte in string", header("  %2 = f32[4] neg(%0) loc(\"a\tb\")\n  return %2\n"), "2:29",
       "unescaped byte 0x09 in a string"},
      {"missing arrow", "func @g() (f32[]) {\n  return\n}\n", "1:11", "expected '->' before the output types"},
  };
  for (const ErrorCase& error_case : cases) {
    SCOPED_TRACE(error_case.name);
    SCOPED_TRACE(error_case.text);
    try {
      parse(error_case.text);
      ADD_FAILURE() << "parsed without error";
    } catch (const ParseError& error) {
      std::string detail = error.detail();
      EXPECT_EQ(detail.substr(0, detail.find(": ")), error_case.position) << detail;
      EXPECT_NE(detail.find(error_case.fragment), std::string::npos) << detail;
      EXPECT_EQ(error.op(), "ir::parse");
    }
  }
}

TEST(PrinterParserTest, PathologicalInputsFailFast) {
  // Deep nesting cannot overflow the stack: the parser does not recurse.
  std::string nested = "func @g(%0: f32" + std::string(200000, '[') + ") -> () {\n  return\n}\n";
  EXPECT_THROW(parse(nested), ParseError);
  std::string braces = header("  %2 = f32[] reduce_sum(%0) " + std::string(200000, '{'), "f32[]");
  EXPECT_THROW(parse(braces), ParseError);
  // Very long numbers are refused, not converted.
  EXPECT_THROW(parse("func @g(%0: f32[" + std::string(100000, '9') + "]) -> () {\n  return\n}\n"), ParseError);
  // A long chain parses in linear time.
  std::string chain = "func @chain(%0: f32[2]) -> (f32[2]) {\n";
  constexpr int length = 20000;
  for (int i = 1; i <= length; ++i)
    chain += "  %" + std::to_string(i) + " = f32[2] neg(%" + std::to_string(i - 1) + ")\n";
  chain += "  return %" + std::to_string(length) + "\n}\n";
  Graph graph = parse(chain);
  EXPECT_EQ(graph.size(), length + 1);
  EXPECT_EQ(print(graph), chain);
}

// ---- Mutation loop: only ParseError or a graph that round-trips ----

std::vector<std::string> seed_texts() {
  std::vector<std::string> texts = {seed_text};
  for (const auto& [op, op_samples] : samples()) {
    for (const Sample& sample : op_samples) {
      Graph graph = sample_graph(op, sample);
      for (int id = 0; id < graph.size(); ++id) graph.node(id).location = "f.cpp:" + std::to_string(id);
      texts.push_back(print(graph, {.locations = texts.size() % 2 == 0}));
    }
  }
  texts.push_back(
      "# comment\nfunc @\"q\\x01\"(%0: f32[?]) -> () {\n  %1 = f32[?] neg(%0) loc(\"a\\\"b\") # c\n  return\n}\n");
  return texts;
}

// Pieces of the grammar, so that mutations often stay close to valid text.
const std::vector<std::string> dictionary = {"%",
                                             "%0",
                                             "%1",
                                             "%2",
                                             "%9",
                                             "%2147483647",
                                             "%99999999999",
                                             "[",
                                             "]",
                                             "{",
                                             "}",
                                             "(",
                                             ")",
                                             ",",
                                             "=",
                                             ":",
                                             "->",
                                             "?",
                                             "-",
                                             "#",
                                             "\"",
                                             "\\",
                                             "\n",
                                             " ",
                                             "0",
                                             "1",
                                             "8",
                                             "-1",
                                             "9223372036854775807",
                                             "9223372036854775808",
                                             "99999999999999999999999",
                                             "1e308",
                                             "1e999",
                                             "5e-324",
                                             "nan",
                                             "inf",
                                             "-inf",
                                             "true",
                                             "false",
                                             "f32",
                                             "f64",
                                             "i32",
                                             "i64",
                                             "bool",
                                             "return",
                                             "func",
                                             "loc(\"x\")",
                                             "parameter",
                                             "constant",
                                             "host_call",
                                             "{callback=70000}",
                                             "slice",
                                             "concat",
                                             "reshape",
                                             "axes=",
                                             "keepdims=",
                                             "[1,1,1,1,1,1,1,1,1]",
                                             "[4611686018427387904,4]",
                                             "{start=[9223372036854775807], step=[9223372036854775807]}",
                                             "\\x",
                                             "\x80",
                                             std::string(1, '\0')};

const std::vector<std::string> numbers = {"0",
                                          "1",
                                          "2",
                                          "7",
                                          "-1",
                                          "65535",
                                          "65536",
                                          "2147483648",
                                          "9223372036854775807",
                                          "9223372036854775808",
                                          "-9223372036854775808",
                                          "4294967296",
                                          "1e-400",
                                          "0.5",
                                          "nan",
                                          "-0"};

std::string mutate(std::string text, std::mt19937& random) {
  auto pick = [&](std::size_t bound) { return bound == 0 ? 0 : static_cast<std::size_t>(random() % bound); };
  int count = 1 + static_cast<int>(random() % 4);
  for (int i = 0; i < count; ++i) {
    std::size_t at = pick(text.size() + 1);
    switch (random() % 7) {
      case 0:  // flip a byte
        if (!text.empty()) text[pick(text.size())] = static_cast<char>(random() & 0xff);
        break;
      case 1:  // insert a random byte
        text.insert(at, 1, static_cast<char>(random() & 0xff));
        break;
      case 2:  // delete a range
        text.erase(at, 1 + pick(16));
        break;
      case 3:  // insert a dictionary word
      case 4:
        text.insert(at, dictionary[pick(dictionary.size())]);
        break;
      case 5: {  // duplicate a range
        std::size_t length = 1 + pick(40);
        text.insert(at, text.substr(pick(text.size()), length));
        break;
      }
      case 6:  // replace a digit with another number
        for (std::size_t j = at; j < text.size(); ++j) {
          if (text[j] >= '0' && text[j] <= '9') {
            text.replace(j, 1, numbers[pick(numbers.size())]);
            break;
          }
        }
        break;
    }
  }
  return text;
}

// Parses `text`: it must either throw ParseError or give a graph that
// verifies and round-trips. Returns true if it parsed.
bool check_parse_is_safe(const std::string& text) {
  Graph graph;
  try {
    graph = parse(text);
  } catch (const ParseError& error) {
    std::string detail = error.detail();
    EXPECT_TRUE(!detail.empty() && detail[0] >= '1' && detail[0] <= '9' && detail.find(':') != std::string::npos)
        << detail;
    return false;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "parse threw something other than ParseError: " << error.what() << "\ninput:\n" << text;
    return false;
  }
  EXPECT_NO_THROW(verify(graph)) << text;
  std::string printed = print(graph, {.locations = true});
  Graph reparsed;
  try {
    reparsed = parse(printed);
  } catch (const std::exception& error) {
    ADD_FAILURE() << "printer output does not parse: " << error.what() << "\ninput:\n"
                  << text << "\nprinted:\n"
                  << printed;
    return true;
  }
  EXPECT_EQ(print(reparsed, {.locations = true}), printed) << text;
  expect_same_graph(graph, reparsed, true);
  return true;
}

TEST(PrinterParserTest, MutatedTextsOnlyGiveParseErrors) {
  std::vector<std::string> texts = seed_texts();
  for (const std::string& text : texts) ASSERT_TRUE(check_parse_is_safe(text)) << text;
  std::mt19937 random(20240611);
  int parsed = 0;
  constexpr int iterations = 5000;
  for (int i = 0; i < iterations; ++i) {
    std::string mutated = mutate(texts[random() % texts.size()], random);
    if (check_parse_is_safe(mutated)) parsed += 1;
    if (::testing::Test::HasFailure()) break;  // one clear failure, not thousands
  }
  // The loop must exercise both outcomes to mean anything.
  std::cout << parsed << " of " << iterations << " mutated texts parsed\n";
  EXPECT_GT(parsed, iterations / 50);
  EXPECT_LT(parsed, iterations);
}

TEST(PrinterParserTest, RandomBytesOnlyGiveParseErrors) {
  std::mt19937 random(7);
  for (int i = 0; i < 2000; ++i) {
    std::string text(random() % 200, '\0');
    for (char& c : text) c = static_cast<char>(random() & 0xff);
    if (i % 2) text = "func @f(" + text;  // get past the first token half the time
    check_parse_is_safe(text);
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace kiln::ir
