#include "compiler/padding_fusion.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kiln::compiler {
namespace {

class PaddingFolder {
 public:
  PaddingFolder(const ir::Graph& graph, FusionPlan plan) : graph_(graph), plan_(std::move(plan)) {}

  FusionPlan run() {
    bool changed = false;
    for (FusedKernel& kernel : plan_.kernels) {
      if (kernel.kind != KernelKind::loop) continue;
      // Copied: folding edits the inputs.
      const std::vector<ir::ValueId> inputs = kernel.inputs;
      for (ir::ValueId input : inputs)
        if (fold(kernel, input)) changed = true;
    }
    if (changed) remove_unread_kernels(graph_, plan_);
    return std::move(plan_);
  }

 private:
  // Has loop kernel `kernel` read `input` through its padding, if it is a padded value; true if it does.
  bool fold(FusedKernel& kernel, ir::ValueId input) {
    const std::optional<Padding> outermost = padding_of(graph_, input);
    if (!outermost) return false;
    const ir::Node& constant = graph_.node(outermost->constant);
    // Down the paddings with the same constant to the value they pad.
    std::vector<ir::ValueId> concats;
    ir::ValueId source = input;
    for (std::optional<Padding> padding = outermost;
         padding && same_constant_value(constant, graph_.node(padding->constant));
         padding = padding_of(graph_, source)) {
      concats.push_back(source);
      source = padding->inner;
    }
    if (!in_memory(graph_, plan_, source) || read_reshaped(kernel, input)) return false;
    // The padded value's own kernel is a library concat; one written by a generated kernel (a member of its
    // consumers' kernel already) is not pad()'s copy.
    const std::optional<std::size_t> concat_kernel = producer_of(plan_, input);
    if (!concat_kernel || plan_.kernels[*concat_kernel].kind != KernelKind::library) return false;
    kernel.members.insert(kernel.members.end(), concats.begin(), concats.end());
    std::sort(kernel.members.begin(), kernel.members.end());
    kernel.members.erase(std::unique(kernel.members.begin(), kernel.members.end()), kernel.members.end());
    std::erase(kernel.inputs, input);
    if (std::find(kernel.inputs.begin(), kernel.inputs.end(), source) == kernel.inputs.end())
      kernel.inputs.push_back(source);
    kernel.decisions.push_back({.reason = Reason::padding_in_place,
                                .subject = input,
                                .values = {source, outermost->constant},
                                .numbers = padded_axes(concats)});
    return true;
  }

  // Whether a member of `kernel` reshapes `input` other than by size-1 axes: it reads the buffer with the new
  // shape (an index map cannot follow such a reshape through a computed value), which needs `input` in memory.
  bool read_reshaped(const FusedKernel& kernel, ir::ValueId input) const {
    return std::any_of(kernel.members.begin(), kernel.members.end(), [&](ir::ValueId member) {
      const ir::Node& node = graph_.node(member);
      const bool reshape = node.op == ir::Op::reshape || node.op == ir::Op::expand_dims || node.op == ir::Op::squeeze;
      return reshape && node.operands[0] == input && !is_unit_reshape(graph_, node);
    });
  }

  // The axes the concats pad, in order.
  std::vector<std::int64_t> padded_axes(const std::vector<ir::ValueId>& concats) const {
    std::vector<std::int64_t> axes;
    for (ir::ValueId concat : concats) axes.push_back(graph_.node(concat).attributes.axis);
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    return axes;
  }

  const ir::Graph& graph_;
  FusionPlan plan_;
};

}  // namespace

FusionPlan fold_padding_into_loops(const ir::Graph& graph, FusionPlan plan) {
  return PaddingFolder(graph, std::move(plan)).run();
}

}  // namespace kiln::compiler
