#pragma once
// Ahead-of-time export, as XLA's tfcompile, jax.export and PyTorch's AOTInductor:
// kiln::export_function traces a function for one input signature, compiles its
// graph as the JIT would, and writes the generated kernels as C++ source files
// that a program builds with its own code. The program then calls the function
// with no C++ compiler, tracer or module cache at run time.
//
//   auto seed = [](kiln::Tensor a, kiln::Tensor b) { return kiln::relu(kiln::matmul(a, b)); };
//   kiln::export_function(seed, std::tuple{a, b}, {.directory = "exported", .name = "seed"});
//
// writes, in exported/:
//   seed.h          kiln::Tensor seed(const kiln::Tensor& input0, const kiln::Tensor& input1);
//   seed_c.h        a C header: int seed_c(const float* input0, const float* input1, float* output0);
//                   and const char* seed_c_error(void);  (includes no kiln header)
//   seed.cpp        the function's graph, its kernel table and captured tensors, and both entry points
//   seed_kernels.cpp  the generated kernels (what get_compiler_ir(Stage::source) shows)
//   seed.cmake      include() it after find_package(kiln): a static library target `seed`, the kernels
//                   compiled with the JIT's flags, so the program computes what the JIT computes, bit for bit
//
// The program links kiln (the library runs the kernels: its thread pool, GEMM and
// library kernels), and must link the same kiln version that exported the
// function: at its first call the function checks that this library lowers the
// graph to the same kernels (else a kiln::CompileError saying to export again).
// Tensors the function captures are exported as constants: their values when it
// was exported. The kernels are compiled with -march=native, for the machine that
// builds the program. CPU only: exporting for inputs on a GPU is a CompileError.

#include <kiln/function.h>
#include <kiln/tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

extern "C" {
struct kiln_runtime;
}

namespace kiln {

struct ExportOptions {
  std::string directory;  // created if missing; files of the same name are replaced
  std::string name;       // a C identifier: the function's, its files' and its CMake target's name
};

// What export_function wrote.
struct ExportedFiles {
  std::string header;    // <name>.h
  std::string c_header;  // <name>_c.h
  std::string source;    // <name>.cpp
  std::string kernels;   // <name>_kernels.cpp
  // <name>_kernels_<m>.cpp: the kernels of the function's branches and loop bodies (cond, while_loop, scan), a file
  // each (m from 1); none without control flow.
  std::vector<std::string> region_kernels;
  std::string cmake;     // <name>.cmake
  int kernel_count = 0;  // kernels per call, as the JIT would run them
};

namespace detail {

ExportedFiles export_traced(const TraceBody& body, const std::vector<Tensor>& tensors,
                            const std::vector<StaticValue>& statics, const ExportOptions& options,
                            const Location& location);

// What an exported function's <name>.cpp hands kiln (all of it static data of the program).
using ExportedKernel = void (*)(const kiln_runtime* runtime, void* const* buffers);
struct ExportedConstant {  // a captured tensor
  DType dtype;
  int rank;
  const std::int64_t* dimensions;
  const void* data;
};
struct ExportedFunction {
  const char* name;
  const char* exported_at;        // the export_function call's line
  const char* graph;              // the traced graph, IR text with locations
  const char* digest;             // SHA-256 of the generated source
  const ExportedKernel* kernels;  // by plan index; null for library kernels
  std::size_t kernel_count;
  const ExportedConstant* constants;
  std::size_t constant_count;
};

// Runs `function` on `inputs` (the exported signature's dtypes and shapes, on the CPU); errors name `location`.
std::vector<Tensor> call_exported(const ExportedFunction& function, const std::vector<Tensor>& inputs,
                                  const Location& location);
// The same over dense row-major host memory: returns 0, or -1 with the message in exported_error().
int call_exported_raw(const ExportedFunction& function, const void* const* inputs, void* const* outputs) noexcept;
// The message of the calling thread's last failed call_exported_raw ("" if none).
const char* exported_error() noexcept;

}  // namespace detail

// Exports `callable` for the example arguments' signature: Tensors (their dtypes and shapes; the values do not
// matter) and static values (static_arguments.h), as it would be called. The callable may be a kiln::Function.
// Throws kiln::CompileError naming the op and its line for a graph the JIT cannot compile, kiln::ValueError for
// a name that is not a C identifier, kiln::IOError when a file cannot be written.
template <class Callable, class... Arguments>
ExportedFiles export_function(const Callable& callable, const std::tuple<Arguments...>& example_arguments,
                              const ExportOptions& options, Location location = Location::current()) {
  if constexpr ((detail::check_argument<Arguments>() && ...)) {
    using Stored = std::decay_t<Callable>;  // a function is kept as a pointer to it
    using Result = detail::ResultOfArguments<Stored, Arguments...>;
    return std::apply(
        [&](const Arguments&... arguments) {
          detail::SplitArguments<Arguments...> split(arguments...);
          return detail::export_traced(detail::trace_body_with_statics<Result, Stored, Arguments...>(
                                           std::make_shared<const Stored>(callable), std::move(split.slots)),
                                       split.tensors, split.statics, options, location);
        },
        example_arguments);
  } else {
    return {};
  }
}

}  // namespace kiln
