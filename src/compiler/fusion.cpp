#include "compiler/fusion.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace kiln::compiler {

std::string_view to_string(KernelKind kind) {
  switch (kind) {
    case KernelKind::loop:
      return "loop";
    case KernelKind::reduction:
      return "reduction";
    case KernelKind::gemm:
      return "gemm";
    case KernelKind::attention:
      return "attention";
    case KernelKind::column:
      return "column";
    case KernelKind::library:
      return "library";
    case KernelKind::view:
      return "view";
    case KernelKind::assembled:
      return "assembled";
  }
  return "?";
}

namespace {

// Ops that keep the elements and their order and change only the shape.
bool is_reshape(ir::Op op) { return op == ir::Op::reshape || op == ir::Op::expand_dims || op == ir::Op::squeeze; }

}  // namespace

std::vector<ir::ValueId> inputs_of(const ir::Graph& graph, const std::vector<ir::ValueId>& members) {
  std::vector<ir::ValueId> inputs;
  for (ir::ValueId member : members)
    for (ir::ValueId operand : graph.node(member).operands)
      if (std::find(members.begin(), members.end(), operand) == members.end() &&
          std::find(inputs.begin(), inputs.end(), operand) == inputs.end())
        inputs.push_back(operand);
  return inputs;
}

bool read_by_other_kernels(const FusionPlan& plan, ir::ValueId value, std::initializer_list<std::size_t> except) {
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const std::vector<ir::ValueId>& inputs = plan.kernels[k].inputs;
    if (std::find(except.begin(), except.end(), k) == except.end() &&
        std::find(inputs.begin(), inputs.end(), value) != inputs.end())
      return true;
  }
  return false;
}

bool is_returned(const ir::Graph& graph, ir::ValueId value) {
  return std::find(graph.outputs.begin(), graph.outputs.end(), value) != graph.outputs.end();
}

std::optional<std::size_t> producer_of(const FusionPlan& plan, ir::ValueId value) {
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const std::vector<ir::ValueId>& outputs = plan.kernels[k].outputs;
    if (std::find(outputs.begin(), outputs.end(), value) != outputs.end()) return k;
  }
  return std::nullopt;
}

bool same_constant_value(const ir::Node& a, const ir::Node& b) {
  const double x = a.attributes.float_value, y = b.attributes.float_value;
  const bool same_float = std::isnan(x) ? std::isnan(y) : x == y && std::signbit(x) == std::signbit(y);
  return a.type.dtype == b.type.dtype && same_float && a.attributes.int_value == b.attributes.int_value;
}

bool in_memory(const ir::Graph& graph, const FusionPlan& plan, ir::ValueId value) {
  return graph.node(value).op == ir::Op::parameter || producer_of(plan, value).has_value();
}

std::optional<Padding> padding_of(const ir::Graph& graph, ir::ValueId value) {
  const ir::Node& node = graph.node(value);
  if (node.op != ir::Op::concat) return std::nullopt;
  Padding padding;
  padding.axis = static_cast<int>(node.attributes.axis);
  for (ir::ValueId operand : node.operands) {
    const ir::Node& each = graph.node(operand);
    if (each.op != ir::Op::constant) {
      if (padding.inner >= 0) return std::nullopt;
      padding.inner = operand;
      continue;
    }
    if (padding.constant < 0) padding.constant = operand;
    if (!same_constant_value(graph.node(padding.constant), each)) return std::nullopt;
    if (padding.inner < 0) padding.before += each.type.shape[padding.axis];
  }
  if (padding.inner < 0 || padding.constant < 0) return std::nullopt;
  return padding;
}

void remove_unread_kernels(const ir::Graph& graph, FusionPlan& plan) {
  std::vector<std::string> names;  // "%16 concat"
  for (std::size_t k = plan.kernels.size(); k-- > 0;) {
    const std::vector<ir::ValueId>& outputs = plan.kernels[k].outputs;
    const bool unread = std::none_of(outputs.begin(), outputs.end(), [&](ir::ValueId value) {
      return is_returned(graph, value) || read_by_other_kernels(plan, value, {k});
    });
    if (!unread) continue;
    for (ir::ValueId member : plan.kernels[k].members) names.push_back(describe(graph, member));
    plan.kernels.erase(plan.kernels.begin() + static_cast<std::ptrdiff_t>(k));
  }
  std::erase_if(plan.not_fused, [&](const std::string& note) {
    return std::any_of(names.begin(), names.end(), [&](const std::string& name) {
      return note.starts_with("library: " + name + " ") || note.starts_with("not fused: " + name + " ") ||
             (note.starts_with("not fused: ") && note.find(" into kernel of " + name + ":") != std::string::npos);
    });
  });
}

std::string describe(const ir::Graph& graph, ir::ValueId value) {
  return "%" + std::to_string(value) + " " + std::string(ir::name(graph.node(value).op));
}

