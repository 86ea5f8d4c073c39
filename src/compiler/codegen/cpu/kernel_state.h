#pragma once
// The CPU generator's parts around the shared emitter (codegen/kernel_emitter.h): a kernel's work items receive a
// state struct (its runtime table and buffer pointers) that its entry point fills from the module's `buffers[]`;
// values are vectors of the register width (prelude.h's vec<T>).

#include "compiler/codegen/kernel_emitter.h"

#include <set>
#include <string>
#include <vector>

namespace kiln::compiler::cpu {

using codegen::Bound;
using codegen::Instance;
using codegen::KernelEmitter;
using codegen::Layout;
using codegen::Linear;
using codegen::literal;
using codegen::storage_type;

// C++ for the declarations of the kernel's buffers inside its state struct and their initialization from
// `buffers[]`.
std::string state_fields(const KernelEmitter& emitter);
std::string state_initialization(const KernelEmitter& emitter);
std::string vector_type(const KernelEmitter& emitter, ir::ValueId value);

// Each generator returns the kernel's C++ (helpers and an `extern "C"` entry
// point named kiln_kernel_<index>).
// Every kind: loop, reduction, column, gemm and attention kernels (row_kernel.h); gemm and attention kernels'
// epilogues are row walks over each tile.
std::string emit_row_kernel(KernelEmitter& emitter);

// A box of a kernel that reads concats piecewise, by emit_piece: its state, items function and setup function
// (which returns its item count), and its items in row-major order of its rows (-1 where they are not).
struct PieceCode {
  std::string text;
  std::int64_t items = -1;
  std::vector<std::int64_t> origin;  // where the box starts in the kernel's space
  std::set<int> inputs;              // the kernel inputs it loads, by position
};
PieceCode emit_piece(KernelEmitter& emitter);

// The entry point of kernel `index` over `space` that reads concats piecewise, running its `boxes` (emit_piece's).
std::string piece_entry(int index, const Shape& space, const std::vector<PieceCode>& boxes);

}  // namespace kiln::compiler::cpu
