// kiln-bench: the seed article's experiment and kiln's workload suite.
// Every number is relative to a floor measured in the same run.
//
//   kiln-bench [WORKLOAD ...|all] [--size N] [--runs R] [--threads T] [--json FILE]

#include "compiler/cache/module_cache.h"
#include "ir/parser.h"
#include "kernels/cpu/blas.h"
#include "measure.h"
#include "runtime/parallel.h"
#include "workloads.h"

#include <kiln/kiln.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

namespace kiln::bench {
namespace {

struct Options {
  std::vector<std::string> workloads;
  WorkloadOptions sizes;
  int runs = 10;
  std::string json_path;
};

struct Result {
  std::string name, shape;
  double standard_ms = 0;
  std::optional<double> jit_ms;
  std::string jit_note;          // why there is no JIT time
  double bandwidth = 0;          // bytes/s at this workload's footprint
  double floor_ms = 0;           // the workload's own floor
  double op_floors_ms = 0;       // sum of the standard executor's ops' floors
  double sgemm_ms = 0;           // seed: OpenBLAS sgemm alone on the same inputs
  double matmul_ms = 0;          // seed: kiln's standard matmul alone
  double matmul_output_bytes = 0; // seed: the N x N product
  double cold_first_call_ms = 0;       // trace + compile + run, empty caches
  double warm_cache_first_call_ms = 0; // trace + load from the disk cache + run
  double jit_peak_temporary_bytes = 0; // peak allocator bytes during one JIT call, beyond inputs and outputs
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "kiln-bench: " << problem << "\n"
            << "usage: kiln-bench [WORKLOAD ...|all] [--size N] [--runs R] [--threads T] [--json FILE]\n"
            << "workloads:";
  for (const std::string& name : workload_names()) std::cerr << " " << name;
  std::cerr << "\n";
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argument + " needs a value");
      return argv[++i];
    };
    if (argument == "--size") options.sizes.seed_size = std::stoll(value());
    else if (argument == "--runs") options.runs = std::stoi(value());
    else if (argument == "--threads") runtime::set_thread_count(std::stoi(value()));
    else if (argument == "--json") options.json_path = value();
    else if (argument == "--help" || argument == "-h") usage("help");
    else if (argument == "all") options.workloads = workload_names();
    else if (!argument.empty() && argument[0] == '-') usage("unknown option " + argument);
    else options.workloads.push_back(argument);
  }
  if (options.workloads.empty()) options.workloads = workload_names();
  return options;
}

// Floors of the ops the standard executor runs: each op's bytes (operands
// read, result written) over the copy bandwidth, or its flops over the sgemm
// rate, whichever is larger.
double op_floors_ms(const std::string& traced_ir, double bandwidth, double sgemm_flops_per_second) {
  ir::Graph graph = ir::parse(traced_ir);
  double total = 0;
  auto bytes_of = [&](ir::ValueId value) {
    const ir::Type& type = graph.type(value);
    return static_cast<double>(type.shape.numel()) * static_cast<double>(size_of(type.dtype));
  };
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.op == ir::Op::parameter || node.op == ir::Op::reshape || node.op == ir::Op::expand_dims ||
        node.op == ir::Op::squeeze)
      continue;
    double bytes = bytes_of(id);
    for (ir::ValueId operand : node.operands) bytes += bytes_of(operand);
    double flops = 0;
    if (node.op == ir::Op::matmul) {
      const Shape& a = graph.type(node.operands[0]).shape;
      int rank = a.rank();
      double k = static_cast<double>(node.attributes.transpose_a ? a[rank - 2] : a[rank - 1]);
      flops = 2 * k * static_cast<double>(node.type.shape.numel());
    }
    double compute_ms = sgemm_flops_per_second > 0 ? flops / sgemm_flops_per_second * 1e3 : 0;
    total += std::max(bytes / bandwidth * 1e3, compute_ms);
  }
  return total;
}

// Largest difference between two output lists relative to the largest value.
double relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    double scale = 1e-30, difference = 0;
    for (std::size_t j = 0; j < x.size(); ++j) {
      scale = std::max(scale, std::abs(x[j]));
      difference = std::max(difference, std::abs(x[j] - y[j]));
    }
    worst = std::max(worst, difference / scale);
  }
  return worst;
}

