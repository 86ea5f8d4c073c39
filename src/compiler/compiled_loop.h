#pragma once
// A loop the CPU JIT compiled whole (loop_step.h, loop_layout.h, codegen/cpu/loop_driver.h): the host allocates the
// carries' buffers, a scan's stacked outputs and the workspace once per call, checks a while_loop's condition once,
// and calls the generated driver, which runs every iteration. The JIT's executable runs it in place of the loop's
// regions one at a time (exec/control_flow.h), which cost ~1 us of the host's per region run and allocated every
// carry afresh.

#include "compiler/codegen/cpu/runtime_abi.h"
#include "compiler/loop_layout.h"
#include "exec/executable.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::compiler {

class CompiledLoop;

// How a step's own control nodes run (per value of the step; empty elsewhere): a loop compiled whole, or the
// executables of the node's regions.
struct StepControl {
  std::vector<std::shared_ptr<const CompiledLoop>> loops;
  std::vector<std::vector<std::shared_ptr<const exec::Executable>>> regions;
};

class CompiledLoop {
 public:
  // Loop node `loop` of `graph`, run by `driver` (kept loaded by `code_owner`) with `layout` over `step` and its
  // `plan` (whose kernels without generated code kiln runs when the driver asks); a while_loop's `condition` is its
  // condition region's executable, for the check before the first iteration.
  // The step's own control nodes run with `regions` (per value, their regions' executables) or `loops` (per value,
  // a loop compiled whole).
  CompiledLoop(const ir::Graph& graph, ir::ValueId loop, ir::Graph step, FusionPlan plan, LoopLayout layout,
               kiln_kernel_entry driver, std::shared_ptr<const void> code_owner,
               std::shared_ptr<const exec::Executable> condition, StepControl control);

  // The loop's results on `operands` (concrete, on the CPU): its final carries, then a scan's stacked outputs. The
  // kernels use `runtime`, the calling executable's table for this call.
  std::vector<runtime::Array> run(std::span<const runtime::Array> operands, const kiln_runtime& runtime) const;

  const LoopLayout& layout() const { return layout_; }

 private:
  // Kernel `kernel` of the step, one without generated code, on `buffers` (kiln_runtime::host_kernel's).
  static int host_kernel(const kiln_runtime* runtime, std::int64_t kernel, void* const* buffers);
  void run_host_kernel(const kiln_runtime& runtime, std::int64_t kernel, void* const* buffers) const;

  // A control node of the step on `operands`: its results.
  std::vector<runtime::Array> run_control(ir::ValueId value, std::span<const runtime::Array> operands,
                                          const kiln_runtime& runtime) const;

  ir::Graph step_;
  FusionPlan plan_;
  StepControl control_;
  LoopLayout layout_;
  std::vector<ir::Type> result_types_;
  std::string location_;
  kiln_kernel_entry driver_;
  std::shared_ptr<const void> code_owner_;
  std::shared_ptr<const exec::Executable> condition_;
};

// Per value of a graph, its compiled loop, or null.
using CompiledLoops = std::vector<std::shared_ptr<const CompiledLoop>>;

}  // namespace kiln::compiler
