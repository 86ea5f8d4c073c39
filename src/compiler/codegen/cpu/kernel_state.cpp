// What the CPU's kernels share around the code the emitter writes: the state struct a kernel's work items receive,
// filled from the module's buffer pointers, and the vector type of a value.

#include "compiler/codegen/cpu/kernel_state.h"

namespace kiln::compiler::cpu {

std::string vector_type(const KernelEmitter& emitter, ir::ValueId value) {
  return "vec<" + emitter.storage_type(value) + ">";
}

std::string state_fields(const KernelEmitter& emitter) {
  const FusedKernel& kernel = emitter.kernel();
  const ir::Graph& graph = emitter.graph();
  std::string text = "  const kiln_runtime* runtime;\n";
  for (std::size_t i = 0; i < kernel.inputs.size(); ++i) {
    ir::ValueId value = kernel.inputs[i];
    text += "  const " + emitter.storage_type(value) + "* " + emitter.input_name(static_cast<int>(i)) + ";  // %" +
            std::to_string(value) + ": " + graph.type(value).to_string() + "\n";
  }
  for (ir::ValueId value : kernel.outputs) {
    text += "  " + emitter.storage_type(value) + "* " + emitter.output_name(value) + ";  // %" + std::to_string(value) +
            ": " + graph.type(value).to_string();
    if (const Placement* placement = placement_of(kernel, value))
      text += ", in %" + std::to_string(placement->into) + ": " + graph.type(placement->into).to_string() + " from " +
              Shape(placement->start).to_string();
    text += "\n";
  }
  return text;
}

std::string state_initialization(const KernelEmitter& emitter) {
  const FusedKernel& kernel = emitter.kernel();
  std::string text = "  state.runtime = runtime;\n";
  std::size_t slot = 0;
  for (std::size_t i = 0; i < kernel.inputs.size(); ++i, ++slot)
    text += "  state." + emitter.input_name(static_cast<int>(i)) + " = static_cast<const " +
            emitter.storage_type(kernel.inputs[i]) + "*>(buffers[" + std::to_string(slot) + "]);\n";
  for (ir::ValueId value : kernel.outputs)
    text += "  state." + emitter.output_name(value) + " = static_cast<" + emitter.storage_type(value) + "*>(buffers[" +
            std::to_string(slot++) + "]);\n";
  return text;
}

}  // namespace kiln::compiler::cpu