bool is_unit_reshape(const ir::Graph& graph, const ir::Node& node) {
  if (!is_reshape(node.op)) return false;
  auto without_ones = [](const Shape& shape) {
    std::vector<std::int64_t> dims;
    for (std::int64_t dim : shape.dims())
      if (dim != 1) dims.push_back(dim);
    return dims;
  };
  return without_ones(node.type.shape) == without_ones(graph.type(node.operands[0]).shape);
}

int trailing_reduced_axes(const ir::Graph& graph, const ir::Node& node) {
  int rank = graph.type(node.operands[0]).shape.rank();
  const auto& axes = node.attributes.axes;
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int>(axes.size()) + static_cast<int>(i)) return -1;
  return static_cast<int>(axes.size());
}

bool is_generated_gemm(const ir::Graph& graph, const ir::Node& matmul) {
  if (matmul.op != ir::Op::matmul || matmul.type.dtype != DType::f32) return false;
  const int left = graph.type(matmul.operands[0]).shape.rank(), right = graph.type(matmul.operands[1]).shape.rank();
  return right == 2 && (left == 2 || (left > 2 && !matmul.attributes.transpose_a));
}

bool is_transcendental(ir::Op op) {
  switch (op) {
    case ir::Op::sin:
    case ir::Op::cos:
    case ir::Op::exp:
    case ir::Op::log:
    case ir::Op::tanh:
    case ir::Op::erf:
    case ir::Op::erfc:
    case ir::Op::log1p:
    case ir::Op::expm1:
    case ir::Op::atan:
    case ir::Op::sigmoid:
    case ir::Op::pow:
      return true;
    default:
      return false;
  }
}

bool is_cheap(const ir::Graph& graph, ir::ValueId value) {
  const ir::Node& node = graph.node(value);
  switch (node.op) {
    case ir::Op::constant:
    case ir::Op::iota:
      return true;
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice: {
      const ir::Node& operand = graph.node(node.operands[0]);
      return operand.op == ir::Op::parameter || is_cheap(graph, node.operands[0]);
    }
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze: {
      // Any reshape of memory is a view; through a computed index map only
      // size-1 axes can be added or removed.
      const ir::Node& operand = graph.node(node.operands[0]);
      return operand.op == ir::Op::parameter || (is_unit_reshape(graph, node) && is_cheap(graph, node.operands[0]));
    }
    default:
      return false;
  }
}

namespace {

// Below this stride between the elements of a transpose's output rows, a loop kernel's gathers were as fast as
// the standard kernel's tiles or faster: swapping the last two axes of [64, 2048, k] floats, the loop kernel
// was ahead up to k = 96 (384 bytes; its lines are reused by the next rows before they leave the L2) and behind
// from k = 128 (Zen 4, 2026-12-01).
constexpr std::int64_t strided_transpose_stride_bytes = 512;

bool is_loop_fusible(ir::Op op) {
  switch (op) {
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice:
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze:
    case ir::Op::iota:
    case ir::Op::constant:
      return true;
    default:
      return ir::is_elementwise(op);
  }
}

// Rough cost of one element, for the "do not recompute" rule.
int cost_per_element(ir::Op op) {
  if (is_transcendental(op)) return 20;
  switch (op) {
    case ir::Op::floor_divide:  // integer division, or NumPy's float divmod through fmod
    case ir::Op::remainder:
    case ir::Op::fmod:
      return 20;
    case ir::Op::div:
    case ir::Op::sqrt:
    case ir::Op::rsqrt:
      return 4;
    default:
      return ir::is_elementwise(op) ? 1 : 0;
  }
}

// `shape`, right-aligned against `space`, is 1 (or absent) on every axis from
// `first_axis` on and equal before it: one value per row of `space`.
bool is_row_shape(const Shape& shape, const Shape& space, int first_axis) {
  if (shape.rank() > space.rank()) return false;
  int offset = space.rank() - shape.rank();
  for (int axis = 0; axis < space.rank(); ++axis) {
    std::int64_t dim = axis >= offset ? shape[axis - offset] : 1;
    if (axis >= first_axis ? dim != 1 : dim != space[axis]) return false;
  }
  return true;
}

struct Group {
  KernelKind kind = KernelKind::loop;
  std::vector<ir::ValueId> members;
  Shape space;
  int reduced_axes = 0;
  std::vector<std::string> decisions;
  bool merged_away = false;

  // The first axis of `space` on which a per-row value has size 1: the first reduced axis of a reduction
  // kernel, the last axis otherwise.
  int first_row_axis() const { return kind == KernelKind::reduction ? space.rank() - reduced_axes : space.rank() - 1; }
};

class Fuser {
 public:
  Fuser(const ir::Graph& graph, const FusionOptions& options)
      : graph_(graph),
        options_(options),
        users_(static_cast<std::size_t>(graph.size())),
        is_output_(static_cast<std::size_t>(graph.size()), false),
        group_of_(static_cast<std::size_t>(graph.size()), -1),
        inlined_(static_cast<std::size_t>(graph.size()), false) {
    for (ir::ValueId id = 0; id < graph.size(); ++id)
      for (ir::ValueId operand : graph.node(id).operands) users_[static_cast<std::size_t>(operand)].push_back(id);
    for (ir::ValueId output : graph.outputs) is_output_[static_cast<std::size_t>(output)] = true;
  }

