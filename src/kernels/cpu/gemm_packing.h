#pragma once
// Copies of A and B in the layouts the GEMM microkernel reads (gemm_microkernel.h), shared by the drivers that
// call it -- sgemm and sgemm_gathered (gemm.cpp) and the attention kernel (attention.cpp) -- and the gathered
// narrow products (gemm_narrow.cpp), which take gather_a_strip's strips. Private to kernels/cpu.

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_strided.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu::gemm_detail {

// Block arithmetic of both drivers.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
inline std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// K blocks of a plan (one when k is 0: its block has depth 0 and writes zeros).
inline std::int64_t depth_blocks_of(const GemmPlan& plan) {
  return std::max<std::int64_t>(1, ceil_div(plan.k, plan.depth_block));
}

// Where a B packed whole for a loop (sgemm's prepack of an invariant operand) holds the K block from depth_begin of
// column panel `column_panel` (`columns` wide): column panels one after another, each of B's whole depth, K blocks in
// order, each block's micro-panels in order.
inline std::int64_t prepacked_offset(const GemmPlan& plan, std::int64_t column_panel, std::int64_t depth_begin,
                                     std::int64_t columns) {
  const std::int64_t panel_floats = std::max<std::int64_t>(1, plan.k) * round_up(plan.panel_columns, kNr);
  return column_panel * panel_floats + depth_begin * round_up(columns, kNr);
}

// Copies rows [row_begin, row_begin + rows) of op(A), columns (K) [depth_begin, depth_begin + depth), into a
// strip buffer of kMr x kKcMax floats in the layout ALayout says: rows of A as stored (ALayout::rows), or, for
// a transposed A, rows of the stored A^T (ALayout::k_major). A plain copy either way. rows <= kMr,
// depth <= kKcMax; lda is the leading dimension of A as stored.
void pack_a_strip(const float* a, std::int64_t lda, bool transpose_a, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, float* strip);

// Most rows of a convolution's A take a short cut. Its parts all read one source with the same strides, so a row
// inside every part's bounds at once (a window away from the padding) reads each part at the part's offset plus the
// row's own, and parts that follow each other in memory (a filter row's taps in NHWC) are one piece of memory for
// every such row. GatheredInterior holds what that takes, found once per product (find_interior). A strip whose
// rows are all inside and on one line of the last axis then takes its runs or its copy group by group from the
// first row's offset, instead of walking every part for every row: that walk took 5-9% of a 3x3 convolution with
// 64 channels, and more than the product itself (39% against 28%) for an image net's first layer (7x7 taps of 3
// channels, 49 runs of 3 floats per row).
struct GatheredInterior {
  struct Group {  // parts adjacent in memory: columns [column, column + width) of A, at source + offset
    std::int64_t column, width, offset;
    int first_part, part_count;  // a's parts [first_part, first_part + part_count)
    // A row inside `lower` and `upper` along every axis is inside all of the group's parts (reads the group as one
    // run); one outside `reach_lower` or `reach_upper` along some axis is outside all of them (reads zeros).
    std::int64_t lower[kGatherMaxAxes], upper[kGatherMaxAxes];
    std::int64_t reach_lower[kGatherMaxAxes], reach_upper[kGatherMaxAxes];
    // Along a line (rows that differ only in the last coordinate x), element (x, j) of the group -- column j from
    // the group's first -- lies at u = x * the last stride + j from the line's start. Where `edges`, the parts'
    // bounds along the last axis agree on the memory: an element is inside its part exactly when
    // lowest <= u < highest, whichever rows and parts read it (a convolution's taps: the input column decides).
    bool edges;
    std::int64_t lowest, highest;
  };
  bool usable = false;  // the parts share a source and strides (and A has at least one axis)
  const float* source = nullptr;
  std::int64_t strides[kGatherMaxAxes] = {};
  std::int64_t lower[kGatherMaxAxes] = {}, upper[kGatherMaxAxes] = {};  // inside every part's bounds
  std::vector<Group> groups;
};
GatheredInterior find_interior(const GatheredRows& a);

// The same copy from rows gathered part by part (GatheredRows, gemm.h): each row's columns of the K block are the
// runs of the parts they overlap, copied from the part's source, or zeros where the row falls outside the part's
// bounds (padding).
void gather_a_strip(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                    std::int64_t depth, float* strip);
// The same, with a's interior (find_interior): a strip whose rows are all inside copies each group's columns; one
// that wraps to the next line or meets the padding goes row by row, group by group: a group the row is inside is one
// run, one it is outside along some axis zeros, and only the others part by part.
void gather_a_strip(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                    std::int64_t depth_begin, std::int64_t depth, float* strip);

// Rows [row_begin, row_begin + rows) of A^T -- columns of the gathered rows -- over K block [depth_begin,
// depth_begin + depth) -- gathered rows -- into a strip laid out as pack_a_strip lays out a transposed A
// (ALayout::k_major: kMr floats per row of A), zeros where a row falls outside a part's bounds.
void gather_a_strip_transposed(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows,
                               std::int64_t depth_begin, std::int64_t depth, float* strip);

// sums[j] += scale[r * scale_stride] * A[row_begin + r, j] over r < rows, for the columns j < columns of the gathered
// rows, r in order for each j (a one-column product A^T b: a convolution to one channel's filter gradient).
void add_scaled_gathered_rows(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t columns,
                              const float* scale, std::int64_t scale_stride, float* sums);

// The same rows read where they lie (ARun, gemm_microkernel.h), for sgemm_gathered when reads_gathered_in_place:
// copying the strip took ~13% of a 3x3 convolution's time. Each run holds the block's columns of one part, or of
// consecutive parts that continue each other in every row of the strip (merged): its row pointers point into the
// source, or at zeros for a row outside the bounds. Returns how many runs there are (at most kMaxRuns).
int gathered_runs(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                  std::int64_t depth, ARun* runs);
// The runs of a strip whose rows are all inside a's interior (find_interior), a run per group; -1 for any other
// strip.
int interior_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, ARun* runs);
// The runs of a strip whose rows are all inside a's interior, a run per group as one pointer each (row r at
// first_row + r * row_stride; gemm_strided.h); -1 for any other strip, or one with more than `capacity` runs.
int interior_strided_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin,
                          std::int64_t rows, std::int64_t depth_begin, std::int64_t depth, StridedRun* runs,
                          int capacity, std::int64_t& row_stride);
