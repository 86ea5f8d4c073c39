#include "kernels/cpu/attention.h"

#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_packing.h"
#include "kernels/cpu/gemm_short.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>

namespace kiln::kernels::cpu {
namespace {

using gemm_detail::ALayout;
using gemm_detail::ceil_div;
using gemm_detail::kKcMax;
using gemm_detail::kKcTarget;
using gemm_detail::kMr;
using gemm_detail::kNr;
using gemm_detail::round_up;

// Score rows are padded to a multiple of 16 floats (64-byte aligned rows for the generated row code) and by 16
// more, so that the rows of a tile do not share L1 sets when n is a multiple of 256.
constexpr std::int64_t kRowPadding = 16;

constexpr std::int64_t kFewRows = kAttentionFewRows;

std::int64_t row_stride(std::int64_t n) { return round_up(n, 16) + kRowPadding; }

// A contraction of `total` split into equal K blocks (one of depth 0 when total is 0: it writes zeros).
struct DepthBlocks {
  explicit DepthBlocks(std::int64_t depth)
      : total(depth),
        count(std::max<std::int64_t>(1, ceil_div(depth, kKcTarget))),
        size(std::max<std::int64_t>(1, ceil_div(depth, count))) {}
  std::int64_t begin(std::int64_t block) const { return block * size; }
  std::int64_t depth(std::int64_t block) const { return std::min(size, total - begin(block)); }
  std::int64_t total, count, size;
};

// One batch item's op(X) (depth x columns) packed whole: the micro-panels of each K block in turn, as sgemm
// packs one block (gemm_packing.h).
class PackedOperand {
 public:
  PackedOperand(std::int64_t depth, std::int64_t columns) : blocks_(depth), columns_(columns) {}

  static std::int64_t floats(std::int64_t depth, std::int64_t columns) { return depth * round_up(columns, kNr); }

  void pack(const float* x, std::int64_t ld, bool transpose, float* target) {
    for (std::int64_t block = 0; block < blocks_.count; ++block)
      for (std::int64_t p = 0; p < micro_panels(); ++p)
        gemm_detail::pack_b_micro_panel(x, ld, transpose, blocks_.begin(block), blocks_.depth(block), p * kNr,
                                        columns_of(p), target + offset(block, p));
    target_ = target;
  }

  const DepthBlocks& blocks() const { return blocks_; }
  std::int64_t micro_panels() const { return ceil_div(columns_, kNr); }
  int columns_of(std::int64_t p) const { return static_cast<int>(std::min<std::int64_t>(kNr, columns_ - p * kNr)); }
  const float* micro_panel(std::int64_t block, std::int64_t p) const { return target_ + offset(block, p); }

 private:
  std::int64_t offset(std::int64_t block, std::int64_t p) const {
    return blocks_.begin(block) * micro_panels() * kNr + p * blocks_.depth(block) * kNr;
  }

