#pragma once
// The workload suite: each workload's standard and JIT times, checked
// against each other first, and its floors, all measured in the same run;
// the table, the JSON file and the saved inputs/outputs that the peers
// (bench/peers/) read.

#include "workloads.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::bench {

struct Result {
  std::string id, name, shape;
  Device device = Device::cpu();
  std::optional<bool> tf32;        // a GPU workload's matmul precision (Workload::tf32)
  bool bf16 = false;               // bf16 inputs (the -bf16 workloads): saved as their f32 values for the peers
  std::vector<bool> bf16_inputs;   // which inputs are bf16 (adam-bf16's moments are f32)
  int batch = 1;                   // calls per timed run on a GPU (device_timing.h); 1 on the CPU
  Timing standard;
  std::optional<Timing> jit;       // empty when the JIT fell back or computed something else
  std::string jit_note;            // why there is no JIT time
  double jit_difference = 0;       // largest |JIT - standard| / largest |standard|, per output
  std::int64_t standard_kernels = 0, jit_kernels = 0;  // kernels launched per call
  double bytes = 0, flops = 0;
  double bandwidth = 0;            // bytes/s at this workload's footprint (device to device on a GPU)
  double memory_floor_ms = 0;      // bytes / bandwidth
  double compute_floor_ms = 0;     // flops / the best sgemm rate measured in this run
  double sgemm_rate = 0;           // that rate: OpenBLAS on the workload's shapes, or at 2048^2 if faster;
                                   // on a GPU, cuBLAS on the workload's shapes
  double floor_ms = 0;             // max(memory floor, compute floor)
  double op_floors_ms = 0;         // sum of the standard executor's ops' floors
  double blas_ms = 0;              // OpenBLAS (cuBLAS on a GPU) alone on the workload's matmul work (0: no matmul)
  double matmul_ms = 0;            // kiln's standard matmuls alone
  double matmul_output_bytes = 0;  // the largest matmul result
  double cold_first_call_ms = 0;        // trace + compile + run, empty caches
  double warm_cache_first_call_ms = 0;  // trace + load from the disk cache + run
  double jit_peak_temporary_bytes = 0;  // peak allocator bytes during one JIT call, beyond inputs and outputs
  double standard_peak_temporary_bytes = 0;  // the same during one standard call (a training step's
                                             // saved activations and gradients show here)
  std::vector<std::string> input_files, standard_files, jit_files;  // under --save-inputs, relative to it
};

// Compares the outputs of one standard and one JIT call and records the
// JIT's fallback or disagreement (then `result.jit_note` says why and there
// is no JIT time), and the kernels each launched.
void judge_jit(const Workload& workload, const std::vector<Tensor>& standard, const std::vector<Tensor>& jit,
               Result& result);
// Copy bandwidth at the workload's footprint, OpenBLAS alone, kiln's
// matmuls alone, and the floors that follow.
// sampled_bandwidth: the copy bandwidth sampled while the workload ran (BandwidthSampler); 0 measures it now.
void measure_floors(const Workload& workload, int runs, Result& result, double sampled_bandwidth = 0);
// First calls of a new JIT function (cold and with a warm disk cache) and
// the peak temporary memory of a steady call.
void measure_first_calls(const Workload& workload, Result& result);
// Writes inputs and outputs as .npy files under directory/<id>/.
void save_tensors(const std::string& directory, const Workload& workload, const std::vector<Tensor>& standard,
                  const std::vector<Tensor>& jit, Result& result);

// Everything above plus median timings of both functions (on a GPU, per
// call in batches of back-to-back calls: device_timing.h).
Result run_workload(const Workload& workload, int runs, const std::string& save_directory);

// "Intel(R) Xeon(R) ..." from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model();
// A workload that threw instead of giving a Result.
struct Failure {
  std::string id, error;
};

// The results of one device's suite.
void print_table(const std::vector<Result>& results, int runs, Device device);
void write_json(const std::vector<Result>& results, const std::vector<Failure>& failures, int runs, Device device,
                std::ostream& out);

}  // namespace kiln::bench
