// Ops that users of TensorFlow, JAX and PyTorch expect as one call but that are compositions of kiln's
// primitives: written with them, so the JIT sees and fuses every step (logsumexp is one row kernel like softmax).
// Each checks its own arguments first, so that a bad axis or shape is reported under the name the user called.

#include "api/dispatch.h"
#include "ir/type_rules.h"

#include <kiln/autodiff.h>
#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/ops.h>

#include <limits>
#include <numbers>
#include <string>

namespace kiln {
namespace {

using detail::computed_in_f32;
using detail::is_half_precision_tensor;
using detail::promoted_dtype;
using detail::checked_rank;
using detail::normalize_axes;
using detail::normalize_axis;

std::string describe(const Tensor& x) { return std::string(to_string(x.dtype())) + x.shape().to_string(); }

Tensor floating(const Tensor& x, const Location& location) {
  return detail::cast_to(x, floating_result(x.dtype()), location);
}

// a and b of one float dtype (their promotion, integers and bools as f32), after checking that they broadcast:
// a composite's ShapeError names the composite, not the primitive inside it that would meet the shapes first.
std::pair<Tensor, Tensor> broadcastable_floats(const Tensor& a, const Tensor& b, const char* op,
                                               const Location& location) {
  checked_rank(a, op, location);
  checked_rank(b, op, location);
  Shape shape;
  if (!ir::broadcast_shapes(a.shape(), b.shape(), &shape))
    throw ShapeError(op, "shapes " + a.shape().to_string() + " and " + b.shape().to_string() + " cannot be broadcast",
                     location);
  const DType dtype = floating_result(promote_types(a.dtype(), b.dtype()));
  return {detail::cast_to(a, dtype, location), detail::cast_to(b, dtype, location)};
}

// isclose under the name `op`: NumPy's formula, a finite reference within the bound, or equal (infinities), or
// both NaN when asked.
Tensor close_elements(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan, const char* op,
                      const Location& location) {
  const auto [x, y] = broadcastable_floats(a, b, op, location);
  const Tensor bound = add(mul(abs(y, location), rtol, location), atol, location);
  const Tensor within =
      logical_and(le(abs(sub(x, y, location), location), bound, location), isfinite(y, location), location);
  const Tensor close = logical_or(within, eq(x, y, location), location);
  if (!equal_nan) return close;
  return logical_or(close, logical_and(isnan(x, location), isnan(y, location), location), location);
}

// The reduction over `axes` (normalized) keeps them as size 1; this drops them again unless `keepdims`.
Tensor drop_reduced_axes(const Tensor& reduced, const std::vector<std::int64_t>& axes, bool keepdims,
                         const Location& location) {
  if (keepdims || axes.empty()) return reduced;
  return squeeze(reduced, Axes(axes), location);
}

}  // namespace

Tensor clip(const Tensor& x, Scalar low, Scalar high, Location location) {
  checked_rank(x, "clip", location);
  return minimum(maximum(x, low, location), high, location);
}

Tensor clip(const Tensor& x, const Tensor& low, const Tensor& high, Location location) {
  checked_rank(x, "clip", location);
  return minimum(maximum(x, low, location), high, location);
}

Tensor isnan(const Tensor& x, Location location) {
  checked_rank(x, "isnan", location);
  return ne(x, x, location);  // false for every integer
}

Tensor isinf(const Tensor& x, Location location) {
  checked_rank(x, "isinf", location);
  if (!is_floating(x.dtype())) return ne(x, x, location);  // false
  return eq(abs(x, location), std::numeric_limits<double>::infinity(), location);
}

Tensor isfinite(const Tensor& x, Location location) {
  checked_rank(x, "isfinite", location);
  if (!is_floating(x.dtype())) return eq(x, x, location);                          // true
  return lt(abs(x, location), std::numeric_limits<double>::infinity(), location);  // NaN compares false
}

Tensor trunc(const Tensor& x, Location location) {
  checked_rank(x, "trunc", location);
  if (!is_floating(x.dtype())) return x;
  return where(lt(x, 0, location), ceil(x, location), floor(x, location), location);
}

Tensor reciprocal(const Tensor& x, Location location) {
  checked_rank(x, "reciprocal", location);
  return div(1, x, location);
}

Tensor logical_xor(const Tensor& a, const Tensor& b, Location location) {
  checked_rank(a, "logical_xor", location);
  checked_rank(b, "logical_xor", location);
  return ne(cast(a, DType::boolean, location), cast(b, DType::boolean, location), location);
}

Tensor logaddexp(const Tensor& a, const Tensor& b, Location location) {
  if (is_half_precision_tensor(a) || is_half_precision_tensor(b))
    return computed_in_f32(
        promoted_dtype(a, b), location, [&](const Tensor& x, const Tensor& y) { return logaddexp(x, y, location); }, a,
        b);
  const auto [x, y] = broadcastable_floats(a, b, "logaddexp", location);
  // Equal operands take the first form: it is exact for infinities, where the second makes NaN of inf - inf.
  const Tensor general =
      add(maximum(x, y, location), log1p(exp(neg(abs(sub(x, y, location), location), location), location), location),
          location);
  return where(eq(x, y, location), add(x, std::numbers::ln2, location), general, location);
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan, Location location) {
  return close_elements(a, b, rtol, atol, equal_nan, "isclose", location);
}

Tensor allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan, Location location) {
  return reduce_all(close_elements(a, b, rtol, atol, equal_nan, "allclose", location), Axes(), false, location);
}

