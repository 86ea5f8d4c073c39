#pragma once
// The derivative of a traced computation at its traced point, as a program of its own: JAX's linearization. Each
// forward op's JVP rule (rules.h) computes its tangent from its operands' tangents with linear ops only (add,
// mul by a value of the graph, reduce_sum, slice, gather, matmul with one tangent operand, ...), which go here,
// while whatever they multiply by (cos(x), a mask, the other matmul operand) is an ordinary node of the graph.
// Forward mode replays this program into the graph; reverse mode transposes it into the graph, node by node from
// the last (each linear op's transpose rule). Either way the graph never holds a tangent it does not use.

#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::autodiff {

using ir::ValueId;

// A tangent: a value of a LinearProgram, or zero (symbolic: nothing is computed for it).
struct Tangent {
  std::int32_t id = -1;
  bool is_zero() const { return id < 0; }
};

// An operand of a linear op: a tangent, or a value of the graph that the op is linear around (a factor, the
// indices of a gather, a select's condition, zeros).
struct LinearOperand {
  bool is_tangent = false;
  std::int32_t id = -1;  // a Tangent's id, or a ValueId of the graph
  static LinearOperand of(Tangent tangent) { return {true, tangent.id}; }
  static LinearOperand of(ValueId value) { return {false, value}; }
};

enum class LinearKind {
  input,           // the tangent of an input of the differentiated computation
  op,              // a linear op of the op table
  custom_output,   // an output of a kiln::custom_vjp call: its transpose is the user's backward function
  control_output,  // a result of a control node (cond, while_loop, scan_loop): derived from its regions
};

// A control node of the graph being differentiated, as the program sees it (control_rules.h): the operands whose
// tangents flow into its regions and the results whose tangents flow out, with the program's tangents of each.
struct ControlCall {
  ValueId node = -1;                      // the forward control node
  std::vector<int> tangent_operands;      // operand positions, in order
  std::vector<Tangent> operand_tangents;  // one per tangent operand; zero where it has none (a loop's carry)
  std::vector<int> tangent_results;       // result positions, in order
  std::vector<Tangent> outputs;           // one control_output per tangent result
  std::string location;
};

struct LinearNode {
  LinearKind kind = LinearKind::op;
  ir::Op op = ir::Op::parameter;
  ir::Type type;
  ir::Attributes attributes;
  std::vector<LinearOperand> operands;  // custom_output: the tangents of the call's inputs (zero ones left out)
  std::string location;                 // the forward op's line
  int input = -1;                       // input: its position among the inputs
  // custom_output: the call (trace::DifferentiationMarks::custom); control_output: the ControlCall. Then which
  // of its outputs (for a control call: which of the node's results).
  int call = -1;
  int position = -1;
  std::vector<int> custom_inputs;       // custom_output: the call's input position of each operand
};

class LinearProgram {
 public:
  explicit LinearProgram(const ir::Graph& graph) : graph_(&graph) {}

  Tangent input(int position, const ir::Type& type);
  // A linear op; its type comes from the type rule, as a graph node's would.
  Tangent apply(ir::Op op, std::vector<LinearOperand> operands, const ir::Attributes& attributes,
                ir::Type declared, const std::string& location);
  Tangent custom_output(int call, int position, const ir::Type& type, std::vector<LinearOperand> inputs,
                        std::vector<int> input_positions);
  // Records `call` (its outputs left empty) and adds a control_output per tangent result, reading the operand
  // tangents that are not zero.
  const ControlCall& control_call(ControlCall call, const std::vector<ir::Type>& result_types);

  const ControlCall& control(int call) const { return controls_[static_cast<std::size_t>(call)]; }
  std::size_t control_count() const { return controls_.size(); }

  const LinearNode& node(Tangent tangent) const { return nodes_[static_cast<std::size_t>(tangent.id)]; }
  const ir::Type& type(Tangent tangent) const { return node(tangent).type; }
  const ir::Type& operand_type(const LinearOperand& operand) const {
    return operand.is_tangent ? nodes_[static_cast<std::size_t>(operand.id)].type : graph_->type(operand.id);
  }
  const std::vector<LinearNode>& nodes() const { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }

 private:
  Tangent push(LinearNode node);

  const ir::Graph* graph_;
  std::vector<LinearNode> nodes_;
  std::vector<ControlCall> controls_;
};

}  // namespace kiln::autodiff
