#include "suite.h"

#include "compiler/cache/module_cache.h"
#include "device_timing.h"
#include "ir/parser.h"
#include "kernels/cpu/blas.h"
#include "runtime/parallel.h"

#include <kiln/config.h>
#include <kiln/cuda.h>
#include <kiln/tensor_files.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

namespace kiln::bench {
namespace {

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

std::string format(double value, int decimals = 2) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// A JSON number; NaN and infinities (not JSON) become null.
std::string number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// `call` timed on `device`: one waited call each on the CPU, batches of
// back-to-back calls on a GPU (device_timing.h).
Timing time_on(Device device, const std::function<void()>& call, int runs) {
  if (device.is_cpu()) return time_calls(call, runs);
  return time_device_calls(device, call, runs);
}

// Sets kiln::config::allow_tf32 while alive when `tf32` holds a value.
class MatmulPrecision {
 public:
  explicit MatmulPrecision(std::optional<bool> tf32) : previous_(config::allow_tf32.load()), set_(tf32.has_value()) {
    if (set_) config::allow_tf32 = *tf32;
  }
  ~MatmulPrecision() {
    if (set_) config::allow_tf32 = previous_;
  }
  MatmulPrecision(const MatmulPrecision&) = delete;
  MatmulPrecision& operator=(const MatmulPrecision&) = delete;

 private:
  bool previous_, set_;
};

// Peak allocator bytes during one steady call of `call`, beyond what was in use before and its outputs: the
// temporaries (for a training step, the saved activations and the gradients before the update consumes them).
double peak_temporary_bytes(Device device, const Call& call, const std::vector<Tensor>& inputs) {
  std::int64_t before = memory_statistics(device).bytes_in_use;
  reset_peak_memory(device);
  std::vector<Tensor> outputs = call(inputs);
  double output_bytes = 0;
  for (const Tensor& output : outputs) output_bytes += static_cast<double>(output.numel() * size_of(output.dtype()));
  return static_cast<double>(memory_statistics(device).peak_bytes_in_use - before) - output_bytes;
}

// How far a JIT result may be from the standard one, relative: 1e-3 (reassociated f32 sums and the like); bf16 and
// f16 outputs, four units of their rounding (an f32 sum rounded to 16 bits may land on the other neighbour).
double difference_allowed(const Workload& workload, const std::vector<Tensor>& outputs) {
  double allowed = 1e-3;
  // TF32 products (a GPU workload run with TF32): the JIT's kernels round their operands to TF32 (the flash-style
  // attention kernel: cvt.rna) where cuBLAS, in the standard executor, truncates them; the results differ by up to
  // ~1e-3 of their magnitude from that alone. 2e-2, as the peers are held to (bench/peers/checks.py), still fails a
  // wrong product, which is off by O(1).
  if (workload.tf32.value_or(false)) allowed = std::max(allowed, 2e-2);
  for (const Tensor& output : outputs) {
    if (output.dtype() == DType::bf16) allowed = std::max(allowed, 0x1p-6);
    if (output.dtype() == DType::f16) allowed = std::max(allowed, 0x1p-9);
  }
  return allowed;
}

}  // namespace

void judge_jit(const Workload& workload, const std::vector<Tensor>& reference, const std::vector<Tensor>& compiled,
               Result& result) {
  result.standard_kernels = workload.standard_statistics().kernels_per_call;
  result.jit_kernels = workload.jit_statistics().kernels_per_call;
  result.jit_difference = relative_difference(reference, compiled);
  if (workload.jit_statistics().fallbacks > 0) {
    // The fused stage of a function that fell back says so, and why.
    std::string note;
    try {
      note = workload.jit_ir(Stage::fused);
    } catch (const Error& error) {
      note = "fell back to the standard executor: " + error.detail();
    }
    while (!note.empty() && note.back() == '\n') note.pop_back();
    result.jit_note = note;
  } else if (result.jit_difference > difference_allowed(workload, compiled)) {
    result.jit_note = "WRONG: differs from the standard executor by " + format(result.jit_difference, 6);
  }
}

void measure_floors(const Workload& workload, int runs, Result& result, double sampled_bandwidth) {
  const Device device = workload.device;
  result.bytes = workload.bytes;
  result.flops = workload.flops;
  if (sampled_bandwidth > 0) result.bandwidth = sampled_bandwidth;
  else if (device.is_cuda()) result.bandwidth = device_copy_bandwidth(device, workload.bytes, runs);
  else result.bandwidth = copy_bandwidth(workload.bytes, runs);
  result.memory_floor_ms = workload.bytes / result.bandwidth * 1e3;
  if (workload.blas_alone) {
    result.blas_ms = workload.blas_alone(runs).median_ms;
    // OpenBLAS on small or batched shapes runs below its peak, and other
    // GEMMs (oneDNN in TensorFlow) beat it there: the floor takes the best
    // rate seen in this run. On a GPU the floor is cuBLAS on these shapes.
    result.sgemm_rate = workload.flops / (result.blas_ms * 1e-3);
    if (device.is_cpu()) result.sgemm_rate = std::max(result.sgemm_rate, peak_sgemm_rate(runs));
    result.compute_floor_ms = workload.flops / result.sgemm_rate * 1e3;
    result.matmul_ms = time_on(device, workload.kiln_matmuls_alone, runs).median_ms;
    result.matmul_output_bytes = workload.matmul_output_bytes;
  }
  result.floor_ms = std::max(result.memory_floor_ms, result.compute_floor_ms);
  result.op_floors_ms = op_floors_ms(workload.standard_ir(Stage::traced), result.bandwidth, result.sgemm_rate);
}

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
    synchronize(workload.device);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  result.cold_first_call_ms = first_call_ms();
  result.warm_cache_first_call_ms = first_call_ms();
  previous ? ::setenv("KILN_CACHE_DIR", saved.c_str(), 1) : ::unsetenv("KILN_CACHE_DIR");
  std::error_code ignored;
  fs::remove_all(directory, ignored);