  FusionPlan run() {
    for (ir::ValueId id = graph_.size() - 1; id >= 0; --id) place(id);
    merge_siblings();
    return build_plan();
  }

 private:
  std::size_t index(ir::ValueId value) const { return static_cast<std::size_t>(value); }

  void place(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    if (node.op == ir::Op::parameter) return;
    if (is_strided_transpose(node)) {
      if (!fuse_transpose_by_strips(id)) start_group(id);
      return;
    }
    if (is_cheap(graph_, id) && !is_output_[index(id)] && !read_from_memory(id)) {
      inlined_[index(id)] = true;
      return;
    }
    std::set<int> consumer_groups = consumer_groups_of(id);
    if (consumer_groups.size() > 1) merge_consumer_loops(id, consumer_groups);
    if (consumer_groups.size() == 1 && try_fuse(id, *consumer_groups.begin())) return;
    if (consumer_groups.size() > 1 && recomputable(id, consumer_groups)) {
      inlined_[index(id)] = true;
      for (int group : consumer_groups)
        groups_[static_cast<std::size_t>(group)].decisions.push_back(
            "recomputed " + describe(graph_, id) + " in each of the " + std::to_string(consumer_groups.size()) +
            " kernels that read it: " + std::to_string(cost_per_element(node.op)) +
            " flop/element from one array, cheaper than writing it to memory and reading it back");
      return;
    }
    if (consumer_groups.size() > 1)
      plan_.not_fused.push_back("not fused: " + describe(graph_, id) + " has consumers in " +
                                std::to_string(consumer_groups.size()) +
                                " kernels; it is computed once and written to memory rather than recomputed (" +
                                std::to_string(cost_per_element(node.op)) + " flops/element)");
    start_group(id);
  }

  // Whether `id`, read by several kernels that could not become one, is better recomputed in each of them (as
  // XLA duplicates cheap elementwise producers into their consumers' fusions): an elementwise op of one flop per
  // element, reading at most one array of its own size (the rest broadcast), is cheaper to compute again from that
  // array than to write and read back. A batch norm's x - mean(x) feeds the variance and the normalized output;
  // recomputed, the kernels read x instead of a written copy of it. Every consumer must be a loop or reduction
  // kernel over the value's own number of elements (an epilogue reads memory tile by tile; a larger space would
  // compute each element many times).
  bool recomputable(ir::ValueId id, const std::set<int>& consumer_groups) const {
    const ir::Node& node = graph_.node(id);
    if (!ir::is_elementwise(node.op) || cost_per_element(node.op) > 1 || is_output_[index(id)] || read_from_memory(id))
      return false;
    const std::int64_t elements = node.type.shape.numel();
    int arrays = 0;
    for (ir::ValueId operand : node.operands) {
      const ir::Node& source = graph_.node(operand);
      const bool broadcast =
          source.op == ir::Op::broadcast_to && graph_.type(source.operands[0]).shape.numel() < elements;
      if (graph_.type(operand).shape.numel() == elements && !broadcast && source.op != ir::Op::constant &&
          source.op != ir::Op::iota)
        arrays += 1;
    }
    if (arrays > 1) return false;
    for (int group_index : consumer_groups) {
      const Group& group = groups_[static_cast<std::size_t>(group_index)];
      std::string reason;
      if ((group.kind != KernelKind::loop && group.kind != KernelKind::reduction) || group.space.numel() != elements ||
          used_through_layout_change(id, group_index) || !fits_space(id, group, &reason))
        return false;
    }
    return true;
  }

  // A transpose run by its standard kernel (FusionOptions::strided_transpose_bytes): its last output axis, of
  // more than one element, is an input axis with a stride of at least strided_transpose_stride_bytes.
  bool is_strided_transpose(const ir::Node& node) const {
    if (node.op != ir::Op::transpose || options_.strided_transpose_bytes == 0) return false;
    const ir::Type& input = graph_.type(node.operands[0]);
    const int rank = input.shape.rank();
    if (rank < 2 || node.type.shape[rank - 1] <= 1 ||
        input.shape.numel() * static_cast<std::int64_t>(size_of(input.dtype)) < options_.strided_transpose_bytes)
      return false;
    std::int64_t stride = static_cast<std::int64_t>(size_of(input.dtype));
    for (int axis = rank - 1; axis > node.attributes.axes.back(); --axis) stride *= input.shape[axis];
    return stride >= strided_transpose_stride_bytes;
  }

