#include "compiler/jit_executable.h"

#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/codegen/cpu/runtime_table.h"
#include "exec/control_flow.h"
#include "ir/type_rules.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "runtime/float_environment.h"

#include <kiln/error.h>

namespace kiln::compiler {
namespace {

class JitExecutable final : public exec::Executable {
 public:
  JitExecutable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment, std::vector<kiln_kernel_entry> entries,
                std::shared_ptr<const void> code_owner, RegionExecutables regions, CompiledLoops loops)
      : graph_(std::move(graph)),
        plan_(std::move(plan)),
        assignment_(std::move(assignment)),
        code_owner_(std::move(code_owner)),
        entries_(std::move(entries)),
        regions_(std::move(regions)),
        loops_(std::move(loops)),
        result_nodes_(ir::result_nodes(graph_)) {
    regions_.resize(static_cast<std::size_t>(graph_.size()));
    loops_.resize(static_cast<std::size_t>(graph_.size()));
    for (std::int64_t offset : assignment_.arena_offset) uses_arena_ = uses_arena_ || offset >= 0;
    placed_.assign(static_cast<std::size_t>(graph_.size()), false);
    for (const FusedKernel& kernel : plan_.kernels)
      for (const Placement& placement : kernel.placements) placed_[static_cast<std::size_t>(placement.value)] = true;
    released_after_ = last_reads(graph_, plan_);
  }

  std::vector<runtime::Array> run(std::span<const runtime::Array> inputs) const override {
    // kiln::config::flush_denormals, for every kernel below.
    const runtime::ScopedFloatControl environment(runtime::computing_control());
    std::vector<runtime::Array> values(static_cast<std::size_t>(graph_.size()));
    for (std::size_t i = 0; i < inputs.size(); ++i) values[static_cast<std::size_t>(graph_.parameters[i])] = inputs[i];
    // One arena per call (also for values of zero bytes, which still need a buffer).
    std::shared_ptr<runtime::Buffer> arena;
    if (uses_arena_) arena = runtime::allocate(Device::cpu(), static_cast<std::size_t>(assignment_.arena_bytes));

    // The buffer of `value`, allocated by the first kernel that writes into it (a concat's, by the first kernel
    // placing an operand there).
    auto written = [&](ir::ValueId value) -> runtime::Array& {
      runtime::Array& slot = values[static_cast<std::size_t>(value)];
      if (!slot.buffer) slot = output_array(graph_, assignment_, value, arena, Device::cpu());
      return slot;
    };
    cpu::CallState state;
    const kiln_runtime table = cpu::runtime_table(state);  // one per call: calls come from many threads
    std::vector<void*> buffers;
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      if (kernel.kind == KernelKind::assembled) {
        // A concat placed in another has no buffer: its operands are already where the outer concat has them.
        if (!placed_[static_cast<std::size_t>(kernel.members.front())])
          copy_operands_not_in_place(kernel, values, written(kernel.members.front()));
        continue;
      }
      if (!has_generated_code(kernel.kind)) {
        const ir::ValueId member = kernel.members.front();
        const ir::Op op = graph_.node(member).op;
        if (const CompiledLoop* loop = loops_[static_cast<std::size_t>(member)].get())
          run_loop(member, *loop, table, values, arena.get());
        else if (ir::has_regions(op))
          exec::run_compiled_control(graph_, member, regions_[static_cast<std::size_t>(member)],
                                     result_nodes_[static_cast<std::size_t>(member)], values, arena.get(),
                                     Device::cpu());
        else if (op != ir::Op::result)  // a result node's value came with its control node's
          run_standard_node(graph_, member, values, Device::cpu());
        release(k, values);
        continue;
      }
      buffers.clear();
      for (ir::ValueId input : kernel.inputs) buffers.push_back(values[static_cast<std::size_t>(input)].mutable_raw());
      for (ir::ValueId output : kernel.outputs) {
        const Placement* placement = placement_of(kernel, output);
        buffers.push_back(written(placement ? placement->into : output).mutable_raw());
      }
      entries_[k](&table, buffers.data());
      check_indices(state);
      release(k, values);
    }
    std::vector<runtime::Array> outputs;
    for (ir::ValueId output : graph_.outputs) outputs.push_back(values[static_cast<std::size_t>(output)]);
    return outputs;
  }

  int kernels_per_call() const override { return kernel_count(plan_); }

 private:
  // Raises the first index out of range the call's kernels reported.
  void check_indices(cpu::CallState& state) const {
    if (const std::optional<cpu::IndexOutOfRange> bad = state.take())
      throw ir::gather_index_error(graph_.node(bad->node), bad->index, bad->position, bad->extent);
  }

  // Loop node `value`, compiled whole: its driver runs every iteration with this call's table (the loop raises its
  // kernels' index errors itself: their node numbers are its step's).
  void run_loop(ir::ValueId value, const CompiledLoop& loop, const kiln_runtime& table,
                std::vector<runtime::Array>& values, const runtime::Buffer* arena) const {
    std::vector<runtime::Array> operands;
    for (ir::ValueId operand : graph_.node(value).operands)
      operands.push_back(values[static_cast<std::size_t>(operand)]);
    std::vector<runtime::Array> results = loop.run(operands, table);
    exec::store_compiled_results(graph_, value, std::move(results), result_nodes_[static_cast<std::size_t>(value)],
                                 values, arena, Device::cpu());
  }