  DepthBlocks blocks_;
  std::int64_t columns_;
  const float* target_ = nullptr;
};

// C[0:rows, 0:columns of `packed`] = op(A)[rows of the strip] * packed, K block by K block.
void multiply_strip(const float* a, std::int64_t lda, bool transpose_a, std::int64_t row_begin, std::int64_t rows,
                    const PackedOperand& packed, float* a_strip, float* c, std::int64_t ldc) {
  const auto kernel = transpose_a ? gemm_detail::kernel_table<ALayout::k_major>[rows - 1]
                                  : gemm_detail::kernel_table<ALayout::rows>[rows - 1];
  const DepthBlocks& blocks = packed.blocks();
  // A full strip of rows lda apart in K blocks at least 128 deep (the probabilities' strip) is read where it lies,
  // with the same sums in the same order: copying it into a_strip first had been 7% of an attention kernel's time
  // (memmove), and kiln-bench's attention (4x16x512x64) ran in 0.93x the time (best of 100 calls, five alternating
  // rounds). The queries' strip (64 deep) is still copied: read in place too, it ran in 0.96x, the strided kernel's
  // tile passing through the stack weighing more against 64 steps.
  const bool in_place = gemm_detail::kStridedMicrokernel && !transpose_a && rows == kMr && blocks.depth(0) >= 128;
  for (std::int64_t block = 0; block < blocks.count; ++block) {
    if (in_place) {
      const gemm_detail::StridedRun run{a + row_begin * lda + blocks.begin(block), blocks.depth(block)};
      for (std::int64_t p = 0; p < packed.micro_panels(); ++p)
        gemm_detail::strided_microkernel(&run, 1, lda, packed.micro_panel(block, p), c + p * kNr, ldc,
                                         packed.columns_of(p), block > 0);
      continue;
    }
    gemm_detail::pack_a_strip(a, lda, transpose_a, row_begin, rows, blocks.begin(block), blocks.depth(block), a_strip);
    for (std::int64_t p = 0; p < packed.micro_panels(); ++p)
      kernel(blocks.depth(block), a_strip, packed.micro_panel(block, p), c + p * kNr, ldc, packed.columns_of(p),
             block > 0);
  }
}

// The same product as multiply_strip's for the rows of a few strips (at most kShortRows) whose op(X) (depth x
// columns, stored with leading dimension ldx) is read once, so not packed whole first: an untransposed X is read
// where it lies, a K block at a time, by all rows at once (block_times_rows_in_place: its rows along their length, the
// sums carried in `sums`, `tile` for the columns past the last whole micro-panel); a transposed one is packed a
// micro-panel at a time into `tile` (kNr of its stored rows read along their length) just before the microkernel
// reads it for every strip in turn. The same K blocks and the same sums as multiply_strip's for each strip.
// `a_strips` holds the strips' packed A, kMr x kKcMax floats apart.
void multiply_strips_reading_once(const float* a, std::int64_t lda, bool transpose_a, std::int64_t rows, const float* x,
                                  std::int64_t ldx, bool transpose_x, std::int64_t depth, std::int64_t columns,
                                  float* a_strips, float* tile, float* sums, float* c, std::int64_t ldc) {
  const auto& kernels =
      transpose_a ? gemm_detail::kernel_table<ALayout::k_major> : gemm_detail::kernel_table<ALayout::rows>;
  const std::int64_t strips = ceil_div(rows, kMr);
  auto strip_rows = [&](std::int64_t strip) { return std::min<std::int64_t>(kMr, rows - strip * kMr); };
  const DepthBlocks blocks(depth);
  for (std::int64_t block = 0; block < blocks.count; ++block) {
    const std::int64_t block_depth = blocks.depth(block);
    for (std::int64_t strip = 0; strip < strips; ++strip)
      gemm_detail::pack_a_strip(a, lda, transpose_a, strip * kMr, strip_rows(strip), blocks.begin(block), block_depth,
                                a_strips + strip * kMr * kKcMax);
    if (!transpose_x) {
      gemm_detail::block_times_rows_in_place(rows, block_depth, a_strips, transpose_a, x + blocks.begin(block) * ldx,
                                             ldx, columns, tile, sums, round_up(columns, kNr), c, ldc, block > 0);
      continue;
    }
    const std::int64_t panels = ceil_div(columns, kNr);
    for (std::int64_t p = 0; p < panels; ++p) {
      const int panel_columns = static_cast<int>(std::min<std::int64_t>(kNr, columns - p * kNr));
      // The micro-panel after next: kNr stored rows, each block_depth long. Read a few lines apart from row to row,
      // they are not a stream the prefetchers find (measured: packing was 2/3 of a decoder step's time).
      const float* ahead = x + std::min(p + 2, panels - 1) * kNr * ldx + blocks.begin(block);
      for (std::int64_t row = 0; row < kNr; ++row)
        for (std::int64_t j = 0; j < block_depth; j += 16) __builtin_prefetch(ahead + row * ldx + j, 0, 3);
      gemm_detail::pack_b_micro_panel(x, ldx, true, blocks.begin(block), block_depth, p * kNr, panel_columns, tile);
      for (std::int64_t strip = 0; strip < strips; ++strip)
        kernels[strip_rows(strip) - 1](block_depth, a_strips + strip * kMr * kKcMax, tile,
                                       c + strip * kMr * ldc + p * kNr, ldc, panel_columns, block > 0);
    }
  }
}

// A thread's scratch: the current item's packed B and C, its A strips, its rows of scores and probabilities, and
// the row function's own (every part a multiple of 16 floats, so each starts 64-byte aligned). Items of a few rows
// (run_few_rows) pack nothing: their scratch is the score and probability rows, and op(A)'s rows where A is stored
// transposed. Items read once (run_strips_reading_once) pack no B or C, and hold all their rows at once.
struct Scratch {
  Scratch(const AttentionProblem& problem, float* memory)
      : packed_b(problem.k, problem.n),
        packed_c(problem.n, problem.d),
        ld(row_stride(problem.n)),
        b_memory(memory),
        c_memory(b_memory + b_floats(problem)),
        a_strip(c_memory + c_floats(problem)),
        scores(a_strip + a_floats(problem)),
        probabilities(scores + rows_at_once(problem) * ld),
        tile(probabilities + rows_at_once(problem) * ld),
        sums(tile + tile_floats(problem)),
        row_scratch(sums + sums_floats(problem)) {}

