#pragma once
// kiln's own single-precision GEMM, for the JIT's fused matmul kernels: C = op(A) * op(B) computed block by
// block, each finished block handed to an epilogue while it is still in cache, so that a fused
// `reduce_sum(relu(matmul(x, y) + ...))` never writes the matmul result to memory in full. The standard
// executor keeps calling OpenBLAS (blas.h); sgemm never calls it, but the JIT's entry, sgemm_or_openblas (at the
// end), hands large deep products to OpenBLAS, where its rate is worth more than the fused epilogue.
//
// Loop nest (GotoBLAS/BLIS order, with the K loop inside the column panel so that a panel's sums finish while
// its buffer is small):
//   for each row panel (all rows when C is given; when not, as many as the C buffer budget allows)
//     for each column panel jc of nc (512) columns:   one parallel_pieces call ("region")
//       for each K block pc of kc (<= 256; <= 384 for a gathered A read in place) and each row strip of kMr
//       (14) rows, in any order that respects K order per strip: copy the strip's A rows into an L1 buffer
//       (their lines prefetched while the previous strip ran), run the 14 x 32 microkernel across the panel's
//       packed B block (kc x nc, L2-resident, shared, packed once by whichever thread gets to it), and after
//       the last K block pass C[strip, jc] -- still in L1/L2 -- to the epilogue.
// Threads claim (strip, K block) items that are ready instead of meeting at a barrier per K block (see
// RegionWork in gemm.cpp): on a shared machine the OS often preempts one thread mid-strip for a time slice.
// Packing traffic: B is packed once per row panel (once when C is given); A is read n / nc times (a plain
// copy of 14 rows, ~1-2% of the time); C, or its buffer, is loaded and stored once per K block.
// C accumulates in the caller's `c`, or, without one, in a panel buffer of rows x nc floats.
// Without C, when B's whole depth for a column panel (k x nc) fits the budget and row panels would pack B
// more than once, the order is instead (plan.whole_depth): for each column panel, B is packed for all of K,
// and each thread takes one row strip at a time through all K blocks, in a C strip of its own -- B packed
// once, no C panel buffer, the same summation order.

#include <cstdint>

namespace kiln::kernels::cpu {

// Called for each finished block of C, possibly from several threads at once.
struct GemmEpilogue {
  // tile: C[row_begin:row_end, column_begin:column_end] with leading dimension `ld` (floats);
  // `block` numbers the blocks 0..block_count-1 in a fixed order that does not depend on threads,
  // so callers can keep deterministic per-block partial results.
  void (*function)(void* context, const float* tile, std::int64_t ld, std::int64_t row_begin, std::int64_t row_end,
                   std::int64_t column_begin, std::int64_t column_end, std::int64_t block) = nullptr;
  void* context = nullptr;
};

// The blocking of one problem size. It depends on m, n, k only (never on the thread count, nor on whether C
// is written), so blocks and summation order are the same for every call of that size.
struct GemmPlan {
  std::int64_t block_count = 0;  // blocks the epilogue sees: row_strips * column_panels
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t strip_rows = 0;      // rows per block (the microkernel's tile height); the last strip may be shorter
  std::int64_t row_strips = 0;      // ceil(m / strip_rows)
  std::int64_t panel_columns = 0;   // columns per block (nc); the last panel may be narrower
  std::int64_t column_panels = 0;   // ceil(n / panel_columns)
  std::int64_t depth_block = 0;     // K per block (kc); C sums K blocks in order
  std::int64_t panel_row_strips = 0;  // strips per row panel (bounds the C buffer when c is null)
  // Calls without c pack B's whole depth per column panel and finish one row strip at a time (see
  // WholeDepthWork in gemm.cpp): chosen when that fits the budget and saves packing B once per row panel.
  bool whole_depth = false;
};

// Blocks of C the epilogue will see for this problem (so the caller can size per-block partials). Block
// b covers rows [s * strip_rows, min(m, (s + 1) * strip_rows)) and columns [p * panel_columns,
// min(n, (p + 1) * panel_columns)), where s = b % row_strips and p = b / row_strips.
GemmPlan plan_sgemm(std::int64_t m, std::int64_t n, std::int64_t k);

// C = op(A) * op(B), f32, row-major; op = transpose when the flag is set (lda/ldb are the leading dimensions of
// A and B as stored). If `c` is non-null, C is written there (ldc); the epilogue, if set, is called on every
// block once that block's full K sum is done (k = 0: on zeros), with the tile in `c` or, when c is null, in a
// temporary buffer. Every element of C is summed in the same order whatever the thread count (K blocks of
// depth_block in order, each summed in order with fused multiply-adds), so results are bitwise reproducible.
// Multithreaded through runtime::parallel_pieces; never calls OpenBLAS. Temporaries come from
// runtime::allocate: three packed B blocks (kc x nc, at most 1.5 MiB), an A strip per thread (21 KiB), and,
// when c is null, the C panel buffer (or, whole-depth, B's whole depth for one column panel and a C strip
// per thread) -- all together at most ~23% of m*n*4 bytes, or about 768 KiB when that is more (small
// problems), plus the per-thread strips beyond two threads. Products of at most 16 rows take other loops
// (gemm_short.h: B read in place, the same blocks and sums): their temporaries are A packed (about 1.5 x m x k
// floats, at most 16 MiB) and a few hundred KiB per thread.
// Preconditions (not checked): m, n, k >= 0; lda >= (transpose_a ? m : k), ldb >= (transpose_b ? k : n),
// ldc >= n; c does not overlap a or b.
void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, bool transpose_a,
           const float* b, std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
           const GemmEpilogue& epilogue);

