// kiln-bench: the seed article's experiment and kiln's workload suite.
// Every number is relative to a floor measured in the same run.
//
//   kiln-bench seed [--size N] [--runs R] [--threads T] [--device cpu|cuda]
//   kiln-bench [all | family | WORKLOAD ...] [--big] [--runs R] [--threads T] [--device cpu|cuda] [--json FILE]
//              [--save-inputs DIR]
//
// `family`: composites beside the same computation spelled with primitives (workloads.h, family_ids).
//
// With --device cuda the suite runs on the GPU, with its own sizes and floors
// (workloads.h, device_timing.h).

#include "runtime/parallel.h"
#include "seed_experiment.h"
#include "suite.h"
#include "workloads.h"

#include <kiln/cuda.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace kiln::bench {
namespace {

struct Options {
  bool seed_experiment = false;
  bool loop_compile = false;
  SeedOptions seed;
  std::vector<std::string> workloads;
  bool big = false;
  int runs = 10;
  std::string json_path;
  std::string save_directory;
  Device device = Device::cpu();
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "kiln-bench: " << problem << "\n"
            << "usage: kiln-bench seed [--size N] [--runs R] [--threads T] [--device cpu|cuda]\n"
            << "         the seed article's experiment, standard vs JIT (default size 8192, 10 runs)\n"
            << "       kiln-bench loop-compile [--runs R]\n"
            << "         a scan's first call (trace + compile, empty caches) at 10 and 10,000 steps\n"
            << "       kiln-bench [all | family | WORKLOAD ...] [--big] [--runs R] [--threads T] [--device cpu|cuda]\n"
            << "                  [--json FILE|-] [--save-inputs DIR]\n"
            << "         the workload suite; --big adds seed-8192; --save-inputs writes each workload's inputs\n"
            << "         and outputs as .npy files under DIR/<workload>/ (for bench/peers)\n"
            << "workloads: seed-<N> (the article's function at size N; seed-<N>-tf32 on a GPU: TF32 matmul)";
  for (const std::string& id : suite_ids(false))
    if (!id.starts_with("seed-")) std::cerr << ", " << id;
  const std::vector<std::string> suite = suite_ids(false);
  for (const std::string& id : family_ids())
    if (std::find(suite.begin(), suite.end(), id) == suite.end()) std::cerr << ", " << id;
  std::cerr
      << "; any of seed-<N>, gelu, gelu-erf, softmax, layernorm, attention, block, adam, block-train with -bf16 (bf16 "
         "inputs; adam and block-train: bf16 parameters and gradients, f32 moments)";
  std::cerr << "\nfamily: ";
  for (const std::string& id : family_ids()) std::cerr << id << " ";
  std::cerr << "(named composites beside their spelling with primitives)\nsuite: ";
  for (const std::string& id : suite_ids(false)) std::cerr << id << " ";
  std::cerr << "(+ seed-8192 with --big)\nsuite on a GPU: ";
  for (const std::string& id : suite_ids(false, Device::cuda())) std::cerr << id << " ";
  std::cerr << "(gelu, gelu-erf, softmax, layernorm 8192x8192; adam 64M; in f32 and bf16; attention 4x16x2048x64 "
               "with TF32 and in bf16)\n";
  std::exit(problem == "help" ? 0 : 2);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "cuda:0") return Device::cuda();
  if (text.starts_with("cuda:")) return Device::cuda(std::stoi(text.substr(5)));
  usage("unknown device '" + text + "' (cpu or cuda[:N])");
}

