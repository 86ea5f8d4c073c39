#pragma once
// Products with few rows (a layer applied to a few examples: m <= kShortRows), for sgemm. Private to kernels/cpu.
//
// sgemm's loops share the packed B block of a column panel among the threads that take the panel's row strips: with
// one to three strips, one thread or two take each panel in turn, and B is copied into the block and read from it
// again, a panel at a time (4096^2 B on Zen 3, two threads: 2 rows 15 ms, 8 rows 35, where reading B once takes
// about 2). Here the threads claim runs of whole column panels (about 1024 columns) instead, and read an untransposed
// B where it lies: a group of 8 rows at a time across the run, each row's ~4 KiB read in order (the prefetchers
// follow 8 such streams; runs of one 240-column panel measured slower), every row strip multiplying each 16-column
// tile while it is in L1, the sums carried in a buffer from group to group. A transposed B is packed a tile at a
// time (16 of its stored rows, read along their length) through all K blocks. B crosses memory once, both threads
// stream it, and no thread waits for another (2 rows of 4096^2: 2.5 ms; 8 rows: 4.0).
//
// The same plan (plan_sgemm), blocks, epilogue calls and summation order as sgemm: every element sums the plan's K
// blocks in order, each with the microkernel's fused multiply-adds in order, so the results are sgemm's, bit for
// bit, whatever the thread count.

#include "kernels/cpu/gemm.h"

#include <cstdint>

namespace kiln::kernels::cpu::gemm_detail {

// Products with at most this many rows take sgemm_short: three of AVX2's 6-row strips (one of AVX-512's 14 and a
// short one).
inline constexpr std::int64_t kShortRows = 16;

// Whether sgemm_short takes a product of at most kShortRows rows: A is packed whole, all K blocks of every strip
// (about 1.5 x m x k floats), so not where that exceeds kShortPackedABytes (a product thousands of K blocks deep,
// which sgemm's own loops take with their bounded buffers).
inline constexpr std::int64_t kShortPackedABytes = std::int64_t{16} << 20;
bool takes_short_product(const GemmPlan& plan);

// sgemm's contract for plan.m <= kShortRows (sgemm's arguments, with `plan` = plan_sgemm(m, n, k)). `prepacked`,
// when not null, holds all of op(B) packed as sgemm packs a loop's invariant operand: column panels one after
// another, each of B's whole depth, K blocks in order, each block's micro-panels in order.
void sgemm_short(const GemmPlan& plan, const float* a, std::int64_t lda, bool transpose_a, const float* b,
                 std::int64_t ldb, bool transpose_b, const float* prepacked, float* c, std::int64_t ldc,
                 const GemmEpilogue& epilogue);

// One K block of a product whose B (untransposed) is read in place: C[0:rows, 0:columns] = A_block B_block, or C
// plus it when `accumulate`, with the microkernel's sums (each element's products over the block's rows summed in
// order from zero, then stored into C or added to it: sgemm's order). rows <= kShortRows; `a` holds the block's
// strips as pack_a_strip packs them (k-major when a_k_major), kMr x kKcMax floats apart; `b` is the block's first
// row, ldb floats apart; `tile` has room for depth x kNr floats (the columns past the last whole tile), `sums` for
// rows x ld (ld >= the columns rounded up to kNr).
void block_times_rows_in_place(std::int64_t rows, std::int64_t depth, const float* a, bool a_k_major, const float* b,
                               std::int64_t ldb, std::int64_t columns, float* tile, float* sums, std::int64_t ld,
                               float* c, std::int64_t ldc, bool accumulate);

}  // namespace kiln::kernels::cpu::gemm_detail
