#include "compiler/attention_fusion.h"

#include "kernels/cpu/attention.h"

#include <algorithm>
#include <optional>
#include <set>

namespace kiln::compiler {
namespace {

// Scratch per thread the attention kernel may take (packed operands and two strips of score rows); beyond
// it the three kernels stay apart. 16 MiB: about 27k keys with a head size of 64.
constexpr std::int64_t kScratchLimitBytes = std::int64_t{16} << 20;

// Whether a kernel is one f32 matmul alone (a library kernel, or a gemm kernel without an epilogue).
bool is_lone_matmul(const ir::Graph& graph, const FusedKernel& kernel) {
  if ((kernel.kind != KernelKind::library && kernel.kind != KernelKind::gemm) || kernel.members.size() != 1)
    return false;
  const ir::Node& node = graph.node(kernel.members.front());
  return node.op == ir::Op::matmul && node.type.dtype == DType::f32;
}

// An operand with the product's batch axes, or with none (shared by every item).
bool batch_fits(const Shape& operand, const Shape& product) {
  if (operand.rank() == 2) return true;
  if (operand.rank() != product.rank()) return false;
  for (int axis = 0; axis + 2 < product.rank(); ++axis)
    if (operand[axis] != product[axis]) return false;
  return true;
}

class AttentionFuser {
 public:
  AttentionFuser(const ir::Graph& graph, FusionPlan plan)
      : graph_(graph), plan_(std::move(plan)), users_(static_cast<std::size_t>(graph.size())) {
    for (ir::ValueId id = 0; id < graph.size(); ++id)
      for (ir::ValueId operand : graph.node(id).operands) {
        auto& users = users_[static_cast<std::size_t>(operand)];
        if (std::find(users.begin(), users.end(), id) == users.end()) users.push_back(id);
      }
  }

  FusionPlan run() {
    while (merge_first()) {
    }
    for (std::size_t row = 0; row < plan_.kernels.size(); ++row) {
      const std::optional<Candidate> candidate = find(row);
      if (!candidate) continue;
      plan_.not_fused.push_back({.reason = Reason::attention_refused,
                                 .subject = candidate->first,
                                 .values = {candidate->second},
                                 .text = refusal(*candidate)});
    }
    return std::move(plan_);
  }

 private:
  struct Candidate {
    std::size_t first_kernel, row_kernel, second_kernel;
    ir::ValueId first, second;  // the matmuls
    ir::ValueId scores, probabilities;
  };

  const std::vector<ir::ValueId>& users(ir::ValueId value) const { return users_[static_cast<std::size_t>(value)]; }

  // The kernel whose `list` (&FusedKernel::outputs, &FusedKernel::members) holds `value`.
  std::optional<std::size_t> kernel_with(ir::ValueId value, std::vector<ir::ValueId> FusedKernel::*list) const {
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const std::vector<ir::ValueId>& values = plan_.kernels[k].*list;
      if (std::find(values.begin(), values.end(), value) != values.end()) return k;
    }
    return std::nullopt;
  }

  // The second matmul's kernel: the matmul alone, or a gemm kernel (a 2-D matmul) with an elementwise epilogue,
  // which then runs as a loop kernel of its own after the attention kernel (writing the matmul's m x d product
  // costs less than the m x n scores it saves). An epilogue with reductions keeps its kernel.
  bool second_kernel_fits(const FusedKernel& kernel, ir::ValueId matmul) const {
    if (is_lone_matmul(graph_, kernel)) return true;
    if (kernel.kind != KernelKind::gemm || graph_.node(matmul).op != ir::Op::matmul) return false;
    for (ir::ValueId member : kernel.members)
      if (ir::is_reduction(graph_.node(member).op)) return false;
    return true;
  }

