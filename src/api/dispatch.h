#pragma once
// The one path every op takes from the public API: type inference (with
// errors naming the op, operands and the user's line), then either a node in
// the graph being traced or an eager run of the standard kernel.

#include "ir/graph.h"

#include <kiln/ops.h>
#include <kiln/tensor.h>

#include <optional>
#include <vector>

namespace kiln::detail {

// Applies `op` to `inputs`. `declared` is the result type for ops whose
// result type is given rather than inferred (ir::has_declared_type).
Tensor apply(ir::Op op, const std::vector<Tensor>& inputs, const ir::Attributes& attributes, const Location& location,
             const ir::Type& declared = {});

// While tracing, refuses to create `what` ("a constant") on `device` when it is another GPU than the traced
// function's: what is created inside a function lives on the function's device (the CPU default included).
void check_created_on_trace_device(Device device, const char* op, const char* what, const Location& location);

// A rank-0 constant of `dtype`: a constant node while tracing, else a tensor.
Tensor scalar_constant(Scalar value, DType dtype, Device device, const Location& location);
// A constant of any shape (zeros, ones, full).
Tensor constant(Scalar value, DType dtype, const Shape& shape, Device device, const Location& location);

// `x` converted to `dtype` (x itself if it already has it).
Tensor cast_to(const Tensor& x, DType dtype, const Location& location);

// The dtype a scalar takes next to a tensor of `tensor_dtype` (weak typing).
DType scalar_dtype(DType tensor_dtype, const Scalar& scalar);

// x's rank; a ValueError naming `op` when x is an undefined Tensor.
int checked_rank(const Tensor& x, const char* op, const Location& location);
// `axis` counted from the end when negative, in [0, rank); a ShapeError naming `op` otherwise.
std::int64_t normalize_axis(std::int64_t axis, int rank, const char* op, const Location& location);
// `axes` normalized, sorted and unique (all of [0, rank) for Axes()); a ShapeError naming `op` for a repeat.
std::vector<std::int64_t> normalize_axes(const Axes& axes, int rank, const char* op, const Location& location);

// Composites (softmax, layer_norm, gelu, logsumexp, cross entropies, ...) of bf16 or f16 operands compute in f32
// and round once, at their result, as XLA's and PyTorch's kernels for them do: spelled with 16-bit primitives they
// would round at every step (a softmax's sum of rounded exponentials), which costs accuracy and, compiled, time.
// `body` gets the operands with every bf16 or f16 one cast to f32; its result is cast to `result`.
inline bool is_half_precision_tensor(const Tensor& x) { return x.defined() && is_half_precision(x.dtype()); }
template <class Body, class... Operands>
Tensor computed_in_f32(DType result, const Location& location, Body body, const Operands&... operands) {
  auto widened = [&](const Tensor& x) { return is_half_precision_tensor(x) ? cast_to(x, DType::f32, location) : x; };
  return cast_to(body(widened(operands)...), result, location);
}
// The dtype float operands promote to (undefined ones left out; the composite's own checks report them).
template <class... Operands>
DType promoted_dtype(const Operands&... operands) {
  std::optional<DType> dtype;
  ((dtype = !operands.defined() ? dtype : dtype ? promote_types(*dtype, operands.dtype()) : operands.dtype()), ...);
  return dtype.value_or(DType::f32);
}

}  // namespace kiln::detail
