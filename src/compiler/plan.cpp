#include "compiler/plan.h"

#include <algorithm>
#include <set>

namespace kiln::compiler {

std::string_view to_string(KernelKind kind) {
  switch (kind) {
    case KernelKind::loop:
      return "loop";
    case KernelKind::reduction:
      return "reduction";
    case KernelKind::column:
      return "column";
    case KernelKind::gemm:
      return "gemm";
    case KernelKind::attention:
      return "attention";
    case KernelKind::library:
      return "library";
    case KernelKind::view:
      return "view";
    case KernelKind::assembled:
      return "assembled";
  }
  return "?";
}

LoopNest FusedKernel::nest() const {
  const int rank = space.rank();
  switch (kind) {
    case KernelKind::reduction:
    case KernelKind::attention:
    case KernelKind::gemm:
      return {space, rank - reduced_axes, rank};
    case KernelKind::column:
      return {space, rank - 1 - reduced_axes, rank - 1};
    default:
      return LoopNest::over(space);
  }
}

bool FusedKernel::stores_per_row(ir::ValueId value) const {
  return std::find(row_outputs.begin(), row_outputs.end(), value) != row_outputs.end();
}

IndexMap FusedKernel::from_origin(IndexMap map) const {
  if (origin.empty()) return map;
  for (AxisMap& entry : map)
    if (entry.source >= 0) entry.offset += entry.scale * origin[static_cast<std::size_t>(entry.source)];
  return map;
}

FusedKernel FusedKernel::piece(std::size_t box) const {
  FusedKernel part = *this;
  part.space = pieces[box].shape;
  part.origin = pieces[box].origin;
  part.pieces.clear();
  return part;
}

IndexMap output_map(const ir::Graph& graph, const FusedKernel& kernel, ir::ValueId value) {
  const LoopNest nest = kernel.nest();
  const Shape& shape = graph.type(value).shape;
  return kernel.from_origin(kernel.stores_per_row(value) ? nest.kept_map(shape) : nest.broadcast_map(shape));
}

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

void drop_notes(FusionPlan& plan, const std::vector<ir::ValueId>& values) {
  const std::set<ir::ValueId> dropped(values.begin(), values.end());
  std::erase_if(plan.not_fused, [&](const FusionDecision& note) {
    return dropped.count(note.subject) > 0 || dropped.count(note.kernel) > 0;
  });
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
    if (kernel.kind == KernelKind::column)
      text += ", reducing the " + std::to_string(kernel.reduced_axes) + " axes before the last";
    if (!kernel.pieces.empty()) text += ", run as " + std::to_string(kernel.pieces.size()) + " boxes";
    text += "):";
    for (ir::ValueId member : kernel.members)
      text += " %" + std::to_string(member) + " " + std::string(ir::name(graph.node(member).op));
    text += "\n  reads " + values(kernel.inputs) + "\n  writes " + values(kernel.outputs) + "\n";
    for (const FusionDecision& decision : kernel.decisions) text += "  " + describe(graph, decision) + "\n";
  }
  for (const FusionDecision& note : plan.not_fused) text += describe(graph, note) + "\n";
  return text;
}

}  // namespace kiln::compiler
