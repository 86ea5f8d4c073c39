#pragma once
// Cotangents that are products, moved through the data movement that transposes put around them. The adjoint of a
// convolution's window sum -- its input's gradient -- is a product (the output's cotangent times the filters) cut
// into the windows' columns, each placed back where its window lay, summed, and cropped by the padding's adjoint.
// Written as it comes, that is an im2col of the cotangent (the product, as large as the forward's windows) and a
// col2im (nine placements summed). Pushed into the product instead, each window's part is the cotangent's window
// times its rows of the filters, and the sum of those products is one product of the windows side by side, which
// the GEMM gathers as it packs (fusion.h's gathered operands): the transposed convolution, no im2col written out.
// The moves apply only to a product nothing reads yet (a cotangent just made), so none is computed twice.

#include "autodiff/emitter.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::autodiff {

// `value`'s elements from `start` (unit steps) over `shape`: through an unread product (rows from its left
// operand, columns from its right), an unread concat (each operand's overlap) and another slice (one slice).
ValueId slice_through(Emitter& emit, ValueId value, std::vector<std::int64_t> start, Shape shape);

// `value` with `before` and `after` zeros around it along `axis`; an unread product padded along one of its rows'
// axes is the product of its padded left operand.
ValueId pad_through(Emitter& emit, ValueId value, int axis, std::int64_t before, std::int64_t after);

// a + b as one product, where both are unread products whose left operands are windows of values (slices and
// zero paddings, which the GEMM gathers): their left operands side by side times their right ones stacked.
std::optional<ValueId> add_products(Emitter& emit, ValueId a, ValueId b);

}  // namespace kiln::autodiff