  // A strided transpose read, element by element in place, by one loop kernel over the transpose's own shape,
  // whose rows come from the input's innermost axis: the kernel reads the input a tile at a time into strips of
  // rows (codegen/cpu/transposed_strips.cpp), as fast as the standard kernel's tiled copy, and the copy is not
  // written and read back.
  bool fuse_transpose_by_strips(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    const int rank = node.type.shape.rank();
    const std::size_t element_bytes = size_of(node.type.dtype);
    // Tiles of 16 x 16 (the widest vectors' lanes) must fit the last two axes, or the kernel would gather.
    if (node.type.dtype == DType::boolean || (element_bytes != 4 && element_bytes != 8) ||
        node.attributes.axes[static_cast<std::size_t>(rank - 2)] != rank - 1 || node.type.shape[rank - 2] < 16 ||
        node.type.shape[rank - 1] < 16)
      return false;
    const std::set<int> consumers = consumer_groups_of(id);
    if (consumers.size() != 1) return false;
    const int group_index = *consumers.begin();
    if (group_index < 0) return false;
    const Group& group = groups_[static_cast<std::size_t>(group_index)];
    if (group.kind != KernelKind::loop || !(group.space == node.type.shape)) return false;
    for (ir::ValueId user : users_[index(id)])
      if (group_of_[index(user)] != group_index) return false;
    if (!read_in_place(id, group_index) || !try_fuse(id, group_index)) return false;
    groups_[static_cast<std::size_t>(group_index)].decisions.push_back("reads the input of " + describe(graph_, id) +
                                                                       " by strips: tiles transposed in registers");
    return true;
  }

  // The kernels that read `id`, looking through recomputed cheap nodes.
  std::set<int> consumer_groups_of(ir::ValueId id) const {
    std::set<int> groups;
    for (ir::ValueId user : users_[index(id)]) {
      if (inlined_[index(user)]) {
        std::set<int> further = consumer_groups_of(user);
        groups.insert(further.begin(), further.end());
      } else {
        groups.insert(group_of_[index(user)]);
      }
    }
    return groups;
  }

  // Matmuls, library kernels and reshapes that change the layout read their
  // operands from memory, so a cheap node feeding one is computed into a
  // buffer rather than recomputed.
  bool read_from_memory(ir::ValueId id) const {
    for (ir::ValueId user : users_[index(id)]) {
      int group = group_of_[index(user)];
      const ir::Node& node = graph_.node(user);
      bool layout_change =
          is_reshape(node.op) && !is_unit_reshape(graph_, node) && graph_.node(id).op != ir::Op::parameter;
      if (node.op == ir::Op::matmul || layout_change ||
          (group >= 0 && groups_[static_cast<std::size_t>(group)].kind == KernelKind::library))
        return true;
    }
    return false;
  }

  void start_group(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    Group group;
    group.members.push_back(id);
    group.space = node.type.shape;
    if (is_loop_fusible(node.op) && !is_strided_transpose(node)) {
      group.kind = KernelKind::loop;
    } else if (ir::is_reduction(node.op) && !ir::is_arg_reduction(node.op) &&
               trailing_reduced_axes(graph_, node) >= 0) {
      group.kind = KernelKind::reduction;
      group.space = graph_.type(node.operands[0]).shape;
      group.reduced_axes = trailing_reduced_axes(graph_, node);
    } else if (is_generated_gemm(graph_, node)) {
      group.kind = KernelKind::gemm;
    } else {
      group.kind = KernelKind::library;
      plan_.not_fused.push_back("library: " + describe(graph_, id) + " runs its standard kernel (" +
                                library_reason(node) + ")");
    }
    group_of_[index(id)] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(group));
  }

  std::string library_reason(const ir::Node& node) const {
    if (node.op == ir::Op::matmul) {
      if (node.type.dtype != DType::f32) return "the generated GEMM handles f32 only";
      const int left = graph_.type(node.operands[0]).shape.rank(), right = graph_.type(node.operands[1]).shape.rank();
      if (right != 2) return right > 2 ? "batched matmul: the right operand has batch axes" : "a matrix-vector product";
      return left < 2 ? "a vector-matrix product" : "batched matmul with a transposed left operand";
    }
    if (ir::is_reduction(node.op))
      return ir::is_arg_reduction(node.op) ? std::string(ir::name(node.op)) + " is not generated"
                                           : "the reduced axes are not the trailing ones";
    if (ir::is_scan(node.op)) return "a scan's standard kernel combines each line in order";
    if (is_strided_transpose(node))
      return "it moves the innermost axis: the standard kernel copies it in tiles transposed in registers, which "
             "its consumers read in order, where they would gather a lane per cache line";
    return "no generated form for this op";
  }

  // Whether a loop-fusible producer fits `group`'s iteration space.
  bool fits_space(ir::ValueId id, const Group& group, std::string* reason) const {
    const ir::Node& node = graph_.node(id);
    const Shape& shape = node.type.shape;
    if (is_output_[index(id)] && shape.numel() == group.space.numel() && !(shape == group.space)) {
      *reason = "it is an output laid out differently from the kernel's iteration space";
      return false;
    }
    if (shape.numel() == group.space.numel()) return true;
    if (group.kind != KernelKind::gemm && is_row_shape(shape, group.space, group.first_row_axis())) {
      if (is_output_[index(id)] && group.kind != KernelKind::reduction) {
        *reason = "it is an output smaller than the kernel's iteration space";
        return false;
      }
      return true;
    }
    if (is_output_[index(id)]) {
      *reason = "it is an output of a different shape than the kernel's iteration space";
      return false;
    }
    if (cost_per_element(node.op) <= 1) return true;
    *reason = "it would be recomputed " +
              std::to_string(group.space.numel() / std::max<std::int64_t>(shape.numel(), 1)) + " times (" +
              std::to_string(cost_per_element(node.op)) + " flops/element)";
    return false;
  }

