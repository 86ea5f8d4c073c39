#pragma once
// Runs a fuzz case on the float64 reference, the standard executor and the
// JIT, and compares both executors' outputs with the reference's within
// reference::graph_tolerance. The graph is valid and the inputs fit it, so
// every exception (kiln::Error or not) is a failure. With CUDA support it can
// also run the CUDA JIT's generated kernels on the host (cuda_emulation.h),
// scalar and `_vector` variants, and run both executors on cuda:0 (a GPU, or
// the CUDA simulator of a KILN_CUDA=SIMULATED build).

#include "fuzz_case.h"

#include <exception>
#include <string>
#include <vector>

namespace kiln::fuzz {

// In to_string()'s order.
enum class Executor { reference, standard, jit, cuda_emulated, cuda_emulated_vector, cuda_standard, cuda_jit };
std::string_view to_string(Executor executor);

struct Failure {
  // Gradient mode (gradient_check.h): a failure of the derivative graph, or of the derivatives against finite
  // differences.
  bool gradient = false;
  Executor executor = Executor::reference;
  bool exception = false;  // else a mismatch
  std::string error_kind;  // exception: "kiln::CompileError", ..., or "std::exception"
  int output = -1;         // mismatch: which output
  std::string mismatch;    // mismatch: its dtype and kind, "f32 value", "f64 NaN", "bool byte", "i32 shape"
  std::string detail;      // compare()'s message or the exception's what()

  // What must stay the same while shrinking, so that it does not slip to
  // another bug: the executor, and the error kind or the mismatch.
  // ("jit mismatch f32 value", "standard kiln::InternalError",
  // "cuda-emulated-vector mismatch f64 NaN", "gradient jit mismatch f32
  // value", "gradient reference mismatch reverse mode vs finite differences")
  std::string signature() const;
  std::string to_string() const;
};

// An exception of `executor` as a failure (its error kind from the message's "kiln::ShapeError: " prefix).
Failure exception_failure(Executor executor, const std::exception& error);

struct CheckOptions {
  bool standard = true;
  bool jit = true;
  bool cuda_emulated = false;  // needs cuda_emulation_available()
  bool cuda = false;           // the standard executor and the JIT on cuda:0; needs cuda_device_available()
};

// Whether cuda:0 exists (a GPU, or the CUDA simulator).
bool cuda_device_available();

// Where a check's time went, in seconds (accumulated).
struct CheckTimes {
  double reference = 0, standard = 0, compile = 0, jit_run = 0, cuda_compile = 0, cuda_run = 0;
};

// What the calling thread's check() is running ("reference", "standard
// executor", "JIT compile", "JIT run", "CUDA emulation compile", "CUDA
// emulation run", "CUDA standard executor", "CUDA JIT compile", "CUDA JIT
// run", or ""), for a crash report.
const char* current_stage();

// Every failure of `fuzz_case` (empty: all executors agree with the
// reference). A reference exception stops the check there.
std::vector<Failure> check(const FuzzCase& fuzz_case, const CheckOptions& options = {}, CheckTimes* times = nullptr);

}  // namespace kiln::fuzz