  result.jit_peak_temporary_bytes = peak_temporary_bytes(workload.device, workload.jit, workload.inputs);
}

void save_tensors(const std::string& directory, const Workload& workload, const std::vector<Tensor>& standard,
                  const std::vector<Tensor>& jit, Result& result) {
  std::filesystem::create_directories(std::filesystem::path(directory) / workload.id);
  // .npy has no bf16 (NumPy lacks it): bf16 tensors are saved as their f32 values, exactly, and the manifest says
  // bf16 so that the peers cast them back.
  auto save = [&](const std::vector<Tensor>& tensors, const std::string& stem, std::vector<std::string>& names) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      names.push_back(workload.id + "/" + stem + std::to_string(i) + ".npy");
      const Tensor& tensor = tensors[i];
      save_npy(std::filesystem::path(directory) / names.back(),
               tensor.dtype() == DType::bf16 ? cast(tensor, DType::f32) : tensor);
    }
  };
  save(workload.inputs, "input", result.input_files);
  save(standard, "standard", result.standard_files);
  save(jit, "jit", result.jit_files);
}

Result run_workload(const Workload& workload, int runs, const std::string& save_directory) {
  MatmulPrecision precision(workload.tf32);
  Result result;
  result.id = workload.id;
  result.name = workload.name;
  result.shape = workload.shape;
  result.device = workload.device;
  result.tf32 = workload.tf32;
  for (const Tensor& input : workload.inputs) result.bf16_inputs.push_back(input.dtype() == DType::bf16);
  result.bf16 = std::find(result.bf16_inputs.begin(), result.bf16_inputs.end(), true) != result.bf16_inputs.end();
  std::vector<Tensor> standard_outputs = workload.standard(workload.inputs);
  std::vector<Tensor> jit_outputs = workload.jit(workload.inputs);
  judge_jit(workload, standard_outputs, jit_outputs, result);
  if (!save_directory.empty()) save_tensors(save_directory, workload, standard_outputs, jit_outputs, result);
  standard_outputs.clear();
  jit_outputs.clear();
  result.standard_peak_temporary_bytes = peak_temporary_bytes(workload.device, workload.standard, workload.inputs);

  auto standard = [&] { workload.standard(workload.inputs); };
  auto jit = [&] { workload.jit(workload.inputs); };
  if (workload.device.is_cuda()) {
    // One batch size for both functions (and the peers): from the faster one.
    double single_ms = single_call_ms(workload.device, standard);
    if (result.jit_note.empty()) single_ms = std::min(single_ms, single_call_ms(workload.device, jit));
    result.batch = batch_for(single_ms);
    result.standard = time_device_calls(workload.device, standard, runs, result.batch);
    if (result.jit_note.empty()) {
      result.jit = time_device_calls(workload.device, jit, runs, result.batch);
      measure_first_calls(workload, result);
    }
    measure_floors(workload, runs, result);
    return result;
  }
  // The copy floor is sampled between the timed calls (see BandwidthSampler).
  BandwidthSampler sampler(workload.bytes);
  auto sample = [&] { sampler.sample(); };
  result.batch = workload.calls_per_run;
  auto per_call = [&](const std::function<void()>& call) {
    if (result.batch == 1) return time_calls_between(call, runs, sample);
    Timing timing = time_calls_between(
        [&] {
          for (int i = 0; i < result.batch; ++i) call();
        },
        runs, sample);
    for (double* time : {&timing.median_ms, &timing.min_ms, &timing.max_ms, &timing.mean_ms}) *time /= result.batch;
    return timing;
  };
  result.standard = per_call(standard);
  if (result.jit_note.empty()) {
    result.jit = per_call(jit);
    measure_first_calls(workload, result);
  }
  measure_floors(workload, runs, result, sampler.bandwidth());
  return result;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (!line.starts_with("model name")) continue;
    std::size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "unknown CPU";
}

