// Derivatives of matmul and of the data-movement ops: all linear, so each JVP applies the op to the tangent and
// the work is in the transposes. A slice's adjoint puts the cotangent back between zeros with concats (strided
// axes in a layout of phases, merged by a reshape), so it stays an index map the JIT fuses; gather's and
// take_along_axis's adjoints add with scatter_add, where indices may repeat.

#include "autodiff/products.h"
#include "autodiff/rules.h"

#include <kiln/error.h>

#include <string>

namespace kiln::autodiff {
namespace {

using ir::Op;

Tangent jvp_linear(JvpContext& context) { return context.same_op(context.tangent(0)); }

Tangent jvp_matmul(JvpContext& context) {
  Tangent from_left, from_right;
  if (!context.tangent(0).is_zero())
    from_left =
        context.linear(Op::matmul, {LinearOperand::of(context.tangent(0)), LinearOperand::of(context.operand(1))},
                       context.attributes());
  if (!context.tangent(1).is_zero())
    from_right =
        context.linear(Op::matmul, {LinearOperand::of(context.operand(0)), LinearOperand::of(context.tangent(1))},
                       context.attributes());
  return context.add(from_left, from_right);
}

Tangent jvp_concat(JvpContext& context) {
  std::vector<LinearOperand> operands;
  for (std::size_t index = 0; index < context.node().operands.size(); ++index)
    operands.push_back(context.tangent_or_zeros(index));
  return context.linear(Op::concat, std::move(operands), context.attributes());
}

Tangent jvp_scatter_add(JvpContext& context) {
  return context.linear(
      Op::scatter_add,
      {context.tangent_or_zeros(0), LinearOperand::of(context.operand(1)), context.tangent_or_zeros(2)},
      context.attributes());
}

// ---- transposes ------------------------------------------------------------------------------------------------

// C = op(A) op(B), op transposing where the flag says: the adjoint of A is C' op(B)^T, laid out as A is (so
// transposed again where A was), and of B op(A)^T C'. Batch axes that A or B broadcast are summed by contribute.
//
// A weight's adjoint, B a matrix (no batch axes) under an A with batch axes (a dense layer over [batch, tokens,
// width], the filters of a convolution's im2col product): the sum over the batch of op(A_i)^T C'_i is one product
// whose depth runs through the batch too, A and C' seen as [batch rows, ...] (views: the rows of an untransposed A
// follow each other across the batch). A batched product and a sum of its batch wrote batch x K x N partial
// products: a 3x3 convolution's filter gradient over 8 x 56 x 56 positions wrote 448 of them (66 MB), and the
// convolution's two gradients took 67-74 ms against 62-64 as one product (Zen 3, two threads).
void transpose_matmul(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const bool transpose_a = context.attributes().transpose_a, transpose_b = context.attributes().transpose_b;
  const ValueId cotangent = context.cotangent();
  const Shape& a_shape = context.operand_type(0).shape;
  const Shape& c_shape = emit.shape(cotangent);
  bool b_done = false;
  if (context.is_tangent(1) && !transpose_a && context.operand_type(1).shape.rank() == 2 && c_shape.rank() > 2 &&
      a_shape.rank() == c_shape.rank() && c_shape[c_shape.rank() - 1] > 0) {
    const std::int64_t columns = c_shape[c_shape.rank() - 1], rows = c_shape.numel() / columns;
    const std::int64_t depth = a_shape[a_shape.rank() - 1];
    if (a_shape.numel() == rows * depth) {  // A's batch axes are C's, none broadcast
      const ValueId a_rows = emit.reshape(context.value(0), Shape({rows, depth}));
      const ValueId c_rows = emit.reshape(cotangent, Shape({rows, columns}));
      context.contribute(
          1, transpose_b ? emit.matmul(c_rows, a_rows, true, false) : emit.matmul(a_rows, c_rows, true, false));
      b_done = true;
    }
  }
  if (context.is_tangent(0)) {
    const ValueId b = context.value(1);
    context.contribute(
        0, transpose_a ? emit.matmul(b, cotangent, transpose_b, true) : emit.matmul(cotangent, b, false, !transpose_b));
  }
  if (context.is_tangent(1) && !b_done) {
    const ValueId a = context.value(0);
    context.contribute(
        1, transpose_b ? emit.matmul(cotangent, a, true, transpose_a) : emit.matmul(a, cotangent, !transpose_a, false));
  }
}

// reshape, expand_dims and squeeze keep the order of the elements.
void transpose_reshape(TransposeContext& context) {
  context.contribute(0, context.emitter().reshape(context.cotangent(), context.operand_type(0).shape));
}

void transpose_transpose(TransposeContext& context) {
  context.contribute(0,
                     context.emitter().transpose(context.cotangent(), inverse_permutation(context.attributes().axes)));
}

// contribute sums the broadcast axes.
void transpose_broadcast_to(TransposeContext& context) { context.contribute(0, context.cotangent()); }

// A slice's adjoint: the cotangent put back at the positions the slice read, zeros elsewhere. An axis of step s > 1
// is laid out as [Q, s] (position q s + r, Q = ceil(size / s)): the cotangent's elements then lie at one r and at
// consecutive q, so the placement is the cotangent with a unit axis after each strided one, padded with zeros along
// q and along r, and merged back ([Q, s] -> [Q s], cropped to the size). Every step is an index map the JIT reads in
// place (paddings, a unit reshape); only the merge is a layout change, a view of the placement in memory. And the
// adjoints of several slices of one value (a pool's or a strided convolution's windows) have the same layout, so
// accumulate() sums them before the merge: one kernel over the phases reading each cotangent through its padding.
// Placing one axis at a time instead (zeros concatenated after each element, merged, then padded) wrote each
// window's placement through six kernels: a 3x3 max pool of stride 2 over [8, 112, 112, 64] took 58 ms to
// differentiate (49 kernels) against 7.5 in PyTorch eager.
void transpose_slice(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const Shape operand = context.operand_type(0).shape;
  const ir::Attributes& attributes = context.attributes();
  std::vector<std::int64_t> start = attributes.start, step = attributes.step;
  ValueId cotangent = context.cotangent();
  const Shape counts = emit.shape(cotangent);
  if (counts.numel() == 0) {
    context.contribute(0, emit.zeros(ir::Type{emit.dtype(cotangent), operand}));
    return;
  }
  const auto rank = static_cast<std::size_t>(operand.rank());
  // Negative steps: the same positions walked upwards, the cotangent reversed along those axes.
  std::vector<std::int64_t> reverse_start(rank, 0), reverse_step(rank, 1);
  bool reverses = false;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    if (step[axis] >= 0) continue;
    const std::int64_t count = counts[static_cast<int>(axis)];
    reverse_start[axis] = count - 1;
    reverse_step[axis] = -1;
    start[axis] += (count - 1) * step[axis];
    step[axis] = -step[axis];
    reverses = true;
  }
  if (reverses) cotangent = emit.slice(cotangent, reverse_start, reverse_step, counts);
  auto strided = [&](std::size_t axis) { return step[axis] > 1 && counts[static_cast<int>(axis)] > 1; };
  std::vector<std::int64_t> split, phased;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    split.push_back(counts[static_cast<int>(axis)]);
    if (strided(axis)) split.push_back(1);
  }
  ValueId placed = emit.reshape(cotangent, Shape(split));
  int position = 0;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    const std::int64_t size = operand[static_cast<int>(axis)], count = counts[static_cast<int>(axis)];
    if (!strided(axis)) {
      placed = pad_through(emit, placed, position++, start[axis], size - start[axis] - count);
      phased.push_back(size);
      continue;
    }
    const std::int64_t phases = step[axis], rows = (size + phases - 1) / phases;
    const std::int64_t first_row = start[axis] / phases, phase = start[axis] % phases;
    placed = pad_through(emit, placed, position, first_row, rows - first_row - count);
    placed = pad_through(emit, placed, position + 1, phase, phases - phase - 1);
    phased.push_back(rows * phases);
    position += 2;
  }
  placed = emit.reshape(placed, Shape(phased));
  if (Shape(phased) != operand)
    placed = emit.slice(placed, std::vector<std::int64_t>(rank, 0), std::vector<std::int64_t>(rank, 1), operand);
  context.contribute(0, placed);
}