  bool used_through_layout_change(ir::ValueId id, int group) const {
    for (ir::ValueId user : users_[index(id)]) {
      const ir::Node& node = graph_.node(user);
      if (group_of_[index(user)] == group && is_reshape(node.op) && !is_unit_reshape(graph_, node)) return true;
    }
    return false;
  }

  // Whether the members of group `group_index` read `value` -- a reduction's
  // result, or a reshape of one -- as one value per row of `space`: broadcast
  // (NumPy-aligned at the right) from a row shape, with the kept axes leading
  // and size 1 on the reduced ones. A result without keepdims, broadcast back
  // against its input, aligns differently: sum over the last axis of [3,3,3]
  // is [3,3], read as [1,3,3] (element [i,j,k] sees sum[j,k], not sum[i,j]).
  bool read_as_rows(ir::ValueId value, int group_index, const Shape& space, int first_row_axis) const {
    for (ir::ValueId user : users_[index(value)]) {
      if (group_of_[index(user)] != group_index) continue;
      const ir::Node& node = graph_.node(user);
      if (is_reshape(node.op)) {
        if (!is_row_shape(node.type.shape, space, first_row_axis) ||
            !read_as_rows(user, group_index, space, first_row_axis))
          return false;
      } else if (!ir::is_elementwise(node.op) && node.op != ir::Op::broadcast_to) {
        return false;
      } else if (!is_row_shape(graph_.type(value).shape, space, first_row_axis)) {
        return false;
      }
    }
    return true;
  }

  // Whether the members of group `group_index` read `value`, and what they
  // compute from it, only at each element's own position: through
  // elementwise ops, reductions and shape ops that move no element. A GEMM
  // epilogue reads the product's element at the position it computes, so
  // transpose(matmul(a, b)) -- of the same shape when the product is square
  // -- must read the product from memory instead.
  bool read_in_place(ir::ValueId value, int group_index) const {
    const Shape& shape = graph_.type(value).shape;
    for (ir::ValueId user : users_[index(value)]) {
      if (group_of_[index(user)] != group_index) continue;
      const ir::Node& node = graph_.node(user);
      if (ir::is_reduction(node.op)) continue;  // every element once, in any order
      bool moves_nothing = ir::is_elementwise(node.op) || is_unit_reshape(graph_, node) ||
                           (node.op == ir::Op::broadcast_to && node.type.shape == shape);
      if (node.op == ir::Op::transpose)
        moves_nothing = std::is_sorted(node.attributes.axes.begin(), node.attributes.axes.end());
      if (node.op == ir::Op::slice && node.type.shape == shape) {
        // Of the same shape, a slice moves elements only by reversing an axis.
        moves_nothing = true;
        for (int axis = 0; axis < shape.rank(); ++axis)
          if (shape[axis] > 1 && node.attributes.step[static_cast<std::size_t>(axis)] != 1) moves_nothing = false;
      }
      if (!moves_nothing || !read_in_place(user, group_index)) return false;
    }
    return true;
  }

