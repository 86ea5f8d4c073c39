// Derivatives of matmul and of the data-movement ops: all linear, so each JVP applies the op to the tangent and
// the work is in the transposes. A slice's adjoint puts the cotangent back between zeros with concats (strided
// ones interleaved through a reshape), so it stays an index map the JIT fuses; gather's and take_along_axis's
// adjoints add with scatter_add, where indices may repeat.

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

// `cotangent` (count elements along `axis`) put at positions start, start + step, ... of an axis of `size`, zeros
// elsewhere.
ValueId place_along_axis(Emitter& emit, ValueId cotangent, int axis, std::int64_t start, std::int64_t step,
                         std::int64_t size) {
  Shape shape = emit.shape(cotangent);
  const std::int64_t count = shape[axis];
  const DType dtype = emit.dtype(cotangent);
  auto zeros = [&](std::int64_t length) {
    Shape zeros_shape = emit.shape(cotangent);
    zeros_shape[axis] = length;
    return emit.constant(0, dtype, zeros_shape);
  };
  if (count == 0) return zeros(size);
  ValueId placed = cotangent;
  if (step < 0) {  // the same positions walked upwards
    std::vector<std::int64_t> begin(static_cast<std::size_t>(shape.rank()), 0), stride(begin.size(), 1);
    begin[static_cast<std::size_t>(axis)] = count - 1;
    stride[static_cast<std::size_t>(axis)] = -1;
    placed = emit.slice(cotangent, begin, stride, shape);
    start += (count - 1) * step;
    step = -step;
  }
  if (step > 1 && count > 1) {
    // [.., count, ..] -> [.., count, step, ..] with zeros after each element -> [.., count * step, ..], less the
    // zeros after the last.
    std::vector<std::int64_t> spread(shape.dims().begin(), shape.dims().end());
    spread.insert(spread.begin() + axis + 1, 1);
    const ValueId column = emit.reshape(placed, Shape(spread));
    spread[static_cast<std::size_t>(axis) + 1] = step - 1;
    const ValueId padded = emit.concat({column, emit.constant(0, dtype, Shape(spread))}, axis + 1);
    Shape flat = shape;
    flat[axis] = count * step;
    placed = emit.slice_axis(emit.reshape(padded, flat), axis, 0, (count - 1) * step + 1);
  }
  const std::int64_t length = emit.shape(placed)[axis];
  return emit.concat({zeros(start), placed, zeros(size - start - length)}, axis);
}

void transpose_slice(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const Shape& operand = context.operand_type(0).shape;
  ValueId cotangent = context.cotangent();
  for (int axis = 0; axis < operand.rank(); ++axis) {
    const auto index = static_cast<std::size_t>(axis);
    cotangent = place_along_axis(emit, cotangent, axis, context.attributes().start[index],
                                 context.attributes().step[index], operand[axis]);
  }
  context.contribute(0, cotangent);
}

void transpose_concat(TransposeContext& context) {
  const auto axis = static_cast<int>(context.attributes().axis);
  std::int64_t offset = 0;
  for (std::size_t index = 0; index < context.node().operands.size(); ++index) {
    const std::int64_t length = context.operand_type(index).shape[axis];
    if (context.is_tangent(index))
      context.contribute(index, context.emitter().slice_axis(context.cotangent(), axis, offset, length));
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
