#pragma once
// What each elementwise op means on one element: the scalar semantics of the
// reference evaluator (reference_evaluator.h), which the kernels and the JIT
// must match. Private to src/reference.
//
// Floats are double; integers are int64 values of the node's dtype, computed
// in uint64 and wrapped, so that overflow is defined (no UB).

#include "ir/graph.h"

#include <kiln/dtype.h>

#include <cstdint>

namespace kiln::reference::element_ops {

// Two's-complement wraparound of a 64-bit result to `dtype` (bool: != 0).
std::int64_t wrap(std::uint64_t bits, DType dtype);
inline std::uint64_t bits_of(std::int64_t value) { return static_cast<std::uint64_t>(value); }
// `value` rounded to nearest in `dtype` (f32), or unchanged (f64).
double round_to(double value, DType dtype);
// The smallest and largest value of an integer or bool dtype.
std::int64_t lowest(DType dtype);
std::int64_t highest(DType dtype);
// Float -> integer: truncate toward zero, saturate at the dtype's range,
// NaN -> 0.
std::int64_t float_to_integer(double x, DType dtype);

// Unary ops. sign keeps NaN and the sign of zero; relu(NaN) is NaN; rsqrt is
// 1/sqrt; sigmoid is 1/(1 + e^-x). Integer neg, abs and square wrap
// (abs(INT_MIN) is INT_MIN); floor and ceil are the identity on integers.
// Throw kiln::InternalError for an op that is not unary on that dtype.
double unary_float(const ir::Node& node, double x);
std::int64_t unary_integer(const ir::Node& node, std::int64_t x, DType dtype);

// Binary ops. maximum and minimum propagate NaN. Integer add, sub, mul wrap;
// integer pow is exponentiation by squaring that wraps like repeated
// multiplication, and a negative exponent gives 0 except for bases 1 (-> 1)
// and -1 (-> +-1). logical_and/or read nonzero as true.
// floor_divide and remainder are Python's // and %, fmod C's: see the op table
// (ir/ops.def) for zero divisors and the lowest integer over -1.
double binary_float(const ir::Node& node, double a, double b);
std::int64_t binary_integer(const ir::Node& node, std::int64_t a, std::int64_t b, DType dtype);
std::int64_t integer_pow(std::int64_t base, std::int64_t exponent, DType dtype);

bool is_comparison(ir::Op op);
// eq ne lt le gt ge; every comparison with NaN is false except ne.
template <class T>
bool compare_elements(ir::Op op, T a, T b) {
  switch (op) {
    case ir::Op::eq: return a == b;
    case ir::Op::ne: return a != b;
    case ir::Op::lt: return a < b;
    case ir::Op::le: return a <= b;
    case ir::Op::gt: return a > b;
    case ir::Op::ge: return a >= b;
    default: return false;
  }
}

// The error scale (Value::magnitudes) of a float result, from its operands'
// values and magnitudes; see the table in reference_evaluator.h.
double unary_magnitude(ir::Op op, double x, double result, double error);
double binary_magnitude(ir::Op op, double a, double b, double result, double error_a, double error_b);

}  // namespace kiln::reference::element_ops