  bool try_fuse(ir::ValueId id, int group_index) {
    Group& group = groups_[static_cast<std::size_t>(group_index)];
    const ir::Node& node = graph_.node(id);
    std::string into = " into kernel of " + describe(graph_, group.members.front());
    std::string reason;
    auto refuse = [&](const std::string& why) {
      plan_.not_fused.push_back("not fused: " + describe(graph_, id) + into + ": " + why);
      return false;
    };
    auto accept = [&](const std::string& why) {
      group.members.push_back(id);
      group.decisions.push_back("fused " + describe(graph_, id) + ": " + why);
      group_of_[index(id)] = group_index;
      return true;
    };
    if (group.kind == KernelKind::library) return refuse("library kernels take no fused producers");
    // A kernel of one reshape becomes a view of its operand's buffer (make_kernel), so the operand's kernel keeps
    // its own shape: log(sum) + max squeezed at the end of a keepdims row reduction (reduce_logsumexp) stays in
    // the row kernel, and relu(x w) reshaped stays the product's epilogue. Fused into the reshape's space they
    // would need a kernel of their own, with the same bytes to write.
    if (group.kind == KernelKind::loop && group.members.size() == 1 && is_reshape(graph_.node(group.members[0]).op))
      return refuse("the reshape is a view of its operand's buffer, which the operand's kernel writes in its shape");
    for (ir::ValueId user : users_[index(id)])
      if (group_of_[index(user)] == group_index && graph_.node(user).op == ir::Op::matmul)
        return refuse("the matmul reads its operands from memory");
    if (used_through_layout_change(id, group_index))
      return refuse("a reshape in that kernel changes the layout of its values");

    if (is_loop_fusible(node.op)) {
      if (!fits_space(id, group, &reason)) return refuse(reason);
      const Shape& shape = node.type.shape;
      std::string why = shape.numel() == group.space.numel() ? "elementwise producer of the same size"
                        : group.kind != KernelKind::gemm && is_row_shape(shape, group.space, group.first_row_axis())
                            ? "one value per row, computed once per row"
                            : "broadcast into the kernel's space, recomputed where read (" +
                                  std::to_string(cost_per_element(node.op)) + " flops/element)";
      if (is_output_[index(id)]) why += "; also written out (multi-output fusion)";
      return accept(why);
    }

    if (ir::is_reduction(node.op) && !ir::is_arg_reduction(node.op)) {
      int reduced = trailing_reduced_axes(graph_, node);
      const Shape& input = graph_.type(node.operands[0]).shape;
      if (reduced < 0) return refuse("it reduces leading axes");
      if (group.kind == KernelKind::gemm) {
        if (!(input == group.space) || reduced != input.rank())
          return refuse("a GEMM epilogue fuses only full reductions of the matmul's shape");
        return accept("reduction of the epilogue, accumulated tile by tile");
      }
      int first_row_axis = input.rank() - reduced;
      bool same_space = input == group.space;
      bool row_consumers = is_row_shape(group.space, input, first_row_axis) && group.kind == KernelKind::loop;
      if (group.kind == KernelKind::reduction && !(same_space && group.reduced_axes == reduced))
        return refuse("it reduces a different set of axes than the kernel");
      if (!same_space && !row_consumers) return refuse("its input's shape differs from the kernel's iteration space");
      // Row by row, a row's value exists only while that row is computed: consumers must read it at their own
      // row (kiln-fuzz seed 97, graph 991: a reversing slice of a keepdims reduction read the other rows).
      if (!same_space && !read_in_place(id, group_index))
        return refuse(
            "its consumers read it at other rows' positions (a reversing slice), and the kernel has each "
            "row's value only while computing that row");
      if (same_space && !read_as_rows(id, group_index, input, first_row_axis))
        return refuse("its consumers read it broadcast across rows, not one value per row (keepdims=false)");
      if (group.kind == KernelKind::loop) {
        group.kind = KernelKind::reduction;
        group.space = input;
        group.reduced_axes = reduced;
        return accept("its consumers are computed row by row in the same kernel");
      }
      return accept("another reduction over the same rows (one more pass over each row)");
    }

    if (node.op == ir::Op::matmul) {
      if (!is_generated_gemm(graph_, node))
        return refuse("the generated GEMM handles f32 matmuls with a 2-D right operand");
      if (!(node.type.shape == group.space)) return refuse("the consumers iterate over a different shape");
      // The epilogue sees one product's tile: a second product (x w + h u) is computed by a kernel of its own
      // and read from memory.
      if (group.kind == KernelKind::gemm) return refuse("the kernel computes another matmul's product");
      if (group.kind == KernelKind::reduction && group.reduced_axes != group.space.rank())
        return refuse("a GEMM epilogue fuses only full reductions");
      for (ir::ValueId member : group.members) {
        const ir::Node& member_node = graph_.node(member);
        if (!ir::is_reduction(member_node.op) && member_node.type.shape.numel() != group.space.numel())
          return refuse(describe(graph_, member) + " does not have the matmul's shape");
      }
      for (ir::ValueId member : group.members)
        if (ir::is_reduction(graph_.node(member).op))
          for (ir::ValueId user : users_[index(member)])
            if (group_of_[index(user)] == group_index)
              return refuse(describe(graph_, user) + " reads " + describe(graph_, member) +
                            ", a reduction of the whole product, complete only after the epilogue's last tile");
      if (!read_in_place(id, group_index))
        return refuse(
            "the consumers read the product at other elements' positions (a transpose of a square "
            "product), and an epilogue reads only the element it computes");
      group.kind = KernelKind::gemm;
      return accept("matmul with its consumers as the epilogue, computed tile by tile while each tile is in cache");
    }
    return refuse("no fusion rule for this op");
  }

  // Groups that `group` reads from (directly).
  std::set<int> producers_of(int group) const {
    std::set<int> producers;
    for (ir::ValueId member : groups_[static_cast<std::size_t>(group)].members)
      collect_producers(member, group, producers);
    return producers;
  }

  void collect_producers(ir::ValueId value, int group, std::set<int>& producers) const {
    for (ir::ValueId operand : graph_.node(value).operands) {
      if (inlined_[index(operand)])
        collect_producers(operand, group, producers);
      else if (group_of_[index(operand)] >= 0 && group_of_[index(operand)] != group)
        producers.insert(group_of_[index(operand)]);
    }
  }

  bool reaches(int from, int to) const {
    std::vector<int> stack{from};
    std::set<int> seen;
    while (!stack.empty()) {
      int current = stack.back();
      stack.pop_back();
      if (current == to) return true;
      if (!seen.insert(current).second) continue;
      for (int producer : producers_of(current)) stack.push_back(producer);
    }
    return false;
  }

