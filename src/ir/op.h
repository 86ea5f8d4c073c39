#pragma once
// The Op enum and per-op facts, generated from ops.def.

#include <optional>
#include <string_view>

namespace kiln::ir {

enum class Op {
#define KILN_OP(name, arity, category, attributes, type_rule) name,
#include "ir/ops.def"
#undef KILN_OP
};

inline constexpr int op_count = 0
#define KILN_OP(name, arity, category, attributes, type_rule) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

enum class OpCategory { source, elementwise, reduction, scan, sort, matmul, shape, host };

// Which attributes an op carries; the printer and parser read and write
// exactly these.
enum class AttributeKind {
  none,
  parameter,      // index: position in the parameter list
  constant,       // value
  axis,           // axis
  axes,           // axes
  axes_keepdims,  // axes, keepdims
  axis_keepdims,  // axis, keepdims
  scan,           // axis, exclusive, reverse
  sort,           // axis, descending
  top_k,          // k
  permutation,    // axes (a permutation)
  slice,          // start, step (per axis; the result shape gives the count)
  matmul,         // transpose_a, transpose_b
  callback,       // index: the graph's host callback table
};

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;  // -1: variadic
  OpCategory category;
  AttributeKind attributes;
};

const OpInfo& info(Op op);
inline std::string_view name(Op op) { return info(op).name; }
std::optional<Op> op_from_name(std::string_view name);

inline bool is_elementwise(Op op) { return info(op).category == OpCategory::elementwise; }
inline bool is_reduction(Op op) { return info(op).category == OpCategory::reduction; }
// argmax and argmin: reductions to an index along one axis (run by their standard kernels, never generated).
inline bool is_arg_reduction(Op op) { return op == Op::argmax || op == Op::argmin; }
inline bool is_scan(Op op) { return info(op).category == OpCategory::scan; }
// sort, argsort, top_k.
inline bool is_sort(Op op) { return info(op).category == OpCategory::sort; }

}  // namespace kiln::ir
