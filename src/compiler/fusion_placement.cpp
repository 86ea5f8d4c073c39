// Where a scheduled kernel stores each output: its own buffer, or the slice of a concat's buffer where the concat
// has it (a piecewise write: the output's map is the concat's, shifted along the concat axis). concat(exp(a), b * 2)
// is two kernels, each writing its half once, instead of three writing it twice, as PyTorch Inductor's concat
// kernels do; the concat becomes a kernel of kind `assembled` that copies only what is left -- operands that are
// parameters, returned, read by another kernel, or repeated -- and runs nothing when nothing is.
//
// An operand that is itself a concat assembled whole (nothing left to copy) is placed too: the kernels writing its
// operands write them where the outer concat has them, and the inner concat never gets a buffer. A layout of
// phases merged along two axes (a strided pool's or convolution's input gradient) is such a nest: one concat per
// row phase inside one along the rows, assembled in one buffer instead of copied again by the outer concat.

#include "compiler/fusion_scheduler.h"

#include <algorithm>

namespace kiln::compiler {

void Scheduler::place_concat_operands(FusionPlan& plan) const {
  if (!capabilities_.concats_in_place) return;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    if (kernel.kind == KernelKind::library && kernel.members.size() == 1 &&
        graph_.node(kernel.members.front()).op == ir::Op::concat)
      place_operands(plan, k);
  }
}

void Scheduler::place_operands(FusionPlan& plan, std::size_t concat_index) const {
  const ir::ValueId concat = plan.kernels[concat_index].members.front();
  const ir::Node& node = graph_.node(concat);
  const int axis = static_cast<int>(node.attributes.axis);
  std::vector<ir::ValueId> placed;
  std::int64_t offset = 0;
  const std::size_t rank = graph_.type(concat).shape.rank();
  for (ir::ValueId operand : node.operands) {
    const std::optional<std::size_t> producer = placeable_producer(plan, operand, concat_index);
    if (producer) {
      FusedKernel& writer = plan.kernels[*producer];
      std::vector<std::int64_t> start(rank, 0);
      start[static_cast<std::size_t>(axis)] = offset;
      const bool nested = writer.kind == KernelKind::assembled;
      if (nested) move_placements(plan, operand, concat, start);
      writer.placements.push_back({operand, concat, start});
      writer.decisions.push_back({.reason = Reason::placed_in_concat,
                                  .subject = operand,
                                  .values = {concat},
                                  .numbers = {offset, axis, nested ? std::int64_t{1} : std::int64_t{0}}});
      placed.push_back(operand);
    }
    offset += graph_.type(operand).shape[axis];
  }
  if (placed.empty()) return;
  FusedKernel& assembled = plan.kernels[concat_index];
  assembled.kind = KernelKind::assembled;
  std::erase_if(assembled.inputs, [&](ir::ValueId input) {
    return std::find(placed.begin(), placed.end(), input) != placed.end();
  });
  assembled.decisions.push_back({.reason = Reason::assembled,
                                 .subject = concat,
                                 .values = placed,
                                 .numbers = {assembled.inputs.empty() ? std::int64_t{0} : std::int64_t{1}}});
}

void Scheduler::move_placements(FusionPlan& plan, ir::ValueId inner, ir::ValueId outer,
                                std::span<const std::int64_t> start) {
  for (FusedKernel& kernel : plan.kernels)
    for (Placement& placement : kernel.placements) {
      if (placement.into != inner) continue;
      placement.into = outer;
      for (std::size_t axis = 0; axis < start.size(); ++axis) placement.start[axis] += start[axis];
    }
}

std::optional<std::size_t> Scheduler::placeable_producer(const FusionPlan& plan, ir::ValueId operand,
                                                        std::size_t concat_index) const {
  const std::vector<ir::ValueId>& operands = graph_.node(plan.kernels[concat_index].members.front()).operands;
  if (std::count(operands.begin(), operands.end(), operand) != 1 || is_returned(graph_, operand) ||
      read_by_other_kernels(plan, operand, {concat_index}) || graph_.type(operand).shape.numel() == 0)
    return std::nullopt;
  for (std::size_t k = 0; k < concat_index; ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    // A concat assembled whole: its operands' writers can write them into the outer concat instead.
    if (kernel.kind == KernelKind::assembled && kernel.members.front() == operand)
      return kernel.inputs.empty() ? std::optional<std::size_t>{k} : std::nullopt;
    if (std::find(kernel.outputs.begin(), kernel.outputs.end(), operand) == kernel.outputs.end()) continue;
    const bool element_output = graph_.type(operand).shape == kernel.space;
    if ((kernel.kind == KernelKind::loop || kernel.kind == KernelKind::reduction) && element_output) return k;
    // A GEMM's epilogue stores its elementwise values row by row, as a loop kernel does (a convolution's relu
    // into the padding the next layer's windows read); the product itself is sgemm's to write, in C's layout.
    if (kernel.kind == KernelKind::gemm && element_output && ir::is_elementwise(graph_.node(operand).op)) return k;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace kiln::compiler
