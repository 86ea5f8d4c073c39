#pragma once
// Options and statistics of kiln::function (see function.h).

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// What a jit_compile function does when its graph cannot be compiled.
enum class Fallback {
  standard,  // warn once per signature and run on the standard executor
  none,      // throw kiln::CompileError (TensorFlow's must-compile semantics)
};

// Stages of get_compiler_ir, in pipeline order.
enum class Stage {
  traced,     // the graph as traced
  optimized,  // after simplify, cse and dce
  fused,      // the kernel plan, with the reason for each fusion decision (or that it fell back, and why)
  source,     // the generated C++ / CUDA source
};
std::string_view to_string(Stage stage);

struct FunctionOptions {
  bool jit_compile = false;
  // KILN_JIT_STRICT=1 in the environment turns `standard` into `none`.
  Fallback on_compile_failure = Fallback::standard;
  // Shown in IR, dumps and warnings; default: the kiln::function call's
  // file name without its extension, '_' and its line ("model_42").
  std::string name = {};
  // After this many traces the function warns (once) that it keeps
  // retracing, naming the argument that changes (or saying that a captured
  // tensor did).
  int retrace_warning_limit = 5;
};

struct FunctionStatistics {
  std::int64_t calls = 0;
  std::int64_t traces = 0;       // one per new signature (static values included), one per changed-capture retrace
  std::int64_t compiles = 0;     // JIT builds actually compiled (not found in the disk cache)
  std::int64_t cache_hits = 0;   // JIT modules loaded from the disk cache
  std::int64_t fallbacks = 0;    // signatures that fell back to the standard executor
  double trace_seconds = 0;
  double compile_seconds = 0;
  std::int64_t kernels_per_call = 0;  // in the most recent call
};

}  // namespace kiln
