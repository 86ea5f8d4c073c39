// Identities of data-movement ops: no-op reshapes, broadcasts, transposes
// and slices disappear; chains collapse into one op; expand_dims and squeeze
// become reshape (one op for the fusion pass to understand); a matmul takes in
// its transpose flags a transpose of its operand's last two axes, and of its
// product's; a reduction of a transpose reduces the transpose's operand.

#include "compiler/simplify_rules.h"

#include <algorithm>
#include <array>

namespace kiln::compiler::simplify_rules {
namespace {

bool identity(Match& match) { return match.operand_has_result_type(0) && match.replace_with(match.operand_id(0)); }

// reshape(reshape(x)) -> reshape(x); a reshape to x's own shape -> x.
bool reshape_chain(Match& match) {
  if (identity(match)) return true;
  const ir::Node& operand = match.operand(0);
  if (operand.op != ir::Op::reshape) return false;
  match.node().operands[0] = operand.operands[0];
  return match.changed();
}

bool to_reshape(Match& match) {
  ir::Node& node = match.node();
  node.op = ir::Op::reshape;
  node.attributes = {};
  return match.changed();
}

bool is_identity_permutation(const std::vector<std::int64_t>& permutation) {
  for (std::size_t axis = 0; axis < permutation.size(); ++axis)
    if (permutation[axis] != static_cast<std::int64_t>(axis)) return false;
  return true;
}

bool transpose_chain(Match& match) {
  ir::Node& node = match.node();
  if (is_identity_permutation(node.attributes.axes)) return match.replace_with(match.operand_id(0));
  const ir::Node& operand = match.operand(0);
  if (operand.op != ir::Op::transpose) return false;
  // result[i] = operand[p[i]] = x[q[p[i]]]
  std::vector<std::int64_t> composed;
  for (std::int64_t axis : node.attributes.axes)
    composed.push_back(operand.attributes.axes[static_cast<std::size_t>(axis)]);
  if (is_identity_permutation(composed)) return match.replace_with(operand.operands[0]);
  node.attributes.axes = composed;
  node.operands[0] = operand.operands[0];
  return match.changed();
}

// A permutation that swaps the last two axes and keeps the others.
bool swaps_last_two_axes(const std::vector<std::int64_t>& permutation) {
  const std::size_t rank = permutation.size();
  if (rank < 2) return false;
  for (std::size_t axis = 0; axis + 2 < rank; ++axis)
    if (permutation[axis] != static_cast<std::int64_t>(axis)) return false;
  return permutation[rank - 2] == static_cast<std::int64_t>(rank - 1) &&
         permutation[rank - 1] == static_cast<std::int64_t>(rank - 2);
}

// matmul(transpose(x), y) -> matmul(x, y) with transpose_a flipped, and the same for y: every matmul kernel reads
// either order, so no transposed copy is made (and the attention fusion sees the matmul's own operands).
bool matmul_of_transpose(Match& match) {
  bool rewritten = false;
  for (std::size_t index : {0, 1}) {
    const ir::Node& operand = match.operand(index);
    if (operand.op != ir::Op::transpose || !swaps_last_two_axes(operand.attributes.axes)) continue;
    ir::Node& node = match.node();
    node.operands[index] = operand.operands[0];
    bool& transposed = index == 0 ? node.attributes.transpose_a : node.attributes.transpose_b;
    transposed = !transposed;
    rewritten = true;
  }
  return rewritten && match.changed();
}

// transpose(matmul(a, b)) over the last two axes -> matmul(b, a) with both
// transpose flags swapped and flipped ((AB)^T = B^T A^T), when the transpose
// is the product's only use: no transposed copy of the product is made, and
// the transpose's consumers can be the matmul's epilogue, which reads each
// element of the product where it is computed.
bool transpose_of_matmul(Match& match) {
  const ir::Node& product = match.operand(0);
  if (product.op != ir::Op::matmul || !swaps_last_two_axes(match.node().attributes.axes) ||
      match.use_count(match.operand_id(0)) != 1)
    return false;
  ir::Node& node = match.node();
  const bool transpose_a = product.attributes.transpose_a, transpose_b = product.attributes.transpose_b;
  node.operands = {product.operands[1], product.operands[0]};
  node.op = ir::Op::matmul;
  node.attributes = {};
  node.attributes.transpose_a = !transpose_b;
  node.attributes.transpose_b = !transpose_a;
  return match.changed();
}

// reduce(transpose(x, p), axes) -> reduce(x, p[axes]) when the kept axes keep their order (without keepdims):
// the same elements reduced, read from x in its own order instead of through the permutation. 2-D sums over
// either axis of a transposed matrix and reductions over the swapped last axes of a batch are such cases; a
// reduction kernel read a large transposed input a lane per cache line (reduce_sum(transpose(x), {1}) of 2048^2
// floats: the transpose's tiled copy, then the row sums). Sums are reassociated, as the JIT does anyway.
bool reduction_of_transpose(Match& match) {
  const ir::Node& transpose = match.operand(0);
  ir::Node& node = match.node();
  if (transpose.op != ir::Op::transpose || node.attributes.keepdims) return false;
  const std::vector<std::int64_t>& permutation = transpose.attributes.axes;
  std::vector<bool> reduced(permutation.size(), false);
  for (std::int64_t axis : node.attributes.axes) reduced[static_cast<std::size_t>(axis)] = true;
  std::vector<std::int64_t> axes;
  std::int64_t last_kept = -1;
  for (std::size_t axis = 0; axis < permutation.size(); ++axis) {
    if (reduced[axis]) {
      axes.push_back(permutation[axis]);
    } else {
      if (permutation[axis] < last_kept) return false;  // the result would come out transposed
      last_kept = permutation[axis];
    }
  }
  std::sort(axes.begin(), axes.end());
  node.operands[0] = transpose.operands[0];
  node.attributes.axes = axes;
  return match.changed();
}

bool full_slice(Match& match) {
  const ir::Node& node = match.node();
  for (std::int64_t step : node.attributes.step)
    if (step != 1) return false;
  return identity(match);
}

bool single_concat(Match& match) { return match.node().operands.size() == 1 && identity(match); }

const std::array shape = {
    Rule{"reshape(reshape(x)) -> reshape(x)", ir::Op::reshape, reshape_chain},
    Rule{"expand_dims -> reshape", ir::Op::expand_dims, to_reshape},
    Rule{"squeeze -> reshape", ir::Op::squeeze, to_reshape},
    Rule{"broadcast_to own shape -> x", ir::Op::broadcast_to, identity},
    Rule{"transpose(transpose(x)) -> transpose(x)", ir::Op::transpose, transpose_chain},
    Rule{"transpose(matmul(a, b)) -> matmul(b, a) with the transpose flags", ir::Op::transpose, transpose_of_matmul},
    Rule{"slice of everything -> x", ir::Op::slice, full_slice},
    Rule{"matmul(transpose(x)) -> matmul(x) with the transpose flag", ir::Op::matmul, matmul_of_transpose},
    Rule{"concat of one -> x", ir::Op::concat, single_concat},
    Rule{"reduce_sum(transpose(x)) -> reduce_sum(x)", ir::Op::reduce_sum, reduction_of_transpose},
    Rule{"reduce_mean(transpose(x)) -> reduce_mean(x)", ir::Op::reduce_mean, reduction_of_transpose},
    Rule{"reduce_max(transpose(x)) -> reduce_max(x)", ir::Op::reduce_max, reduction_of_transpose},
    Rule{"reduce_min(transpose(x)) -> reduce_min(x)", ir::Op::reduce_min, reduction_of_transpose},
    Rule{"reduce_prod(transpose(x)) -> reduce_prod(x)", ir::Op::reduce_prod, reduction_of_transpose},
};

}  // namespace

std::span<const Rule> shape_rules() { return shape; }

}  // namespace kiln::compiler::simplify_rules
