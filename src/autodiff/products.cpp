#include "autodiff/products.h"

#include <algorithm>

namespace kiln::autodiff {
namespace {

// Whether no node or output reads `value` yet, but `reader` (an unread node being rewritten, which reads it).
bool unread(const ir::Graph& graph, ValueId value, ValueId reader = -1) {
  for (ValueId id = value + 1; id < graph.size(); ++id) {
    const std::vector<ValueId>& operands = graph.node(id).operands;
    if (id != reader && std::find(operands.begin(), operands.end(), value) != operands.end()) return false;
  }
  return std::find(graph.outputs.begin(), graph.outputs.end(), value) == graph.outputs.end();
}

// An unread A B (or A B^T) whose A has the product's rank and B none but its two: its rows are A's.
struct Product {
  ValueId left = -1, right = -1;
  bool transpose_right = false;
};

std::optional<Product> product_of(const ir::Graph& graph, ValueId value, ValueId reader = -1) {
  const ir::Node& node = graph.node(value);
  if (node.op != ir::Op::matmul || node.attributes.transpose_a || !unread(graph, value, reader)) return std::nullopt;
  const ValueId left = node.operands[0], right = node.operands[1];
  if (graph.type(left).shape.rank() != node.type.shape.rank() || graph.type(right).shape.rank() != 2)
    return std::nullopt;
  return Product{left, right, node.attributes.transpose_b};
}

// A concat of one value between zero constants.
bool is_zero_padding(const ir::Node& node, const ir::Graph& graph) {
  if (node.op != ir::Op::concat) return false;
  const auto values = std::count_if(node.operands.begin(), node.operands.end(),
                                    [&](ValueId operand) { return !ir::is_positive_zero(graph.node(operand)); });
  return values == 1;
}

// A window of a value: slices whose last axis steps by 1 and zero paddings along the axes before the last, down
// to a value that is neither (which the GEMM reads in memory).
bool is_window(const ir::Graph& graph, ValueId value) {
  const ir::Node& node = graph.node(value);
  if (node.op == ir::Op::slice) return node.attributes.step.empty() || node.attributes.step.back() == 1;
  return is_zero_padding(node, graph) && node.attributes.axis < node.type.shape.rank() - 1;
}

// The operands of `value` if it is a concat along `axis` that only `reader` reads, else `value` alone.
std::vector<ValueId> parts_along(const ir::Graph& graph, ValueId value, std::int64_t axis, ValueId reader) {
  const ir::Node& node = graph.node(value);
  if (node.op == ir::Op::concat && node.attributes.axis == axis && unread(graph, value, reader)) return node.operands;
  return {value};
}

ValueId slice_through(Emitter& emit, ValueId value, std::vector<std::int64_t> start, Shape shape, ValueId reader);

// For each axis of `merged`, the axes of `split` it merges: [first, first + count), count 1 or 2 (a strided axis
// laid out as [rows, phases]); none where `split` is no such layout of `merged`.
std::optional<std::vector<std::pair<int, int>>> merged_axes(const Shape& split, const Shape& merged) {
  std::vector<std::pair<int, int>> groups;
  int at = 0;
  for (int axis = 0; axis < merged.rank(); ++axis) {
    if (at < split.rank() && split[at] == merged[axis]) {
      groups.emplace_back(at++, 1);
    } else if (at + 1 < split.rank() && split[at] * split[at + 1] == merged[axis]) {
      groups.emplace_back(at, 2);
      at += 2;
    } else {
      return std::nullopt;
    }
  }
  if (at != split.rank()) return std::nullopt;
  return groups;
}

// A crop of one axis of a reshape that merged [rows, phases] into it (transpose_slice's layout, after the sum of
// a pool's windows): the same phase layout with the phases rotated, the crop's first element at phase 0. Phase r'
// of the cropped layout is phase (first + r') mod s of the merged one, from row (first + r') / s on: a slice of
// the phase layout each, side by side, merged again, which the JIT reads as index maps. Cropping the merge instead
// copied it (a max pool's gradient over [8, 112, 112, 64]: 206 MB moved after the sum). Only where the crop keeps
// whole rows of phases.
std::optional<ValueId> slice_of_phases(Emitter& emit, ValueId value, std::vector<std::int64_t> start,
                                       const Shape& shape) {
  const ir::Graph& graph = emit.graph();
  const ValueId operand = graph.node(value).operands[0];
  const Shape merged = emit.shape(value), split = emit.shape(operand);
  const std::optional<std::vector<std::pair<int, int>>> groups = merged_axes(split, merged);
  if (!groups) return std::nullopt;
  // The first cropped axis of phases whose crop keeps whole rows: rotated here, the other crops after.
  for (int axis = 0; axis < merged.rank(); ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    const auto [rows_axis, count] = (*groups)[a];
    const std::int64_t first = start[a], length = shape[axis];
    if ((first == 0 && length == merged[axis]) || count != 2) continue;
    const std::int64_t phases = split[rows_axis + 1];
    if (length % phases != 0 || (first + phases - 1) / phases + length / phases > split[rows_axis]) continue;
    // A part per phase even where the crop starts at phase 0 (one slice of the rows would do): each part's kernel
    // then reads the windows' paddings at one phase, where the sum's kernel over all phases masked every read on
    // four axes (a max pool's gradient 15.2-15.6 ms as parts, copied into place, against 20.5-21.1 as one kernel
    // writing the sum in place; an average pool's 3.9-4.2 against 10.1-10.2).
    std::vector<ValueId> parts;
    for (std::int64_t phase = 0; phase < phases; ++phase) {
      std::vector<std::int64_t> part_start(static_cast<std::size_t>(split.rank()), 0);
      Shape part_shape = split;
      part_start[static_cast<std::size_t>(rows_axis)] = (first + phase) / phases;
      part_start[static_cast<std::size_t>(rows_axis) + 1] = (first + phase) % phases;
      part_shape[rows_axis] = length / phases;
      part_shape[rows_axis + 1] = 1;
      parts.push_back(slice_through(emit, operand, std::move(part_start), part_shape, value));
    }
    Shape rotated_shape = merged;
    rotated_shape[axis] = length;
    const ValueId rotated = emit.reshape(emit.concat(std::move(parts), rows_axis + 1), rotated_shape);
    start[a] = 0;
    return slice_through(emit, rotated, std::move(start), shape, -1);
  }
  return std::nullopt;
}

ValueId slice_through(Emitter& emit, ValueId value, std::vector<std::int64_t> start, Shape shape, ValueId reader) {
  const ir::Graph& graph = emit.graph();
  const Shape whole = emit.shape(value);
  if (shape == whole) return value;
  const int rank = whole.rank();
  if (graph.node(value).op == ir::Op::reshape && unread(graph, value, reader))
    if (const std::optional<ValueId> rotated = slice_of_phases(emit, value, start, shape)) return *rotated;
  if (std::optional<Product> product = product_of(graph, value, reader)) {
    // Rows: A's elements at the same coordinates, all of its depth. Columns: B's, all of its depth.
    std::vector<std::int64_t> left_start = start;
    left_start.back() = 0;
    Shape left_shape = shape;
    left_shape[rank - 1] = emit.shape(product->left)[rank - 1];
    const std::int64_t column = start.back(), columns = shape[rank - 1];
    const Shape right = emit.shape(product->right);
    const ValueId left = slice_through(emit, product->left, std::move(left_start), left_shape, value);
    const ValueId right_part =
        product->transpose_right ? slice_through(emit, product->right, {column, 0}, Shape({columns, right[1]}), value)
                                 : slice_through(emit, product->right, {0, column}, Shape({right[0], columns}), value);
    return emit.matmul(left, right_part, false, product->transpose_right);
  }
  const ir::Node& node = graph.node(value);
  // Not into a zero padding: a slice of one is the window the GEMM gathers (and as cheap to read as any other).
  if (node.op == ir::Op::concat && !is_zero_padding(node, graph) && unread(graph, value, reader)) {
    const auto axis = static_cast<int>(node.attributes.axis);
    const std::vector<ValueId> operands = node.operands;
    std::vector<ValueId> parts;
    std::int64_t offset = 0;
    for (ValueId operand : operands) {
      const Shape operand_shape = emit.shape(operand);
      const std::int64_t length = operand_shape[axis];
      const std::int64_t begin = std::max(offset, start[static_cast<std::size_t>(axis)]),
                         end = std::min(offset + length, start[static_cast<std::size_t>(axis)] + shape[axis]);
      if (begin < end) {
        std::vector<std::int64_t> part_start = start;
        part_start[static_cast<std::size_t>(axis)] = begin - offset;
        Shape part_shape = shape;
        part_shape[axis] = end - begin;
        const bool zeros = ir::is_positive_zero(graph.node(operand));
        const DType dtype = emit.dtype(operand);
        parts.push_back(zeros ? emit.constant(0, dtype, part_shape)
                              : slice_through(emit, operand, std::move(part_start), part_shape, value));
      }
      offset += length;
    }
    return emit.concat(std::move(parts), axis);
  }
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(rank), 1);
  if (node.op == ir::Op::slice && node.attributes.step == ones) {
    // One slice: the inner one's start moved by the outer's (and through what is under it, if only it reads that).
    std::vector<std::int64_t> composed = node.attributes.start;
    for (std::size_t axis = 0; axis < composed.size(); ++axis) composed[axis] += start[axis];
    const ValueId operand = node.operands[0];
    if (unread(graph, value, reader)) return slice_through(emit, operand, std::move(composed), std::move(shape), value);
    return emit.slice(operand, std::move(composed), ones, std::move(shape));
  }
  return emit.slice(value, std::move(start), ones, std::move(shape));
}

// An unread product by a factor the same all along `axis` (a depthwise convolution's tap weight, per channel), as
// (the other factor, that factor). Not a constant's: an average pool's windows are scaled cotangents whose sums
// accumulate merges before their paddings (add_alike), which a product in between would keep apart.
std::optional<std::pair<ValueId, ValueId>> scaled_along(const ir::Graph& graph, ValueId value, int axis,
                                                        ValueId reader) {
  const ir::Node& node = graph.node(value);
  if (node.op != ir::Op::mul || !unread(graph, value, reader)) return std::nullopt;
  const int rank = node.type.shape.rank();
  for (std::size_t keep = 0; keep < 2; ++keep) {
    const ValueId factor = node.operands[keep], other = node.operands[1 - keep];
    const Shape& shape = graph.type(factor).shape;
    const int aligned = axis - (rank - shape.rank());
    if (graph.node(factor).op != ir::Op::constant && (aligned < 0 || shape[aligned] == 1) &&
        graph.type(other).shape == node.type.shape)
      return std::pair{other, factor};
  }
  return std::nullopt;
}

ValueId pad_through(Emitter& emit, ValueId value, int axis, std::int64_t before, std::int64_t after, ValueId reader) {
  if (before == 0 && after == 0) return value;
  const ir::Graph& graph = emit.graph();
  const std::optional<Product> product = product_of(graph, value, reader);
  if (product && axis < emit.shape(value).rank() - 1)
    return emit.matmul(pad_through(emit, product->left, axis, before, after, value), product->right, false,
                       product->transpose_right);
  // A scaled value: the other factor padded, times the factor. The padding's zeros times the factor are zeros where
  // the factor is finite (as in the transposed convolution XLA and PyTorch compute); the product is not written
  // before its padding, and the padded factor is read where it lies (a depthwise convolution's input gradient:
  // nine products of the cotangent by a tap's weights, each written in full before, 103 MB at [8,56,56,128]).
  if (const auto scaled = scaled_along(graph, value, axis, reader))
    return emit.multiply(pad_through(emit, scaled->first, axis, before, after, value), scaled->second);
  const ir::Node& node = graph.node(value);
  if (node.op == ir::Op::reshape && unread(graph, value, reader)) {
    // Under a reshape that keeps the axes up to `axis` (a depthwise convolution's [.., channels, 1] dropped), when
    // that moves it onto a scaled value.
    const ValueId operand = node.operands[0];
    const Shape& inner = emit.shape(operand);
    bool same_prefix = inner.rank() > axis;
    for (int t = 0; same_prefix && t <= axis; ++t) same_prefix = inner[t] == node.type.shape[t];
    if (same_prefix && scaled_along(graph, operand, axis, value)) {
      Shape padded = node.type.shape;
      padded[axis] += before + after;
      return emit.reshape(pad_through(emit, operand, axis, before, after, value), std::move(padded));
    }
  }
  auto zeros = [&](std::int64_t length) {
    Shape shape = emit.shape(value);
    shape[axis] = length;
    return emit.constant(0, emit.dtype(value), shape);
  };
  return emit.concat({zeros(before), value, zeros(after)}, axis);
}

}  // namespace

