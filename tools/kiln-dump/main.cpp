// kiln-dump: what kiln's JIT makes of a function, from its IR text, without
// the program that traced it (as XLA's hlo-opt does for HLO).
//
//   kiln-dump FILE [--device cpu|cuda] [--stage traced|optimized|fused|source|all]
//             [--out DIR] [--build] [--arch sm_XY]
//
// FILE ('-': standard input) holds one function's IR text: what
// get_compiler_ir(Stage::traced, ...) returns, KILN_DUMP_TO's
// <function>.0-traced.txt, or a graph kiln-fuzz printed. kiln-dump runs the
// JIT's pipeline on it for the device (compiler::lower: the same passes, plan
// and code generator as a call) and prints the stages, each under a heading,
// or only --stage's text. --out DIR writes them as KILN_DUMP_TO does (with the
// graph after each pass that changed it) instead of printing.
//
// Neither the CUDA source nor its resource report needs a GPU: --device cuda
// works wherever kiln was built with CUDA support.
//
// --build also builds the source: on the CPU with the system compiler through
// kiln's module cache ($KILN_CXX, $KILN_CACHE_DIR), printing the time; on CUDA
// with NVRTC for --arch (default: cuda:0's architecture, else sm_90), printing
// a table of each kernel's registers, spills, stack and shared memory and the
// occupancy they allow at its block size.
//
// Exit status: 0 done, 1 the graph did not parse, lower or build (the error
// names the op and the source line), 2 bad usage.

#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/jit.h"
#if KILN_HAVE_CUDA
#include "compiler/codegen/cuda/nvrtc_build.h"
#endif
#include "ir/parser.h"
#include "ir/printer.h"
#include "resource_report.h"

#include <kiln/device.h>
#include <kiln/error.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace kiln::dump {
namespace {

struct Options {
  std::string file;
  Device device = Device::cpu();
  std::string stage = "all";
  std::string out;
  bool build = false;
  std::string arch;  // "sm_90"; empty: cuda:0's, else sm_90
};

[[noreturn]] void usage(const std::string& problem) {
  if (problem != "help") std::cerr << "kiln-dump: " << problem << "\n";
  (problem == "help" ? std::cout : std::cerr)
      << "usage: kiln-dump FILE [--device cpu|cuda] [--stage traced|optimized|fused|source|all]\n"
         "                 [--out DIR] [--build] [--arch sm_XY]\n"
         "  FILE    one function's IR text ('-': standard input), as get_compiler_ir(Stage::traced)\n"
         "          returns it or KILN_DUMP_TO writes it (<function>.0-traced.txt)\n"
         "  --stage the stage to print (default all, each under a heading)\n"
         "  --out   write every stage to DIR as KILN_DUMP_TO does, instead of printing\n"
         "  --build build the source too: the CPU's with the system compiler (the time); CUDA's with\n"
         "          NVRTC for --arch (each kernel's registers, spills, shared memory and occupancy)\n"
         "  --arch  the CUDA architecture for --build (default: cuda:0's, else sm_90)\n";
  std::exit(problem == "help" ? 0 : 2);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  usage("unknown device '" + text + "' (cpu or cuda)");
}

std::string checked_stage(const std::string& text) {
  for (const char* stage : {"all", "traced", "optimized", "fused", "source"})
    if (text == stage) return text;
  usage("unknown stage '" + text + "'");
}

std::string checked_arch(const std::string& text) {
  if (text.starts_with("sm_") && text.size() >= 5 && text.find_first_not_of("0123456789", 3) == std::string::npos)
    return text;
  usage("--arch takes sm_XY (sm_90), got '" + text + "'");
}

Options parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argument + " needs a value");
      return argv[++i];
    };
    if (argument == "--help" || argument == "-h")
      usage("help");
    else if (argument == "--device")
      options.device = parse_device(value());
    else if (argument == "--stage")
      options.stage = checked_stage(value());
    else if (argument == "--out")
      options.out = value();
    else if (argument == "--build")
      options.build = true;
    else if (argument == "--arch")
      options.arch = checked_arch(value());
    else if (argument != "-" && argument.starts_with("-"))
      usage("unknown option " + argument);
    else if (!options.file.empty())
      usage("one FILE only (got " + options.file + " and " + argument + ")");
    else
      options.file = argument;
  }
  if (options.file.empty()) usage("no FILE");
  if (!options.arch.empty() && !options.device.is_cuda()) usage("--arch is for --device cuda");
  if (!options.out.empty() && options.stage != "all") usage("--out writes every stage; --stage is for printing");
  return options;
}

std::string read_input(const std::string& file) {
  std::ostringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream stream(file);
  if (!stream) throw ValueError("kiln-dump", "cannot read " + file, std::string());
  text << stream.rdbuf();
  return text.str();
}

