#pragma once
// The independent oracle: a naive float64 evaluator over the IR, like XLA's
// HLO evaluator. Tests and the differential fuzzer compare both executors
// (standard kernels and JIT) against it.
//
// It shares no code with the kernels or the code generators: every op is a
// plain loop over multi-indices (O(n) per elementwise op, a triple loop for
// matmul), written for obviousness rather than speed. It reads only the IR:
// graph.h, and type_rules.h, which it runs on every node with the concrete
// operand types to validate the node and to size values downstream of
// nonzero.
//
// Arithmetic:
// - Floats (f32 and f64) are computed in double. f32 inputs are widened
//   exactly and intermediate results are NOT rounded back to f32: an f32
//   node holds the float64 value of the math the graph describes. Two places
//   do round, because rounding is what they mean: `cast` to f32 and an f32
//   `constant` (its stored value is the float nearest attributes.float_value).
//   compare() rounds the expected value to the actual array's dtype, so an
//   f32 overflow to inf matches.
// - Integers are computed in 64-bit unsigned arithmetic and wrapped to the
//   node's dtype (an i32 add wraps at 2^32; no signed overflow, no UB).
// - Bools are 0 or 1.
// Op semantics the kernels must match are documented in element_ops.h (per
// element: integer pow, NaN rules, ...) and at each op in
// reference_evaluator.cpp (cast, reductions, argmax, slice, nonzero, ...).
//
// Ops whose result jumps (floor, ceil, round, sign, comparisons, argmax, cast to an
// integer or bool, nonzero) can legitimately disagree with an f32 executor
// when their operand is a computed value sitting within rounding error of the
// jump (floor(x * y) is 2 here if x * y is 2.9999999999 in float64, and 3 in
// an executor that rounds the product to 3.0f). Differential tests keep such
// operands away from the jumps or apply those ops to parameters only.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <kiln/dtype.h>
#include <kiln/shape.h>

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::reference {

// One evaluated IR value, row-major.
struct Value {
  DType dtype = DType::f32;  // the node's declared dtype
  Shape shape;               // always concrete (nonzero's data-dependent size filled in)

  // Every element as a double, for every dtype. For i64 values beyond 2^53
  // this is rounded; `integers` is the exact value.
  std::vector<double> values;
  // Every element exactly, for i32, i64 and bool (0/1); empty for floats.
  std::vector<std::int64_t> integers;
  // Float values only, optional: the error scale of each element. An
  // executor's error in element i may grow to (relative tolerance) x
  // magnitudes[i]; 0 (or an empty vector) means the element is computed
  // exactly from the inputs. compare() measures relative error against
  // max(|expected|, magnitude), so a sum that cancels to nearly zero is held
  // to the size of its terms ("the condition"), not of its tiny result.
  //
  // evaluate() fills it for float nodes by first-order error propagation.
  // With E(x) the operand's magnitude (0 for parameters, constants, iota):
  //   reduce_sum   sum |t| + sum E(t)          reduce_mean  that / count
  //   matmul       sum (|a| + E(a)) (|b| + E(b))
  //   reduce_prod  prod (|t| + E(t))           mul          (|a| + E(a)) (|b| + E(b))
  //   square       (|x| + E(x))^2              add, sub     |r| + E(a) + E(b); 0 for an infinite r
  //                                                         of an exact infinite operand
  //   div          |r| + E(a)/|b| + |a| E(b)/b^2
  //   pow          |r| + |(|x| + E(x))^y - |x|^y| + |r log|x|| E(y)
  //   exp          |r| + e^x E(x)              log          |r| + E(x)/|x|
  //   sqrt         |r| + E(x)/(2 sqrt|x|)      rsqrt        |r| + E(x)/(2 |x|^1.5)
  //   sin, cos, tanh  |r| + E(x)               sigmoid      |r| + E(x)/4
  //   erf, erfc    |r| + E(x) 2/sqrt(pi)       (Lipschitz constants)
  //   log1p        |r| + E(x)/|1 + x|           expm1        |r| + e^x E(x)
  //   atan         |r| + E(x)/(1 + x^2)
  //   neg, abs, relu, cast float->float, shape ops: E(x), moved with the data
  //   maximum, minimum, reduce_max, reduce_min: the largest E involved
  //   where        E(chosen branch)
  //   sign, floor, ceil, host_call: 0 (input errors across a jump cannot be
  //                bounded; see above)
  // (|r| is the op's own rounding; sum |t| is a summation's condition.) The
  // products use (|a| + E(a))(|b| + E(b)) rather than the first-order
  // |b| E(a) + |a| E(b) so that x * x near x = 0 keeps its second-order
  // error. A NaN magnitude becomes +inf: that element is then only checked
  // for NaN/inf agreement.
  std::vector<double> magnitudes;

  std::int64_t numel() const { return static_cast<std::int64_t>(values.size()); }
  // magnitudes[i], or 0 when there are none.
  double magnitude(std::int64_t index) const;
};

// Reads a CPU array (f32 widened exactly). Throws kiln::DeviceError for an
// array on another device.
Value from_array(const runtime::Array& array);

// A new CPU array holding `value` rounded to its dtype (round to nearest for
// f32; integers and bools exactly).
runtime::Array to_array(const Value& value);

// Evaluates `graph` on `inputs` (one per graph parameter, in call order; each
// must match its parameter's dtype and shape) and returns one Value per
// graph output. Host callbacks (graph.host_functions) are called with arrays
// made by to_array from their operands, and their result is read back with
// from_array. Throws kiln::ValueError for inputs or callback results of the
// wrong type; for a malformed graph, the type rules' kiln::ShapeError or
// kiln::DTypeError, or kiln::InternalError (a node typed unlike its operands,
// an operand defined after its use). Never crashes on a malformed graph.
std::vector<Value> evaluate(const ir::Graph& graph, std::span<const runtime::Array> inputs);

}  // namespace kiln::reference
