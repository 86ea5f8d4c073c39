#pragma once
// The CPU code generator: one C++ translation unit per concrete function,
// with one `extern "C"` entry point `kiln_kernel_<k>` per generated kernel
// of the fusion plan (library kernels have none; the executable runs their
// standard kernel). The text starts with the prelude (prelude.h,
// vector_math.h, runtime_abi.h) and is meant to be read: KILN_DUMP_TO and
// get_compiler_ir(Stage::source) show it.

#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/fusion.h"
#include "ir/graph.h"

#include <string>
#include <vector>

namespace kiln::compiler::cpu {

std::string generate_source(const ir::Graph& graph, const FusionPlan& plan);

// The same kernels as generate_source's, in at most `limit` (and 8) translation units
// that GCC can compile at once (each with the prelude and its kernels'
// math), grouped by their estimated compile time; one unit -- the whole
// source but for its first line -- where splitting would not finish sooner.
std::vector<std::string> translation_units(const ir::Graph& graph, const FusionPlan& plan, int limit);

// The flags generated sources are compiled with (besides -shared -fPIC and
// the output): the same language, ISA and floating-point semantics as
// kiln's own standard kernels, so results agree.
std::vector<std::string> compile_flags();

// What the shared object links against, after the source.
std::vector<std::string> link_libraries();

// compile_flags() and link_libraries() for the function `name`.
BuildOptions build_options(const std::string& name);

// The entry point of kernel `index`.
std::string entry_point(int index);

// The embedded prelude text.
const char* prelude();

// The name a source shown to a user includes the prelude by: KILN_DUMP_TO writes it under this name.
inline constexpr const char* prelude_file_name = "kiln-prelude.h";

// generate_source's text as a user reads it (the `source` stage): the prelude, thousands of lines the same in
// every module, replaced by an #include of prelude_file_name, so that the function's own kernels come first.
std::string source_for_reading(const std::string& source);

}  // namespace kiln::compiler::cpu
