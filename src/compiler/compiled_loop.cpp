#include "compiler/compiled_loop.h"

#include "compiler/codegen/cpu/runtime_table.h"
#include "exec/control_flow.h"
#include "ir/type_rules.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_invariant.h"
#include "kernels/kernels.h"

#include <kiln/error.h>

#include <algorithm>
#include <cstring>
#include <exception>

namespace kiln::compiler {

namespace {

// What one run of a loop's driver gives kiln_runtime::host_kernel: the loop, and the first error of a host's kernel.
struct HostCall {
  const CompiledLoop* loop = nullptr;
  std::exception_ptr error;
};

// Memory the driver owns, as an array kiln's kernels read or write.
runtime::Array array_at(void* data, const ir::Type& type) {
  return runtime::Array{
      runtime::Buffer::external(Device::cpu(), data, static_cast<std::size_t>(type.shape.numel()) * size_of(type.dtype),
                                nullptr),
      type.dtype, type.shape};
}

}  // namespace

CompiledLoop::CompiledLoop(const ir::Graph& graph, ir::ValueId loop, ir::Graph step, FusionPlan plan, LoopLayout layout,
                           kiln_kernel_entry driver, std::shared_ptr<const void> code_owner,
                           std::shared_ptr<const exec::Executable> condition, StepControl control)
    : step_(std::move(step)),
      plan_(std::move(plan)),
      control_(std::move(control)),
      layout_(std::move(layout)),
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
  HostCall call{.loop = this, .error = nullptr};
  // The step's kernels report indices out of range here: their node numbers are the step's.
  cpu::CallState state;
  kiln_runtime table = runtime;
  table.host_kernel = host_kernel;
  table.host_context = &call;
  table.call_state = &state;
  driver_(&table, buffers.data());
  if (call.error) std::rethrow_exception(call.error);
  if (const std::optional<cpu::IndexOutOfRange> bad = state.take())
    throw ir::gather_index_error(step_.node(bad->node), bad->index, bad->position, bad->extent);
  for (std::size_t carry = 0; carry < carries; ++carry)
    if (where[carry] != 0) results[carry] = where[carry] == 1 ? first[carry] : second[carry];
  return results;
}

int CompiledLoop::host_kernel(const kiln_runtime* runtime, std::int64_t kernel, void* const* buffers) {
  auto& call = *static_cast<HostCall*>(runtime->host_context);
  try {
    call.loop->run_host_kernel(*runtime, kernel, buffers);
    return 0;
  } catch (...) {  // nothing may unwind through generated code
    call.error = std::current_exception();
    return 1;
  }
}

void CompiledLoop::run_host_kernel(const kiln_runtime& runtime, std::int64_t kernel, void* const* buffers) const {
  const FusedKernel& planned = plan_.kernels.at(static_cast<std::size_t>(kernel));
  const ir::ValueId value = planned.members.front();
  const ir::Node& node = step_.node(value);
  std::vector<runtime::Array> operands;
  std::vector<bool> in_place;
  for (std::size_t operand = 0; operand < node.operands.size(); ++operand) {
    const ir::Type& type = step_.type(node.operands[operand]);
    in_place.push_back(buffers[operand] == nullptr);
    operands.push_back(buffers[operand] ? array_at(buffers[operand], type)
                                        : runtime::Array{nullptr, type.dtype, type.shape});
  }
  if (ir::has_regions(node.op)) {
    const std::vector<runtime::Array> results = run_control(value, operands, runtime);
    for (std::size_t result = 0; result < results.size(); ++result)
      if (void* into = buffers[node.operands.size() + result]; into && results[result].bytes() > 0)
        std::memcpy(into, results[result].raw(), results[result].bytes());
    return;
  }
  const runtime::Array result = array_at(buffers[node.operands.size()], node.type);
  if (planned.kind == KernelKind::assembled) {
    kernels::cpu::concat(node.attributes.axis, operands, result, in_place);
    return;
  }
  const runtime::Array computed = kernels::run(node, operands, Device::cpu());
  if (computed.bytes() > 0 && computed.raw() != result.raw())
    std::memcpy(result.mutable_raw(), computed.raw(), result.bytes());
}

std::vector<runtime::Array> CompiledLoop::run_control(ir::ValueId value, std::span<const runtime::Array> operands,
                                                      const kiln_runtime& runtime) const {
  if (const auto& loop = control_.loops.at(static_cast<std::size_t>(value))) return loop->run(operands, runtime);
  const auto& regions = control_.regions.at(static_cast<std::size_t>(value));
  return exec::run_control(
      step_, value, operands, Device::cpu(),
      [&](std::size_t region, std::span<const runtime::Array> inputs) { return regions.at(region)->run(inputs); });
}

}  // namespace kiln::compiler