  static bool few_rows(const AttentionProblem& problem) { return problem.m <= kFewRows; }
  static bool reads_once(const AttentionProblem& problem) {
    return !few_rows(problem) && problem.m <= gemm_detail::kShortRows && problem.b_batch_stride != 0 &&
           problem.c_batch_stride != 0;
  }
  static bool packs(const AttentionProblem& problem) { return !few_rows(problem) && !reads_once(problem); }
  static std::int64_t rows_at_once(const AttentionProblem& problem) { return packs(problem) ? kMr : problem.m; }
  // The parts, in order (each a multiple of 16 floats).
  static std::int64_t b_floats(const AttentionProblem& problem) {
    return packs(problem) ? PackedOperand::floats(problem.k, problem.n) : 0;
  }
  static std::int64_t c_floats(const AttentionProblem& problem) {
    return packs(problem) ? PackedOperand::floats(problem.n, problem.d) : 0;
  }
  static std::int64_t a_floats(const AttentionProblem& problem) {
    if (few_rows(problem)) return problem.transpose_a && problem.m > 1 ? round_up(problem.m * problem.k, 16) : 0;
    return round_up(rows_at_once(problem), kMr) * kKcMax;
  }
  static std::int64_t tile_floats(const AttentionProblem& problem) { return few_rows(problem) ? 0 : kKcMax * kNr; }
  static std::int64_t sums_floats(const AttentionProblem& problem) {
    return few_rows(problem) ? 0 : rows_at_once(problem) * round_up(std::max(problem.n, problem.d), kNr);
  }
  static std::int64_t floats(const AttentionProblem& problem) {
    return b_floats(problem) + c_floats(problem) + a_floats(problem) +
           2 * rows_at_once(problem) * row_stride(problem.n) + tile_floats(problem) + sums_floats(problem);
  }
  // The most any problem of these sizes takes (without the row function's part): packing, reading once, or few rows.
  static std::int64_t floats(std::int64_t n, std::int64_t k, std::int64_t d) {
    AttentionProblem packing, reading, few;
    packing.m = gemm_detail::kShortRows + 1;
    reading.m = gemm_detail::kShortRows;
    reading.b_batch_stride = reading.c_batch_stride = 1;
    few.m = kFewRows;
    few.transpose_a = true;
    std::int64_t most = 0;
    for (AttentionProblem* problem : {&packing, &reading, &few}) {
      problem->n = n;
      problem->k = k;
      problem->d = d;
      most = std::max(most, floats(*problem));
    }
    return most;
  }
  static std::int64_t row_floats(const AttentionProblem& problem) {
    return round_up(problem.row_scratch_bytes, 64) / static_cast<std::int64_t>(sizeof(float));
  }

