// Derivative rules keep no reference into the graph's node list across the nodes they add. kiln-fuzz --gradients
// (seed 2, graph 141) found reduce_prod's rule reshaping into a garbage shape, "cannot reshape 3 elements into
// [0,0]": in emit.reshape(emit.multiply(before, after), emit.shape(moved)) the shape's reference was taken before
// the multiply was added and read after it, and when that addition moved the node list, the reference dangled.
// cummax and cummin's rule kept the operand's shape across the exclusive scan it adds the same way (not seen
// failing). Each case is differentiated with the node list full, then with room for 1, 2, ... more nodes, so that
// the list moves at every node the rule adds; each gradient is checked against central differences in float64.

#include "autodiff/differentiate.h"
#include "autodiff/emitter.h"
#include "ir/parser.h"
#include "reference/reference_evaluator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace kiln::autodiff {
namespace {

runtime::Array input_of(const Shape& shape) {
  runtime::Array array = runtime::allocate_array(DType::f64, shape);
  for (std::int64_t i = 0; i < shape.numel(); ++i)
    array.mutable_data<double>()[i] = 0.4 + 0.37 * static_cast<double>(i % 5) - 0.15 * static_cast<double>(i % 3);
  return array;
}

// The sum of the graph's one output at `input`, over its finite elements (an exclusive running maximum starts at
// -inf, whatever the input).
double sum_at(const ir::Graph& graph, const runtime::Array& input) {
  const std::vector<reference::Value> outputs = reference::evaluate(graph, {&input, 1});
  double sum = 0;
  for (double value : outputs.at(0).values)
    if (std::isfinite(value)) sum += value;
  return sum;
}

// d sum(f(x)) / dx by reverse mode, on a copy of `primal` whose node list has room for exactly `room` more nodes.
std::vector<double> gradient_with_room(const ir::Graph& primal, const runtime::Array& input, std::size_t room) {
  ir::Graph graph = primal;
  graph.nodes.shrink_to_fit();
  graph.nodes.reserve(graph.nodes.size() + room);
  const ValueId x = graph.parameters[0], output = graph.outputs[0];
  const Region region{0, nullptr, "test", "moving_graph_test"};
  const Linearization linearization = linearize(graph, region, {&x, 1}, {&output, 1});
  Emitter emitter(graph);
  const ValueId ones = emitter.constant(1, DType::f64, graph.type(output).shape);
  graph.outputs = transpose(graph, linearization, {&ones, 1});
  return reference::evaluate(graph, {&input, 1}).at(0).values;
}

void check_every_move(const std::string& text) {
  SCOPED_TRACE(text);
  const ir::Graph primal = ir::parse(text);
  const runtime::Array input = input_of(primal.type(primal.parameters[0]).shape);
  std::vector<double> differences;
  const double step = 1e-6;
  for (std::int64_t k = 0; k < input.shape.numel(); ++k) {
    runtime::Array moved = input_of(input.shape);
    moved.mutable_data<double>()[k] += step;
    const double up = sum_at(primal, moved);
    moved.mutable_data<double>()[k] -= 2 * step;
    differences.push_back((up - sum_at(primal, moved)) / (2 * step));
  }
  for (std::size_t room = 0; room <= 40; ++room) {
    const std::vector<double> gradient = gradient_with_room(primal, input, room);
    ASSERT_EQ(gradient.size(), differences.size()) << "room " << room;
    for (std::size_t k = 0; k < gradient.size(); ++k)
      EXPECT_NEAR(gradient[k], differences[k], 1e-7 * (1 + std::fabs(differences[k]))) << "room " << room << ", " << k;
  }
}

TEST(DerivativeRulesOnAMovingGraph, ReduceProd) {
  check_every_move(
      "func @f(%0: f64[3,1]) -> (f64[3,1]) {\n  %1 = f64[3,1] reduce_prod(%0) {axes=[1], keepdims=true}\n"
      "  return %1\n}\n");
  check_every_move(
      "func @f(%0: f64[2,3,4]) -> (f64[3]) {\n  %1 = f64[3] reduce_prod(%0) {axes=[0,2], keepdims=false}\n"
      "  return %1\n}\n");
}

TEST(DerivativeRulesOnAMovingGraph, ExclusiveRunningExtremes) {
  check_every_move(
      "func @f(%0: f64[3,5]) -> (f64[3,5]) {\n"
      "  %1 = f64[3,5] cummax(%0) {axis=1, exclusive=true, reverse=false}\n  return %1\n}\n");
  check_every_move(
      "func @f(%0: f64[4,3]) -> (f64[4,3]) {\n"
      "  %1 = f64[4,3] cummin(%0) {axis=0, exclusive=true, reverse=true}\n  return %1\n}\n");
}

}  // namespace
}  // namespace kiln::autodiff