void build_for_cpu(const std::string& source, const std::string& name) {
  compiler::BuildResult built = compiler::build_module(source, compiler::cpu::build_options(name));
  std::cout << "built @" << name << " for the CPU: ";
  if (built.from_disk_cache || built.from_memory_cache)
    std::cout << "taken from the module cache";
  else
    std::cout << "compiled in " << static_cast<int>(built.compile_seconds * 1000 + 0.5) << " ms";
  std::cout << " (" << compiler::compiler_identity(name).version << ")\n";
}

#if KILN_HAVE_CUDA
int default_architecture() {
  for (const DeviceInfo& info : devices())
    if (info.device.is_cuda()) return info.compute_capability;
  return 90;
}

void build_for_cuda(const compiler::LoweredFunction& lowered, const std::string& source, const std::string& name,
                    std::string arch) {
  if (arch.empty()) arch = "sm_" + std::to_string(default_architecture());
  const int architecture = std::stoi(arch.substr(3));
  const std::string log = compiler::cuda::nvrtc_resource_report(source, arch, name);
  const std::vector<KernelResources> kernels = parse_ptxas_report(log);
  std::cout << "built @" << name << " for " << arch << " with NVRTC " << compiler::cuda::nvrtc_version() << ": "
            << kernels.size() << (kernels.size() == 1 ? " entry function\n" : " entry functions\n");
  if (kernels.empty()) {
    std::cout << "(NVRTC's log has no ptxas report)\n";
    return;
  }
  const std::optional<MultiprocessorLimits> limits = limits_for(architecture);
  std::printf("%-24s %8s %10s %15s %7s %8s %10s %10s  %s\n", "kernel", "threads", "registers", "spilled st/ld B",
              "stack B", "shared B", "blocks/SM", "occupancy", "limited by");
  for (const KernelResources& kernel : kernels) {
    int threads = 0;
    for (const compiler::LoweredFunction::CudaKernel& entry : lowered.cuda_kernels)
      if (entry.function == kernel.function) threads = entry.threads;
    const std::string spills = std::to_string(kernel.spill_store_bytes) + "/" + std::to_string(kernel.spill_load_bytes);
    std::printf("%-24s %8d %10d %15s %7lld %8lld", kernel.function.c_str(), threads, kernel.registers, spills.c_str(),
                static_cast<long long>(kernel.stack_bytes), static_cast<long long>(kernel.shared_bytes));
    if (limits && threads > 0) {
      const Occupancy result = occupancy(kernel, threads, *limits);
      std::printf(" %10d %9.0f%%  %s\n", result.blocks, result.fraction * 100, result.limited_by.c_str());
    } else {
      std::printf(" %10s %10s  %s\n", "?", "?", limits ? "block size unknown" : "architecture not in the table");
    }
  }
}
#endif

int run(const Options& options) {
#if !KILN_HAVE_CUDA
  if (options.device.is_cuda())
    throw CompileError("kiln-dump",
                       "this kiln was built without CUDA support: configure with -DKILN_CUDA=ON "
                       "(the CUDA toolkit is needed; a GPU is not) to see what the JIT generates for CUDA",
                       std::string());
#endif
  ir::Graph graph = ir::parse(read_input(options.file));
  if (!options.out.empty())
    setenv("KILN_DUMP_TO", options.out.c_str(), 1);
  else
    unsetenv("KILN_DUMP_TO");  // this run prints; a dump directory from the environment is not asked for
  const compiler::LoweredFunction lowered = compiler::lower(graph, options.device);
  std::vector<std::pair<Stage, std::string>> stages = {{Stage::traced, ir::print(graph, {.locations = true})}};
  stages.insert(stages.end(), lowered.stages.begin(), lowered.stages.end());
  const std::string& source = lowered.module_source;  // what is built: the source stage includes the prelude
  for (const auto& [stage, text] : stages) {
    if (!options.out.empty()) continue;
    if (options.stage == "all")
      std::cout << "==== " << to_string(stage) << " (@" << graph.name << ", " << options.device.to_string()
                << ") ====\n"
                << text << (text.ends_with('\n') ? "" : "\n") << "\n";
    else if (options.stage == to_string(stage))
      std::cout << text << (text.ends_with('\n') ? "" : "\n");
  }
  if (!options.out.empty()) std::cout << "wrote @" << graph.name << "'s stages to " << options.out << "\n";
  if (!options.build) return 0;
#if KILN_HAVE_CUDA
  if (options.device.is_cuda()) {
    build_for_cuda(lowered, source, graph.name, options.arch);
    return 0;
  }
#endif
  build_for_cpu(source, graph.name);
  return 0;
}

}  // namespace
}  // namespace kiln::dump

int main(int argc, char** argv) {
  const kiln::dump::Options options = kiln::dump::parse_arguments(argc, argv);
  try {
    return kiln::dump::run(options);
  } catch (const kiln::Error& error) {
    std::cerr << "kiln-dump: " << error.what() << "\n";
    return 1;
  }
}
