#pragma once
// kiln's side of the JIT runtime ABI: the table every generated CPU kernel
// receives (runtime_abi.h).

#include "compiler/codegen/cpu/runtime_abi.h"

namespace kiln::compiler::cpu {

const kiln_runtime& runtime_table();

}  // namespace kiln::compiler::cpu
