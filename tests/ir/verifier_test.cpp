// The verifier: valid graphs pass; each hand-broken graph is rejected with
// kiln::InternalError naming the node at fault and what is wrong.

#include "ir/verifier.h"
#include "ir/parser.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kiln::ir {
namespace {

Type type(DType dtype, std::initializer_list<std::int64_t> dims) { return {dtype, Shape(dims)}; }

// func @g(%0: f32[4,4], %1: f32[4,4]) -> (f32[]) {
//   %2 = f32[4,4] add(%0, %1)
//   %3 = f32[] reduce_sum(%2) {axes=[0,1], keepdims=false}
//   return %3
// }
Graph valid_graph() {
  Graph graph;
  graph.name = "g";
  ValueId x = graph.add_parameter(type(DType::f32, {4, 4}));
  ValueId y = graph.add_parameter(type(DType::f32, {4, 4}));
  Node add;
  add.op = Op::add;
  add.type = type(DType::f32, {4, 4});
  add.operands = {x, y};
  ValueId sum = graph.add(add);
  Node reduce;
  reduce.op = Op::reduce_sum;
  reduce.type = type(DType::f32, {});
  reduce.operands = {sum};
  reduce.attributes.axes = {0, 1};
  graph.outputs = {graph.add(reduce)};
  return graph;
}

Node constant(Type result, std::int64_t int_value, double float_value = 0) {
  Node node;
  node.op = Op::constant;
  node.type = std::move(result);
  node.attributes.int_value = int_value;
  node.attributes.float_value = float_value;
  return node;
}

struct BrokenCase {
  const char* name;
  std::function<void(Graph&)> break_it;
  std::vector<std::string> fragments;  // all must be in the message
  ValueId value;                       // the node find_verifier_failure blames (-1: the graph)
};

TEST(VerifierTest, ValidGraphsPass) {
  EXPECT_NO_THROW(verify(valid_graph()));
  EXPECT_EQ(find_verifier_failure(valid_graph()), std::nullopt);
  Graph empty;
  EXPECT_NO_THROW(verify(empty));
}

TEST(VerifierTest, BrokenGraphsAreRejectedNamingTheNode) {
  const std::vector<BrokenCase> cases = {
      {"operand refers forward",
       [](Graph& g) {
         g.node(2).operands = {0, 3};
       },
       {"%2 (add)", "operand %3 does not refer to an earlier node"},
       2},
      {"operand refers to itself",
       [](Graph& g) {
         g.node(2).operands = {2, 0};
       },
       {"%2 (add)", "operand %2"},
       2},
      {"operand out of range", [](Graph& g) { g.node(3).operands = {-1}; }, {"%3 (reduce_sum)", "operand %-1"}, 3},
      {"wrong type",
       [](Graph& g) { g.node(2).type = type(DType::f32, {4}); },
       {"%2 (add)", "has type f32[4], but its operands give f32[4,4]"},
       2},
      {"wrong dtype",
       [](Graph& g) { g.node(3).type = type(DType::f64, {}); },
       {"%3 (reduce_sum)", "has type f64[], but its operands give f32[]"},
       3},
      {"operand dtypes differ",
       [](Graph& g) {
         g.node(1).type = type(DType::i32, {4, 4});
       },
       {"%2 (add)", "operands must have one dtype", "f32[4,4], i32[4,4]"},
       2},
      {"bad axes",
       [](Graph& g) {
         g.node(3).attributes.axes = {0, 2};
       },
       {"%3 (reduce_sum)", "axis 2 is out of range for rank 2"},
       3},
      {"unsorted axes",
       [](Graph& g) {
         g.node(3).attributes.axes = {1, 0};
       },
       {"%3 (reduce_sum)", "axes must be sorted and unique"},
       3},
      {"wrong arity", [](Graph& g) { g.node(2).operands = {0}; }, {"%2 (add)", "expects 2 operands, has 1"}, 2},
      {"parameters out of order",
       [](Graph& g) {
         // A parameter recorded after the first op, not moved to the front.
         Node late;
         late.op = Op::parameter;
         late.type = type(DType::f32, {4, 4});
         late.attributes.index = 2;
         g.parameters.push_back(g.add(late));
       },
       {"parameter 2 is %4", "the parameters must be the nodes %0..%2 in order"},
       -1},
      {"parameter list out of order",
       [](Graph& g) { std::swap(g.parameters[0], g.parameters[1]); },
       {"parameter 0 is %1"},
       -1},
      {"parameter not in the list",
       [](Graph& g) { g.parameters.pop_back(); },
       {"%1 (parameter)", "a parameter outside the parameter list"},
       1},
      {"non-parameter among the first nodes",
       [](Graph& g) { g.parameters.push_back(2); },
       {"%2 (add)", "the parameters are the nodes %0..%2, but this node is not one"},
       2},
      {"parameter index differs from its position",
       [](Graph& g) { g.node(1).attributes.index = 0; },
       {"%1 (parameter)", "parameter index is 0, but its position is 1"},
       1},
      {"too many parameters",
       [](Graph& g) {
         g.parameters = {0, 1, 2, 3, 4};
       },
       {"lists 5 parameters"},
       -1},
      {"output missing",
       [](Graph& g) {
         g.outputs = {3, 9};
       },
       {"graph @g", "output 1 is %9, which is not a node"},
       -1},
      {"op not in the table",
       [](Graph& g) { g.node(2).op = static_cast<Op>(op_count + 5); },
       {"%2 (op " + std::to_string(op_count + 5) + ")", "not in the op table"},
       2},
      {"unused attribute set",
       [](Graph& g) { g.node(2).attributes.axis = 1; },
       {"%2 (add)", "sets attributes.axis, which add does not use"},
       2},
      {"unused float_value on a reduction",
       [](Graph& g) { g.node(3).attributes.float_value = -0.0; },
       {"%3 (reduce_sum)", "attributes.float_value"},
       3},
      {"callback out of range",
       [](Graph& g) {
         Node call;
         call.op = Op::host_call;
         call.type = type(DType::f32, {});
         call.attributes.index = 1;
         g.host_functions.resize(1);
         g.outputs.push_back(g.add(call));
       },
       {"%4 (host_call)", "callback 1 is not in the host function table (size 1)"},
       4},
      {"constant with a dynamic shape",
       [](Graph& g) { g.add(constant(type(DType::f32, {Shape::dynamic}), 0, 1.5)); },
       {"%4 (constant)", "a constant needs a static shape"},
       4},
      {"bool constant not 0 or 1",
       [](Graph& g) { g.add(constant(type(DType::boolean, {}), 2)); },
       {"%4 (constant)", "bool constant holds 2"},
       4},
      {"i32 constant too large",
       [](Graph& g) { g.add(constant(type(DType::i32, {}), std::int64_t{1} << 40)); },
       {"%4 (constant)", "does not fit in 32 bits"},
       4},
      {"float constant with an int value",
       [](Graph& g) { g.add(constant(type(DType::f32, {}), 3, 3.0)); },
       {"%4 (constant)", "attributes.int_value"},
       4},
      {"negative dimension",
       [](Graph& g) { g.node(0).type.shape[1] = -7; },
       {"%0 (parameter)", "negative dimension -7"},
       0},
      {"element count overflows",
       [](Graph& g) {
         g.node(0).type = type(DType::f32, {std::int64_t{1} << 40, std::int64_t{1} << 40});
       },
       {"%0 (parameter)", "more than 2^63-1 elements"},
       0},
      {"slice arithmetic overflows",
       [](Graph& g) {
         Node slice;
         slice.op = Op::slice;
         slice.type = type(DType::f32, {4, 4});
         slice.operands = {0};
         slice.attributes.start = {0, 0};
         slice.attributes.step = {1, std::numeric_limits<std::int64_t>::max()};
         g.add(slice);
       },
       {"%4 (slice)", "slice reads outside axis 1"},
       4},
      {"slice outside the input",
       [](Graph& g) {
         Node slice;
         slice.op = Op::slice;
         slice.type = type(DType::f32, {4, 2});
         slice.operands = {0};
         slice.attributes.start = {0, 1};
         slice.attributes.step = {1, 3};
         g.add(slice);
       },
       {"%4 (slice)", "slice reads outside axis 1 of size 4"},
       4},
  };
  for (const BrokenCase& broken : cases) {
    SCOPED_TRACE(broken.name);
    Graph graph = valid_graph();
    broken.break_it(graph);
    try {
      verify(graph);
      ADD_FAILURE() << "verified without error";
    } catch (const InternalError& error) {
      EXPECT_EQ(error.op(), "ir::verify");
      for (const std::string& fragment : broken.fragments)
        EXPECT_NE(error.detail().find(fragment), std::string::npos) << "missing '" << fragment << "' in\n"
                                                                    << error.detail();
    }
    auto failure = find_verifier_failure(graph);
    ASSERT_TRUE(failure.has_value());
    EXPECT_EQ(failure->value, broken.value) << failure->detail;
  }
}

TEST(VerifierTest, ParsedGraphsAreVerifiedWithPlaceholders) {
  // A parsed host_call holds a null placeholder; the verifier accepts it.
  Graph graph = parse(R"(func @h(%0: f32[3]) -> (f32[2]) {
  %1 = f32[2] host_call(%0) {callback=0}
  return %1
})");
  ASSERT_EQ(graph.host_functions.size(), 1u);
  EXPECT_NO_THROW(verify(graph));
  graph.host_functions.clear();
  EXPECT_THROW(verify(graph), InternalError);
}

}  // namespace
}  // namespace kiln::ir
