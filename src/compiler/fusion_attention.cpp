// Attention as a case of the scheduler's rule: a matmul whose consumers are a row kernel over its product's rows,
// whose one result is the left operand of a second matmul -- softmax(Q K^T / sqrt(d)) V, masked or scaled, or
// any other row-wise kernel between two products -- joins that row kernel with the second matmul as one kernel of
// kind `attention`: the three share a strip of rows, so the scores never reach memory (on the CPU
// kernels/cpu/attention.h runs it; on CUDA one generated kernel, codegen/cuda/attention_kernel.cpp). Where the
// backend has no such kernel, or the strip's scores would take more of the kernel's own memory than the backend
// allows (BackendCapabilities::attention), the matmuls stay apart: a library or gemm kernel, the row kernel, and
// another.

#include "compiler/fusion_scheduler.h"

#include <algorithm>

namespace kiln::compiler {

namespace {

// An operand with the product's batch axes, or with none (shared by every item).
bool batch_fits(const Shape& operand, const Shape& product) {
  if (operand.rank() == 2) return true;
  if (operand.rank() != product.rank()) return false;
  for (int axis = 0; axis + 2 < product.rank(); ++axis)
    if (operand[axis] != product[axis]) return false;
  return true;
}

// "16 MiB", "32 KiB", "32800 bytes": in a whole unit where there is one.
std::string byte_size(std::int64_t bytes) {
  if (bytes > 0 && bytes % (std::int64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes > 0 && bytes % (std::int64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

// A product the attention kernels take: f32, or bf16 of bf16 operands where the backend multiplies them (the CPU's
// AMX tiles).
bool Scheduler::attention_dtype(const ir::Node& product) const {
  const DType dtype = product.type.dtype;
  if (dtype == DType::bf16 && !(capabilities_.attention && capabilities_.attention->bf16)) return false;
  return (dtype == DType::f32 || dtype == DType::bf16) && graph_.type(product.operands[0]).dtype == dtype &&
         graph_.type(product.operands[1]).dtype == dtype;
}

std::optional<Scheduler::AttentionCandidate> Scheduler::attention_candidate(ir::ValueId first, int row_group) const {
  const ir::Node& product = graph_.node(first);
  const Group& rows = group(row_group);
  if (!capabilities_.attention || product.op != ir::Op::matmul || !attention_dtype(product) ||
      rows.kind != KernelKind::reduction || rows.nest.reduced_count() != 1 || rows.nest.space.rank() < 2)
    return std::nullopt;
  // The row kernel's one output, read by a second matmul (alone, unless the backend writes the probabilities to
  // memory for their other readers too: the kernel then writes them, never the scores).
  std::vector<ir::ValueId> written;
  for (ir::ValueId member : rows.members)
    if (escapes(member, row_group)) written.push_back(member);
  if (written.size() != 1) return std::nullopt;
  const std::vector<ir::ValueId>& readers = users_[index(written.front())];
  if (readers.size() != 1 && !capabilities_.attention->writes_probabilities) return std::nullopt;
  const auto is_product_of = [&](ir::ValueId reader, bool transposed) {
    const ir::Node& node = graph_.node(reader);
    return node.op == ir::Op::matmul && node.operands[0] == written.front() &&
           node.attributes.transpose_a == transposed && group_of_[index(reader)] != row_group;
  };
  // The second product: the first reader in the graph's order that takes the probabilities as its left operand,
  // untransposed (the forward's, before a backward's products); else a transposed one, or a lone reader, which
  // attention_refusal refuses with its reason.
  auto found =
      std::find_if(readers.begin(), readers.end(), [&](ir::ValueId reader) { return is_product_of(reader, false); });
  if (found == readers.end())
    found =
        std::find_if(readers.begin(), readers.end(), [&](ir::ValueId reader) { return is_product_of(reader, true); });
  if (found == readers.end() && readers.size() == 1) found = readers.begin();
  if (found == readers.end()) return std::nullopt;
  const ir::ValueId second = *found;
  const int second_group = group_of_[index(second)];
  if (graph_.node(second).op != ir::Op::matmul || second_group < 0 || second_group == row_group) return std::nullopt;
  // The second matmul alone in its kernel, or a 2-D product's gemm kernel with an elementwise epilogue (which then
  // runs as a loop kernel of its own after the attention kernel: writing the m x d product costs less than the
  // m x n scores it saves). An epilogue with reductions keeps its kernel.
  const Group& consumer = group(second_group);
  const bool alone =
      (consumer.kind == KernelKind::library || consumer.kind == KernelKind::gemm) && consumer.members.size() == 1;
  const bool epilogue = consumer.kind == KernelKind::gemm &&
                        std::none_of(consumer.members.begin(), consumer.members.end(), [&](ir::ValueId member) {
                          return ir::is_reduction(graph_.node(member).op);
                        });
  if (!alone && !epilogue) return std::nullopt;
  // The probabilities in the products' type: a bf16 kernel multiplies bf16 probabilities.
  if (graph_.type(written.front()).dtype != product.type.dtype || !attention_dtype(graph_.node(second)) ||
      graph_.node(second).type.dtype != product.type.dtype)
    return std::nullopt;
  return AttentionCandidate{first, second, written.front(), second_group};
}

std::string Scheduler::attention_refusal(const AttentionCandidate& candidate, int row_group) const {
  const Group& rows = group(row_group);
  const ir::Node& first = graph_.node(candidate.first);
  const ir::Node& second = graph_.node(candidate.second);
  const Shape& scores = first.type.shape;
  if (is_output_[index(candidate.first)] || is_output_[index(candidate.probabilities)])
    return "the scores or their row kernel's result are returned";
  if (!(scores == rows.nest.space)) return "the row kernel's space is not the first product's shape";
  if (!(graph_.type(candidate.probabilities).shape == scores)) return "the row kernel's result is not of the scores' shape";
  if (second.type.shape.rank() != scores.rank() || !batch_fits(scores, second.type.shape))
    return "the second matmul has batch axes the scores do not have";
  if (read_outside(candidate.first, row_group)) return "the scores are also read outside the row kernel";
  for (ir::ValueId user : users_[index(candidate.first)]) {
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
  if (gathers(row_group)) return "the row kernel picks elements with take_along_axis, which the attention driver's rows do not";
  const std::int64_t n = scores[scores.rank() - 1];
  const Shape& left = graph_.type(first.operands[0]).shape;
  const std::int64_t k = first.attributes.transpose_a ? left[left.rank() - 2] : left[left.rank() - 1];
  const std::int64_t d = second.type.shape[second.type.shape.rank() - 1];
  const AttentionMemory& memory = *capabilities_.attention;
  if (memory.bytes(n, k, d) > memory.limit_bytes)
    return "its " + std::string(memory.name) + " would exceed " + byte_size(memory.limit_bytes) + " (" +
           byte_size(memory.bytes(n, k, d)) + " for " + std::to_string(n) + " keys)";
  return "";
}

bool Scheduler::join_attention(ir::ValueId first, int row_group) {
  const std::optional<AttentionCandidate> candidate = attention_candidate(first, row_group);
  if (!candidate) return false;
  if (const std::string refusal = attention_refusal(*candidate, row_group); !refusal.empty()) {
    plan_.not_fused.push_back(
        {.reason = Reason::attention_refused, .subject = first, .values = {candidate->second}, .text = refusal});
    return false;
  }
  Group& rows = group(row_group);
  Group& consumer = group(candidate->second_group);
  rows.kind = KernelKind::attention;
  for (ir::ValueId matmul : {first, candidate->second}) {
    rows.members.push_back(matmul);
    group_of_[index(matmul)] = row_group;
  }
  rows.decisions.push_back(
      {.reason = Reason::attention, .subject = first, .values = {candidate->second, candidate->first}});
  // The second product's epilogue, if it had one, reads the product from memory in a loop kernel of its own.
  std::erase(consumer.members, candidate->second);
  std::erase_if(consumer.decisions, [&](const FusionDecision& decision) {
    return decision.subject == candidate->second && is_fused(decision.reason);  // no longer true
  });
  if (consumer.members.empty()) {
    consumer.merged_away = true;
  } else {
    consumer.kind = KernelKind::loop;
    consumer.nest = LoopNest::over(graph_.type(candidate->second).shape);
    consumer.decisions.push_back({.reason = Reason::attention_epilogue, .subject = candidate->second});
  }
  // The notes that said the matmuls and the row kernel's result were kernels apart.
  drop_notes(plan_, {first, candidate->second, candidate->probabilities});
  return true;
}

}  // namespace kiln::compiler