  std::set<ir::ValueId> leaves_of(int group) const {
    std::set<ir::ValueId> leaves;
    std::function<void(ir::ValueId)> visit = [&](ir::ValueId value) {
      for (ir::ValueId operand : graph_.node(value).operands) {
        if (inlined_[index(operand)])
          visit(operand);
        else if (group_of_[index(operand)] != group)
          leaves.insert(operand);
      }
    };
    for (ir::ValueId member : groups_[static_cast<std::size_t>(group)].members) visit(member);
    return leaves;
  }

  // Multi-output fusion, on demand: when a producer's consumers sit in
  // several loop kernels over the same space, those kernels become one (if
  // none depends on another), so the producer can join them instead of
  // being written to memory.
  void merge_consumer_loops(ir::ValueId producer, std::set<int>& consumer_groups) {
    int first = *consumer_groups.begin();
    const Group& target = groups_[static_cast<std::size_t>(first)];
    for (int group : consumer_groups) {
      const Group& other = groups_[static_cast<std::size_t>(group)];
      if (other.kind != KernelKind::loop || target.kind != KernelKind::loop || !(other.space == target.space)) return;
    }
    for (int a : consumer_groups)
      for (int b : consumer_groups)
        if (a != b && reaches(a, b)) return;
    for (int group : consumer_groups) {
      if (group == first) continue;
      merge_into(first, group,
                 "merged with kernel of " + describe(graph_, groups_[static_cast<std::size_t>(group)].members.front()) +
                     ": both consume " + describe(graph_, producer) + " over the same space (multi-output fusion)");
    }
    consumer_groups = {first};
  }

  void merge_into(int target, int source, const std::string& decision) {
    Group& into = groups_[static_cast<std::size_t>(target)];
    Group& from = groups_[static_cast<std::size_t>(source)];
    into.decisions.push_back(decision);
    for (ir::ValueId member : from.members) {
      into.members.push_back(member);
      group_of_[index(member)] = target;
    }
    into.decisions.insert(into.decisions.end(), from.decisions.begin(), from.decisions.end());
    from.members.clear();
    from.merged_away = true;
  }

  // Multi-output fusion of siblings: loop kernels over the same iteration
  // space that read a common input become one kernel (the input is read once).
  void merge_siblings() {
    for (std::size_t a = 0; a < groups_.size(); ++a) {
      for (std::size_t b = a + 1; b < groups_.size(); ++b) {
        Group& first = groups_[a];
        Group& second = groups_[b];
        if (first.merged_away || second.merged_away || first.kind != KernelKind::loop ||
            second.kind != KernelKind::loop || !(first.space == second.space))
          continue;
        std::set<ir::ValueId> shared, leaves_a = leaves_of(static_cast<int>(a)),
                                      leaves_b = leaves_of(static_cast<int>(b));
        std::set_intersection(leaves_a.begin(), leaves_a.end(), leaves_b.begin(), leaves_b.end(),
                              std::inserter(shared, shared.begin()));
        if (shared.empty() || reaches(static_cast<int>(a), static_cast<int>(b)) ||
            reaches(static_cast<int>(b), static_cast<int>(a)))
          continue;
        merge_into(static_cast<int>(a), static_cast<int>(b),
                   "merged sibling kernel of " + describe(graph_, second.members.front()) +
                       ": same iteration space, reads " + describe(graph_, *shared.begin()) +
                       " too (multi-output fusion)");
      }
    }
  }

  FusedKernel make_kernel(int group_index) const {
    const Group& group = groups_[static_cast<std::size_t>(group_index)];
    FusedKernel kernel;
    kernel.kind = group.kind;
    kernel.space = group.space;
    kernel.reduced_axes = group.reduced_axes;
    kernel.decisions = group.decisions;
    std::set<ir::ValueId> members(group.members.begin(), group.members.end());
    std::function<void(ir::ValueId)> pull_inlined = [&](ir::ValueId value) {
      for (ir::ValueId operand : graph_.node(value).operands)
        if (inlined_[index(operand)] && members.insert(operand).second) pull_inlined(operand);
    };
    for (ir::ValueId member : group.members) pull_inlined(member);
    kernel.members.assign(members.begin(), members.end());  // std::set is sorted: graph order
    std::set<ir::ValueId> inputs_seen;
    if (kernel.kind == KernelKind::loop && kernel.members.size() == 1 &&
        is_reshape(graph_.node(kernel.members[0]).op)) {
      // Nothing else to compute: copying the operand into a new layout would only move the same elements in the
      // same order.
      kernel.kind = KernelKind::view;
      kernel.decisions.push_back(
          "a reshape of a value in memory: its buffer, read with the new shape; nothing is copied");
    }
    for (ir::ValueId member : kernel.members) {
      for (ir::ValueId operand : graph_.node(member).operands)
        if (!members.count(operand) && inputs_seen.insert(operand).second) kernel.inputs.push_back(operand);
      // Written out if returned, or read by another kernel (directly or
      // through a cheap node that kernel recomputes).
      bool escapes = is_output_[index(member)] && !inlined_[index(member)];
      for (ir::ValueId user : users_[index(member)])
        escapes =
            escapes || (!inlined_[index(member)] && (group_of_[index(user)] != group_index || inlined_[index(user)]));
      if (escapes) kernel.outputs.push_back(member);
    }
    return kernel;
  }

