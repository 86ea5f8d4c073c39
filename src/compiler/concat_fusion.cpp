#include "compiler/concat_fusion.h"

#include <algorithm>
#include <optional>

namespace kiln::compiler {
namespace {

class ConcatPlacer {
 public:
  ConcatPlacer(const ir::Graph& graph, FusionPlan plan) : graph_(graph), plan_(std::move(plan)) {}

  FusionPlan run() {
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      if (kernel.kind == KernelKind::library && kernel.members.size() == 1 &&
          graph_.node(kernel.members.front()).op == ir::Op::concat)
        place_operands(k);
    }
    return std::move(plan_);
  }

 private:
  void place_operands(std::size_t concat_index) {
    const ir::ValueId concat = plan_.kernels[concat_index].members.front();
    const ir::Node& node = graph_.node(concat);
    const int axis = static_cast<int>(node.attributes.axis);
    std::vector<ir::ValueId> placed;
    std::int64_t offset = 0;
    for (ir::ValueId operand : node.operands) {
      const std::optional<std::size_t> producer = placeable_producer(operand, concat_index);
      if (producer) {
        FusedKernel& writer = plan_.kernels[*producer];
        writer.placements.push_back({operand, concat, axis, offset});
        writer.decisions.push_back(
            {.reason = Reason::placed_in_concat, .subject = operand, .values = {concat}, .numbers = {offset, axis}});
        placed.push_back(operand);
      }
      offset += graph_.type(operand).shape[axis];
    }
    if (placed.empty()) return;
    FusedKernel& assembled = plan_.kernels[concat_index];
    assembled.kind = KernelKind::assembled;
    std::erase_if(assembled.inputs, [&](ir::ValueId input) {
      return std::find(placed.begin(), placed.end(), input) != placed.end();
    });
    assembled.decisions.push_back({.reason = Reason::assembled,
                                   .subject = concat,
                                   .values = placed,
                                   .numbers = {assembled.inputs.empty() ? std::int64_t{0} : std::int64_t{1}}});
  }

  // The kernel that can write `operand` of the concat at `concat_index` into the concat's buffer, if any.
  std::optional<std::size_t> placeable_producer(ir::ValueId operand, std::size_t concat_index) const {
    const std::vector<ir::ValueId>& operands = graph_.node(plan_.kernels[concat_index].members.front()).operands;
    if (std::count(operands.begin(), operands.end(), operand) != 1 || is_returned(graph_, operand) ||
        read_by_other_kernels(plan_, operand, {concat_index}) || graph_.type(operand).shape.numel() == 0)
      return std::nullopt;
    for (std::size_t k = 0; k < concat_index; ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      if (std::find(kernel.outputs.begin(), kernel.outputs.end(), operand) == kernel.outputs.end()) continue;
      const bool element_output = graph_.type(operand).shape == kernel.space;
      if ((kernel.kind == KernelKind::loop || kernel.kind == KernelKind::reduction) && element_output) return k;
      return std::nullopt;
    }
    return std::nullopt;
  }

  const ir::Graph& graph_;
  FusionPlan plan_;
};

}  // namespace

FusionPlan place_concat_operands(const ir::Graph& graph, FusionPlan plan) {
  return ConcatPlacer(graph, std::move(plan)).run();
}

}  // namespace kiln::compiler