ValueId slice_through(Emitter& emit, ValueId value, std::vector<std::int64_t> start, Shape shape) {
  return slice_through(emit, value, std::move(start), std::move(shape), -1);
}

ValueId pad_through(Emitter& emit, ValueId value, int axis, std::int64_t before, std::int64_t after) {
  return pad_through(emit, value, axis, before, after, -1);
}

std::optional<ValueId> add_products(Emitter& emit, ValueId a, ValueId b) {
  const ir::Graph& graph = emit.graph();
  const std::optional<Product> first = product_of(graph, a), second = product_of(graph, b);
  if (!first || !second || first->transpose_right != second->transpose_right) return std::nullopt;
  const Shape left_a = emit.shape(first->left), left_b = emit.shape(second->left);
  const int last = left_a.rank() - 1;
  if (left_a.rank() != left_b.rank() || emit.dtype(first->left) != emit.dtype(second->left)) return std::nullopt;
  for (int axis = 0; axis < last; ++axis)
    if (left_a[axis] != left_b[axis]) return std::nullopt;
  // The depth runs along A's last axis and B's rows (B^T's columns).
  const int depth_axis = first->transpose_right ? 1 : 0;
  std::vector<ValueId> lefts = parts_along(graph, first->left, last, a),
                       rights = parts_along(graph, first->right, depth_axis, a);
  const std::vector<ValueId> more_lefts = parts_along(graph, second->left, last, b),
                             more_rights = parts_along(graph, second->right, depth_axis, b);
  lefts.insert(lefts.end(), more_lefts.begin(), more_lefts.end());
  rights.insert(rights.end(), more_rights.begin(), more_rights.end());
  if (!std::all_of(lefts.begin(), lefts.end(), [&](ValueId left) { return is_window(graph, left); }))
    return std::nullopt;
  const bool transpose_right = first->transpose_right;
  const ValueId left = emit.concat(std::move(lefts), last), right = emit.concat(std::move(rights), depth_axis);
  return emit.matmul(left, right, false, transpose_right);
}

}  // namespace kiln::autodiff
