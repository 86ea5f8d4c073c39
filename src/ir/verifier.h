#pragma once
// The IR verifier: checks the invariants every pass may rely on and every
// pass must keep. The pipeline runs it after each pass in debug builds; the
// parser runs it on every graph it reads.
//
// A graph is valid when
//   - its parameters are exactly the nodes 0..P-1, in order: node i has op
//     `parameter` and attributes.index == i, graph.parameters[i] == i, and no
//     other node is a parameter (the canonical layout, see canonicalize);
//   - every node's op is in the op table and its operand count matches the
//     op's arity (variadic: any count; the type rule may still want one);
//   - every operand refers to an earlier node, every output to a node;
//   - attributes: only the fields of the op's AttributeKind differ from their
//     defaults (see attribute_fields in printer.h; parameter uses index,
//     constant uses float_value for f32/f64 and int_value otherwise); a bool
//     constant is 0 or 1, an i32 constant fits in 32 bits; a host_call's
//     callback index is < graph.host_functions.size() (entries may be null);
//   - every type has a valid dtype, dimensions >= 0 or Shape::dynamic, and an
//     element count that fits in int64 (static dimensions only; this keeps
//     the type rules' arithmetic from overflowing); constants and iota have
//     static shapes;
//   - every node's type equals infer_type(...) of its operands' types (for
//     has_declared_type ops, infer_type validates the declared type);
//   - control nodes (cond, while_loop, scan_loop) have the regions graph.h
//     describes, each a valid graph whose parameters are what the node gives
//     it and whose outputs have the types the node needs; their type is their
//     result 0's; a `result` names a result >= 1 of a control node, with its
//     type; no other node has regions.

#include "ir/graph.h"

#include <optional>
#include <string>

namespace kiln::ir {

// Throws kiln::InternalError (op "ir::verify") describing the first problem
// found, naming the node as "%5 (add): ..." where there is one.
void verify(const Graph& graph);

// The first problem in `graph`, or nullopt if it is valid. `value` is the
// node at fault, or -1 for a problem of the graph as a whole (its parameter
// list or outputs); `detail` is the full message, node name included.
struct VerifierFailure {
  ValueId value = -1;
  std::string detail;
};
std::optional<VerifierFailure> find_verifier_failure(const Graph& graph);

}  // namespace kiln::ir
