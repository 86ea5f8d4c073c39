#pragma once
// bf16 x bf16 -> f32 matrix products in AMX tiles (Intel's Advanced Matrix Extensions: Sapphire Rapids and later),
// for the matmuls of bf16 tensors in both executors. Each 16 x 16 block of f32 accumulators takes 16 x 32 bf16 of A
// and 32 x 16 of B per instruction (TDPBF16PS), 1024 flops a cycle per core against AVX-512's 64 in f32. Where a
// CPU has no AMX but AVX512_BF16 (Cooper Lake, AMD Zen 4 and later), the same blocks with its dot products
// (VDPBF16PS: twice the multiplies of an f32 FMA). Products of bf16 are exact in f32 and summed in f32, so the
// results differ from an f32 GEMM of the widened operands by the order of the sums only, and by both
// instructions' treating subnormal bf16 inputs and results as zero.

#include "kernels/cpu/gemm.h"

#include <cstdint>

namespace kiln::kernels::cpu {

// Whether this CPU has AMX-BF16 and Linux lets this process use the tile registers (asked once, with
// arch_prctl(ARCH_REQ_XCOMP_PERM); refused on kernels before 5.16). KILN_NO_AMX=1 in the environment says no, to
// run the other path.
bool has_amx_bf16();
// Whether this CPU has AVX512_BF16 with AVX-512 usable, and its dot products run fast enough to beat the f32
// product of the widened operands (measured once: on Intel's cores VDPBF16PS runs at half an f32 FMA's flops).
// KILN_NO_AVX512_BF16=1 says no; KILN_AVX512_BF16=1 says yes wherever the instructions are.
bool has_avx512_bf16();
// Whether gemm_bf16 can run here: AMX tiles, or else AVX512_BF16's dot products.
bool has_bf16_products();

// The pieces gemm_bf16 hands its epilogue, numbered in a fixed order: each 32 x 32 block of C (fewer at the edges)
// in four pieces of 8 rows, called in order, a piece past an edge block's last row with no rows.
std::int64_t gemm_bf16_block_count(std::int64_t m, std::int64_t n);

// c[m x n] (row-major, ldc) = op(a) op(b), a and b bf16 bit patterns, row-major: op(a) is m x k (a k x m when
// transpose_a), op(b) k x n (n x k when transpose_b). Needs has_bf16_products(). Runs on kiln's threads. c may be null
// when only the epilogue is wanted: it then sees each block in a buffer of its own (as sgemm's, gemm.h).
void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
               bool transpose_a, const std::uint16_t* b, std::int64_t ldb, bool transpose_b, float* c,
               std::int64_t ldc, const GemmEpilogue& epilogue = {});

}  // namespace kiln::kernels::cpu
