#include "compiler/jit.h"

#include "compiler/buffer_assignment.h"
#include "compiler/cache/sha256.h"
#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/codegen/cpu/loop_driver.h"
#if KILN_HAVE_CUDA
#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/cuda/cuda_executable.h"
#include "compiler/codegen/cuda/nvrtc_build.h"
#include "runtime/cuda/cuda_context.h"
#endif
#include "compiler/dump.h"
#include "compiler/jit_executable.h"
#include "compiler/loop_layout.h"
#include "compiler/loop_step.h"
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
  std::string readable_source;  // the `source` stage: `source` with the CPU prelude included by name
#if KILN_HAVE_CUDA
  cuda::ModuleSource module;  // on CUDA: source is module.text
#endif
  // A loop's step (loop_step.h): how its driver runs it, and the driver's source (also at the end of `source`).
  std::optional<LoopLayout> loop;
  std::string loop_driver;
};

// The loop node a step is lowered for: its layout and driver go into the step's module.
struct LoopOfStep {
  const ir::Graph& graph;
  ir::ValueId value;
};

// Appends the driver of `loop` to the lowered step's source, and its layout (or why there is none) to its fused stage.
void add_loop_driver(Lowering& lowering, const LoopOfStep& loop) {
  std::string why_not;
  lowering.loop = layout_loop(loop.graph, loop.value, lowering.graph, lowering.plan, lowering.assignment, why_not);
  if (!lowering.loop) {
    lowering.fused += "compiled loop: none, the host runs the loop's regions step by step: " + why_not + "\n";
    return;
  }
  const ir::Node& node = loop.graph.node(loop.value);
  lowering.loop_driver =
      cpu::loop_driver_source(*lowering.loop, "%" + std::to_string(loop.value) + " " + std::string(ir::name(node.op)) +
                                                  " of @" + loop.graph.name);
  lowering.source += lowering.loop_driver;
  lowering.fused += "compiled loop: " + std::string(cpu::loop_entry_point) +
                    " (in the source) runs the kernels above in a loop of its own, no dispatch per iteration\n" +
                    describe(*lowering.loop);
}

// `nested`: the graph is a region of another (a branch, a loop's body or condition), its results read by the graph
// around it; a loop's step (`loop`) is nested too.
Lowering lower_graph(const ir::Graph& traced, Device device, const LoopOfStep* loop = nullptr, bool nested = false) {
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
  program.results_leave = !nested && !loop;
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
          "scores per warp or block in shared memory; where its row code is a softmax, a flash-style variant "
          "runs instead, of f32 operands while TF32 is allowed, of bf16 ones always (tensor cores, tiles of keys, "
          "the softmax online)\n";
  }
#endif
  if (loop) add_loop_driver(lowering, *loop);
  dumper.write("2-optimized.txt", lowering.optimized);
  dumper.write("3-fused.txt", lowering.fused);
  if (device.is_cpu()) {
    lowering.readable_source = cpu::source_for_reading(lowering.source);
    dumper.write_shared(cpu::prelude_file_name, cpu::prelude());
    dumper.write("4-source.cpp", lowering.readable_source);
  } else {
    lowering.readable_source = lowering.source;  // a prelude of ~140 lines
    dumper.write("4-source.cu", lowering.source);
  }
  return lowering;
}

std::vector<std::pair<Stage, std::string>> stage_texts(const Lowering& lowering) {
  return {{Stage::optimized, lowering.optimized},
          {Stage::fused, lowering.fused},
          {Stage::source, lowering.readable_source}};
}

}  // namespace

LoweredFunction lower(const ir::Graph& traced, Device device) {
  Lowering lowering = lower_graph(traced, device);
  LoweredFunction lowered;
  lowered.stages = stage_texts(lowering);
  lowered.module_source = lowering.source;
#if KILN_HAVE_CUDA
  for (const cuda::KernelLaunch& launch : lowering.module.launches) {
    if (!launch.function.empty()) lowered.cuda_kernels.push_back({launch.function, launch.threads});
    if (!launch.vector_function.empty()) lowered.cuda_kernels.push_back({launch.vector_function, launch.threads});
    if (!launch.tensor_core_function.empty())
      lowered.cuda_kernels.push_back({launch.tensor_core_function, launch.tensor_core_threads});
  }
#endif
  return lowered;
}

