#include "compiler/gather_fusion.h"

#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {
namespace {

class OperandGatherer {
 public:
  OperandGatherer(const ir::Graph& graph, FusionPlan plan) : graph_(graph), plan_(std::move(plan)) {}

  FusionPlan run() {
    bool changed = false;
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k)
      if (plan_.kernels[k].kind == KernelKind::gemm && gather(k)) changed = true;
    if (changed) remove_unread_kernels(graph_, plan_);
    return std::move(plan_);
  }

 private:
  // Has gemm kernel `gemm_index` gather its left operand, if that operand is a concat of views; true if it does.
  bool gather(std::size_t gemm_index) {
    FusedKernel& gemm = plan_.kernels[gemm_index];
    const auto matmul = std::find_if(gemm.members.begin(), gemm.members.end(),
                                     [&](ir::ValueId member) { return graph_.node(member).op == ir::Op::matmul; });
    if (matmul == gemm.members.end() || graph_.node(*matmul).attributes.transpose_a) return false;
    const ir::ValueId operand = graph_.node(*matmul).operands[0];
    const ir::Node& concat = graph_.node(operand);
    const int rank = concat.type.shape.rank();
    if (concat.op != ir::Op::concat || concat.attributes.axis != rank - 1 || rank - 1 > kernels::cpu::kGatherMaxAxes)
      return false;
    const std::optional<std::size_t> concat_index = producer(operand);
    if (!concat_index || plan_.kernels[*concat_index].kind != KernelKind::library || is_returned(graph_, operand) ||
        read_by_other_kernels(plan_, operand, {*concat_index, gemm_index}))
      return false;
    std::vector<GatheredView> views;
    for (ir::ValueId part : concat.operands) {
      std::optional<GatheredView> view = view_of(part);
      if (!view) return false;
      views.push_back(std::move(*view));
    }
    std::vector<ir::ValueId> inputs;
    bool padded = false;
    for (ir::ValueId input : gemm.inputs) {
      if (input != operand) {
        inputs.push_back(input);
        continue;
      }
      for (const GatheredView& view : views)
        if (std::find(inputs.begin(), inputs.end(), view.source) == inputs.end()) inputs.push_back(view.source);
    }
    std::vector<ir::ValueId> sources;
    for (const GatheredView& view : views) {
      if (std::find(sources.begin(), sources.end(), view.source) == sources.end()) sources.push_back(view.source);
      if (reads_padding(view)) padded = true;
    }
    gemm.inputs = std::move(inputs);
    gemm.gathered = std::move(views);
    gemm.decisions.push_back(
        {.reason = Reason::gathered_operand,
         .subject = operand,
         .values = std::move(sources),
         .numbers = {static_cast<std::int64_t>(concat.operands.size()), padded ? std::int64_t{1} : std::int64_t{0}}});
    plan_.kernels[*concat_index].inputs.clear();  // read nothing: removed with the kernels nobody reads
    plan_.kernels[*concat_index].outputs.clear();
    return true;
  }

  // Concat operand `part` as a view of a value in memory, if it is one.
  std::optional<GatheredView> view_of(ir::ValueId part) const {
    const ir::Node& node = graph_.node(part);
    const int rank = node.type.shape.rank();
    GatheredView view{part, part, std::vector<std::int64_t>(static_cast<std::size_t>(rank), 0),
                      std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1)};
    if (node.op == ir::Op::slice && in_memory(node.operands[0]) && node.attributes.step.back() == 1 &&
        std::all_of(node.attributes.step.begin(), node.attributes.step.end(), [](std::int64_t s) { return s >= 1; })) {
      view.source = node.operands[0];
      view.start = node.attributes.start;
      view.step = node.attributes.step;
    } else if (!in_memory(part)) {
      return std::nullopt;
    }
    // Through the padding: a concat along a leading axis of zeros and one value in memory.
    for (std::optional<std::pair<ir::ValueId, std::int64_t>> unpadded; (unpadded = unpad(view.source, rank));) {
      const ir::Node& padding = graph_.node(view.source);
      view.start[static_cast<std::size_t>(padding.attributes.axis)] -= unpadded->second;
      view.source = unpadded->first;
    }
    return view;
  }

  // For a concat `value` along an axis before the last of zero constants and one value in memory: that value and
  // how many elements precede it along the axis.
  std::optional<std::pair<ir::ValueId, std::int64_t>> unpad(ir::ValueId value, int rank) const {
    const std::optional<Padding> padding = padding_of(graph_, value);
    if (!padding || padding->axis >= rank - 1 || !in_memory(padding->inner)) return std::nullopt;
    const ir::Attributes& constant = graph_.node(padding->constant).attributes;
    if (constant.float_value != 0 || std::signbit(constant.float_value) || constant.int_value != 0) return std::nullopt;
    return std::pair{padding->inner, padding->before};
  }

  // Whether some element of the view falls outside its source.
  bool reads_padding(const GatheredView& view) const {
    const Shape& part = graph_.type(view.part).shape;
    const Shape& source = graph_.type(view.source).shape;
    for (int axis = 0; axis < part.rank(); ++axis) {
      const std::size_t a = static_cast<std::size_t>(axis);
      if (part[axis] > 0 && (view.start[a] < 0 || view.start[a] + (part[axis] - 1) * view.step[a] >= source[axis]))
        return true;
    }
    return false;
  }

  bool in_memory(ir::ValueId value) const { return compiler::in_memory(graph_, plan_, value); }

  std::optional<std::size_t> producer(ir::ValueId value) const { return producer_of(plan_, value); }

  const ir::Graph& graph_;
  FusionPlan plan_;
};

}  // namespace

FusionPlan gather_gemm_operands(const ir::Graph& graph, FusionPlan plan) {
  return OperandGatherer(graph, std::move(plan)).run();
}

}  // namespace kiln::compiler