Tensor reduce_logsumexp(const Tensor& x, Axes axes, bool keepdims, Location location) {
  if (is_half_precision_tensor(x))
    return computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return reduce_logsumexp(wide, axes, keepdims, location); }, x);
  const int rank = checked_rank(x, "reduce_logsumexp", location);
  const std::vector<std::int64_t> normalized = normalize_axes(axes, rank, "reduce_logsumexp", location);
  const Tensor values = floating(x, location);
  const Tensor largest = reduce_max(values, Axes(normalized), true, location);
  // An infinite (or NaN) maximum is not subtracted: x - inf would make NaN of +inf's own term and of every term
  // when all are -inf; with 0 instead, +inf's exp is +inf and -inf's 0, which the sum and log carry through.
  // The shift changes no result, so its derivative is zero (stop_gradient, as JAX's logsumexp): the gradient is
  // exp(x - logsumexp(x)), without terms through the maximum that cancel only to rounding.
  const Tensor shift = stop_gradient(
      where(lt(abs(largest, location), std::numeric_limits<double>::infinity(), location), largest, 0.0, location),
      location);
  const Tensor total = reduce_sum(exp(sub(values, shift, location), location), Axes(normalized), true, location);
  return drop_reduced_axes(add(log(total, location), shift, location), normalized, keepdims, location);
}

Tensor reduce_variance(const Tensor& x, Axes axes, bool keepdims, Location location) {
  if (is_half_precision_tensor(x))
    return computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return reduce_variance(wide, axes, keepdims, location); }, x);
  const int rank = checked_rank(x, "reduce_variance", location);
  const std::vector<std::int64_t> normalized = normalize_axes(axes, rank, "reduce_variance", location);
  const Tensor values = floating(x, location);
  const Tensor centered = sub(values, reduce_mean(values, Axes(normalized), true, location), location);
  return reduce_mean(square(centered, location), Axes(normalized), keepdims, location);
}

// The square root taken before the reduced axes are dropped, so that it stays in the variance's row kernel.
Tensor reduce_std(const Tensor& x, Axes axes, bool keepdims, Location location) {
  if (is_half_precision_tensor(x))
    return computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return reduce_std(wide, axes, keepdims, location); }, x);
  const int rank = checked_rank(x, "reduce_std", location);
  const std::vector<std::int64_t> normalized = normalize_axes(axes, rank, "reduce_std", location);
  const Tensor deviation = sqrt(reduce_variance(x, Axes(normalized), true, location), location);
  return drop_reduced_axes(deviation, normalized, keepdims, location);
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t axis, Location location) {
  if (tensors.empty()) throw ValueError("stack", "needs at least one tensor", location);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined())
      throw ValueError("stack", "operand " + std::to_string(i) + " is an undefined (default-constructed) Tensor",
                       location);
    if (tensors[i].shape() != tensors[0].shape())
      throw ShapeError("stack",
                       "every tensor must have the same shape: operand 0 is " + describe(tensors[0]) + ", operand " +
                           std::to_string(i) + " " + describe(tensors[i]),
                       location);
  }
  const std::int64_t normalized = normalize_axis(axis, tensors[0].rank() + 1, "stack", location);
  std::vector<Tensor> expanded;
  for (const Tensor& tensor : tensors) expanded.push_back(expand_dims(tensor, normalized, location));
  return concat(expanded, normalized, location);
}

