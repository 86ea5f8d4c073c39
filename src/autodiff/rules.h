#pragma once
// The derivative rules, one entry per op of the op table (ir/ops.def), as JAX defines them: a JVP rule gives an
// op's tangent from its operands' tangents, written with the linear ops of a LinearProgram; an op that such
// tangents are built from (add, mul by a value, reduce_sum, slice, gather, matmul, ...) also has a transpose rule,
// its adjoint, which reverse mode applies. The table is keyed by the op: tests/autodiff/rule_table_test.cpp walks
// the op table and fails for an op without an entry, and checks every rule against finite differences.

#include "autodiff/emitter.h"
#include "autodiff/linear_program.h"

#include <span>
#include <vector>

namespace kiln::autodiff {

// What a JVP rule sees: the forward node, its operands and their tangents; what it builds: primal values through
// the emitter (into the graph), tangents through the linear helpers (into the program).
class JvpContext {
 public:
  JvpContext(Emitter& emitter, LinearProgram& program, const ir::Node& node, ValueId result,
             std::vector<Tangent> tangents)
      : emitter_(emitter), program_(program), node_(node), result_(result), tangents_(std::move(tangents)) {}

  Emitter& emitter() { return emitter_; }
  const ir::Node& node() const { return node_; }
  const ir::Attributes& attributes() const { return node_.attributes; }
  ValueId result() const { return result_; }  // the forward node's own value
  ValueId operand(std::size_t index) const { return node_.operands[index]; }
  const ir::Type& operand_type(std::size_t index) const { return emitter_.type(operand(index)); }
  Tangent tangent(std::size_t index) const { return tangents_[index]; }
  DType dtype() const { return node_.type.dtype; }
  // A scalar of the result's dtype.
  ValueId constant(double value) { return emitter_.constant(value, dtype()); }

  // The linear op `op` (which must have a transpose rule).
  Tangent linear(ir::Op op, std::vector<LinearOperand> operands, const ir::Attributes& attributes = {},
                 ir::Type declared = {});
  // The forward node's own op and attributes applied to `tangent` in place of operand 0 (its other operands kept):
  // the tangent of an op linear in operand 0 (reshape, slice, reduce_sum, gather, cumsum, ...).
  Tangent same_op(Tangent tangent);
  Tangent scale(Tangent tangent, ValueId factor);    // tangent * factor
  Tangent divide(Tangent tangent, ValueId divisor);  // tangent / divisor
  Tangent add(Tangent a, Tangent b);                 // zeros dropped
  Tangent subtract(Tangent a, Tangent b);
  Tangent negate(Tangent tangent);
  // where(condition, a, b), a zero tangent as a zero constant.
  Tangent select(ValueId condition, Tangent when_true, Tangent when_false);
  // Operand `index`'s tangent, or zeros of its type where it has none (for ops that need every operand).
  LinearOperand tangent_or_zeros(std::size_t index);

 private:
  Emitter& emitter_;
  LinearProgram& program_;
  const ir::Node& node_;
  ValueId result_;
  std::vector<Tangent> tangents_;
};

// What a transpose rule sees: a linear node and the cotangent of its result (a value of the graph); it adds the
// cotangents of the node's tangent operands through contribute().
class TransposeContext {
 public:
  TransposeContext(Emitter& emitter, const LinearProgram& program, const LinearNode& node, ValueId cotangent,
                   std::vector<ValueId>& cotangents)
      : emitter_(emitter), program_(program), node_(node), cotangent_(cotangent), cotangents_(cotangents) {}

  Emitter& emitter() { return emitter_; }
  const LinearNode& node() const { return node_; }
  const ir::Attributes& attributes() const { return node_.attributes; }
  ValueId cotangent() const { return cotangent_; }
  bool is_tangent(std::size_t index) const { return node_.operands[index].is_tangent; }
  // Operand `index`, which must be a value of the graph (not a tangent).
  ValueId value(std::size_t index) const;
  const ir::Type& operand_type(std::size_t index) const { return program_.operand_type(node_.operands[index]); }
  // Adds `cotangent` to operand `index`'s, if that is a tangent, summed down to its shape first (the adjoint of
  // the broadcasting that elementwise ops do).
  void contribute(std::size_t index, ValueId cotangent);

 private:
  Emitter& emitter_;
  const LinearProgram& program_;
  const LinearNode& node_;
  ValueId cotangent_;
  std::vector<ValueId>& cotangents_;
};

// Adds `contribution` to the cotangent of `tangent` (cotangents[id], -1 while it has none).
void accumulate(Emitter& emitter, std::vector<ValueId>& cotangents, Tangent tangent, ValueId contribution);

using JvpRule = Tangent (*)(JvpContext&);
using TransposeRule = void (*)(TransposeContext&);

enum class Derivative {
  rule,     // the JVP rule gives it (and the transpose rule, for an op that tangents are built from)
  none,     // no derivative flows: sources (parameter, constant, iota), piecewise constant ops (floor, sign,
            // comparisons), integer and bool results (argmax, bitwise ops, argsort, top_k's indices)
  regions,  // control flow: derived from its regions (control_rules.h), not by a rule of its own
  refused,  // unknown (host_call: code kiln cannot see): differentiating through it is an error
};

struct OpRule {
  ir::Op op;
  Derivative derivative;
  JvpRule jvp = nullptr;
  TransposeRule transpose = nullptr;
};

// The entry of `op`, or null where the table has none.
const OpRule* rule_for(ir::Op op);

// The families of rules (elementwise_rules.cpp, reduction_rules.cpp, shape_rules.cpp), which the table merges.
std::span<const OpRule> elementwise_rules();
std::span<const OpRule> reduction_rules();
std::span<const OpRule> shape_rules();

}  // namespace kiln::autodiff