  // An assembled concat (fusion_placement.cpp): the kernels before it wrote its placed operands into `result`; the
  // others are copied now.
  void copy_operands_not_in_place(const FusedKernel& kernel, const std::vector<runtime::Array>& values,
                                  const runtime::Array& result) const {
    if (!launches(kernel)) return;
    const ir::Node& concat = graph_.node(kernel.members.front());
    std::vector<runtime::Array> operands;
    std::vector<bool> in_place;
    for (ir::ValueId operand : concat.operands) {
      const bool placed = placed_[static_cast<std::size_t>(operand)];
      in_place.push_back(placed);
      const ir::Type& type = graph_.type(operand);
      operands.push_back(placed ? runtime::Array{nullptr, type.dtype, type.shape}
                                : values[static_cast<std::size_t>(operand)]);
    }
    kernels::cpu::concat(concat.attributes.axis, operands, result, in_place);
  }

  // Drops the values kernel `k` read last: a library kernel's result (outside the arena) is freed as soon as the
  // kernels reading it are done, as the standard executor frees each value after its last use, instead of at
  // the end of the call (a training step's attention scores, twice 32 MiB in block-train).
  void release(std::size_t k, std::vector<runtime::Array>& values) const {
    for (ir::ValueId value : released_after_[k]) values[static_cast<std::size_t>(value)] = {};
  }

  ir::Graph graph_;
  FusionPlan plan_;
  BufferAssignment assignment_;
  std::shared_ptr<const void> code_owner_;  // what keeps the entry points loaded (a module), if anything
  std::vector<kiln_kernel_entry> entries_;  // per kernel: its entry point, null for library, view and assembled ones
  bool uses_arena_ = false;
  std::vector<bool> placed_;  // per value: written into another value's buffer (a placement)
  std::vector<std::vector<ir::ValueId>> released_after_;  // per kernel: the values it reads last (last_reads)
  RegionExecutables regions_;                             // per control node, its regions' executables
  CompiledLoops loops_;                                   // per loop node compiled whole, its compiled loop
  std::vector<std::vector<ir::ValueId>> result_nodes_;    // per control node, the result nodes reading it
};

}  // namespace

std::vector<std::vector<ir::ValueId>> last_reads(const ir::Graph& graph, const FusionPlan& plan) {
  std::vector<int> last(static_cast<std::size_t>(graph.size()), -1);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    for (ir::ValueId input : kernel.inputs) last[static_cast<std::size_t>(input)] = static_cast<int>(k);
    // A library, view or assembled kernel runs its node on the node's operands.
    if (!has_generated_code(kernel.kind))
      for (ir::ValueId member : kernel.members)
        for (ir::ValueId operand : graph.node(member).operands)
          last[static_cast<std::size_t>(operand)] = static_cast<int>(k);
  }
  for (ir::ValueId output : graph.outputs) last[static_cast<std::size_t>(output)] = -1;
  std::vector<std::vector<ir::ValueId>> released(plan.kernels.size());
  for (ir::ValueId value = 0; value < graph.size(); ++value)
    if (const int k = last[static_cast<std::size_t>(value)]; k >= 0)
      released[static_cast<std::size_t>(k)].push_back(value);
  return released;
}

void run_standard_node(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array>& values, Device device) {
  const ir::Node& node = graph.node(value);
  std::vector<runtime::Array> operands;
  for (ir::ValueId operand : node.operands) operands.push_back(values[static_cast<std::size_t>(operand)]);
  values[static_cast<std::size_t>(value)] = kernels::run(node, operands, device);
}

std::unique_ptr<exec::Executable> make_jit_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                      std::shared_ptr<const LoadedModule> module,
                                                      RegionExecutables regions, CompiledLoops loops) {
  std::vector<kiln_kernel_entry> entries;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    kiln_kernel_entry entry = nullptr;
    if (has_generated_code(plan.kernels[k].kind))
      entry = reinterpret_cast<kiln_kernel_entry>(module->symbol(cpu::entry_point(static_cast<int>(k)).c_str()));
    entries.push_back(entry);
  }
  return std::make_unique<JitExecutable>(std::move(graph), std::move(plan), std::move(assignment), std::move(entries),
                                         std::move(module), std::move(regions), std::move(loops));
}

std::unique_ptr<exec::Executable> make_jit_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                      std::vector<kiln_kernel_entry> entries,
                                                      std::shared_ptr<const void> code_owner, RegionExecutables regions,
                                                      CompiledLoops loops) {
  return std::make_unique<JitExecutable>(std::move(graph), std::move(plan), std::move(assignment), std::move(entries),
                                         std::move(code_owner), std::move(regions), std::move(loops));
}

}  // namespace kiln::compiler