std::vector<Tensor> split(const Tensor& x, std::int64_t count, std::int64_t axis, Location location) {
  const int rank = checked_rank(x, "split", location);
  if (rank == 0) throw ShapeError("split", "cannot split a rank-0 tensor", location);
  const std::int64_t normalized = normalize_axis(axis, rank, "split", location);
  const std::int64_t size = x.shape()[static_cast<int>(normalized)];
  if (count <= 0)
    throw ValueError("split", "the number of pieces must be >= 1, got " + std::to_string(count), location);
  if (size % count != 0)
    throw ShapeError("split",
                     "axis " + std::to_string(axis) + " of " + describe(x) + " (size " + std::to_string(size) +
                         ") does not divide into " + std::to_string(count) + " equal pieces",
                     location);
  return split_sizes(x, std::vector<std::int64_t>(static_cast<std::size_t>(count), size / count), axis, location);
}

std::vector<Tensor> split_sizes(const Tensor& x, std::vector<std::int64_t> sizes, std::int64_t axis,
                                Location location) {
  const int rank = checked_rank(x, "split", location);
  if (rank == 0) throw ShapeError("split", "cannot split a rank-0 tensor", location);
  if (!x.shape().is_static()) throw ShapeError("split", "cannot split a value whose shape depends on data", location);
  const std::int64_t normalized = normalize_axis(axis, rank, "split", location);
  const std::int64_t size = x.shape()[static_cast<int>(normalized)];
  if (sizes.empty()) throw ValueError("split", "needs at least one size", location);
  std::int64_t known = 0;
  std::size_t inferred = sizes.size();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && inferred == sizes.size()) {
      inferred = i;
    } else if (sizes[i] < 0) {
      throw ValueError("split", "size " + std::to_string(sizes[i]) + " is negative (only one may be -1)", location);
    } else {
      known += sizes[i];
    }
  }
  if (inferred < sizes.size()) sizes[inferred] = size - known;
  if ((inferred < sizes.size() && known > size) || (inferred == sizes.size() && known != size))
    throw ShapeError("split",
                     "the sizes add up to " + std::to_string(known) + ", but axis " + std::to_string(axis) + " of " +
                         describe(x) + " has " + std::to_string(size),
                     location);
  // Every axis before `normalized` whole, and [start, start + piece) along it.
  SliceOptions options;
  options.start.assign(static_cast<std::size_t>(normalized) + 1, 0);
  for (int earlier = 0; earlier < normalized; ++earlier) options.stop.push_back(x.shape()[earlier]);
  options.stop.push_back(0);
  std::vector<Tensor> pieces;
  std::int64_t start = 0;
  for (std::int64_t piece : sizes) {
    options.start.back() = start;
    options.stop.back() = start + piece;
    pieces.push_back(slice(x, options, location));
    start += piece;
  }
  return pieces;
}

Tensor reduce_any(const Tensor& x, Axes axes, bool keepdims, Location location) {
  checked_rank(x, "reduce_any", location);
  return reduce_max(cast(x, DType::boolean, location), std::move(axes), keepdims, location);
}