  // A matmul kernel feeding reduction kernel `row` and a matmul kernel reading its output: the shape of the
  // pattern, before its conditions (refusal) are checked.
  std::optional<Candidate> find(std::size_t row) const {
    const FusedKernel& kernel = plan_.kernels[row];
    if (kernel.kind != KernelKind::reduction || kernel.reduced_axes != 1 || kernel.outputs.size() != 1 ||
        kernel.space.rank() < 2)
      return std::nullopt;
    Candidate candidate{};
    candidate.row_kernel = row;
    candidate.probabilities = kernel.outputs.front();
    bool found_first = false;
    for (ir::ValueId input : kernel.inputs) {
      const std::optional<std::size_t> producer = kernel_with(input, &FusedKernel::outputs);
      if (!producer || !is_lone_matmul(graph_, plan_.kernels[*producer])) continue;
      candidate.first_kernel = *producer;
      candidate.first = candidate.scores = input;
      found_first = true;
    }
    if (!found_first || users(candidate.probabilities).size() != 1) return std::nullopt;
    const ir::ValueId consumer = users(candidate.probabilities).front();
    const std::optional<std::size_t> second_kernel = kernel_with(consumer, &FusedKernel::members);
    if (!second_kernel || !second_kernel_fits(plan_.kernels[*second_kernel], consumer)) return std::nullopt;
    candidate.second_kernel = *second_kernel;
    candidate.second = consumer;
    return candidate;
  }

  // Merges the first candidate that passes; false if none does.
  bool merge_first() {
    for (std::size_t row = 0; row < plan_.kernels.size(); ++row) {
      const std::optional<Candidate> candidate = find(row);
      if (candidate && refusal(*candidate).empty()) {
        merge(*candidate);
        return true;
      }
    }
    return false;
  }

  // Why the candidate cannot be one kernel, or "" if it can.
  std::string refusal(const Candidate& candidate) const {
    const FusedKernel& row_kernel = plan_.kernels[candidate.row_kernel];
    const ir::Node& first = graph_.node(candidate.first);
    const ir::Node& second = graph_.node(candidate.second);
    const Shape& scores = first.type.shape;
    if (is_returned(graph_, candidate.scores) || is_returned(graph_, candidate.probabilities))
      return "the scores or their row kernel's result are returned";
    if (!(scores == row_kernel.space)) return "the row kernel's space is not the first product's shape";
    if (!(graph_.type(candidate.probabilities).shape == scores))
      return "the row kernel's result is not of the scores' shape";
    if (second.type.shape.rank() != scores.rank() || !batch_fits(scores, second.type.shape))
      return "the second matmul has batch axes the scores do not have";
    // Asked of the plan, not of the scores' users: a kernel that recomputes a value of the row kernel reads
    // the scores too.
    if (read_by_other_kernels(plan_, candidate.scores, {candidate.row_kernel}))
      return "the scores are also read outside the row kernel";
    for (ir::ValueId member : row_kernel.members)
      if (graph_.node(member).op == ir::Op::take_along_axis)
        return "the row kernel picks elements with take_along_axis, which the attention driver's rows do not";
    for (ir::ValueId user : users(candidate.scores)) {
      const ir::Op op = graph_.node(user).op;
      if (!ir::is_elementwise(op) && !ir::is_reduction(op))
        return "the row kernel moves the scores (" + describe(graph_, user) + "), not only computes with them";
    }
    if (second.operands[0] != candidate.probabilities || second.operands[1] == candidate.probabilities ||
        second.attributes.transpose_a)
      return "the second matmul does not read the row kernel's result as its left operand, untransposed";
    for (const ir::Node* node : {&first, &second})
      for (ir::ValueId operand : node->operands)
        if (!batch_fits(graph_.type(operand).shape, node->type.shape))
          return "an operand's batch axes are broadcast (only whole or absent batch axes are supported)";
    const std::int64_t n = scores[scores.rank() - 1];
    const Shape& left = graph_.type(first.operands[0]).shape;
    const std::int64_t k = first.attributes.transpose_a ? left[left.rank() - 2] : left[left.rank() - 1];
    const std::int64_t d = second.type.shape[second.type.shape.rank() - 1];
    if (kernels::cpu::attention_scratch_bytes(n, k, d) > kScratchLimitBytes)
      return "its scratch per thread would exceed " + std::to_string(kScratchLimitBytes >> 20) + " MiB";
    return "";
  }

