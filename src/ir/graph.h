#pragma once
// kiln's IR: a function as a list of SSA nodes in topological order. Node i
// defines value %i; operands refer to earlier nodes. Every value has a dtype
// and a static shape (see kiln/shape.h for the one dynamic exception).

#include "ir/op.h"
#include "runtime/buffer.h"

#include <kiln/dtype.h>
#include <kiln/shape.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir {

using ValueId = std::int32_t;

struct Type {
  DType dtype = DType::f32;
  Shape shape;
  // "f32[2,3]"
  std::string to_string() const;
  friend bool operator==(const Type&, const Type&) = default;
};

// The attributes of a node; which fields are meaningful depends on the op's
// AttributeKind (op.h). Unused fields stay at their defaults, so two nodes
// with equal attributes compare equal.
struct Attributes {
  std::int64_t index = 0;                 // parameter position, host callback index
  double float_value = 0;                 // constant of a float dtype
  std::int64_t int_value = 0;             // constant of an integer or bool dtype
  std::int64_t axis = 0;                  // concat, expand_dims, iota, argmax, argmin
  std::vector<std::int64_t> axes;         // reductions (sorted), squeeze (sorted), transpose (permutation)
  bool keepdims = false;                  // reductions
  bool exclusive = false, reverse = false;  // scans: leave each element out; run from the end
  bool descending = false;                  // sort, argsort: largest first
  std::int64_t k = 0;                       // top_k: how many of the largest
  std::vector<std::int64_t> start, step;  // slice: first index and stride per axis
  bool transpose_a = false, transpose_b = false;  // matmul
  // Control flow (below): the region arguments carried from one step to the next (a cond's operands), the
  // sequences a scan_loop steps over, its step count, and whether it steps from the end.
  std::int64_t carry_count = 0, sequence_count = 0, length = 0;
  friend bool operator==(const Attributes&, const Attributes&) = default;
};

class Graph;

// A control node's value is its result 0; `result` nodes (operand: the control node, attributes.index k >= 1)
// stand for its other results. Each region is a graph of its own, whose parameters are everything it uses: no
// region reads a value of the graph around it. With n = carry_count and the m values the regions capture last:
//   cond        operands: index (i32[], clamped to the branches), n arguments, m captures. Regions: the
//               branches, each of the n + m parameters, all returning the same types: the results.
//   while_loop  operands: n initial carries, m captures. Regions: condition (n + m parameters -> bool[]) and
//               body (n + m -> the n carries' types). Results: the carries once the condition is false.
//   scan_loop   operands: n initial carries, p = sequence_count sequences (leading axis of `length` each), m
//               captures. Region: body, of the n carries, p elements (a sequence without its leading axis) and m
//               captures, returning n carries and q per-step outputs. Results: the n final carries, then the q
//               outputs stacked along a new leading axis of `length`; `reverse` steps from the last element.
struct Node {
  Op op = Op::constant;
  Type type;
  std::vector<ValueId> operands;
  Attributes attributes;
  std::string location;  // "file:line" of the user's call, if known
  std::vector<Graph> regions;
};

// A user callback behind host_call. It receives concrete arrays and must
// return one of the declared type.
class HostFunction {
 public:
  virtual ~HostFunction() = default;
  virtual runtime::Array call(std::span<const runtime::Array> inputs) const = 0;
};

class Graph {
 public:
  std::string name = "main";
  std::vector<Node> nodes;
  std::vector<ValueId> parameters;  // parameter nodes in call order
  std::vector<ValueId> outputs;
  std::vector<std::shared_ptr<const HostFunction>> host_functions;

  ValueId add(Node node);
  ValueId add_parameter(const Type& type);
  const Node& node(ValueId value) const { return nodes[static_cast<std::size_t>(value)]; }
  Node& node(ValueId value) { return nodes[static_cast<std::size_t>(value)]; }
  const Type& type(ValueId value) const { return node(value).type; }
  int size() const { return static_cast<int>(nodes.size()); }

  // How many times each value is used (as an operand or output).
  std::vector<int> use_counts() const;
  // True if any node has an op of the `host` category or a dynamic shape.
  bool has_dynamic_shapes() const;
};

// Whether `node` is a constant +0 (of any dtype): the identity of a sum, which -0 is not where the sum is +0 (a
// zero padding of -0 would turn it into -0).
bool is_positive_zero(const Node& node);

// The types of control node `value`'s results (a control node's own type is result 0's), from its regions.
std::vector<Type> result_types(const Graph& graph, ValueId value);
// Adds control node `node` (its type left to this: its result 0's), then a `result` node for each of its other
// results; returns the node's value and the result nodes', in result order.
std::vector<ValueId> add_control_node(Graph& graph, Node node);
// Per value, the result nodes reading it (empty but for control nodes): what an executor fills with the results
// (each node's attributes.index) when the control node has run.
std::vector<std::vector<ValueId>> result_nodes(const Graph& graph);

// Puts the parameters first (in parameter order), keeps every other node in
// its order, and renumbers operands. Tracing records captured inputs as
// parameters when it meets them; this gives the canonical layout the printer
// and the passes expect.
void canonicalize(Graph& graph);

// Removes nodes no output depends on and renumbers. Parameters always stay.
// Returns true if anything was removed.
bool remove_dead_nodes(Graph& graph);

// Rebuilds `graph` keeping only nodes whose `keep` flag is set (their operands
// must be kept too) and renumbering operands and outputs.
void compact(Graph& graph, const std::vector<bool>& keep);

}  // namespace kiln::ir
