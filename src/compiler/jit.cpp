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
#include "compiler/attention_fusion.h"
#include "compiler/fusion.h"
#include "compiler/jit_executable.h"
#include "compiler/pipeline.h"
#include "ir/printer.h"
#include "runtime/log.h"

#include <kiln/error.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kiln::compiler {
namespace {

// Graphs the JIT cannot compile, with the op to blame.
void check_compilable(const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes) {
    if (ir::info(node.op).category == ir::OpCategory::host)
      throw CompileError(std::string(ir::name(node.op)),
                         node.op == ir::Op::host_call ? "a host callback cannot be compiled"
                                                      : "its output shape depends on the data",
                         node.location);
    if (!node.type.shape.is_static())
      throw CompileError(std::string(ir::name(node.op)), "its shape " + node.type.to_string() + " depends on data",
                         node.location);
  }
}

// KILN_DUMP_TO=dir: every stage of every compiled function, as files named
// <function>.<stage>.<ext>; passes that changed the graph also dump it.
class Dumper {
 public:
  explicit Dumper(const std::string& name) {
    const char* directory = std::getenv("KILN_DUMP_TO");
    if (!directory || !*directory) return;
    directory_ = directory;
    name_ = name;
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
  }

  void write(const std::string& stage, const std::string& text) {
    if (directory_.empty()) return;
    std::string path = (std::filesystem::path(directory_) / (name_ + "." + stage)).string();
    std::ofstream file(path);
    file << text;
    if (!file) {
      runtime::warn("KILN_DUMP_TO: cannot write " + path);
      directory_.clear();
    }
  }

  bool enabled() const { return !directory_.empty(); }

 private:
  std::string directory_;
  std::string name_;
};

}  // namespace

CompiledFunction compile(const ir::Graph& traced, Device device) {
#if !KILN_HAVE_CUDA
  if (!device.is_cpu())
    throw CompileError("kiln::function", "kiln was built without CUDA support; inputs on " + device.to_string() +
                                             " run on the standard executor",
                       std::string());
#endif
  check_compilable(traced);
  ir::Graph graph = traced;
  Dumper dumper(graph.name);
  dumper.write("0-traced.txt", ir::print(graph, {.locations = true}));
  int pass_number = 0;
  optimize(graph, [&](std::string_view pass, const ir::Graph& after) {
    if (dumper.enabled())
      dumper.write("1-" + std::to_string(++pass_number) + "-after-" + std::string(pass) + ".txt", ir::print(after));
  });
  std::string optimized = ir::print(graph);
  FusionPlan plan = fuse(graph);
  // The attention kernel is the CPU's; on CUDA cuBLAS runs both matmuls with the row kernel between them.
  if (device.is_cpu()) plan = fuse_attention(graph, std::move(plan));
  BufferAssignment assignment = assign_buffers(graph, plan);
  std::string fused = print_plan(graph, plan) + print_assignment(graph, assignment);
#if KILN_HAVE_CUDA
  if (device.is_cuda()) {
    cuda::ModuleSource module = cuda::generate_source(graph, plan);
    // The plan's gemm decisions describe the CPU's tile-by-tile epilogue.
    for (const FusedKernel& kernel : plan.kernels)
      if (kernel.kind == KernelKind::gemm) {
        fused += "on CUDA: cuBLAS writes each gemm kernel's product; one generated kernel applies its epilogue\n";
        break;
      }
    dumper.write("2-optimized.txt", optimized);
    dumper.write("3-fused.txt", fused);
    dumper.write("4-source.cu", module.text);
    const cudaDeviceProp& properties = runtime::cuda::context(device, graph.name).properties;
    cuda::ModuleImage image =
        cuda::compile_module(module.text, cuda::nvrtc_target(properties.major, properties.minor), graph.name);
    CompiledFunction compiled;
    compiled.from_disk_cache = image.from_disk_cache;
    compiled.stages = {{Stage::optimized, optimized}, {Stage::fused, fused}, {Stage::source, module.text}};
    compiled.executable =
        cuda::make_cuda_executable(std::move(graph), std::move(plan), std::move(assignment), module, image, device);
    return compiled;
  }
#endif
  std::string source = cpu::generate_source(graph, plan);
  dumper.write("2-optimized.txt", optimized);
  dumper.write("3-fused.txt", fused);
  dumper.write("4-source.cpp", source);

  BuildResult built = build_module(source, BuildOptions{cpu::compile_flags(), graph.name});
  CompiledFunction compiled;
  compiled.from_disk_cache = built.from_disk_cache;
  compiled.stages = {{Stage::optimized, optimized}, {Stage::fused, fused}, {Stage::source, source}};
  compiled.executable = make_jit_executable(std::move(graph), std::move(plan), std::move(assignment), built.module);
  return compiled;
}

}  // namespace kiln::compiler
