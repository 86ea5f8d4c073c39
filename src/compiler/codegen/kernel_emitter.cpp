#include "compiler/codegen/kernel_emitter.h"

#include "core/half_precision.h"
#include "ir/printer.h"

#include <kiln/error.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace kiln::compiler::codegen {

std::int64_t Layout::middle_count() const {
  std::int64_t count = 1;
  for (std::int64_t size : middle_sizes) count *= size;
  return count;
}

std::int64_t Layout::rows() const {
  std::int64_t rows = 1;
  for (std::int64_t size : outer_sizes) rows *= size;
  return rows;
}

std::string storage_type(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return "uint8_t";
    case DType::i32:
      return "int32_t";
    case DType::i64:
      return "int64_t";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    case DType::bf16:  // bits, computed in f32 (compiler/widen_half_precision.h)
    case DType::f16:
      return "uint16_t";
  }
  return "?";
}

namespace {

// A float constant as C++ source.
std::string float_literal(double value) {
  if (value != value) return "__builtin_nan(\"\")";
  if (value == __builtin_inf()) return "__builtin_inf()";
  if (value == -__builtin_inf()) return "-__builtin_inf()";
  std::string text = ir::format_double(value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string literal(const ir::Node& constant) {
  DType dtype = constant.type.dtype;
  if (is_half_precision(dtype)) {  // its bits, the lanes' type
    char text[16];
    std::snprintf(text, sizeof text, "0x%04X", half_precision_bits(dtype, constant.attributes.float_value));
    return text;
  }
  if (is_floating(dtype)) return float_literal(constant.attributes.float_value);
  std::int64_t value = constant.attributes.int_value;
  if (value == INT64_MIN) return "(-9223372036854775807LL - 1)";
  return std::to_string(value) + "LL";
}

KernelEmitter::KernelEmitter(const ir::Graph& graph, const FusedKernel& kernel, int index, int piece,
                             bool results_leave)
    : graph_(graph),
      kernel_(kernel),
      index_(index),
      piece_(piece),
      results_leave_(results_leave),
      member_(static_cast<std::size_t>(graph.size()), false) {
  for (ir::ValueId member : kernel.members) member_[static_cast<std::size_t>(member)] = true;
}

bool KernelEmitter::is_member(ir::ValueId value) const { return member_[static_cast<std::size_t>(value)]; }

Linear KernelEmitter::linear_address(const Shape& shape, const IndexMap& map) const {
  Linear linear;
  linear.coefficients.assign(static_cast<std::size_t>(kernel_.space.rank()), 0);
  std::int64_t stride = 1;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    const AxisMap& entry = map[static_cast<std::size_t>(axis)];
    linear.offset += stride * entry.offset;
    if (entry.source >= 0) linear.coefficients[static_cast<std::size_t>(entry.source)] += stride * entry.scale;
    stride *= shape[axis];
  }
  return linear;
}

int KernelEmitter::add_load(Instance created, ir::ValueId source, const Shape& shape, const IndexMap& map) {
  auto position = std::find(kernel_.inputs.begin(), kernel_.inputs.end(), source) - kernel_.inputs.begin();
  created.kind = Instance::Kind::load;
  created.buffer = static_cast<int>(position);
  created.address = linear_address(shape, map);
  instances_.push_back(std::move(created));
  return instance_count() - 1;
}

int KernelEmitter::instance(ir::ValueId value, const IndexMap& map) {
  const ir::Node& node = graph_.node(value);
  bool map_free = is_member(value) && (ir::is_reduction(node.op) || node.op == ir::Op::matmul);
  for (int id = 0; id < instance_count(); ++id) {
    const Instance& existing = at(id);
    if (existing.value == value && (map_free || existing.map == map)) return id;
  }
  Instance created;
  created.value = value;
  created.map = map;
  std::string suffix;
  int same_value = 0;
  for (const Instance& existing : instances_) same_value += existing.value == value ? 1 : 0;
  if (same_value > 0) suffix = "_" + std::to_string(same_value);

  created.name = "x" + std::to_string(value) + suffix;
  if (!is_member(value) ||
      (node.op == ir::Op::reshape && !is_member(node.operands[0]) && !is_unit_reshape(graph_, node))) {
    // A load from memory. A reshape of an input reads that input's buffer
    // with the reshape's own (dense) layout.
    return add_load(std::move(created), is_member(value) ? node.operands[0] : value, node.type.shape, map);
  }
  if (node.op == ir::Op::concat &&
      std::find(kernel_.piecewise.begin(), kernel_.piecewise.end(), value) != kernel_.piecewise.end())
    return piece_instance(value, map);
  if (node.op == ir::Op::concat) {
    // A padded input read in place (fusion.h: padding read in place): down the member concats to the value they pad,
    // each moving the map by its padding before the value and bounding the coordinate along its axis.
    ir::ValueId source = value;
    IndexMap source_map = map;
    while (is_member(source)) {
      const std::optional<Padding> padding = padding_of(graph_, source);
      if (!padding) throw CompileError("concat", "a concat fused into a loop must be a padding", node.location);
      if (created.padding < 0) created.padding = padding->constant;
      AxisMap& along = source_map[static_cast<std::size_t>(padding->axis)];
      along.offset -= padding->before;
      created.bounds.push_back({along, graph_.type(padding->inner).shape[padding->axis]});
      source = padding->inner;
    }
    return add_load(std::move(created), source, graph_.type(source).shape, source_map);
  }
  if (node.op == ir::Op::take_along_axis) {
    // The values are an input: read at the member's map on every axis but the gathered one, whose coordinate is
    // the index computed at that map.
    const int rank = node.type.shape.rank();
    const int axis = static_cast<int>(node.attributes.axis < 0 ? node.attributes.axis + rank : node.attributes.axis);
    const ir::ValueId values = node.operands[0];
    const Shape& values_shape = graph_.type(values).shape;
    const IndexMap index_map = compiler::operand_map(graph_, node, 1, map);
    IndexMap values_map = compiler::operand_map(graph_, node, 0, map);
    values_map[static_cast<std::size_t>(axis)] = AxisMap{};
    created.name = "g" + std::to_string(value) + suffix;
    created.operands = {instance(node.operands[1], index_map)};
    created.index_position = linear_address(graph_.type(node.operands[1]).shape, index_map);
    created.gather_extent = values_shape[axis];
    created.gather_stride = 1;
    for (int later = axis + 1; later < rank; ++later) created.gather_stride *= values_shape[later];
    const int at = add_load(std::move(created), values, values_shape, values_map);
    instances_[static_cast<std::size_t>(at)].kind = Instance::Kind::gather;
    return at;
  }
  switch (node.op) {
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice:
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze:
      if ((node.op == ir::Op::reshape || node.op == ir::Op::expand_dims || node.op == ir::Op::squeeze) &&
          !is_unit_reshape(graph_, node))
        throw CompileError(std::string(ir::name(node.op)), "a reshape of a computed value cannot be fused",
                           node.location);
      return instance(node.operands[0], compiler::operand_map(graph_, node, 0, map));
    default:
      break;
  }
  created.name = "v" + std::to_string(value) + suffix;
  if (ir::is_reduction(node.op)) {
    created.kind = Instance::Kind::reduction;
    int operand = instance(node.operands[0], broadcast_map(graph_.type(node.operands[0]).shape));
    created.operands = {operand};
  } else if (node.op == ir::Op::matmul) {
    created.kind = Instance::Kind::tile;
  } else {
    created.kind = Instance::Kind::compute;
    if (node.op == ir::Op::iota) {
      const AxisMap& entry = map[static_cast<std::size_t>(node.attributes.axis)];
      created.address.offset = entry.offset;
      created.address.coefficients.assign(static_cast<std::size_t>(kernel_.space.rank()), 0);
      if (entry.source >= 0) created.address.coefficients[static_cast<std::size_t>(entry.source)] = entry.scale;
    }
    const ir::Node* rounding = node.op == ir::Op::cast && is_member(node.operands[0])
                                   ? &graph_.node(node.operands[0])
                                   : nullptr;
    if (rounding && is_half_precision(rounding->type.dtype) && node.type.dtype == DType::f32 &&
        rounding->op == ir::Op::cast && graph_.type(rounding->operands[0]).dtype == DType::f32) {
      created.round_through = true;
      const IndexMap rounded_map = compiler::operand_map(graph_, node, 0, map);
      created.operands.push_back(
          instance(rounding->operands[0], compiler::operand_map(graph_, *rounding, 0, rounded_map)));
    } else {
      for (std::size_t operand = 0; operand < node.operands.size(); ++operand)
        created.operands.push_back(
            instance(node.operands[operand], compiler::operand_map(graph_, node, operand, map)));
    }
  }
  instances_.push_back(std::move(created));
  return instance_count() - 1;
}

int KernelEmitter::piece_instance(ir::ValueId value, const IndexMap& map) {
  const ir::Node& node = graph_.node(value);
  const auto axis = static_cast<std::size_t>(node.attributes.axis);
  const AxisMap& along = map[axis];
  // The coordinates along the concat axis that the box reads: offset + scale * [0, size) of its source axis.
  std::int64_t low = along.offset, high = along.offset;
  if (along.source >= 0 && kernel_.space[along.source] > 0) {
    const std::int64_t last = along.offset + along.scale * (kernel_.space[along.source] - 1);
    low = std::min(low, last);
    high = std::max(high, last);
  }
  std::int64_t start = 0;
  for (ir::ValueId operand : node.operands) {
    const std::int64_t size = graph_.type(operand).shape[static_cast<int>(axis)];
    // An empty box runs nothing: any operand stands for the concat there.
    if ((low >= start && high < start + size) || kernel_.space.numel() == 0) {
      IndexMap moved = map;
      moved[axis].offset -= start;
      return instance(operand, moved);
    }
    start += size;
  }
  throw CompileError("concat", "internal: a box of the kernel reads two operands of a concat read piecewise",
                     node.location);
}

Layout KernelEmitter::layout(int split, const std::vector<Linear>& extra) const {
  std::vector<Linear> linears = extra;
  for (const Instance& item : instances_) {
    if (item.kind == Instance::Kind::load || item.kind == Instance::Kind::gather ||
        (item.kind == Instance::Kind::compute && !item.address.coefficients.empty()))
      linears.push_back(item.address);
    if (item.kind == Instance::Kind::gather) linears.push_back(item.index_position);
  }
  const Shape& space = kernel_.space;
  // Merge adjacent axes a (outer) and b (inner) when every quantity has
  // coefficient[a] == coefficient[b] * size[b].
  auto groups_of = [&](int begin, int end) {
    std::vector<std::vector<int>> groups;
    for (int axis = begin; axis < end; ++axis) {
      if (space[axis] == 1) continue;
      if (!groups.empty()) {
        std::vector<int>& last = groups.back();
        int outer = last.back();
        bool mergeable = true;
        for (const Linear& linear : linears)
          mergeable = mergeable && linear.coefficients[static_cast<std::size_t>(outer)] ==
                                       linear.coefficients[static_cast<std::size_t>(axis)] * space[axis];
        if (mergeable) {
          last.push_back(axis);
          continue;
        }
      }
      groups.push_back({axis});
    }
    return groups;
  };
  std::vector<std::vector<int>> outer, inner;
  if (split < 0) {
    outer = groups_of(0, space.rank());
    if (!outer.empty()) {
      inner.push_back(outer.back());
      outer.pop_back();
    }
  } else {
    outer = groups_of(0, split);
    inner = groups_of(split, space.rank());
  }
  Layout result;
  while (inner.size() > 1) {
    std::int64_t size = 1;
    for (int axis : inner.front()) size *= space[axis];
    result.middle_sizes.push_back(size);
    result.middle_axes.push_back(inner.front().back());
    inner.erase(inner.begin());
  }
  for (const auto& group : outer) {
    std::int64_t size = 1;
    for (int axis : group) size *= space[axis];
    result.outer_sizes.push_back(size);
    result.outer_axes.push_back(group.back());
  }
  if (!inner.empty()) {
    result.inner_size = 1;
    for (int axis : inner.front()) result.inner_size *= space[axis];
    result.inner_axis = inner.front().back();
  } else if (split >= 0 && split < space.rank()) {
    result.inner_size = 1;  // every reduced axis has size 1
  }
  return result;
}

Layout KernelEmitter::product_rows() const {
  const Shape& space = kernel_.space;
  Layout result;
  result.outer_sizes.assign(space.dims().begin(), space.dims().end() - 1);
  for (int axis = 0; axis + 1 < space.rank(); ++axis) result.outer_axes.push_back(axis);
  result.inner_size = space[space.rank() - 1];
  result.inner_axis = space.rank() - 1;
  return result;
}

std::string KernelEmitter::row_offset(const Linear& linear, const Layout& layout) const {
  std::string text = std::to_string(linear.offset);
  for (std::size_t t = 0; t < layout.outer_axes.size(); ++t) {
    std::int64_t coefficient = linear.coefficients[static_cast<std::size_t>(layout.outer_axes[t])];
    if (coefficient != 0) text += " + " + std::to_string(coefficient) + " * c" + std::to_string(t);
  }
  return text;
}

std::string KernelEmitter::middle_offset(const Linear& linear, const Layout& layout) const {
  std::string text;
  if (linear.coefficients.empty()) return text;
  for (std::size_t t = 0; t < layout.middle_axes.size(); ++t) {
    std::int64_t coefficient = linear.coefficients[static_cast<std::size_t>(layout.middle_axes[t])];
    if (coefficient != 0) text += " + " + std::to_string(coefficient) + " * d" + std::to_string(t);
  }
  return text;
}

bool KernelEmitter::varies_in_middle(const Linear& linear, const Layout& layout) const {
  return !middle_offset(linear, layout).empty();
}

std::int64_t KernelEmitter::inner_coefficient(const Linear& linear, const Layout& layout) const {
  if (layout.inner_axis < 0 || linear.coefficients.empty()) return 0;
  return linear.coefficients[static_cast<std::size_t>(layout.inner_axis)];
}

std::string KernelEmitter::storage_type(ir::ValueId value) const {
  return codegen::storage_type(graph_.type(value).dtype);
}

std::string KernelEmitter::output_name(ir::ValueId value) const { return "output" + std::to_string(value); }

std::string KernelEmitter::heading() const {
  std::string text = "\n// ==== kernel " + std::to_string(index_) + ": " + std::string(to_string(kernel_.kind)) +
                     " over " + kernel_.space.to_string() + " ====\n";
  for (ir::ValueId member : kernel_.members) text += describe(member) + "\n";
  return text;
}

std::string KernelEmitter::describe(ir::ValueId value) const {
  const ir::Node& node = graph_.node(value);
  std::string text =
      "// %" + std::to_string(value) + " = " + node.type.to_string() + " " + std::string(ir::name(node.op));
  text += "(";
  if (node.op == ir::Op::constant)
    text += is_half_precision(node.type.dtype) ? float_literal(node.attributes.float_value) : literal(node);
  for (std::size_t i = 0; i < node.operands.size(); ++i) text += (i ? ", %" : "%") + std::to_string(node.operands[i]);
  return text + ")";
}

namespace {

std::string cast_expression(DType from, DType to, const std::string& operand) {
  // bf16 and f16 take part in casts between their bits and f32 (or from f64): compiler/widen_half_precision.h
  // leaves no other.
  if (is_half_precision(from) && to == DType::f32)
    return std::string(from == DType::bf16 ? "widen_bf16(" : "widen_f16(") + operand + ")";
  if (is_half_precision(to) && (from == DType::f32 || from == DType::f64))
    return std::string(to == DType::bf16 ? "round_to_bf16(" : "round_to_f16(") + operand + ")";
  if (is_half_precision(from) || is_half_precision(to))
    throw CompileError("cast", "internal: a cast from " + std::string(to_string(from)) + " to " +
                                   std::string(to_string(to)) + " was left for the code generator",
                       std::string());
  return "cast<" + storage_type(to) + ">(" + operand + ")";
}

}  // namespace

std::string KernelEmitter::expression(int id) const {
  const Instance& item = at(id);
  const ir::Node& node = graph_.node(item.value);
  auto operand = [&](std::size_t index) { return at(item.operands[index]).name; };
  if (node.op == ir::Op::constant) return "splat<" + storage_type(item.value) + ">(" + literal(node) + ")";
  if (node.op == ir::Op::cast) {
    const DType from = graph_.type(node.operands[0]).dtype;
    // An f32 value rounded to 16 bits and widened again (an op's rounded result read by the next op): the round
    // trip in f32 lanes, not through 16-bit ones (narrowing and widening cost a shuffle each way).
    if (item.round_through)
      return std::string(from == DType::bf16 ? "round_through_bf16(" : "round_through_f16(") + operand(0) + ")";
    return cast_expression(from, node.type.dtype, operand(0));
  }
  std::string text = std::string(ir::name(node.op)) + "(";
  for (std::size_t i = 0; i < item.operands.size(); ++i) text += (i ? ", " : "") + operand(i);
  return text + ")";
}

}  // namespace kiln::compiler::codegen