  FusionPlan build_plan() {
    // Order kernels so that each runs after the kernels it reads from.
    std::vector<int> order;
    std::vector<int> state(groups_.size(), 0);  // 0 new, 1 visiting, 2 done
    std::function<void(int)> visit = [&](int group) {
      if (state[static_cast<std::size_t>(group)] != 0) return;
      state[static_cast<std::size_t>(group)] = 1;
      for (int producer : producers_of(group)) visit(producer);
      state[static_cast<std::size_t>(group)] = 2;
      order.push_back(group);
    };
    // Visit in the order of each group's first member, for a stable plan.
    std::vector<std::pair<ir::ValueId, int>> firsts;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].merged_away) continue;
      firsts.emplace_back(*std::min_element(groups_[g].members.begin(), groups_[g].members.end()), static_cast<int>(g));
    }
    std::sort(firsts.begin(), firsts.end());
    for (const auto& [first, group] : firsts) visit(group);
    for (int group : order) plan_.kernels.push_back(make_kernel(group));
    return std::move(plan_);
  }

  const ir::Graph& graph_;
  FusionOptions options_;
  std::vector<std::vector<ir::ValueId>> users_;
  std::vector<bool> is_output_;
  std::vector<int> group_of_;
  std::vector<bool> inlined_;
  std::vector<Group> groups_;
  FusionPlan plan_;
};

}  // namespace

FusionOptions fusion_options(Device device) {
  // On the CPU, from 64 KiB: at 2048^2 floats a loop kernel's transpose took 11x the standard kernel's time
  // (12.3 against 1.1 ms), 2-12x from 128^2 to 4096^2 (a lane per cache line; at power-of-two strides the
  // lines of a vector share a cache set), and at 100^2 (40 KiB) it was faster (2.1 against 3.1 us; Zen 4,
  // 2026-12-01). The CUDA backend keeps transposes as index maps (not measured on a GPU).
  return {.strided_transpose_bytes = device.is_cpu() ? std::int64_t{64} << 10 : 0};
}

FusionPlan fuse(const ir::Graph& graph, const FusionOptions& options) { return Fuser(graph, options).run(); }

const Placement* placement_of(const FusedKernel& kernel, ir::ValueId value) {
  for (const Placement& placement : kernel.placements)
    if (placement.value == value) return &placement;
  return nullptr;
}

bool launches(const FusedKernel& kernel) {
  if (kernel.kind == KernelKind::view) return false;
  return kernel.kind != KernelKind::assembled || !kernel.inputs.empty();
}

int kernel_count(const FusionPlan& plan) {
  return static_cast<int>(std::count_if(plan.kernels.begin(), plan.kernels.end(), launches));
}

std::string print_plan(const ir::Graph& graph, const FusionPlan& plan) {
  const int kernels = kernel_count(plan);
  const auto views = std::count_if(plan.kernels.begin(), plan.kernels.end(),
                                   [](const FusedKernel& kernel) { return kernel.kind == KernelKind::view; });
  const auto assembled = static_cast<std::int64_t>(plan.kernels.size()) - kernels - views;
  std::string text =
      "fusion plan for @" + graph.name + ": " + std::to_string(kernels) + " kernel" + (kernels == 1 ? "" : "s");
  if (views > 0) text += " and " + std::to_string(views) + " view" + (views == 1 ? "" : "s") + " (no copy)";
  if (assembled > 0)
    text += ", " + std::to_string(assembled) + " concat" + (assembled == 1 ? "" : "s") + " assembled in place";
  text += "\n";
  auto values = [&](const std::vector<ir::ValueId>& list) {
    std::string out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i) out += ", ";
      out += "%" + std::to_string(list[i]) + ": " + graph.type(list[i]).to_string();
    }
    return out.empty() ? std::string("none") : out;
  };
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    text += "kernel " + std::to_string(k) + " (" + std::string(to_string(kernel.kind)) + " over " +
            kernel.space.to_string();
    if (kernel.kind == KernelKind::reduction || kernel.kind == KernelKind::attention)
      text += ", reducing the last " + std::to_string(kernel.reduced_axes) + " axes";
    text += "):";
    for (ir::ValueId member : kernel.members)
      text += " %" + std::to_string(member) + " " + std::string(ir::name(graph.node(member).op));
    text += "\n  reads " + values(kernel.inputs) + "\n  writes " + values(kernel.outputs) + "\n";
    for (const std::string& decision : kernel.decisions) text += "  " + decision + "\n";
  }
  for (const std::string& note : plan.not_fused) text += note + "\n";
  return text;
}

}  // namespace kiln::compiler