// ---- A gathered from memory while it is packed (implicit im2col) ---------------------------------------------------
// The rows of A need not be a matrix in memory: a convolution's left operand is the taps of its (padded) input side
// by side, and writing them out first (im2col) costs more than the product at 3x3 (9 copies of the input, written
// and read again). Instead each strip of A is gathered from the input as sgemm packs it, the way cuDNN's implicit
// GEMM and XLA's CPU convolutions avoid the copy.
//
// A is m x k. Row r has coordinates (i_0, ..., i_{axes-1}) in `extents` (row-major; their product is m). The columns
// are the parts side by side, in order: part p covers `width` columns, and its element j of row r is
//   source[offset + sum over t of i_t * strides[t] + j]        when lower[t] <= i_t < upper[t] for every t,
//   0                                                          otherwise (a tap that falls on the padding).
// (The offset is added as an integer: for a row outside the bounds it may point outside the source.)
inline constexpr int kGatherMaxAxes = 6;
struct GatheredPart {
  const float* source = nullptr;
  std::int64_t offset = 0;
  std::int64_t width = 0;
  std::int64_t strides[kGatherMaxAxes] = {};
  std::int64_t lower[kGatherMaxAxes] = {};
  std::int64_t upper[kGatherMaxAxes] = {};
};
struct GatheredRows {
  int axes = 0;
  std::int64_t extents[kGatherMaxAxes] = {};
  int part_count = 0;
  const GatheredPart* parts = nullptr;
};

// sgemm with A gathered (the same plan, blocks, epilogue calls and summation order as sgemm with that A in memory,
// so the results are bitwise those of sgemm on the written-out A -- except without C where A is read in place and
// the plan is whole-depth: there the K blocks are deeper (gemm_detail::in_place_depth_block), and the results are
// those of the same blocking, still the same whatever the thread count). Always kiln's loops: OpenBLAS needs A in
// memory. Except at most 4 columns wide (a convolution to a channel or a few), where the microkernel's 16 or 32
// columns would be mostly padding: each element is then a dot product along K (gemm_narrow.cpp), its K blocks
// summed in order, each block by vector lanes and then the lanes in order -- the same blocks and epilogue calls,
// and the same results whatever the thread count, but not bitwise sgemm's. Preconditions (not checked): the parts'
// widths add up to k, the extents multiply to m, 0 <= axes <= kGatherMaxAxes, and every element a valid row reads is in
// its source.
void sgemm_gathered(std::int64_t m, std::int64_t n, std::int64_t k, const GatheredRows& a, const float* b,
                    std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc, const GemmEpilogue& epilogue);

