#include "differential_check.h"

#include "cuda_emulation.h"

#include "compiler/jit.h"
#include "exec/standard_executor.h"
#include "reference/compare.h"
#include "reference/reference_evaluator.h"

#include <kiln/config.h>
#include <kiln/error.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <chrono>
#include <optional>

namespace kiln::fuzz {
namespace {

// What kind of difference compare()'s message describes.
std::string mismatch_kind(const std::string& message) {
  if (message.rfind("dtype mismatch", 0) == 0) return "dtype";
  if (message.rfind("shape mismatch", 0) == 0) return "shape";
  if (message.find("NaN on one side") != std::string::npos) return "NaN";
  if (message.find("infinity") != std::string::npos) return "infinity";
  if (message.find("bool byte") != std::string::npos) return "byte";
  return "value";
}

void compare_outputs(Executor executor, const ir::Graph& graph, const std::vector<runtime::Array>& actual,
                     const std::vector<reference::Value>& expected, std::vector<Failure>& failures) {
  if (actual.size() != expected.size()) {
    Failure failure;
    failure.executor = executor;
    failure.mismatch = "output count";
    failure.detail = "returned " + std::to_string(actual.size()) + " outputs, the graph has " +
                     std::to_string(expected.size());
    failures.push_back(failure);
    return;
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    reference::Tolerance tolerance = reference::graph_tolerance(graph, graph.outputs[i]);
    reference::Comparison comparison = reference::compare(actual[i], expected[i], tolerance);
    if (comparison.ok) continue;
    Failure failure;
    failure.executor = executor;
    failure.output = static_cast<int>(i);
    failure.mismatch = std::string(kiln::to_string(expected[i].dtype)) + " " + mismatch_kind(comparison.message);
    failure.detail = comparison.message;
    failures.push_back(failure);
  }
}

thread_local const char* stage = "";

// Times a stage and names it for crash reports while it runs.
class Stopwatch {
 public:
  Stopwatch(const char* name, double* total) : total_(total), start_(std::chrono::steady_clock::now()) {
    stage = name;
  }
  ~Stopwatch() {
    stage = "";
    if (total_) *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

// The CUDA JIT's kernels on the host: the scalar kernels, then the `_vector`
// variants where the module has any. A module that does not compile fails
// both.
void check_cuda_emulated(const FuzzCase& fuzz_case, const std::vector<reference::Value>& expected, CheckTimes& times,
                         std::vector<Failure>& failures) {
  std::optional<EmulatedCudaModule> module;
  try {
    Stopwatch stopwatch("CUDA emulation compile", &times.cuda_compile);
    module.emplace(fuzz_case.graph);
  } catch (const std::exception& error) {
    failures.push_back(exception_failure(Executor::cuda_emulated, error));
    return;
  }
  for (Executor executor : {Executor::cuda_emulated, Executor::cuda_emulated_vector}) {
    const bool vector = executor == Executor::cuda_emulated_vector;
    if (vector && !module->has_vector_variants()) continue;
    try {
      std::vector<runtime::Array> outputs;
      {
        Stopwatch stopwatch("CUDA emulation run", &times.cuda_run);
        outputs = module->run(fuzz_case.inputs, vector);
      }
      compare_outputs(executor, fuzz_case.graph, outputs, expected, failures);
    } catch (const std::exception& error) {
      failures.push_back(exception_failure(executor, error));
    }
  }
}

#if KILN_HAVE_CUDA
// (A graph without parameters runs where its constants are made, on the CPU: its outputs are already there.)
std::vector<runtime::Array> to_device(const std::vector<runtime::Array>& arrays, Device device) {
  std::vector<runtime::Array> copies;
  for (const runtime::Array& array : arrays)
    copies.push_back(array.device() == device ? array : runtime::cuda::copy_to(array, device));
  return copies;
}

// The standard executor and the JIT on cuda:0, inputs copied there and
// outputs back.
void check_cuda(const FuzzCase& fuzz_case, const std::vector<reference::Value>& expected, CheckTimes& times,
                std::vector<Failure>& failures) {
  const Device gpu = Device::cuda(0);
  config::allow_tf32 = false;  // graph_tolerance is float32's; TF32 products are tested on their own
  try {
    std::vector<runtime::Array> outputs;
    {
      Stopwatch stopwatch("CUDA standard executor", &times.cuda_run);
      outputs = to_device(exec::run_standard(fuzz_case.graph, to_device(fuzz_case.inputs, gpu)), Device::cpu());
    }
    compare_outputs(Executor::cuda_standard, fuzz_case.graph, outputs, expected, failures);
  } catch (const std::exception& error) {
    failures.push_back(exception_failure(Executor::cuda_standard, error));
  }
  try {
    compiler::CompiledFunction compiled;
    {
      Stopwatch stopwatch("CUDA JIT compile", &times.cuda_compile);
      compiled = compiler::compile(fuzz_case.graph, gpu);
    }
    std::vector<runtime::Array> outputs;
    {
      Stopwatch stopwatch("CUDA JIT run", &times.cuda_run);
      outputs = to_device(compiled.executable->run(to_device(fuzz_case.inputs, gpu)), Device::cpu());
    }
    compare_outputs(Executor::cuda_jit, fuzz_case.graph, outputs, expected, failures);
  } catch (const std::exception& error) {
    failures.push_back(exception_failure(Executor::cuda_jit, error));
  }
}
#endif

}  // namespace

bool cuda_device_available() {
#if KILN_HAVE_CUDA
  return runtime::cuda::device_count() > 0;
#else
  return false;
#endif
}

const char* current_stage() { return stage; }

// "kiln::ShapeError" from "kiln::ShapeError: op: detail".
static std::string error_kind(const std::exception& error) {
  if (!dynamic_cast<const Error*>(&error)) return "std::exception";
  std::string what = error.what();
  return what.substr(0, what.find(": "));
}

Failure exception_failure(Executor executor, const std::exception& error) {
  Failure failure;
  failure.executor = executor;
  failure.exception = true;
  failure.error_kind = error_kind(error);
  failure.detail = error.what();
  return failure;
}

std::string_view to_string(Executor executor) {
  static constexpr std::string_view names[] = {"reference",     "standard",      "jit",     "cuda-emulated",
                                               "cuda-emulated-vector", "cuda-standard", "cuda-jit"};
  return names[static_cast<int>(executor)];
}

std::string Failure::signature() const {
  return std::string(gradient ? "gradient " : "") + std::string(fuzz::to_string(executor)) + " " +
         (exception ? error_kind : "mismatch " + mismatch);
}

std::string Failure::to_string() const {
  std::string text = signature();
  if (output >= 0) text += " (output " + std::to_string(output) + ")";
  return text + ": " + detail;
}

std::vector<Failure> check(const FuzzCase& fuzz_case, const CheckOptions& options, CheckTimes* times) {
  CheckTimes ignored;
  if (!times) times = &ignored;
  std::vector<Failure> failures;
  std::vector<reference::Value> expected;
  try {
    Stopwatch stopwatch("reference", &times->reference);
    expected = reference::evaluate(fuzz_case.graph, fuzz_case.inputs);
  } catch (const std::exception& error) {
    failures.push_back(exception_failure(Executor::reference, error));
    return failures;
  }
  if (options.standard) {
    try {
      std::vector<runtime::Array> outputs;
      {
        Stopwatch stopwatch("standard executor", &times->standard);
        outputs = exec::run_standard(fuzz_case.graph, fuzz_case.inputs);
      }
      compare_outputs(Executor::standard, fuzz_case.graph, outputs, expected, failures);
    } catch (const std::exception& error) {
      failures.push_back(exception_failure(Executor::standard, error));
    }
  }
  if (options.jit) {
    try {
      compiler::CompiledFunction compiled;
      {
        Stopwatch stopwatch("JIT compile", &times->compile);
        compiled = compiler::compile(fuzz_case.graph);
      }
      std::vector<runtime::Array> outputs;
      {
        Stopwatch stopwatch("JIT run", &times->jit_run);
        outputs = compiled.executable->run(fuzz_case.inputs);
      }
      compare_outputs(Executor::jit, fuzz_case.graph, outputs, expected, failures);
    } catch (const std::exception& error) {
      failures.push_back(exception_failure(Executor::jit, error));
    }
  }
  if (options.cuda_emulated) check_cuda_emulated(fuzz_case, expected, *times, failures);
#if KILN_HAVE_CUDA
  if (options.cuda) check_cuda(fuzz_case, expected, *times, failures);
#endif
  return failures;
}

}  // namespace kiln::fuzz