int parse_positive(const std::string& option, const std::string& text) {
  int value = 0;
  try {
    value = std::stoi(text);
  } catch (const std::exception&) {
  }
  if (value <= 0) usage(option + " needs a positive number, got '" + text + "'");
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  bool size_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argument + " needs a value");
      return argv[++i];
    };
    if (argument == "--size") {
      options.seed.size = parse_positive(argument, value());
      size_given = true;
    } else if (argument == "--runs") options.runs = parse_positive(argument, value());
    else if (argument == "--threads") runtime::set_thread_count(parse_positive(argument, value()));
    else if (argument == "--device") options.device = parse_device(value());
    else if (argument == "--json") options.json_path = value();
    else if (argument == "--save-inputs") options.save_directory = value();
    else if (argument == "--big") options.big = true;
    else if (argument == "--help" || argument == "-h") usage("help");
    else if (!argument.empty() && argument[0] == '-') usage("unknown option " + argument);
    else if (argument == "seed") options.seed_experiment = true;
    else if (argument == "loop-compile")
      options.loop_compile = true;
    else if (argument == "all" || argument == "family")
      options.workloads.push_back(argument);  // expanded once the device is known
    else options.workloads.push_back(argument);
  }
  std::vector<std::string> ids;
  for (const std::string& id : options.workloads) {
    if (id == "all")
      for (const std::string& member : suite_ids(false, options.device)) ids.push_back(member);
    else if (id == "family")
      for (const std::string& member : family_ids()) ids.push_back(member);
    else
      ids.push_back(id);
  }
  options.workloads = ids;
  if (options.seed_experiment) {
    if (!options.workloads.empty() || options.big || !options.json_path.empty() || !options.save_directory.empty())
      usage("'seed' (the article's experiment) runs alone; in the suite the seed workload is seed-<N>");
  } else {
    if (size_given) usage("--size belongs to 'kiln-bench seed'; in the suite, name seed-<N> instead");
    if (options.workloads.empty()) options.workloads = suite_ids(false, options.device);
    auto& ids = options.workloads;
    if (options.big && std::find(ids.begin(), ids.end(), "seed-8192") == ids.end()) {
      auto after = std::find(ids.begin(), ids.end(), "seed-2048");
      ids.insert(after == ids.end() ? ids.end() : after + 1, "seed-8192");
    }
  }
  options.seed.runs = options.runs;
  options.seed.device = options.device;
  return options;
}

int run_suite(const Options& options) {
  synchronize(options.device);  // a missing GPU stops the run here, with its reason
  std::vector<Result> results;
  std::vector<Failure> failures;
  for (const std::string& id : options.workloads) {
    // A workload that throws (a kiln::Error on this device, say) is reported
    // and the others still run: one failure must not lose a whole GPU run.
    try {
      Workload workload = make_workload(id, options_for(options.device));
      std::cerr << "kiln-bench: " << id << " " << workload.shape << "...\n";
      results.push_back(run_workload(workload, options.runs, options.save_directory));
    } catch (const std::invalid_argument&) {
      throw;  // an unknown workload id: a usage error
    } catch (const std::exception& error) {
      std::cerr << "kiln-bench: " << id << " FAILED: " << error.what() << "\n";
      failures.push_back({id, error.what()});
    }
  }
  print_table(results, options.runs, options.device);
  for (const Failure& failure : failures) std::printf("\n%s FAILED: %s\n", failure.id.c_str(), failure.error.c_str());
  if (!options.json_path.empty()) {
    if (options.json_path == "-") {
      write_json(results, failures, options.runs, options.device, std::cout);
    } else {
      std::ofstream file(options.json_path);
      write_json(results, failures, options.runs, options.device, file);
      if (!file) throw std::runtime_error("cannot write " + options.json_path);
    }
  }
  if (!failures.empty()) return 1;
  for (const Result& result : results)
    if (result.jit_note.starts_with("WRONG")) return 1;
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;
  Options options = parse_options(argc, argv);
  try {
    if (options.loop_compile) return report_loop_compile_times(options.runs);
    return options.seed_experiment ? run_seed_experiment(options.seed) : run_suite(options);
  } catch (const kiln::DeviceError& error) {
    std::cerr << "kiln-bench: --device " << options.device.to_string() << ": " << error.what() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "kiln-bench: " << error.what() << "\n";
    return 1;
  }
}
