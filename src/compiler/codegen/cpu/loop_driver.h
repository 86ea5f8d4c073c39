#pragma once
// The generated driver of a compiled loop (compiler/loop_layout.h): `kiln_loop`, an entry point of the step's module
// that runs the step's kernels once per iteration in a loop of its own -- the carries passed on by pointer, a scan's
// elements and rows addressed in place, a while_loop's condition read from the flag its kernels write -- so that an
// iteration costs the kernels' calls and nothing of the host's.

#include "compiler/loop_layout.h"

#include <string>

namespace kiln::compiler::cpu {

// The entry point's name.
inline constexpr const char* loop_entry_point = "kiln_loop";

// The driver's source, to follow the step's kernels (it declares them, so it may also stand in a translation unit
// of its own). `loop` names the loop node for the reader ("%5 while_loop of @f").
std::string loop_driver_source(const LoopLayout& layout, const std::string& loop);

}  // namespace kiln::compiler::cpu
