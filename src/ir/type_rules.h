#pragma once
// Type inference: the result dtype and shape of every op, from its operands
// and attributes. The api layer calls it before recording or running an op;
// the verifier and the parser call it to check a graph.

#include "ir/graph.h"

#include <kiln/error.h>

#include <span>
#include <string>

namespace kiln::ir {

// True for ops whose result type is not derivable from the operands and is
// given instead (parameter, constant, iota, cast, reshape, broadcast_to,
// slice, host_call); infer_type validates it for them.
bool has_declared_type(Op op);

// The result type of `op` on operands of `operands` types. `declared` is the
// result type for ops with has_declared_type(op) (ignored otherwise).
// Throws kiln::ShapeError or kiln::DTypeError naming the op and the operand
// types, with `location` ("file:line") as the user's call.
Type infer_type(Op op, const Attributes& attributes, std::span<const Type> operands, const Type& declared,
                const std::string& location);

// The dtype the api layer gives an elementwise op's operands, from its type rule: `floating` where the rule
// admits only floats (div, sin, copysign: integers compute in float, as in NumPy), `logical` where it admits only
// bools (logical_and, ...), the operands' common dtype otherwise.
enum class OperandPromotion { common, floating, logical };
OperandPromotion operand_promotion(Op op);

// NumPy broadcasting of two shapes (aligned at the right; equal dims or 1).
// Returns false if they are incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* result);

// The error of a gather, take_along_axis or scatter_add node whose index `value` (element `position` of its indices,
// row-major) is outside
// [-size, size) for the gathered axis of `size`: indices are data, so kernels and the reference evaluator find it.
ValueError gather_index_error(const Node& node, std::int64_t value, std::int64_t position, std::int64_t size);

// "f32[2,3], f32[4]": the operand list used in error messages.
std::string describe_types(std::span<const Type> types);

}  // namespace kiln::ir
