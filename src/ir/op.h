#pragma once
// The Op enum and per-op facts, generated from ops.def.

#include <optional>
#include <string_view>

namespace kiln::ir {

enum class Op {
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) name,
#include "ir/ops.def"
#undef KILN_OP
};

inline constexpr int op_count = 0
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

enum class OpCategory { source, elementwise, reduction, scan, sort, matmul, shape, host, control };

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
  control,        // carry_count, sequence_count, length, reverse (cond, while_loop, scan_loop; graph.h)
  result,         // index: which result of a control node (>= 1)
};

// Where an elementwise op's meaning on one element is written (the `meaning` column of ops.def).
enum class Meaning {
  scalar,  // kiln::scalar::<name> in kernels/scalar_ops.h, applied by every executor
  math,    // a float function from each device's math library (vector_math.h; CUDA's)
  own,     // no function of one element: kernels of its own
};

// Why an element costs what it costs (the `cost` column): the fusion planner recomputes cheap producers in
// each consumer rather than storing them, and never an expensive one.
enum class Cost {
  none,            // 0: not an elementwise op
  simple,          // 1: an instruction or a few
  divide,          // 4: a division or a square root
  pick,            // 2: an index, its check and a load from where it points (take_along_axis)
  division,        // 20: integer work without a vector form (integer division, Philox) or float fmod (a loop)
  transcendental,  // 20: a math-library function (exp, sin, pow, ...)
};

// How far a float result may be from the float64 reference evaluator's (the `accuracy` column;
// reference/compare.h turns it into a tolerance).
struct Accuracy {
  enum class Kind {
    exact,         // no rounding happens: equal to the reference rounded to the dtype
    ulps,          // within `ulps` units in the last place; inexact in a chain even with 0
    reassociated,  // sums and products, in another order than the reference's
  };
  Kind kind = Kind::exact;
  int ulps = 0;
};

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;  // -1: variadic
  OpCategory category;
  AttributeKind attributes;
  Meaning meaning;
  Cost cost;
  Accuracy accuracy;
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
// cond, while_loop, scan_loop and result: control flow, run by the executors themselves (never by a kernel).
inline bool is_control(Op op) { return info(op).category == OpCategory::control; }
// cond, while_loop and scan_loop: the nodes owning regions.
inline bool has_regions(Op op) { return is_control(op) && op != Op::result; }

// The rough cost of one element of `op`, in flops (see Cost): 0 for ops that are not elementwise.
int flops_per_element(Op op);
// Whether `op` calls a math-library function: long, and needing the math of the JIT's prelude.
inline bool is_transcendental_op(Op op) { return info(op).cost == Cost::transcendental; }
// How far an executor's float result of `op` may be from the float64 reference's.
inline Accuracy accuracy(Op op) { return info(op).accuracy; }

}  // namespace kiln::ir