  PackedOperand packed_b, packed_c;
  std::int64_t ld;
  float *b_memory, *c_memory, *a_strip, *scores, *probabilities, *tile, *sums, *row_scratch;
  // The matrices packed now: an item's own, or one shared by every item (batch stride 0, packed once).
  const float* packed_b_source = nullptr;
  const float* packed_c_source = nullptr;
};

// An item of at most kShortRows rows (a decoder's step with a few queries per head) whose B and C are its own: each
// is read once, so as the products go (multiply_strips_reading_once), by all the unit's rows at once. Packed whole, an
// item's keys and values (512 KiB each at 2048 x 64) had left L2 before they were read: one query per head of 8 x 16
// heads of 2048 x 64 took 13.9 ms, about 10 GB/s of keys and values; with 8 queries a head (2 strips of AVX2's 6
// rows) 13.2-13.5 ms, now 8.9-9.5.
void run_strips_reading_once(const AttentionProblem& problem, std::int64_t item, std::int64_t strip_begin,
                             std::int64_t strip_end, const float* a, const float* b, const float* c,
                             AttentionRows rows_function, void* context, Scratch& scratch) {
  const std::int64_t lda = problem.transpose_a ? problem.m : problem.k;
  const std::int64_t row_begin = strip_begin * kMr, rows = std::min(strip_end * kMr, problem.m) - row_begin;
  multiply_strips_reading_once(problem.transpose_a ? a + row_begin : a + row_begin * lda, lda, problem.transpose_a,
                               rows, b, problem.transpose_b ? problem.k : problem.n, problem.transpose_b, problem.k,
                               problem.n, scratch.a_strip, scratch.tile, scratch.sums, scratch.scores, scratch.ld);
  const std::int64_t first_row = item * problem.m + row_begin;
  rows_function(context, first_row, first_row + rows, scratch.scores, scratch.probabilities, scratch.ld,
                scratch.row_scratch);
  multiply_strips_reading_once(scratch.probabilities, scratch.ld, false, rows, c,
                               problem.transpose_c ? problem.n : problem.d, problem.transpose_c, problem.n, problem.d,
                               scratch.a_strip, scratch.tile, scratch.sums,
                               static_cast<float*>(problem.out) + first_row * problem.d, problem.d);
}

// ---- Few query rows: the products as matrix-vector products --------------------------------------------------
// A decoder's step multiplies a query per head (or a few: the query heads sharing a key-value head) by the item's keys
// and values, each read once: the products are bound by reading them (0.5 MiB each at 2048 x 64), and the
// microkernel's tile of kMr rows would be mostly empty while the keys' micro-panels were still copied into it.
// Instead each stored row of the matrix is read once, where it lies, into sums kept in registers: a dot product per
// stored row where the contraction runs along them (keys stored n x k, values stored d x n), else the rows scaled
// by the query's elements and added (values stored n x d); either for either transpose. Several query rows take each
// stored row in turn as it comes (from L1 after the first), each with the sums it would have alone: the same bits
// for a query whatever the other rows, the threads, or the sharing of the operands.

using gemm_detail::broadcast_vector;
using gemm_detail::kLanes;
using gemm_detail::load_vector;
using gemm_detail::multiply_add;
using gemm_detail::store_vector;
using gemm_detail::Vector;

// The first `count` floats of `source` (count < kLanes), zeros after them.
Vector load_head(const float* source, std::int64_t count) {
  float lanes[kLanes] = {};
  std::copy_n(source, count, lanes);
  return load_vector(lanes);
}

// The lanes of `sums` added pairwise, halves first (a fixed order).
float lane_sum(Vector sums) {
  float lanes[kLanes];
  store_vector(lanes, sums);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) lanes[lane] += lanes[lane + width];
  return lanes[0];
}

constexpr int kDotRows = 4;  // stored rows per pass: their sums interleave, and x's vectors are loaded once for all

// out[r] = lane_sum(sums[r]) for the kDotRows vectors, the same additions in the same order, each step on the four
// at once: four horizontal sums one by one were most of the instructions of a dot pass.
void lane_sums(const Vector (&sums)[kDotRows], float* out) {
#if defined(__AVX512F__)
  const Vector low =
      __builtin_shufflevector(sums[0], sums[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(sums[0], sums[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const Vector high =
      __builtin_shufflevector(sums[2], sums[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
      __builtin_shufflevector(sums[2], sums[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const Vector quarters =
      __builtin_shufflevector(low, high, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
      __builtin_shufflevector(low, high, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const Vector pairs =
      __builtin_shufflevector(quarters, quarters, 0, 1, 4, 5, 8, 9, 12, 13, 0, 1, 4, 5, 8, 9, 12, 13) +
      __builtin_shufflevector(quarters, quarters, 2, 3, 6, 7, 10, 11, 14, 15, 2, 3, 6, 7, 10, 11, 14, 15);
  const Vector totals = __builtin_shufflevector(pairs, pairs, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6) +
                        __builtin_shufflevector(pairs, pairs, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7);
#elif defined(__AVX__)
  const Vector low = __builtin_shufflevector(sums[0], sums[1], 0, 1, 2, 3, 8, 9, 10, 11) +
                     __builtin_shufflevector(sums[0], sums[1], 4, 5, 6, 7, 12, 13, 14, 15);
  const Vector high = __builtin_shufflevector(sums[2], sums[3], 0, 1, 2, 3, 8, 9, 10, 11) +
                      __builtin_shufflevector(sums[2], sums[3], 4, 5, 6, 7, 12, 13, 14, 15);
  const Vector pairs = __builtin_shufflevector(low, high, 0, 1, 4, 5, 8, 9, 12, 13) +
                       __builtin_shufflevector(low, high, 2, 3, 6, 7, 10, 11, 14, 15);
  const Vector totals = __builtin_shufflevector(pairs, pairs, 0, 2, 4, 6, 0, 2, 4, 6) +
                        __builtin_shufflevector(pairs, pairs, 1, 3, 5, 7, 1, 3, 5, 7);
#else
  const Vector low =
      __builtin_shufflevector(sums[0], sums[1], 0, 1, 4, 5) + __builtin_shufflevector(sums[0], sums[1], 2, 3, 6, 7);
  const Vector high =
      __builtin_shufflevector(sums[2], sums[3], 0, 1, 4, 5) + __builtin_shufflevector(sums[2], sums[3], 2, 3, 6, 7);
  const Vector totals = __builtin_shufflevector(low, high, 0, 2, 4, 6) + __builtin_shufflevector(low, high, 1, 3, 5, 7);
#endif
  for (int r = 0; r < kDotRows; ++r) out[r] = totals[r];
}

// out[i, j] = row i of x (x_ld apart) . row j of `matrix` (rows `depth` long and apart), for i < x_rows, j < rows.
// Each pass over kDotRows stored rows takes every row of x in turn, so the stored rows come from memory once.
void dot_rows(const float* x, std::int64_t x_rows, std::int64_t x_ld, std::int64_t depth, const float* matrix,
              std::int64_t rows, float* out, std::int64_t out_ld) {
  const std::int64_t whole = depth - depth % kLanes;
  std::int64_t row = 0;
  for (; row + kDotRows <= rows; row += kDotRows) {
    const float* first = matrix + row * depth;
    for (std::int64_t i = 0; i < x_rows; ++i) {
      const float* xs = x + i * x_ld;
      Vector sums[kDotRows] = {};
      for (std::int64_t p = 0; p < whole; p += kLanes) {
        const Vector x_part = load_vector(xs + p);
        for (int r = 0; r < kDotRows; ++r) sums[r] = multiply_add(x_part, load_vector(first + r * depth + p), sums[r]);
      }
      if (whole < depth) {
        const Vector x_part = load_head(xs + whole, depth - whole);
        for (int r = 0; r < kDotRows; ++r)
          sums[r] = multiply_add(x_part, load_head(first + r * depth + whole, depth - whole), sums[r]);
      }
      lane_sums(sums, out + i * out_ld + row);
    }
  }
  for (; row < rows; ++row) {
    const float* stored = matrix + row * depth;
    for (std::int64_t i = 0; i < x_rows; ++i) {
      const float* xs = x + i * x_ld;
      Vector sums = {};
      for (std::int64_t p = 0; p < whole; p += kLanes)
        sums = multiply_add(load_vector(xs + p), load_vector(stored + p), sums);
      if (whole < depth)
        sums = multiply_add(load_head(xs + whole, depth - whole), load_head(stored + whole, depth - whole), sums);
      out[i * out_ld + row] = lane_sum(sums);
    }
  }
}

// out[i, 0 : Vectors kLanes) = sum over p < depth of x[i, p] times row p of `matrix` there (rows `ld` apart), for
// the Rows rows of x (x_ld apart) and of out (out_ld apart): every row's sums in registers, each stored row read once.
template <int Rows, int Vectors>
void scaled_rows_block(const float* x, std::int64_t x_ld, std::int64_t depth, const float* matrix, std::int64_t ld,
                       float* out, std::int64_t out_ld) {
  Vector sums[Rows][Vectors] = {};
  for (std::int64_t p = 0; p < depth; ++p) {
    Vector scales[Rows];
    for (int i = 0; i < Rows; ++i) scales[i] = broadcast_vector(x[i * x_ld + p]);
    const float* stored = matrix + p * ld;
    for (int v = 0; v < Vectors; ++v) {
      const Vector part = load_vector(stored + v * kLanes);
      for (int i = 0; i < Rows; ++i) sums[i][v] = multiply_add(scales[i], part, sums[i][v]);
    }
  }
  for (int i = 0; i < Rows; ++i)
    for (int v = 0; v < Vectors; ++v) store_vector(out + i * out_ld + v * kLanes, sums[i][v]);
}

// The same for the last `count` (< kLanes) columns.
template <int Rows>
void scaled_rows_tail(const float* x, std::int64_t x_ld, std::int64_t depth, const float* matrix, std::int64_t ld,
                      std::int64_t count, float* out, std::int64_t out_ld) {
  Vector sums[Rows] = {};
  for (std::int64_t p = 0; p < depth; ++p) {
    const Vector part = load_head(matrix + p * ld, count);
    for (int i = 0; i < Rows; ++i) sums[i] = multiply_add(broadcast_vector(x[i * x_ld + p]), part, sums[i]);
  }
  for (int i = 0; i < Rows; ++i) {
    float lanes[kLanes];
    store_vector(lanes, sums[i]);
    std::copy_n(lanes, count, out + i * out_ld);
  }
}

constexpr int kScaledRowVectors = 8;  // vectors of sums per block, in registers: 8 of AVX2's 16

// Rows x (x_ld apart, `depth` long) times the matrix stored depth x columns (rows `columns` long), into rows of out
// (out_ld apart): blocks of columns as wide as the rows' sums fit in kScaledRowVectors registers, then single
// vectors, then the last few columns. A column's sums are the same for any width of its block.
template <int Rows>
void scaled_rows(const float* x, std::int64_t x_ld, std::int64_t depth, const float* matrix, std::int64_t columns,
                 float* out, std::int64_t out_ld) {
  constexpr int wide = std::max(1, kScaledRowVectors / Rows);
  std::int64_t column = 0;
  for (; column + wide * kLanes <= columns; column += wide * kLanes)
    scaled_rows_block<Rows, wide>(x, x_ld, depth, matrix + column, columns, out + column, out_ld);
  for (; column + kLanes <= columns; column += kLanes)
    scaled_rows_block<Rows, 1>(x, x_ld, depth, matrix + column, columns, out + column, out_ld);
  if (column < columns)
    scaled_rows_tail<Rows>(x, x_ld, depth, matrix + column, columns, columns - column, out + column, out_ld);
}

// Rows i < rows of x (x_ld apart, `depth` long) times op(matrix) into rows of out (out_ld apart); op(matrix) is
// depth x columns, stored so (rows `columns` long) or transposed (rows `depth` long).
void rows_times(const float* x, std::int64_t rows, std::int64_t x_ld, std::int64_t depth, const float* matrix,
                bool transposed, std::int64_t columns, float* out, std::int64_t out_ld) {
  if (transposed) {
    dot_rows(x, rows, x_ld, depth, matrix, columns, out, out_ld);
    return;
  }
  static_assert(kFewRows == 2, "one instance of scaled_rows per count of rows");
  if (rows == 1)
    scaled_rows<1>(x, x_ld, depth, matrix, columns, out, out_ld);
  else
    scaled_rows<2>(x, x_ld, depth, matrix, columns, out, out_ld);
}

// An item of at most kFewRows rows, whatever its operands' sharing.
void run_few_rows(const AttentionProblem& problem, std::int64_t item, const float* a, const float* b, const float* c,
                  AttentionRows rows_function, void* context, Scratch& scratch) {
  const std::int64_t rows = problem.m, k = problem.k;
  // op(A)'s rows, contiguous: in place, or gathered from the stored A^T (k x m).
  const float* queries = a;
  if (problem.transpose_a && rows > 1) {
    for (std::int64_t row = 0; row < rows; ++row)
      for (std::int64_t p = 0; p < k; ++p) scratch.a_strip[row * k + p] = a[p * rows + row];
    queries = scratch.a_strip;
  }
  rows_times(queries, rows, k, k, b, problem.transpose_b, problem.n, scratch.scores, scratch.ld);
  const std::int64_t first_row = item * rows;
  rows_function(context, first_row, first_row + rows, scratch.scores, scratch.probabilities, scratch.ld,
                scratch.row_scratch);
  rows_times(scratch.probabilities, rows, scratch.ld, problem.n, c, problem.transpose_c, problem.d,
             static_cast<float*>(problem.out) + first_row * problem.d, problem.d);
}

void run_strips(const AttentionProblem& problem, std::int64_t item, std::int64_t strip_begin, std::int64_t strip_end,
                AttentionRows rows_function, void* context, Scratch& scratch) {
  const float* a = static_cast<const float*>(problem.a) + item * problem.a_batch_stride;
  const float* b = static_cast<const float*>(problem.b) + item * problem.b_batch_stride;
  const float* c = static_cast<const float*>(problem.c) + item * problem.c_batch_stride;
  if (Scratch::few_rows(problem)) {
    run_few_rows(problem, item, a, b, c, rows_function, context, scratch);
    return;
  }
  // B and C read once per item: packed as they are read. (Shared by every item, they are packed once in all.)
  if (Scratch::reads_once(problem)) {
    run_strips_reading_once(problem, item, strip_begin, strip_end, a, b, c, rows_function, context, scratch);
    return;
  }
  if (scratch.packed_b_source != b) {
    scratch.packed_b.pack(b, problem.transpose_b ? problem.k : problem.n, problem.transpose_b, scratch.b_memory);
    scratch.packed_b_source = b;
  }
  if (scratch.packed_c_source != c) {
    scratch.packed_c.pack(c, problem.transpose_c ? problem.n : problem.d, problem.transpose_c, scratch.c_memory);
    scratch.packed_c_source = c;
  }
  const std::int64_t lda = problem.transpose_a ? problem.m : problem.k;
  float* out = static_cast<float*>(problem.out) + item * problem.m * problem.d;
  for (std::int64_t strip = strip_begin; strip < strip_end; ++strip) {
    const std::int64_t row_begin = strip * kMr, rows = std::min<std::int64_t>(kMr, problem.m - row_begin);
    multiply_strip(a, lda, problem.transpose_a, row_begin, rows, scratch.packed_b, scratch.a_strip, scratch.scores,
                   scratch.ld);
    const std::int64_t first_row = item * problem.m + row_begin;
    rows_function(context, first_row, first_row + rows, scratch.scores, scratch.probabilities, scratch.ld,
                  scratch.row_scratch);
    multiply_strip(scratch.probabilities, scratch.ld, false, 0, rows, scratch.packed_c, scratch.a_strip,
                   out + row_begin * problem.d, problem.d);
  }
}

// Units of work per thread when the batch is small: a unit packs its item's B and C, so it should be many
// strips long, but there should be enough units for a thread that the OS preempts to be covered by others.
constexpr std::int64_t kUnitsPerThread = 4;

}  // namespace

StripUnits::StripUnits(std::int64_t batch, std::int64_t strips) : strips_(strips) {
  const int threads = runtime::thread_count();
  // Each item's strips in `groups` contiguous runs; whole items when the batch alone keeps every thread busy.
  groups_ = std::clamp<std::int64_t>(ceil_div(kUnitsPerThread * threads, batch), 1, std::max<std::int64_t>(strips, 1));
  units_ = batch * groups_;
  pieces_ = static_cast<int>(std::min<std::int64_t>(threads, units_));
}

bool StripUnits::next(Unit& unit) {
  const std::int64_t claimed = next_.fetch_add(1, std::memory_order_relaxed);
  if (claimed >= units_) return false;
  const std::int64_t group = claimed % groups_;
  unit = {claimed / groups_, strips_ * group / groups_, strips_ * (group + 1) / groups_};
  return true;
}

std::int64_t attention_scratch_bytes(std::int64_t n, std::int64_t k, std::int64_t d) {
  return Scratch::floats(n, k, d) * static_cast<std::int64_t>(sizeof(float));
}

void attention(const AttentionProblem& problem, AttentionRows rows_function, void* context) {
  if (problem.batch <= 0 || problem.m <= 0) return;
  if (problem.bf16) {
    attention_bf16(problem, rows_function, context);
    return;
  }
  StripUnits units(problem.batch, ceil_div(problem.m, kMr));
  const std::int64_t scratch_floats = Scratch::floats(problem) + Scratch::row_floats(problem);
  auto memory =
      runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(units.pieces() * scratch_floats));
  runtime::parallel_pieces(units.pieces(), [&](std::int64_t piece, std::int64_t) {
    Scratch scratch(problem, static_cast<float*>(memory->data()) + piece * scratch_floats);
    for (StripUnits::Unit unit; units.next(unit);)
      run_strips(problem, unit.item, unit.strip_begin, unit.strip_end, rows_function, context, scratch);
  });
}

}  // namespace kiln::kernels::cpu