// Not reduce_min of bools: its identity (for no elements) is the largest value of the stored byte, not true.
Tensor reduce_all(const Tensor& x, Axes axes, bool keepdims, Location location) {
  checked_rank(x, "reduce_all", location);
  return logical_not(reduce_any(logical_not(x, location), std::move(axes), keepdims, location), location);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings, Scalar value,
           Location location) {
  const int rank = checked_rank(x, "pad", location);
  if (static_cast<int>(paddings.size()) != rank)
    throw ShapeError("pad",
                     std::to_string(paddings.size()) + " pairs of paddings for " + describe(x) +
                         ": give one (before, after) pair per axis",
                     location);
  if (!x.shape().is_static()) throw ShapeError("pad", "cannot pad a value whose shape depends on data", location);
  Tensor result = x;
  for (int axis = 0; axis < rank; ++axis) {
    const auto [before, after] = paddings[static_cast<std::size_t>(axis)];
    if (before < 0 || after < 0)
      throw ValueError("pad",
                       "paddings must be >= 0, got (" + std::to_string(before) + ", " + std::to_string(after) +
                           ") on axis " + std::to_string(axis),
                       location);
    if (before == 0 && after == 0) continue;
    std::vector<Tensor> pieces;
    auto filler = [&](std::int64_t count) {
      std::vector<std::int64_t> dims(result.shape().dims().begin(), result.shape().dims().end());
      dims[static_cast<std::size_t>(axis)] = count;
      return detail::constant(value, x.dtype(), Shape(dims), x.device(), location);
    };
    if (before > 0) pieces.push_back(filler(before));
    pieces.push_back(result);
    if (after > 0) pieces.push_back(filler(after));
    result = concat(pieces, axis, location);
  }
  return result;
}

Tensor tile(const Tensor& x, const std::vector<std::int64_t>& multiples, Location location) {
  checked_rank(x, "tile", location);
  if (!x.shape().is_static()) throw ShapeError("tile", "cannot tile a value whose shape depends on data", location);
  for (std::int64_t multiple : multiples)
    if (multiple < 0) throw ValueError("tile", "multiples must be >= 0, got " + std::to_string(multiple), location);
  // Both lists right-aligned, as np.tile aligns them: the shorter one gains leading 1s.
  std::vector<std::int64_t> dims(x.shape().dims().begin(), x.shape().dims().end()), repeats = multiples;
  while (dims.size() < repeats.size()) dims.insert(dims.begin(), 1);
  while (repeats.size() < dims.size()) repeats.insert(repeats.begin(), 1);
  // [d0, d1, ...] -> [1, d0, 1, d1, ...] -> broadcast to [m0, d0, m1, d1, ...] -> [m0 d0, m1 d1, ...].
  std::vector<std::int64_t> interleaved, broadcast, tiled;
  for (std::size_t axis = 0; axis < dims.size(); ++axis) {
    interleaved.insert(interleaved.end(), {1, dims[axis]});
    broadcast.insert(broadcast.end(), {repeats[axis], dims[axis]});
    tiled.push_back(repeats[axis] * dims[axis]);
  }
  if (interleaved.size() > static_cast<std::size_t>(Shape::max_rank)) {
    // Too many axes to interleave within the maximum rank: one axis at a time, by concatenation.
    Tensor result = reshape(x, dims, location);
    for (std::size_t axis = 0; axis < dims.size(); ++axis) {
      if (repeats[axis] == 0) return detail::constant(0, x.dtype(), Shape(tiled), x.device(), location);
      if (repeats[axis] > 1)
        result = concat(std::vector<Tensor>(static_cast<std::size_t>(repeats[axis]), result),
                        static_cast<std::int64_t>(axis), location);
    }
    return result;
  }
  const Tensor spread = broadcast_to(reshape(x, interleaved, location), Shape(broadcast), location);
  return reshape(spread, tiled, location);
}

Tensor flip(const Tensor& x, Axes axes, Location location) {
  const int rank = checked_rank(x, "flip", location);
  const std::vector<std::int64_t> flipped = normalize_axes(axes, rank, "flip", location);
  if (flipped.empty()) return x;
  SliceOptions reversed;
  reversed.step.assign(static_cast<std::size_t>(rank), 1);
  for (std::int64_t axis : flipped) reversed.step[static_cast<std::size_t>(axis)] = -1;
  return slice(x, reversed, location);
}