namespace {

// compile() of a graph that is a region of another when `nested` (lower_graph).
CompiledFunction compile_graph(const ir::Graph& traced, Device device, bool nested);

// Each control node's regions, compiled as functions of their own (their kernels fused among themselves; a region's
// own control nodes compile theirs the same way), but for the loops in `loops`.
RegionExecutables compile_regions(const ir::Graph& graph, Device device, const CompiledLoops& loops = {}) {
  RegionExecutables regions(static_cast<std::size_t>(graph.size()));
  for (ir::ValueId value = 0; value < graph.size(); ++value) {
    if (static_cast<std::size_t>(value) < loops.size() && loops[static_cast<std::size_t>(value)]) continue;
    for (const ir::Graph& region : graph.node(value).regions)
      regions[static_cast<std::size_t>(value)].push_back(compile_graph(region, device, true).executable);
  }
  return regions;
}

bool is_loop(ir::Op op) { return op == ir::Op::while_loop || op == ir::Op::scan_loop; }

CompiledLoops compile_loops(const ir::Graph& graph, std::string& fused);

// Loop node `value` of `graph` compiled whole on the CPU: its step's kernels and the driver running them in one
// module (compiled_loop.h). Null where the driver cannot run the step alone; the loop's regions then compile on their
// own and the host runs them.
std::shared_ptr<const CompiledLoop> compile_loop(const ir::Graph& graph, ir::ValueId value) {
  const LoopOfStep loop{graph, value};
  Lowering lowering = lower_graph(loop_step(graph, value), Device::cpu(), &loop);
  if (!lowering.loop) return nullptr;
  BuildOptions options = cpu::build_options(lowering.graph.name);
  options.split = [&] {
    std::vector<std::string> units = cpu::translation_units(lowering.graph, lowering.plan, runtime::thread_count());
    units.front() += lowering.loop_driver;  // it declares the kernels it calls, wherever they are compiled
    return units;
  };
  BuildResult built = build_module(lowering.source, options);
  const auto driver = reinterpret_cast<kiln_kernel_entry>(built.module->symbol(cpu::loop_entry_point));
  const ir::Node& node = graph.node(value);
  std::shared_ptr<const exec::Executable> condition;
  if (node.op == ir::Op::while_loop) condition = compile_graph(node.regions.front(), Device::cpu(), true).executable;
  // The step's own loops and branches, which the driver asks kiln to run.
  std::string nested_notes;
  StepControl control;
  control.loops = compile_loops(lowering.graph, nested_notes);
  control.regions = compile_regions(lowering.graph, Device::cpu(), control.loops);
  return std::make_shared<const CompiledLoop>(graph, value, std::move(lowering.graph), std::move(lowering.plan),
                                              std::move(*lowering.loop), driver, built.module, std::move(condition),
                                              std::move(control));
}

// The loops of `graph` that compile whole, by value (null elsewhere), each noted in `fused`.
CompiledLoops compile_loops(const ir::Graph& graph, std::string& fused) {
  CompiledLoops loops(static_cast<std::size_t>(graph.size()));
  for (ir::ValueId value = 0; value < graph.size(); ++value) {
    const ir::Op op = graph.node(value).op;
    if (!is_loop(op)) continue;
    const std::shared_ptr<const CompiledLoop> loop = compile_loop(graph, value);
    fused += "%" + std::to_string(value) + " " + std::string(ir::name(op)) + ": ";
    fused += loop ? "compiled whole, its iterations run by generated code (its step: @" + graph.name + ".loop_" +
                        std::to_string(value) + ")\n" + describe(loop->layout())
                  : "its regions run one at a time by the host (its step's fused stage says why)\n";
    loops[static_cast<std::size_t>(value)] = loop;
  }
  return loops;
}

CompiledFunction compile_graph(const ir::Graph& traced, Device device, bool nested) {
  Lowering lowering = lower_graph(traced, device, nullptr, nested);
  CompiledFunction compiled;
  compiled.stages = stage_texts(lowering);
#if KILN_HAVE_CUDA
  if (device.is_cuda()) {
    const cudaDeviceProp& properties = runtime::cuda::context(device, traced.name).properties;
    cuda::ModuleImage image =
        cuda::compile_module(lowering.source, cuda::nvrtc_target(properties.major, properties.minor), traced.name);
    compiled.from_disk_cache = image.from_disk_cache;
    RegionExecutables regions = compile_regions(lowering.graph, device);
    compiled.executable =
        cuda::make_cuda_executable(std::move(lowering.graph), std::move(lowering.plan), std::move(lowering.assignment),
                                   lowering.module, image, device, std::move(regions));
    return compiled;
  }
#endif
  BuildOptions options = cpu::build_options(traced.name);
  // As many compiler processes at once as kiln has threads (KILN_NUM_THREADS): the cores the user gave kiln.
  options.split = [&] { return cpu::translation_units(lowering.graph, lowering.plan, runtime::thread_count()); };
  BuildResult built = build_module(lowering.source, options);
  compiled.from_disk_cache = built.from_disk_cache;
  std::string& fused = std::find_if(compiled.stages.begin(), compiled.stages.end(), [](const auto& stage) {
                         return stage.first == Stage::fused;
                       })->second;
  CompiledLoops loops = compile_loops(lowering.graph, fused);
  RegionExecutables regions = compile_regions(lowering.graph, device, loops);
  compiled.executable =
      make_jit_executable(std::move(lowering.graph), std::move(lowering.plan), std::move(lowering.assignment),
                          built.module, std::move(regions), std::move(loops));
  return compiled;
}

}  // namespace

