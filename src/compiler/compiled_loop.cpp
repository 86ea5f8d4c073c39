#include "compiler/compiled_loop.h"

#include "exec/control_flow.h"
#include "kernels/cpu/gemm_invariant.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler {

CompiledLoop::CompiledLoop(const ir::Graph& graph, ir::ValueId loop, LoopLayout layout, kiln_kernel_entry driver,
                           std::shared_ptr<const void> code_owner, std::shared_ptr<const exec::Executable> condition)
    : layout_(std::move(layout)),
      result_types_(ir::result_types(graph, loop)),
      location_(graph.node(loop).location),
      driver_(driver),
      code_owner_(std::move(code_owner)),
      condition_(std::move(condition)) {}

std::vector<runtime::Array> CompiledLoop::run(std::span<const runtime::Array> operands,
                                              const kiln_runtime& runtime) const {
  const auto carries = static_cast<std::size_t>(layout_.carries);
  std::vector<runtime::Array> results(operands.begin(), operands.begin() + static_cast<std::ptrdiff_t>(carries));
  if (layout_.op == ir::Op::while_loop &&
      exec::read_scalar(condition_->run(operands).at(0), "while_loop", location_) == 0)
    return results;
  // The captures stay as they are until the loop ends: products with them as B pack it once (gemm_invariant.h).
  const kernels::cpu::InvariantOperands invariant(
      exec::captured_ranges(operands.subspan(static_cast<std::size_t>(layout_.carries + layout_.sequences))));
  std::vector<void*> buffers;
  for (const runtime::Array& operand : operands) buffers.push_back(const_cast<void*>(operand.raw()));
  std::vector<runtime::Array> first(carries), second(carries);
  for (std::size_t carry = 0; carry < carries; ++carry) {
    const LoopSlot& slot = layout_.slots[carry];
    if (slot.source != LoopSlot::Source::unchanged) {
      first[carry] = runtime::allocate_array(slot.type.dtype, slot.type.shape, Device::cpu());
      if (!slot.in_place) second[carry] = runtime::allocate_array(slot.type.dtype, slot.type.shape, Device::cpu());
    }
    buffers.push_back(first[carry].buffer ? first[carry].mutable_raw() : nullptr);
    buffers.push_back(second[carry].buffer ? second[carry].mutable_raw() : nullptr);
  }
  for (std::size_t output = carries; output < result_types_.size(); ++output) {
    results.push_back(runtime::allocate_array(result_types_[output].dtype, result_types_[output].shape, Device::cpu()));
    buffers.push_back(results.back().mutable_raw());
  }
  const std::shared_ptr<runtime::Buffer> workspace =
      runtime::allocate(Device::cpu(), static_cast<std::size_t>(layout_.workspace_bytes));
  buffers.push_back(workspace->data());
  std::vector<std::int64_t> where(carries, 0);
  buffers.push_back(where.data());
  driver_(&runtime, buffers.data());
  for (std::size_t carry = 0; carry < carries; ++carry)
    if (where[carry] != 0) results[carry] = where[carry] == 1 ? first[carry] : second[carry];
  return results;
}

}  // namespace kiln::compiler