void transpose_concat(TransposeContext& context) {
  const auto axis = static_cast<int>(context.attributes().axis);
  std::int64_t offset = 0;
  for (std::size_t index = 0; index < context.node().operands.size(); ++index) {
    const std::int64_t length = context.operand_type(index).shape[axis];
    if (context.is_tangent(index)) {
      std::vector<std::int64_t> start(static_cast<std::size_t>(context.operand_type(index).shape.rank()), 0);
      start[static_cast<std::size_t>(axis)] = offset;
      context.contribute(index, slice_through(context.emitter(), context.cotangent(), std::move(start),
                                              context.operand_type(index).shape));
    }
    offset += length;
  }
}

void transpose_gather(TransposeContext& context) {
  Emitter& emit = context.emitter();
  context.contribute(0, emit.scatter_add(emit.zeros(context.operand_type(0)), context.value(1), context.cotangent(),
                                         context.attributes().axis));
}

// take_along_axis picks element [o, indices[o, j, i], i] of values [outer, size, inner] for each [o, j, i]; its
// adjoint adds the cotangents there: a scatter_add into the flattened values at (o size + index) inner + i.
void transpose_take_along_axis(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const Shape& values = context.operand_type(0).shape;
  const ValueId indices = context.value(1);
  const Shape& picked = emit.shape(indices);
  const auto axis = static_cast<int>(context.attributes().axis);
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= values[d];
  for (int d = axis + 1; d < values.rank(); ++d) inner *= values[d];
  const std::int64_t size = values[axis];
  const Shape lines({outer, picked[axis], inner});
  const ValueId index = emit.reshape(emit.cast(indices, DType::i64), lines);
  const ValueId wrapped = emit.select(emit.binary(Op::lt, index, emit.constant(0, DType::i64)),
                                      emit.add(index, emit.constant(static_cast<double>(size), DType::i64)), index);
  const ValueId row = emit.multiply(emit.iota(lines, 0), emit.constant(static_cast<double>(size), DType::i64));
  const ValueId flat =
      emit.add(emit.multiply(emit.add(row, wrapped), emit.constant(static_cast<double>(inner), DType::i64)),
               emit.iota(lines, 2));
  const DType dtype = context.operand_type(0).dtype;
  const ValueId sums = emit.scatter_add(emit.constant(0, dtype, Shape({values.numel()})), flat,
                                        emit.reshape(context.cotangent(), lines), 0);
  context.contribute(0, emit.reshape(sums, values));
}

