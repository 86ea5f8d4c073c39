#pragma once
// kiln's side of the JIT runtime ABI: the table every generated CPU kernel
// receives (runtime_abi.h).

#include "compiler/codegen/cpu/runtime_abi.h"

namespace kiln::compiler::cpu {

// The table for one call (the current thread count filled in).
kiln_runtime runtime_table();

}  // namespace kiln::compiler::cpu