// The runs of a strip of one line that meets the padding, as interior_strided_runs gives them: each group's columns
// for the strip's rows written once into `space` (the line's memory from the first row's first element to the last
// row's last, zeros where outside the parts: Group::edges), so that row r reads it at r * row_stride. -1 where a
// group has no `edges`, its parts disagree on the line's other coordinates, the strip wraps to the next line, or
// the runs need more than `space_floats` floats or `capacity` runs.
int edge_strided_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin,
                      std::int64_t rows, std::int64_t depth_begin, std::int64_t depth, float* space,
                      std::int64_t space_floats, StridedRun* runs, int capacity, std::int64_t& row_stride);
// gathered_runs with a's interior: interior_runs where the strip is inside, else the walk through the parts.
int gathered_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, ARun* runs);

// Read in place only where runs are long enough to pay for setting up their row pointers: measured on 3x3
// convolutions (8x56x56 images, 64 output channels), 32 input channels ran 5% faster in place, 16 channels 5%
// slower (3.55 -> 3.72 ms), 24 the same; with a filter row's taps merged into one run, 16 channels were still 3%
// slower in place (one thread, 6.53 -> 6.70 ms). And only where the microkernel keeps a pointer per row in
// registers next to its own (kMr rows: 6 on AVX2, NEON and SSE; AVX-512's 14 would spill them, not measured).
inline constexpr std::int64_t kMinInPlaceWidth = 32;
inline constexpr int kMaxInPlaceRows = 8;
inline constexpr int kMaxRuns = kKcMax / kMinInPlaceWidth + 2;  // +2: a block may cut a part at either end
bool reads_gathered_in_place(const GatheredRows& a);

// The K blocks of a product read in place without C (whole-depth order, so every strip goes through all of K in
// turn): as deep as kKcMax, in equal blocks, rather than kKcTarget. No strip is copied, so the blocks' depth is
// bounded by L1 holding the strip's rows and a B micro-panel, not a strip buffer; fewer blocks store and reload
// the C tile fewer times and find their runs fewer times. Measured on 3x3 convolutions (one thread): 8x112x112x32 to
// 64 channels (288 deep: one block instead of two) 44.5 -> 42.3 ms; 64 to 64 (576: two blocks of 288 instead of
// three of 192), 128 and 256 channels, within 2%.
inline std::int64_t in_place_depth_block(std::int64_t k) { return ceil_div(k, ceil_div(k, kKcMax)); }

// sgemm_gathered's products at most this many columns wide go to sgemm_gathered_narrow (gemm_narrow.cpp): the
// plan's blocks, each row strip read where it lies or gathered as sgemm gathers it, a vector of B's row (its
// columns, then zeros) per step along K times each row's element.
inline constexpr std::int64_t kNarrowColumns = kLanes;
void sgemm_gathered_narrow(const GemmPlan& plan, const GatheredRows& a, const float* b, std::int64_t ldb,
                           bool transpose_b, float* c, std::int64_t ldc, const GemmEpilogue& epilogue);

// Packs one micro-panel of op(B): rows (K) [depth_begin, depth_begin + depth), columns [column, column +
// columns) with columns <= kNr, as `depth` rows of kNr floats each, zero beyond `columns`. ldb is the leading
// dimension of B as stored.
void pack_b_micro_panel(const float* b, std::int64_t ldb, bool transpose_b, std::int64_t depth_begin,
                        std::int64_t depth, std::int64_t column, std::int64_t columns, float* target);

}  // namespace kiln::kernels::cpu::gemm_detail