// The first call of a new JIT function with empty caches (trace + compile),
// then with only the disk cache warm (as a second process would see it), and
// the peak of temporary memory in a steady call.
void measure_first_calls(const Workload& workload, Result& result) {
  namespace fs = std::filesystem;
  const char* previous = std::getenv("KILN_CACHE_DIR");
  std::string saved = previous ? previous : "";
  fs::path directory = fs::temp_directory_path() / ("kiln-bench-cache-" + std::to_string(::getpid()));
  ::setenv("KILN_CACHE_DIR", directory.c_str(), 1);
  auto first_call_ms = [&] {
    compiler::clear_memory_cache_for_testing();
    Call fresh = workload.fresh_jit();
    auto start = std::chrono::steady_clock::now();
    fresh(workload.inputs);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  result.cold_first_call_ms = first_call_ms();
  result.warm_cache_first_call_ms = first_call_ms();
  previous ? ::setenv("KILN_CACHE_DIR", saved.c_str(), 1) : ::unsetenv("KILN_CACHE_DIR");
  std::error_code ignored;
  fs::remove_all(directory, ignored);

  std::int64_t before = memory_statistics().bytes_in_use;
  reset_peak_memory();
  std::vector<Tensor> outputs = workload.jit(workload.inputs);
  double output_bytes = 0;
  for (const Tensor& output : outputs) output_bytes += static_cast<double>(output.numel()) * 4;
  result.jit_peak_temporary_bytes =
      static_cast<double>(memory_statistics().peak_bytes_in_use - before) - output_bytes;
}

Result run_workload(const std::string& name, const Options& options) {
  Workload workload = make_workload(name, options.sizes);
  Result result;
  result.name = workload.name;
  result.shape = workload.shape;

  std::vector<Tensor> reference = workload.standard(workload.inputs);
  result.standard_ms = time_calls([&] { workload.standard(workload.inputs); }, options.runs).median_ms;

  std::vector<Tensor> compiled = workload.jit(workload.inputs);
  if (workload.jit_statistics().fallbacks > 0) {
    result.jit_note = "n/a";
  } else if (double difference = relative_difference(reference, compiled); difference > 1e-3) {
    result.jit_note = "WRONG (differs from standard by " + std::to_string(difference) + ")";
  } else {
    result.jit_ms = time_calls([&] { workload.jit(workload.inputs); }, options.runs).median_ms;
  }

  if (result.jit_ms) measure_first_calls(workload, result);
  result.bandwidth = copy_bandwidth(workload.bytes, options.runs);
  double sgemm_rate = 0;
  if (workload.flops > 0) {
    result.sgemm_ms = time_sgemm(workload.inputs[0], workload.inputs[1], options.runs).median_ms;
    result.matmul_output_bytes = static_cast<double>(workload.inputs[0].shape()[0] * workload.inputs[1].shape()[1]) * 4;
    sgemm_rate = workload.flops / (result.sgemm_ms * 1e-3);
    result.matmul_ms =
        time_calls([&] { matmul(workload.inputs[0], workload.inputs[1]); }, options.runs).median_ms;
  }
  double memory_floor_ms = workload.bytes / result.bandwidth * 1e3;
  result.floor_ms = std::max(memory_floor_ms, workload.flops > 0 ? result.sgemm_ms : 0.0);
  result.op_floors_ms = op_floors_ms(workload.traced_ir(), result.bandwidth, sgemm_rate);
  return result;
}

std::string format(double value, int decimals = 2) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

void print_table(const std::vector<Result>& results, const Options& options) {
  std::printf("kiln-bench: %d threads, %d timed runs each (median ms, after warm-up)\n", runtime::thread_count(),
              options.runs);
  std::printf("BLAS: %s\n", kernels::cpu::blas::describe().c_str());
  std::printf("floor: bytes that must move / copy bandwidth at the same footprint, or flops / OpenBLAS sgemm rate\n");
  std::printf("std/op-floors: standard time over the sum of its ops' own floors\n\n");
  std::printf("%-10s %-11s %12s %10s %8s %10s %14s %10s %10s\n", "workload", "shape", "standard ms", "JIT ms",
              "speedup", "floor ms", "std/op-floors", "JIT/floor", "copy GB/s");
  for (const Result& r : results) {
    std::string jit = r.jit_ms ? format(*r.jit_ms) : r.jit_note;
    std::string speedup = r.jit_ms ? format(r.standard_ms / *r.jit_ms) + "x" : "n/a";
    std::string jit_floor = r.jit_ms ? format(*r.jit_ms / r.floor_ms) : "n/a";
    std::printf("%-10s %-11s %12s %10s %8s %10s %14s %10s %10s\n", r.name.c_str(), r.shape.c_str(),
                format(r.standard_ms).c_str(), jit.c_str(), speedup.c_str(), format(r.floor_ms).c_str(),
                format(r.standard_ms / r.op_floors_ms).c_str(), jit_floor.c_str(),
                format(r.bandwidth / 1e9, 1).c_str());
  }
  for (const Result& r : results) {
    if (r.sgemm_ms <= 0) continue;
    std::printf("\n%s %s: OpenBLAS sgemm alone %.2f ms; kiln standard matmul %.2f ms = %.1f%% of the sgemm rate\n",
                r.name.c_str(), r.shape.c_str(), r.sgemm_ms, r.matmul_ms, 100 * r.sgemm_ms / r.matmul_ms);
    if (r.jit_ms)
      std::printf("%s %s: JIT %.2f ms = %.3fx the time of sgemm alone; peak temporary memory %.1f%% of the matmul output\n",
                  r.name.c_str(), r.shape.c_str(), *r.jit_ms, *r.jit_ms / r.sgemm_ms,
                  100 * r.jit_peak_temporary_bytes / r.matmul_output_bytes);
  }
  std::printf("\nJIT first call: cold = trace + compile with empty caches; warm = a new function with the disk cache warm\n");
  std::printf("%-10s %14s %18s %12s %16s\n", "workload", "cold ms", "warm cache ms", "steady ms", "peak temp MiB");
  for (const Result& r : results) {
    if (!r.jit_ms) continue;
    std::printf("%-10s %14.1f %18.2f %12.2f %16.2f\n", r.name.c_str(), r.cold_first_call_ms, r.warm_cache_first_call_ms,
                *r.jit_ms, r.jit_peak_temporary_bytes / (1 << 20));
  }
}

void write_json(const std::vector<Result>& results, std::ostream& out) {
  auto optional = [](const std::optional<double>& value) { return value ? format(*value, 4) : std::string("null"); };
  out << "{\n  \"threads\": " << runtime::thread_count() << ",\n  \"blas\": \"" << kernels::cpu::blas::describe()
      << "\",\n  \"workloads\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << "    {\"name\": \"" << r.name << "\", \"shape\": \"" << r.shape << "\", \"standard_ms\": "
        << format(r.standard_ms, 4) << ", \"jit_ms\": " << optional(r.jit_ms) << ", \"floor_ms\": "
        << format(r.floor_ms, 4) << ", \"op_floors_ms\": " << format(r.op_floors_ms, 4)
        << ", \"copy_bandwidth_gbs\": " << format(r.bandwidth / 1e9, 2);
    if (r.sgemm_ms > 0)
      out << ", \"sgemm_ms\": " << format(r.sgemm_ms, 4) << ", \"matmul_ms\": " << format(r.matmul_ms, 4);
    if (r.jit_ms)
      out << ", \"cold_first_call_ms\": " << format(r.cold_first_call_ms, 2) << ", \"warm_cache_first_call_ms\": "
          << format(r.warm_cache_first_call_ms, 2) << ", \"jit_peak_temporary_bytes\": "
          << format(r.jit_peak_temporary_bytes, 0);
    out << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;
  Options options = parse_options(argc, argv);
  std::vector<Result> results;
  try {
    for (const std::string& name : options.workloads) results.push_back(run_workload(name, options));
  } catch (const std::exception& error) {
    std::cerr << "kiln-bench: " << error.what() << "\n";
    return 1;
  }
  print_table(results, options);
  if (!options.json_path.empty()) {
    if (options.json_path == "-") {
      write_json(results, std::cout);
    } else {
      std::ofstream file(options.json_path);
      write_json(results, file);
    }
  }
  return 0;
}
