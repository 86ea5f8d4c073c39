#pragma once
// bf16 and f16 computed in f32, as the standard executor computes them (kernels::run widens every operand of
// a 16-bit op to f32 and rounds its result once): every op that computes on a bf16 or f16 value reads it
// through a cast to f32 and, where its result was bf16 or f16, computes an f32 result and casts that back.
// Ops that only move elements (reshape, transpose, broadcast_to, slice, concat, expand_dims, squeeze, gather,
// take_along_axis) keep the 16-bit type: they move the bits. What remains of bf16 and f16 after this pass is
// data movement and casts between them and f32, or from f64 to them: the code generator's lanes of bits,
// widened where read and rounded where stored (codegen/cpu/prelude.h, "bf16 and f16"). So a fused chain
// rounds where the standard executor rounds, and the two agree to the bit wherever they agree in f32.
//
// A 16-bit matmul stays one where the backend multiplies its dtype as it is (BackendCapabilities::multiplies: bf16
// in the CPU's AMX tiles or AVX512_BF16 dot products, bf16 and f16 on a GPU's tensor cores): its product is summed in
// f32 and rounded once, what the widened product would give (to the order of the sums).
//
// Casts that do not fit those are split: a 16-bit value to anything but f32 goes through f32 (exact), an
// integer or bool to 16 bits through f64 (exact; then one rounding, as the standard kernel rounds), and bf16
// to f16 through f32. An iota of bf16 or f16 counts in f32 (f64 past 2^24 elements) and rounds once.
//
// A lowering pass (on the CPU and on CUDA), after the optimizations (which must not fold the casts it adds: an
// f32 -> bf16 -> f32 round trip is a rounding, not an identity) and before fusion.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

// Rewrites `graph` as above for a backend of `capabilities`; returns whether it changed.
bool widen_half_precision(ir::Graph& graph, const BackendCapabilities& capabilities);

}  // namespace kiln::compiler
