#include "cuda_emulation.h"

#include <kiln/error.h>

#if defined(KILN_HAVE_CUDA)

#include "compiler/buffer_assignment.h"
#include "compiler/cache/module_cache.h"
#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/cuda/nvrtc_build.h"
#include "compiler/fusion.h"
#include "compiler/jit_executable.h"
#include "compiler/pipeline.h"
#include "compiler/widen_half_precision.h"
#include "kernels/kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

// CUDA's device built-ins on the host (tools/cuda-simulator/emulated_device.h).
extern const char* const kiln_simulated_device_header;

namespace kiln::fuzz {
namespace {

// Appended after the module: emulate_<name>(parameters, blocks, threads) runs
// kernel `name` over a grid; parameters[i] points to its i-th argument, as
// for cuLaunchKernel.
std::string runner(const std::string& name) {
  return "extern \"C\" __attribute__((visibility(\"default\"))) void emulate_" + name +
         "(void** parameters, unsigned blocks, unsigned threads) {\n"
         "  std::unique_ptr<std::function<void()>> bound(static_cast<std::function<void()>*>(\n"
         "      kiln_simulated_device::bind_kernel(&kiln::jit::" +
         name +
         ", parameters)));\n"
         "  kiln_simulated_device::run_grid(*bound, {blocks, 1, 1}, {threads, 1, 1});\n}\n";
}

using Emulated = void (*)(void**, unsigned, unsigned);

// What a GPU would refuse at launch, or run wrongly, checked before the
// emulation (which would run it anyway): more threads than the kernel's
// __launch_bounds__ or than a block holds, and partial warps (the warp
// shuffles' full masks need whole warps).
void check_launch(const std::string& text, const std::string& function, int threads) {
  auto fail = [&](const std::string& detail) {
    throw InternalError("cuda emulation",
                        function + " is launched with " + std::to_string(threads) + " threads per block, " + detail,
                        std::string());
  };
  if (threads < 32 || threads > 1024 || threads % 32 != 0) fail("not whole warps up to 1024");
  const std::string declaration = ") " + function + "(";
  const std::size_t at = text.find(declaration);
  const std::size_t bounds = text.rfind("__launch_bounds__(", at);
  if (at == std::string::npos || bounds == std::string::npos || text.find('\n', bounds) < at)
    fail("and has no __launch_bounds__ on its line");
  const int limit = std::atoi(text.c_str() + bounds + std::strlen("__launch_bounds__("));
  if (threads > limit) fail("over its __launch_bounds__(" + std::to_string(limit) + ")");
}

std::size_t slot(ir::ValueId value) { return static_cast<std::size_t>(value); }

}  // namespace

struct EmulatedCudaModule::State {
  ir::Graph graph;
  compiler::FusionPlan plan;
  compiler::BufferAssignment assignment;
  compiler::cuda::ModuleSource module;
  std::shared_ptr<const compiler::LoadedModule> loaded;
};

bool cuda_emulation_available() { return true; }

namespace {

// `traced` as the JIT lowers it for CUDA before fusion: optimized, and computing on bf16 and f16 in f32.
ir::Graph lowered_for_cuda(const ir::Graph& traced) {
  ir::Graph graph = traced;
  compiler::optimize(graph);
  compiler::widen_half_precision(graph, compiler::capabilities(Device::cuda(0)));
  return graph;
}

}  // namespace

std::string generated_cuda_source(const ir::Graph& traced) {
  const ir::Graph graph = lowered_for_cuda(traced);
  return compiler::cuda::generate_source(graph, compiler::fuse(graph, compiler::capabilities(Device::cuda(0)))).text;
}

EmulatedCudaModule::EmulatedCudaModule(const ir::Graph& graph) : state_(std::make_unique<State>()) {
  state_->graph = lowered_for_cuda(graph);
  state_->plan = compiler::fuse(state_->graph, compiler::capabilities(Device::cuda(0)));  // as the JIT plans for CUDA
  state_->assignment = compiler::assign_buffers(state_->graph, state_->plan);
  state_->module = compiler::cuda::generate_source(state_->graph, state_->plan);
  // The module must also be CUDA that the JIT can build: host C++ accepts
  // some things NVRTC does not (host-only functions, for one). And it must
  // compile cleanly: a warning in generated code (an unused variable, a
  // narrowing) is noise to the user who reads it, or a bug.
  if (std::string warnings = compiler::cuda::nvrtc_warnings(state_->module.text, "sm_90", state_->graph.name);
      !warnings.empty())
    throw CompileError(state_->graph.name, "NVRTC warns about the generated CUDA:\n" + warnings, std::string());
  std::string source = std::string(kiln_simulated_device_header) + state_->module.text;
  for (const compiler::cuda::KernelLaunch& launch : state_->module.launches) {
    if (launch.function.empty()) continue;  // cuBLAS alone, or cuBLASLt with its epilogue
    check_launch(state_->module.text, launch.function, launch.threads);
    source += runner(launch.function);
    if (!launch.tensor_core_function.empty()) {
      check_launch(state_->module.text, launch.tensor_core_function, launch.tensor_core_threads);
      source += runner(launch.tensor_core_function);
    }
    if (launch.vector_function.empty()) continue;
    check_launch(state_->module.text, launch.vector_function, launch.threads);
    source += runner(launch.vector_function);
  }
  // A name of its own per module: the temporary files and messages use it.
  static std::atomic<std::uint64_t> modules{0};
  std::string name = "emulated_" + state_->graph.name + "_" + std::to_string(modules++);
  std::string image = compiler::compile_shared_object(
      compiler::compiler_identity(name), source,
      {{"-std=c++20", "-O1", "-ffp-contract=off", "-fno-gnu-unique", "-fvisibility=hidden", "-fPIC", "-shared", "-w"},
       name});
  state_->loaded = compiler::LoadedModule::load(image, name);
}

EmulatedCudaModule::~EmulatedCudaModule() = default;
EmulatedCudaModule::EmulatedCudaModule(EmulatedCudaModule&&) noexcept = default;
EmulatedCudaModule& EmulatedCudaModule::operator=(EmulatedCudaModule&&) noexcept = default;

bool EmulatedCudaModule::has_vector_variants() const {
  return std::any_of(state_->module.launches.begin(), state_->module.launches.end(),
                     [](const compiler::cuda::KernelLaunch& launch) { return !launch.vector_function.empty(); });
}

bool EmulatedCudaModule::has_tensor_core_variants() const {
  return std::any_of(state_->module.launches.begin(), state_->module.launches.end(),
                     [](const compiler::cuda::KernelLaunch& launch) { return !launch.tensor_core_function.empty(); });
}

std::vector<runtime::Array> EmulatedCudaModule::run(const std::vector<runtime::Array>& inputs, bool vector,
                                                    int max_blocks, bool allow_tf32) const {
  // As CudaExecutable::run (codegen/cuda/cuda_executable.cpp) does, buffers
  // included: intermediate values in one arena at their assigned offsets.
  const ir::Graph& graph = state_->graph;
  if (inputs.size() != graph.parameters.size())
    throw ValueError("cuda emulation", "expected one input per parameter", std::string());
  std::vector<runtime::Array> values(static_cast<std::size_t>(graph.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) values[slot(graph.parameters[i])] = inputs[i];
  std::shared_ptr<runtime::Buffer> arena;  // also when every value in it is empty: they are views of it
  const std::vector<std::int64_t>& offsets = state_->assignment.arena_offset;
  if (std::any_of(offsets.begin(), offsets.end(), [](std::int64_t offset) { return offset >= 0; }))
    arena = runtime::allocate(Device::cpu(), static_cast<std::size_t>(state_->assignment.arena_bytes));
  auto output_slot = [&](ir::ValueId output) -> runtime::Array& {
    return values[slot(output)] = compiler::output_array(graph, state_->assignment, output, arena, Device::cpu());
  };
  std::size_t generated = 0;
  for (const compiler::FusedKernel& kernel : state_->plan.kernels) {
    if (!compiler::has_generated_code(kernel.kind)) {
      compiler::run_standard_node(graph, kernel.members.front(), values, Device::cpu());
      continue;
    }
    const compiler::cuda::KernelLaunch& launch = state_->module.launches[generated++];
    if (launch.epilogue != kernels::cuda::GemmEpilogue::none) {
      // cuBLASLt's work (no generated code to emulate): the members on the CPU.
      for (ir::ValueId member : kernel.members) compiler::run_standard_node(graph, member, values, Device::cpu());
      continue;
    }
    std::vector<void*> parameters;
    for (ir::ValueId input : kernel.inputs) parameters.push_back(values[slot(input)].mutable_raw());
    for (ir::ValueId output : kernel.outputs) parameters.push_back(output_slot(output).mutable_raw());
    runtime::Array product;  // a gemm kernel's: cuBLAS's, by the CPU kernel
    if (kernel.kind == compiler::KernelKind::gemm) {
      for (ir::ValueId member : kernel.members) {
        const ir::Node& node = graph.node(member);
        if (node.op != ir::Op::matmul) continue;
        std::vector<runtime::Array> operands;
        for (ir::ValueId operand : node.operands) operands.push_back(values[slot(operand)]);
        // A 16-bit product is cuBLAS's f32 sums, which the kernel rounds (and writes, where it is an output).
        ir::Node sums = node;
        if (is_half_precision(node.type.dtype)) sums.type.dtype = DType::f32;
        product = kernels::run(sums, operands, Device::cpu());
        // Written into its output buffer where the kernel returns it.
        if (!is_half_precision(node.type.dtype) &&
            std::find(kernel.outputs.begin(), kernel.outputs.end(), member) != kernel.outputs.end()) {
          if (product.bytes() > 0) std::memcpy(values[slot(member)].mutable_raw(), product.raw(), product.bytes());
          product = values[slot(member)];
        }
      }
      parameters.push_back(product.mutable_raw());
    }
    if (launch.function.empty()) continue;
    // The `_vector` variant needs every buffer 16-byte aligned (the arena's offsets may not be).
    bool use_vector = vector && !launch.vector_function.empty();
    for (void* pointer : parameters) use_vector = use_vector && reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0;
    const bool tensor_cores = !launch.tensor_core_function.empty() && (!launch.tensor_core_needs_tf32 || allow_tf32);
    const std::string& function = tensor_cores ? launch.tensor_core_function
                                  : use_vector ? launch.vector_function
                                               : launch.function;
    auto emulate = reinterpret_cast<Emulated>(state_->loaded->symbol(("emulate_" + function).c_str()));
    std::vector<void*> arguments;
    for (void*& pointer : parameters) arguments.push_back(&pointer);
    std::int64_t blocks = tensor_cores ? launch.tensor_core_blocks : use_vector ? launch.vector_blocks : launch.blocks;
    if (!launch.fixed_grid) blocks = std::min<std::int64_t>(blocks, max_blocks);
    emulate(arguments.data(), static_cast<unsigned>(blocks),
            static_cast<unsigned>(tensor_cores ? launch.tensor_core_threads : launch.threads));
  }
  std::vector<runtime::Array> outputs;
  for (ir::ValueId output : graph.outputs) outputs.push_back(values[slot(output)]);
  return outputs;
}

}  // namespace kiln::fuzz

#else  // no CUDA support in this build

namespace kiln::fuzz {

struct EmulatedCudaModule::State {};

bool cuda_emulation_available() { return false; }

std::string generated_cuda_source(const ir::Graph&) {
  throw CompileError("cuda emulation", "this kiln was built without CUDA support (KILN_CUDA)", std::string());
}

EmulatedCudaModule::EmulatedCudaModule(const ir::Graph&) {
  throw CompileError("cuda emulation", "this kiln was built without CUDA support (KILN_CUDA)", std::string());
}
EmulatedCudaModule::~EmulatedCudaModule() = default;
EmulatedCudaModule::EmulatedCudaModule(EmulatedCudaModule&&) noexcept = default;
EmulatedCudaModule& EmulatedCudaModule::operator=(EmulatedCudaModule&&) noexcept = default;
bool EmulatedCudaModule::has_vector_variants() const { return false; }
bool EmulatedCudaModule::has_tensor_core_variants() const { return false; }
std::vector<runtime::Array> EmulatedCudaModule::run(const std::vector<runtime::Array>&, bool, int, bool) const {
  return {};
}

}  // namespace kiln::fuzz

#endif
