#include "compiler/jit.h"

#include "compiler/buffer_assignment.h"
#include "compiler/cache/sha256.h"
#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/codegen/cpu/cpu_codegen.h"
#if KILN_HAVE_CUDA
#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/cuda/cuda_executable.h"
#include "compiler/codegen/cuda/nvrtc_build.h"
#include "runtime/cuda/cuda_context.h"
#endif
#include "compiler/dump.h"
#include "compiler/jit_executable.h"
#include "compiler/pipeline.h"
#include "ir/printer.h"
#include "runtime/log.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kiln::compiler {
namespace {

// Graphs the JIT cannot compile, with the op to blame.
void check_compilable(const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes) {
    if (ir::info(node.op).category == ir::OpCategory::host)
      throw CompileError(
          std::string(ir::name(node.op)),
          node.op == ir::Op::host_call ? "a host callback cannot be compiled" : "its output shape depends on the data",
          node.location);
    if (!node.type.shape.is_static())
      throw CompileError(std::string(ir::name(node.op)), "its shape " + node.type.to_string() + " depends on data",
                         node.location);
  }
}

// The pipeline up to generated source, shared by compile() and lower(): the
// texts of the stages, and what building needs.
struct Lowering {
  ir::Graph graph;
  FusionPlan plan;
  BufferAssignment assignment;
  std::string optimized, fused, source;
#if KILN_HAVE_CUDA
  cuda::ModuleSource module;  // on CUDA: source is module.text
#endif
};

Lowering lower_graph(const ir::Graph& traced, Device device) {
#if !KILN_HAVE_CUDA
  if (!device.is_cpu())
    throw CompileError(
        "kiln::function",
        "kiln was built without CUDA support; inputs on " + device.to_string() + " run on the standard executor",
        std::string());
#endif
  check_compilable(traced);
  Dumper dumper(traced.name);
  Program program = program_for(traced, device);
  dumper.write("0-traced.txt", ir::print(program.graph, {.locations = true}));
  // Every pass that changed the program, as far as it took it (pass.h's print): the graph after each
  // optimization, then the plan, the plan with its arena, and the source.
  int pass_number = 0;
  const PassObserver observer = [&](std::string_view pass, const Program& after) {
    if (dumper.enabled())
      dumper.write("1-" + std::to_string(++pass_number) + "-after-" + std::string(pass) + ".txt", print(after));
  };
  optimize(program, observer);
  Lowering lowering;
  lowering.optimized = ir::print(program.graph);
  run_lowering(program, observer);
  lowering.graph = std::move(program.graph);
  lowering.plan = std::move(*program.plan);
  lowering.assignment = std::move(*program.assignment);
  lowering.source = std::move(program.source);
  lowering.fused = print_plan(lowering.graph, lowering.plan) + print_assignment(lowering.graph, lowering.assignment);
#if KILN_HAVE_CUDA
  if (device.is_cuda()) {
    lowering.module = *program.module;
    // The plan's gemm decisions describe the CPU's tile-by-tile epilogue; its attention decisions hold on CUDA,
    // whose kernel differs from the CPU's in where it keeps the scores and in computing the products itself.
    const auto has_kind = [&](KernelKind kind) {
      return std::any_of(lowering.plan.kernels.begin(), lowering.plan.kernels.end(),
                         [&](const FusedKernel& kernel) { return kernel.kind == kind; });
    };
    if (has_kind(KernelKind::gemm))
      lowering.fused +=
          "on CUDA: cuBLAS writes each gemm kernel's product; one generated kernel applies its epilogue\n";
    if (has_kind(KernelKind::attention))
      lowering.fused +=
          "on CUDA: each attention kernel computes both products itself, in f32 without TF32, a row of "
          "scores per warp or block in shared memory\n";
  }
#endif
  dumper.write("2-optimized.txt", lowering.optimized);
  dumper.write("3-fused.txt", lowering.fused);
  dumper.write(device.is_cpu() ? "4-source.cpp" : "4-source.cu", lowering.source);
  return lowering;
}

std::vector<std::pair<Stage, std::string>> stage_texts(const Lowering& lowering) {
  return {{Stage::optimized, lowering.optimized}, {Stage::fused, lowering.fused}, {Stage::source, lowering.source}};
}

}  // namespace

LoweredFunction lower(const ir::Graph& traced, Device device) {
  Lowering lowering = lower_graph(traced, device);
  LoweredFunction lowered;
  lowered.stages = stage_texts(lowering);
#if KILN_HAVE_CUDA
  for (const cuda::KernelLaunch& launch : lowering.module.launches) {
    if (!launch.function.empty()) lowered.cuda_kernels.push_back({launch.function, launch.threads});
    if (!launch.vector_function.empty()) lowered.cuda_kernels.push_back({launch.vector_function, launch.threads});
  }
#endif
  return lowered;
}

CompiledFunction compile(const ir::Graph& traced, Device device) {
  Lowering lowering = lower_graph(traced, device);
  CompiledFunction compiled;
  compiled.stages = stage_texts(lowering);
#if KILN_HAVE_CUDA
  if (device.is_cuda()) {
    const cudaDeviceProp& properties = runtime::cuda::context(device, traced.name).properties;
    cuda::ModuleImage image =
        cuda::compile_module(lowering.source, cuda::nvrtc_target(properties.major, properties.minor), traced.name);
    compiled.from_disk_cache = image.from_disk_cache;
    compiled.executable = cuda::make_cuda_executable(std::move(lowering.graph), std::move(lowering.plan),
                                                     std::move(lowering.assignment), lowering.module, image, device);
    return compiled;
  }
#endif
  BuildOptions options = cpu::build_options(traced.name);
  // As many compiler processes at once as kiln has threads (KILN_NUM_THREADS): the cores the user gave kiln.
  options.split = [&] { return cpu::translation_units(lowering.graph, lowering.plan, runtime::thread_count()); };
  BuildResult built = build_module(lowering.source, options);
  compiled.from_disk_cache = built.from_disk_cache;
  compiled.executable = make_jit_executable(std::move(lowering.graph), std::move(lowering.plan),
                                            std::move(lowering.assignment), built.module);
  return compiled;
}

}  // namespace kiln::compiler