void print_table(const std::vector<Result>& results, int runs, Device device) {
  const bool gpu = device.is_cuda();
  const std::string blas = gpu ? "cuBLAS" : kernels::cpu::blas::name();
  if (gpu) {
    std::printf("kiln-bench on %s: %s; host %s; %d timed runs each\n", device.to_string().c_str(),
                device_description(device).c_str(), cpu_model().c_str(), runs);
    std::printf("times: ms per call, the median run's; a run is `batch` calls queued back to back, then one wait\n");
    std::printf("floor: max(bytes that must move / device-to-device copy bandwidth at the same footprint, matmul flops /\n"
                "       cuBLAS's rate on the workload's own shapes and precision)\n");
  } else {
    std::printf("kiln-bench: %s, %u cores, %d threads, %d timed runs each (median ms, after warm-up)\n",
                cpu_model().c_str(), std::thread::hardware_concurrency(), runtime::thread_count(), runs);
    std::printf("BLAS: %s\n", kernels::cpu::blas::describe().c_str());
    std::printf(
        "floor: max(bytes that must move / copy bandwidth at the same footprint, matmul flops / best %s\n"
        "       sgemm rate in this run: on the workload's own shapes, or at 2048^2 if that is faster)\n",
        blas.c_str());
  }
  std::printf("std/op-floors: standard time over the sum of its ops' own floors; kernels: launched per call (standard/JIT)\n\n");
  int shape_width = 12;  // the widest shape's
  for (const Result& r : results) shape_width = std::max(shape_width, static_cast<int>(r.shape.size()));
  std::printf("%-15s %-*s %12s %10s %8s %10s %14s %10s %10s %8s%s\n", "workload", shape_width, "shape", "standard ms",
              "JIT ms", "speedup", "floor ms", "std/op-floors", "JIT/floor", "copy GB/s", "kernels",
              gpu ? "  batch" : "");
  for (const Result& r : results) {
    std::string speedup = r.jit ? format(r.standard.median_ms / r.jit->median_ms) + "x" : "n/a";
    std::string jit_floor = r.jit ? format(r.jit->median_ms / r.floor_ms) : "n/a";
    std::string kernels = std::to_string(r.standard_kernels) + "/" + std::to_string(r.jit_kernels);
    const int decimals = r.floor_ms < 1 ? 4 : 2;  // GPU calls take fractions of a millisecond
    std::printf("%-15s %-*s %12s %10s %8s %10s %14s %10s %10s %8s%s\n", r.id.c_str(), shape_width, r.shape.c_str(),
                format(r.standard.median_ms, decimals).c_str(),
                r.jit ? format(r.jit->median_ms, decimals).c_str() : "n/a", speedup.c_str(),
                format(r.floor_ms, decimals).c_str(), format(r.standard.median_ms / r.op_floors_ms).c_str(),
                jit_floor.c_str(), format(r.bandwidth / 1e9, 1).c_str(), kernels.c_str(),
                gpu ? ("  " + std::to_string(r.batch)).c_str() : "");
  }
  for (const Result& r : results)
    if (!r.jit_note.empty()) std::printf("\n%s: JIT %s\n", r.id.c_str(), r.jit_note.c_str());
  for (const Result& r : results)
    if (r.id == "call")
      std::printf(
          "\ncall: what a call costs where the work is nothing (x + 1 on 16 floats, %d calls a run): JIT "
          "%.2f us, standard executor %.2f us\n",
          r.batch, r.jit ? r.jit->median_ms * 1e3 : 0.0, r.standard.median_ms * 1e3);
  for (const Result& r : results) {
    if (r.blas_ms <= 0) continue;
    std::string precision = r.bf16 ? "" : r.tf32 ? (*r.tf32 ? " (TF32)" : " (full f32)") : "";
    // bf16 workloads' floor on the CPU is kiln's own bf16 product (workloads.cpp): no BLAS there multiplies bf16.
    // On a GPU it is cuBLAS's.
    const char* gemm = !r.bf16 ? blas.c_str() : gpu ? "cuBLAS's bf16 GEMM" : "kiln's bf16 GEMM";
    std::printf("\n%s %s: %s alone on the same shapes%s %.3f ms (%.0f GFLOP/s; rate of the floor %.0f GFLOP/s);\n"
                "  kiln standard matmuls %.3f ms = %.1f%% of %s's rate on these shapes\n",
                r.id.c_str(), r.shape.c_str(), gemm, precision.c_str(), r.blas_ms, r.flops / r.blas_ms * 1e-6,
                r.sgemm_rate * 1e-9, r.matmul_ms, 100 * r.blas_ms / r.matmul_ms, gemm);
    if (r.jit)
      std::printf("%s %s: JIT %.3f ms = %.3fx the time of %s alone; peak temporary memory %.1f%% of the largest matmul output\n",
                  r.id.c_str(), r.shape.c_str(), r.jit->median_ms, r.jit->median_ms / r.blas_ms, gemm,
                  100 * r.jit_peak_temporary_bytes / r.matmul_output_bytes);
  }
  std::printf("\nJIT first call: cold = trace + compile with empty caches; warm = a new function with the disk cache warm\n");
  std::printf("peak temp: allocator bytes beyond inputs and outputs during one steady call (JIT; standard executor)\n");
  std::printf("%-15s %14s %18s %12s %16s %16s\n", "workload", "cold ms", "warm cache ms", "steady ms", "peak temp MiB",
              "std temp MiB");
  for (const Result& r : results) {
    if (!r.jit) continue;
    std::printf("%-15s %14.1f %18.2f %12.3f %16.2f %16.2f\n", r.id.c_str(), r.cold_first_call_ms,
                r.warm_cache_first_call_ms, r.jit->median_ms, r.jit_peak_temporary_bytes / (1 << 20),
                r.standard_peak_temporary_bytes / (1 << 20));
  }
}