Tensor roll(const Tensor& x, std::int64_t shift, std::int64_t axis, Location location) {
  const int rank = checked_rank(x, "roll", location);
  const std::int64_t rolled = normalize_axis(axis, rank, "roll", location);
  if (!x.shape().is_static()) throw ShapeError("roll", "cannot roll a value whose shape depends on data", location);
  const std::int64_t size = x.shape()[static_cast<int>(rolled)];
  const std::int64_t split = size == 0 ? 0 : ((shift % size) + size) % size;  // the elements that wrap around
  if (split == 0) return x;
  SliceOptions tail, head;
  tail.start.assign(static_cast<std::size_t>(rolled + 1), 0);
  tail.start.back() = size - split;
  head.stop.assign(static_cast<std::size_t>(rolled + 1), std::numeric_limits<std::int64_t>::max());
  head.stop.back() = size - split;
  return concat({slice(x, tail, location), slice(x, head, location)}, rolled, location);
}

namespace {

// x where column - row compares with `diagonal` as `keep` says, else 0, over the last two axes.
template <class Keep>
Tensor triangle(const Tensor& x, std::int64_t diagonal, const char* op, Keep keep, const Location& location) {
  const int rank = checked_rank(x, op, location);
  if (rank < 2) throw ShapeError(op, "needs at least two axes (a matrix), got " + describe(x), location);
  const std::int64_t rows = x.shape()[rank - 2], columns = x.shape()[rank - 1];
  const Tensor row =
      reshape(arange(0, static_cast<double>(rows), 1, DType::i64, x.device(), location), {rows, 1}, location);
  const Tensor column =
      reshape(arange(0, static_cast<double>(columns), 1, DType::i64, x.device(), location), {1, columns}, location);
  const Tensor offset = sub(column, row, location);  // j - i
  return where(keep(offset, diagonal), x, detail::constant(0, x.dtype(), Shape({}), x.device(), location), location);
}

}  // namespace

Tensor tril(const Tensor& x, std::int64_t diagonal, Location location) {
  return triangle(
      x, diagonal, "tril", [&](const Tensor& offset, std::int64_t k) { return le(offset, k, location); }, location);
}

Tensor triu(const Tensor& x, std::int64_t diagonal, Location location) {
  return triangle(
      x, diagonal, "triu", [&](const Tensor& offset, std::int64_t k) { return ge(offset, k, location); }, location);
}

Tensor segment_sum(const Tensor& data, const Tensor& segment_ids, std::int64_t num_segments, Location location) {
  const int rank = checked_rank(data, "segment_sum", location);
  checked_rank(segment_ids, "segment_sum", location);
  if (segment_ids.dtype() != DType::i32 && segment_ids.dtype() != DType::i64)
    throw DTypeError("segment_sum",
                     "segment_ids must be i32 or i64, got " + std::string(to_string(segment_ids.dtype())), location);
  if (data.dtype() == DType::boolean) throw DTypeError("segment_sum", "bools cannot be summed", location);
  if (rank == 0 || segment_ids.shape().rank() != 1 || segment_ids.shape()[0] != data.shape()[0])
    throw ShapeError("segment_sum",
                     "segment_ids " + segment_ids.shape().to_string() + " must name one segment per row of data " +
                         data.shape().to_string(),
                     location);
  if (num_segments < 0)
    throw ValueError("segment_sum", "num_segments " + std::to_string(num_segments) + " is negative", location);
  // Rows of dropped ids go to one extra segment past the end, sliced off.
  const Tensor outside = logical_or(lt(segment_ids, 0, location), ge(segment_ids, num_segments, location), location);
  const Tensor rows = where(outside, Scalar(num_segments), segment_ids, location);
  std::vector<std::int64_t> dims(data.shape().dims().begin(), data.shape().dims().end());
  dims[0] = num_segments + 1;
  const Tensor sums = scatter_add(detail::constant(Scalar(0), data.dtype(), Shape(dims), data.device(), location), rows,
                                  data, 0, location);
  return slice(sums, {.start = {0}, .stop = {num_segments}}, location);
}

}  // namespace kiln