CompiledFunction compile(const ir::Graph& traced, Device device) { return compile_graph(traced, device, false); }

namespace {

// `graph`'s lowering (a loop's step's, with its driver, when `loop` says which) and, depth first, what compile()
// builds for its control nodes: for a loop, its step's module followed by those of the step's own control nodes and,
// for a while_loop, its condition's; for a branch (or a loop whose step the driver cannot run), its regions'. The
// modules of an exported function, in ExportedSource's order.
void lower_with_regions(const ir::Graph& graph, std::vector<Lowering>& modules, const LoopOfStep* loop = nullptr,
                        bool nested = false) {
  modules.push_back(lower_graph(graph, Device::cpu(), loop, nested));
  const ir::Graph lowered = modules.back().graph;  // a copy: the vector grows below
  for (ir::ValueId value = 0; value < lowered.size(); ++value) {
    const ir::Node& node = lowered.node(value);
    if (is_loop(node.op)) {
      const std::size_t step = modules.size();
      const LoopOfStep of{lowered, value};
      lower_with_regions(loop_step(lowered, value), modules, &of);
      if (modules[step].loop) {
        if (node.op == ir::Op::while_loop) lower_with_regions(node.regions.front(), modules, nullptr, true);
        continue;
      }
      modules.resize(step);
    }
    for (const ir::Graph& region : node.regions) lower_with_regions(region, modules, nullptr, true);
  }
}

std::string digest_of(const std::vector<Lowering>& modules) {
  if (modules.size() == 1) return to_hex(sha256(modules.front().source));  // as before regions could be exported
  std::string all;
  for (const Lowering& module : modules) all += module.source + '\0';
  return to_hex(sha256(all));
}

// The entry points of `lowering`'s kernels from `entries` (consumed from `entry`), checked against its plan.
std::vector<kiln_kernel_entry> take_entries(const Lowering& lowering, std::span<const kiln_kernel_entry> entries,
                                            std::size_t& entry, const std::string& name) {
  std::vector<kiln_kernel_entry> kernels;
  for (std::size_t k = 0; k < lowering.plan.kernels.size(); ++k, ++entry) {
    if (entry >= entries.size())
      throw CompileError(name, "the program has fewer kernel entries than the exported plans", std::string());
    if (has_generated_code(lowering.plan.kernels[k].kind) != (entries[entry] != nullptr))
      throw CompileError(name, "kernel " + std::to_string(entry) + "'s entry point does not match the plan",
                         std::string());
    kernels.push_back(entries[entry]);
  }
  return kernels;
}

std::unique_ptr<exec::Executable> load_module(std::vector<Lowering>& modules, std::size_t& next,
                                              std::span<const kiln_kernel_entry> entries, std::size_t& entry,
                                              const std::string& name);

// How `graph`'s control nodes run, from the modules lower_with_regions lowered after `graph`'s (consumed from `next`,
// their entries from `entry`).
StepControl load_control(const ir::Graph& graph, std::vector<Lowering>& modules, std::size_t& next,
                         std::span<const kiln_kernel_entry> entries, std::size_t& entry, const std::string& name) {
  StepControl control;
  control.loops.resize(static_cast<std::size_t>(graph.size()));
  control.regions.resize(static_cast<std::size_t>(graph.size()));
  for (ir::ValueId value = 0; value < graph.size(); ++value) {
    const ir::Node& node = graph.node(value);
    if (is_loop(node.op) && next < modules.size() && modules[next].loop) {
      // The loop's step, with its driver after its kernels in the table.
      Lowering& step = modules.at(next++);
      take_entries(step, entries, entry, name);  // the driver calls them itself
      if (entry >= entries.size() || !entries[entry])
        throw CompileError(name, "the program has no driver for the loop of module " + std::to_string(next - 1),
                           std::string());
      const kiln_kernel_entry driver = entries[entry++];
      StepControl own = load_control(step.graph, modules, next, entries, entry, name);
      std::shared_ptr<const exec::Executable> condition;
      if (node.op == ir::Op::while_loop) condition = load_module(modules, next, entries, entry, name);
      control.loops[static_cast<std::size_t>(value)] = std::make_shared<const CompiledLoop>(
          graph, value, step.graph, step.plan, *step.loop, driver, nullptr, std::move(condition), std::move(own));
      continue;
    }
    for (std::size_t region = 0; region < node.regions.size(); ++region)
      control.regions[static_cast<std::size_t>(value)].push_back(load_module(modules, next, entries, entry, name));
  }
  return control;
}

// The executable of modules[next] with its control nodes', from `entries` (consumed in order); advances `next` and
// `entry` past what it used.
std::unique_ptr<exec::Executable> load_module(std::vector<Lowering>& modules, std::size_t& next,
                                              std::span<const kiln_kernel_entry> entries, std::size_t& entry,
                                              const std::string& name) {
  Lowering& lowering = modules.at(next++);
  std::vector<kiln_kernel_entry> kernels = take_entries(lowering, entries, entry, name);
  StepControl control = load_control(lowering.graph, modules, next, entries, entry, name);
  return make_jit_executable(std::move(lowering.graph), std::move(lowering.plan), std::move(lowering.assignment),
                             std::move(kernels), nullptr, std::move(control.regions), std::move(control.loops));
}

}  // namespace