void write_json(const std::vector<Result>& results, const std::vector<Failure>& failures, int runs, Device device,
                std::ostream& out) {
  auto timing = [](const Timing& t) {
    return "{\"median_ms\": " + number(t.median_ms) + ", \"min_ms\": " + number(t.min_ms) +
           ", \"max_ms\": " + number(t.max_ms) + "}";
  };
  out << "{\n  \"tool\": \"kiln-bench\",\n  \"date\": " << quoted(utc_now()) << ",\n  \"cpu\": " << quoted(cpu_model())
      << ",\n  \"cores\": " << std::thread::hardware_concurrency() << ",\n  \"threads\": " << runtime::thread_count()
      << ",\n  \"runs\": " << runs << ",\n  \"blas\": " << quoted(kernels::cpu::blas::describe())
      << ",\n  \"device\": " << quoted(device.to_string());
  if (device.is_cuda())
    out << ",\n  \"gpu\": " << quoted(device_description(device)) << ",\n  \"settle_ms\": " << number(settle_ms);
  out << ",\n  \"workloads\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << "    {\"id\": " << quoted(r.id) << ", \"name\": " << quoted(r.name) << ", \"shape\": " << quoted(r.shape)
        << ", \"batch\": " << r.batch;
    if (r.tf32) out << ", \"tf32\": " << (*r.tf32 ? "true" : "false");
    if (r.bf16) {
      out << ", \"dtype\": \"bf16\", \"bf16_inputs\": [";
      for (std::size_t j = 0; j < r.bf16_inputs.size(); ++j)
        out << (j ? ", " : "") << (r.bf16_inputs[j] ? "true" : "false");
      out << "]";
    }
    out << ",\n     \"standard_ms\": " << number(r.standard.median_ms)
        << ", \"jit_ms\": " << (r.jit ? number(r.jit->median_ms) : "null")
        << ", \"floor_ms\": " << number(r.floor_ms) << ",\n     \"standard\": " << timing(r.standard)
        << ", \"jit\": " << (r.jit ? timing(*r.jit) : "null") << ", \"jit_note\": " << quoted(r.jit_note)
        << ",\n     \"jit_vs_standard_difference\": " << number(r.jit_difference)
        << ", \"kernels_per_call\": {\"standard\": " << r.standard_kernels << ", \"jit\": " << r.jit_kernels << "}"
        << ",\n     \"bytes\": " << format(r.bytes, 0) << ", \"flops\": " << format(r.flops, 0)
        << ", \"standard_peak_temporary_bytes\": " << format(r.standard_peak_temporary_bytes, 0)
        << ", \"memory_floor_ms\": " << number(r.memory_floor_ms) << ", \"op_floors_ms\": "
        << number(r.op_floors_ms) << ", \"copy_bandwidth_gbs\": " << format(r.bandwidth / 1e9, 2);
    if (r.blas_ms > 0)
      out << ",\n     \"blas_ms\": " << number(r.blas_ms) << ", \"kiln_matmuls_ms\": " << number(r.matmul_ms)
          << ", \"compute_floor_ms\": " << number(r.compute_floor_ms)
          << ", \"sgemm_gflops\": " << format(r.sgemm_rate * 1e-9, 1);
    if (r.jit)
      out << ",\n     \"cold_first_call_ms\": " << format(r.cold_first_call_ms, 2)
          << ", \"warm_cache_first_call_ms\": " << format(r.warm_cache_first_call_ms, 2)
          << ", \"jit_peak_temporary_bytes\": " << format(r.jit_peak_temporary_bytes, 0);
    if (!r.input_files.empty())
      out << ",\n     \"files\": {\"inputs\": " << quoted_list(r.input_files)
          << ", \"standard\": " << quoted_list(r.standard_files) << ", \"jit\": " << quoted_list(r.jit_files) << "}";
    out << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  out << "  ],\n  \"failed_workloads\": [";
  for (std::size_t i = 0; i < failures.size(); ++i)
    out << (i ? ", " : "") << "{\"id\": " << quoted(failures[i].id) << ", \"error\": " << quoted(failures[i].error) << "}";
  out << "]\n}\n";
}

}  // namespace kiln::bench