// C = A^T op(B) with A (k x m) gathered as sgemm_gathered reads it: a convolution's filter gradient, its windows'
// transpose times the output's cotangent, with the windows never written. Each strip of A^T is kMr columns of the
// gathered rows (a few channels of a tap) over a K block of rows (positions), copied as sgemm copies a transposed A
// from memory, so the results are bitwise sgemm's with that A written out and transpose_a (same plan, blocks and
// epilogue calls). Same preconditions as sgemm_gathered, with A's rows numbering k and its columns m.
void sgemm_gathered_transposed(std::int64_t m, std::int64_t n, std::int64_t k, const GatheredRows& a, const float* b,
                               std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
                               const GemmEpilogue& epilogue);

// ---- large products through OpenBLAS (gemm_openblas.cpp) -------------------------------------------------------
// sgemm's loops run at 0.90-0.97 of OpenBLAS's rate on large products (tools/gemm_benchmark on Zen 3: 0.94 at
// 3072^3 and 4096^3, 0.92 at 1024 x 4096 x 4096, 0.90 at 8192^3), at 0.90-1.03 from 1536^3 to 2048^3 (below
// par when the machine is loaded), and ahead on small products (256^3: 1.8-2x), where OpenBLAS's thread
// hand-offs and packing weigh more. An epilogue fused into sgemm's tiles saves writing C and reading it back,
// 8 bytes per element: 2% of the product's time at k = 1024 (175 GFLOP/s, 30 GB/s), less beyond. But without C,
// sgemm keeps its temporaries within a quarter of C, and a deep product then needs narrow column panels (B's
// whole depth, or a C panel buffer of all rows, must fit): at k >= 768 the fused loops ran 0.68-0.97 of
// OpenBLAS followed by the same epilogue (0.68 at 256 x 1024 x 1024, 0.83 at 1024 x 1024 x 2048, 0.90-0.97 at
// 768^3 and 1024^3; 2026-12-01), while at k = 512 they were at par or ahead (0.96-1.11). So a product at least
// 768 deep with at least 256^2 outputs goes to OpenBLAS, and its blocks to the epilogue afterwards: the JIT's seed
// function then runs at the standard executor's GEMM rate (at 8192, 1.01x the standard executor's time instead of
// 0.89x), and its product is written (in panels of at most max(64 MiB, C / 4)). So does a narrow product, with
// at most 16 rows or columns (a matrix times a vector), where sgemm's packing of the wide operand costs more
// than the few products it feeds: 1.15-2x slower than OpenBLAS and the epilogue.
bool prefers_openblas(std::int64_t m, std::int64_t n, std::int64_t k);

// sgemm's contract -- the same blocks (plan_sgemm), numbered the same way, each passed to the epilogue once --
// with OpenBLAS computing C: into `c` in one call when it is given; else a panel of rows at a time into a
// buffer of at most max(64 MiB, a quarter of C) (panel_rows, a multiple of the plan's strip_rows, overrides it:
// for tests), each panel's blocks passed to the epilogue in parallel before the next panel. Every panel is a
// new OpenBLAS call that packs B again: 4 panels at 8192^3, about 1% of the time. C is OpenBLAS's, as the
// standard executor's matmul is (bitwise, for a C that is written); a panel's rows may be summed by another of
// OpenBLAS's kernels than the whole C's (within reassociation). The panels depend on the size only, so every
// call of a size gives the same results. Throws kiln::DeviceError if OpenBLAS cannot be loaded; dimensions
// must fit OpenBLAS's int.
void sgemm_through_openblas(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                            bool transpose_a, const float* b, std::int64_t ldb, bool transpose_b, float* c,
                            std::int64_t ldc, const GemmEpilogue& epilogue, std::int64_t panel_rows = 0);

// The JIT's GEMM: sgemm_through_openblas where prefers_openblas and OpenBLAS loads, sgemm otherwise.
void sgemm_or_openblas(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                       bool transpose_a, const float* b, std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
                       const GemmEpilogue& epilogue);

}  // namespace kiln::kernels::cpu