ExportedSource export_source(const ir::Graph& traced) {
  std::vector<Lowering> modules;
  lower_with_regions(traced, modules);
  ExportedSource exported;
  exported.stages = stage_texts(modules.front());
  exported.digest = digest_of(modules);
  // An object of the program's, not a shared object of its own: it links with the program's C and C++ runtime.
  for (const std::string& flag : cpu::compile_flags())
    if (flag != "-shared" && flag != "-nostdlib") exported.flags.push_back(flag);
  for (std::size_t module = 0; module < modules.size(); ++module) {
    for (const FusedKernel& kernel : modules[module].plan.kernels) {
      exported.generated.push_back(has_generated_code(kernel.kind));
      exported.module_of_kernel.push_back(module);
      exported.driver.push_back(false);
    }
    if (modules[module].loop) {  // a loop's step: its driver follows its kernels
      exported.generated.push_back(true);
      exported.module_of_kernel.push_back(module);
      exported.driver.push_back(true);
    }
    exported.modules.push_back(std::move(modules[module].source));
  }
  exported.kernels_per_call = kernel_count(modules.front().plan);
  return exported;
}

std::unique_ptr<exec::Executable> load_exported(const ir::Graph& traced, std::string_view digest,
                                                std::span<const kiln_kernel_entry> entries, const std::string& name) {
  std::vector<Lowering> modules;
  lower_with_regions(traced, modules);
  if (digest_of(modules) != digest)
    throw CompileError(name,
                       "this kiln library lowers the exported function to other kernels than the kiln that exported "
                       "it (the generated sources differ): export it again with the kiln this program links",
                       std::string());
  std::size_t next = 0, entry = 0;
  std::unique_ptr<exec::Executable> executable = load_module(modules, next, entries, entry, name);
  if (entry != entries.size())
    throw CompileError(name,
                       "the program has " + std::to_string(entries.size()) + " kernel entries for plans of " +
                           std::to_string(entry) + " kernels",
                       std::string());
  return executable;
}

}  // namespace kiln::compiler