  void merge(const Candidate& candidate) {
    const FusedKernel& row_kernel = plan_.kernels[candidate.row_kernel];
    FusedKernel merged;
    merged.kind = KernelKind::attention;
    merged.space = row_kernel.space;
    merged.reduced_axes = row_kernel.reduced_axes;
    std::set<ir::ValueId> members(row_kernel.members.begin(), row_kernel.members.end());
    members.insert(candidate.first);
    members.insert(candidate.second);
    merged.members.assign(members.begin(), members.end());  // std::set is sorted: graph order
    merged.inputs = inputs_of(graph_, merged.members);
    const FusedKernel& second_kernel = plan_.kernels[candidate.second_kernel];
    merged.outputs = second_kernel.members.size() == 1 ? second_kernel.outputs
                                                       : std::vector<ir::ValueId>{candidate.second};
    std::optional<FusedKernel> epilogue = epilogue_kernel(second_kernel, candidate.second);
    merged.decisions = row_kernel.decisions;
    merged.decisions.push_back(
        {.reason = Reason::attention, .subject = candidate.first, .values = {candidate.second, candidate.scores}});
    // In the second matmul's place: every input is ready by then, and nothing between reads S or P.
    plan_.kernels[candidate.second_kernel] = std::move(merged);
    if (epilogue)
      plan_.kernels.insert(plan_.kernels.begin() + static_cast<std::ptrdiff_t>(candidate.second_kernel) + 1,
                           std::move(*epilogue));
    // Both come before the second matmul's kernel (the plan is in execution order); the later one goes first.
    const std::size_t later = std::max(candidate.first_kernel, candidate.row_kernel);
    const std::size_t earlier = std::min(candidate.first_kernel, candidate.row_kernel);
    plan_.kernels.erase(plan_.kernels.begin() + static_cast<std::ptrdiff_t>(later));
    plan_.kernels.erase(plan_.kernels.begin() + static_cast<std::ptrdiff_t>(earlier));
    drop_notes(plan_, {candidate.first, candidate.second, candidate.scores, candidate.probabilities});
  }

  // The rest of a gemm kernel whose matmul joins an attention kernel, as a loop kernel reading the product from
  // memory; none for a kernel of the matmul alone.
  std::optional<FusedKernel> epilogue_kernel(const FusedKernel& gemm, ir::ValueId matmul) const {
    if (gemm.members.size() == 1) return std::nullopt;
    FusedKernel epilogue;
    epilogue.kind = KernelKind::loop;
    epilogue.space = graph_.type(matmul).shape;
    for (ir::ValueId member : gemm.members)
      if (member != matmul) epilogue.members.push_back(member);
    epilogue.inputs = inputs_of(graph_, epilogue.members);
    for (ir::ValueId output : gemm.outputs)
      if (output != matmul) epilogue.outputs.push_back(output);
    for (const FusionDecision& decision : gemm.decisions)
      if (decision.subject != matmul || !is_fused(decision.reason))  // the matmul's own is no longer true
        epilogue.decisions.push_back(decision);
    epilogue.decisions.push_back({.reason = Reason::attention_epilogue, .subject = matmul});
    return epilogue;
  }

  const ir::Graph& graph_;
  FusionPlan plan_;
  std::vector<std::vector<ir::ValueId>> users_;
};

}  // namespace

FusionPlan fuse_attention(const ir::Graph& graph, FusionPlan plan) {
  return AttentionFuser(graph, std::move(plan)).run();
}

}  // namespace kiln::compiler