void transpose_scatter_add(TransposeContext& context) {
  context.contribute(0, context.cotangent());
  if (context.is_tangent(2))
    context.contribute(2, context.emitter().gather(context.cotangent(), context.value(1), context.attributes().axis));
}

constexpr Derivative rule = Derivative::rule;
constexpr Derivative none = Derivative::none;

const OpRule rules[] = {
    {Op::matmul, rule, jvp_matmul, transpose_matmul},
    {Op::reshape, rule, jvp_linear, transpose_reshape},
    {Op::transpose, rule, jvp_linear, transpose_transpose},
    {Op::broadcast_to, rule, jvp_linear, transpose_broadcast_to},
    {Op::slice, rule, jvp_linear, transpose_slice},
    {Op::concat, rule, jvp_concat, transpose_concat},
    {Op::gather, rule, jvp_linear, transpose_gather},
    {Op::take_along_axis, rule, jvp_linear, transpose_take_along_axis},
    {Op::scatter_add, rule, jvp_scatter_add, transpose_scatter_add},
    {Op::expand_dims, rule, jvp_linear, transpose_reshape},
    {Op::squeeze, rule, jvp_linear, transpose_reshape},
    {Op::host_call, Derivative::refused},
    {Op::nonzero, none},
    // Control flow: the derivatives of its regions (control_rules.h).
    {Op::cond, Derivative::regions},
    {Op::while_loop, Derivative::regions},
    {Op::scan_loop, Derivative::regions},
    {Op::result, Derivative::regions},
};

}  // namespace

std::span<const OpRule> shape_rules() { return rules; }

}  // namespace kiln::autodiff
