#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_invariant.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_packing.h"
#include "kernels/cpu/gemm_short.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using gemm_detail::ALayout;
using gemm_detail::ceil_div;
using gemm_detail::depth_blocks_of;
using gemm_detail::kKcMax;
using gemm_detail::kKcTarget;
using gemm_detail::kMr;
using gemm_detail::kNr;
using gemm_detail::round_up;

// Target column panel: the packed B block (kc x nc) is what every strip reads, so it should stay in L2 (2 MiB
// here) next to the C rows being updated; wider panels read A fewer times (once per panel).
constexpr std::int64_t kNcTarget = 512;
static_assert(kNcTarget % kNr == 0);
// Temporaries may take this fraction of m * n floats (the budget of the fused kernel they serve: kiln promises
// at most 25% of the matmul output; a larger budget means wider column panels and fewer row panels, which
// measured 0.86 -> 0.94 of OpenBLAS at n = 1024 going from 0.20 to 0.24) ...
constexpr double kBudgetFraction = 0.23;
// ... or this many bytes, whichever is more, so that small problems are not blocked finely for nothing.
// 768 KiB holds a whole 256 x 256 problem (its B block and C buffer: one panel, B packed once) while staying
// under 25% of C from n = 1024 on.
constexpr std::int64_t kBudgetFloorBytes = std::int64_t{768} << 10;
// Packed B blocks in flight: a thread may run up to kBBuffers - 1 K blocks ahead of a strip that another
// thread holds (see RegionWork).
constexpr int kBBuffers = 3;
// Extra floats per row of the C panel buffer: nc is a multiple of 32 floats, often of 256; a padded stride
// keeps the rows of a C tile from falling into the same L1 sets.
constexpr std::int64_t kCBufferPadding = 16;
// Threads whose C strips (kMr x nc each, whole-depth calls) the plan keeps room for in the budget; more
// threads take a little more (like the A strips, which are outside the budget).
constexpr std::int64_t kReservedStrips = 2;

// B buffers a problem with `depth_blocks` K blocks uses: no more than it has blocks.
std::int64_t b_buffer_count(std::int64_t depth_blocks) { return std::min<std::int64_t>(kBBuffers, depth_blocks); }

struct Problem {
  GemmPlan plan;
  const float* a;
  std::int64_t lda;
  bool transpose_a;
  const GatheredRows* gathered;  // A gathered while it is packed (sgemm_gathered), or null: A is `a`
  bool gathered_in_place;        // the gathered rows read where they lie (gemm_detail::reads_gathered_in_place)
  const gemm_detail::GatheredInterior* interior;  // with gathered: how most strips find their rows
  const float* b;
  std::int64_t ldb;
  bool transpose_b;
  float* c;  // where C accumulates: the caller's c, or the panel buffer
  std::int64_t ldc;
  bool c_is_buffer;               // c is the panel buffer: its row 0 is the first row of the current row panel
  std::int64_t panel_row_strips;  // strips per row panel: plan.panel_row_strips with the buffer, else all
  GemmEpilogue epilogue;
  float* b_panels[kBBuffers];  // packed B blocks: K block kb of a region in b_panels[kb % kBBuffers]
  const float* prepacked;      // or all of op(B) packed already (InvariantOperands), as prepacked_block lays it out
  float* a_strips;             // one kMr x kKcMax strip per piece
};

// One step of the loop nest: C[row panel, column panel] (+)= A[rows, K block] * B[K block, column panel].
struct Step {
  std::int64_t first_strip = 0, end_strip = 0;  // row strips of the row panel
  std::int64_t column_panel = 0;
  std::int64_t column_begin = 0, columns = 0;
  std::int64_t depth_begin = 0, depth = 0;
  bool first_depth = true, last_depth = true;
};

Step make_step(const Problem& problem, std::int64_t index) {
  const GemmPlan& plan = problem.plan;
  const std::int64_t depth_blocks = depth_blocks_of(plan);
  Step step;
  const std::int64_t depth_index = index % depth_blocks;
  const std::int64_t panel_step = index / depth_blocks;
  step.column_panel = panel_step % plan.column_panels;
  const std::int64_t row_panel = panel_step / plan.column_panels;
  step.first_strip = row_panel * problem.panel_row_strips;
  step.end_strip = std::min(plan.row_strips, step.first_strip + problem.panel_row_strips);
  step.column_begin = step.column_panel * plan.panel_columns;
  step.columns = std::min(plan.panel_columns, plan.n - step.column_begin);
  step.depth_begin = depth_index * plan.depth_block;
  step.depth = std::min(plan.depth_block, plan.k - step.depth_begin);
  step.first_depth = depth_index == 0;
  step.last_depth = depth_index == depth_blocks - 1;
  return step;
}

std::int64_t step_count(const Problem& problem) {
  const GemmPlan& plan = problem.plan;
  const std::int64_t depth_blocks = depth_blocks_of(plan);
  return depth_blocks * plan.column_panels * ceil_div(plan.row_strips, problem.panel_row_strips);
}

// Asks for part `part` of `parts` of the cache lines that the next strip's copy will read, so that a strip's
// microkernel calls spread those requests evenly. Into L1 (prefetcht0); measured, the copy then takes ~1.2% of
// the strip's kernel time, against ~5-7% without prefetching. (Copying the next strip piecewise between the
// calls instead, double-buffered, measured 1-3% slower overall.) Always inlined: GCC's IPA pure-const pass
// counts __builtin_prefetch as free of side effects, finds a separate prefetch function "pure" and deletes its
// calls (silently: that cost 5% here before it was noticed in the generated code).
[[gnu::always_inline]] inline void prefetch_a_strip(const Problem& problem, std::int64_t row_begin, std::int64_t rows,
                                                    std::int64_t depth_begin, std::int64_t depth, std::int64_t part,
                                                    std::int64_t parts) {
  // Gathered rows are not prefetched: on a 3x3 convolution, prefetching each next row's runs cost about what it
  // saved (its index arithmetic is the gather's), within the noise of the 2-core VM.
  if (problem.gathered) return;
  if (!problem.transpose_a) {
    const std::int64_t lines_per_row = ceil_div(depth, 16);
    const std::int64_t lines = rows * lines_per_row;
    for (std::int64_t line = lines * part / parts; line < lines * (part + 1) / parts; ++line) {
      const std::int64_t r = line / lines_per_row;
      __builtin_prefetch(problem.a + (row_begin + r) * problem.lda + depth_begin + (line % lines_per_row) * 16, 0, 3);
    }
  } else {
    for (std::int64_t kk = depth * part / parts; kk < depth * (part + 1) / parts; ++kk) {
      const float* row = problem.a + (depth_begin + kk) * problem.lda + row_begin;
      __builtin_prefetch(row, 0, 3);
      __builtin_prefetch(row + rows - 1, 0, 3);
    }
  }
}

// Where a prepacked B (Problem::prepacked) holds the block of `step` (the layout WholeDepthWork packs).
std::int64_t prepacked_offset(const GemmPlan& plan, const Step& step) {
  return gemm_detail::prepacked_offset(plan, step.column_panel, step.depth_begin, step.columns);
}
const float* prepacked_block(const Problem& problem, const Step& step) {
  return problem.prepacked + prepacked_offset(problem.plan, step);
}

// Packs micro-panels [first, end) of the B block of `step`: micro-panel p holds op(B)[K block, kNr columns
// from column_begin + p * kNr] as depth rows of kNr floats, zero beyond the last column.
void pack_b_panels(const Problem& problem, const Step& step, std::int64_t first, std::int64_t end, float* panel) {
  for (std::int64_t p = first; p < end; ++p) {
    const std::int64_t columns = std::min<std::int64_t>(kNr, step.columns - p * kNr);
    gemm_detail::pack_b_micro_panel(problem.b, problem.ldb, problem.transpose_b, step.depth_begin, step.depth,
                                    step.column_begin + p * kNr, columns, panel + p * step.depth * kNr);
  }
}

// The A rows a strip's microkernel calls prefetch for what runs next: rows [row_begin, row_begin + rows) of
// K block [depth_begin, depth_begin + depth); none when rows is 0.
struct NextStrip {
  std::int64_t row_begin = 0, rows = 0, depth_begin = 0, depth = 0;
};

// The strip below `s` in the same K block, as RegionWork runs them.
NextStrip strip_below(const Problem& problem, const Step& step, std::int64_t s) {
  const std::int64_t row_begin = (s + 1) * kMr;
  return {row_begin, std::clamp<std::int64_t>(problem.plan.m - row_begin, 0, kMr), step.depth_begin, step.depth};
}

// Where strip `s` of `step` accumulates in C: the caller's c, or the row panel's buffer.
float* c_tile_of(const Problem& problem, const Step& step, std::int64_t s) {
  const std::int64_t c_row = problem.c_is_buffer ? (s - step.first_strip) * kMr : s * kMr;
  return problem.c + c_row * problem.ldc + (problem.c_is_buffer ? 0 : step.column_begin);
}

// On AVX-512 and AVX2 with FMA, a full strip of a gathered A inside a convolution's interior, read where it lies
// (gemm_strided.h) instead of copied, or one at the padding through its line's memory with the padding's zeros: the
// product of every micro-panel into c_tile. False where the strip is neither.
bool strided_in_place(const Problem& problem, const Step& step, const float* b_panel, std::int64_t row_begin,
                      std::int64_t rows, float* strip, float* c_tile) {
  if constexpr (gemm_detail::kStridedMicrokernel) {
    if (!problem.gathered || problem.transpose_a || rows != kMr) return false;
    constexpr int capacity = 64;
    gemm_detail::StridedRun runs[capacity];
    std::int64_t row_stride = 0;
    int run_count = gemm_detail::interior_strided_runs(*problem.gathered, *problem.interior, row_begin, rows,
                                                       step.depth_begin, step.depth, runs, capacity, row_stride);
    // A strip at the padding: its line's memory with zeros where the padding is, written once into the strip
    // buffer, read as the interior is (the copy wrote each of 14 rows' windows, overlapping).
    if (run_count <= 0)
      run_count =
          gemm_detail::edge_strided_runs(*problem.gathered, *problem.interior, row_begin, rows, step.depth_begin,
                                         step.depth, strip, kMr * gemm_detail::kKcMax, runs, capacity, row_stride);
    if (run_count <= 0) return false;
    for (std::int64_t p = 0; p * kNr < step.columns; ++p)
      gemm_detail::strided_microkernel(
          runs, run_count, row_stride, b_panel + p * step.depth * kNr, c_tile + p * kNr, problem.ldc,
          static_cast<int>(std::min<std::int64_t>(kNr, step.columns - p * kNr)), !step.first_depth);
    return true;
  }
  return false;
}

// One row strip of `step`: copy its A rows into the piece's strip buffer, run the microkernel across the
// column panel into `c_tile` (prefetching the A rows of `next`), and after the last K block hand the
// finished tile to the epilogue.
void run_strip(const Problem& problem, const Step& step, const float* b_panel, std::int64_t s, float* strip,
               float* c_tile, const NextStrip& next) {
  const GemmPlan& plan = problem.plan;
  const std::int64_t micro_panels = ceil_div(step.columns, kNr);
  const std::int64_t row_begin = s * kMr;
  const std::int64_t rows = std::min<std::int64_t>(kMr, plan.m - row_begin);
  auto column_count = [&](std::int64_t p) {
    return static_cast<int>(std::min<std::int64_t>(kNr, step.columns - p * kNr));
  };
  if (problem.gathered_in_place) {
    gemm_detail::ARun runs[gemm_detail::kMaxRuns];
    const int run_count = gemm_detail::gathered_runs(*problem.gathered, *problem.interior, row_begin, rows,
                                                     step.depth_begin, step.depth, runs);
    const auto kernel = gemm_detail::runs_kernel_table[rows - 1];
    for (std::int64_t p = 0; p < micro_panels; ++p)
      kernel(runs, run_count, b_panel + p * step.depth * kNr, c_tile + p * kNr, problem.ldc, column_count(p),
             !step.first_depth);
  } else if (!strided_in_place(problem, step, b_panel, row_begin, rows, strip, c_tile)) {
    if (problem.gathered && problem.transpose_a)
      gemm_detail::gather_a_strip_transposed(*problem.gathered, row_begin, rows, step.depth_begin, step.depth, strip);
    else if (problem.gathered)
      gemm_detail::gather_a_strip(*problem.gathered, *problem.interior, row_begin, rows, step.depth_begin, step.depth,
                                  strip);
    else
      gemm_detail::pack_a_strip(problem.a, problem.lda, problem.transpose_a, row_begin, rows, step.depth_begin,
                                step.depth, strip);
    const auto kernel = problem.transpose_a ? gemm_detail::kernel_table<ALayout::k_major>[rows - 1]
                                            : gemm_detail::kernel_table<ALayout::rows>[rows - 1];
    for (std::int64_t p = 0; p < micro_panels; ++p) {
      if (next.rows > 0)
        prefetch_a_strip(problem, next.row_begin, next.rows, next.depth_begin, next.depth, p, micro_panels);
      kernel(step.depth, strip, b_panel + p * step.depth * kNr, c_tile + p * kNr, problem.ldc, column_count(p),
             !step.first_depth);
    }
  }
  if (step.last_depth && problem.epilogue.function) {
    problem.epilogue.function(problem.epilogue.context, c_tile, problem.ldc, row_begin, row_begin + rows,
                              step.column_begin, step.column_begin + step.columns,
                              step.column_panel * plan.row_strips + s);
  }
}

// One round of waiting for another thread's work: spin briefly (`idle` counts the rounds so far), then yield
// the core, which on a loaded machine may be what the awaited thread needs.
void wait_a_little(int& idle) {
  if (++idle < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

// The work of one region -- a row panel times a column panel, through all its K blocks -- shared by the
// pieces of one parallel_pieces call, with no barrier between K blocks. Measured on the loaded 2-core VM: a
// barrier per K block cost 5-20%, and so did waiting for a particular strip, because the OS often preempts one
// of the threads in the middle of a strip for a whole time slice. So nobody waits for anything in particular:
// a thread claims any strip whose next K block is ready -- its previous block done (C sums its K blocks in
// order), that block's B packed, and within kBBuffers - 1 blocks of the oldest unfinished one (the B buffers
// in flight) -- preferring the oldest block and its own contiguous share of the strips (its C rows are in its
// L2), and packs B blocks ahead when their buffer is free. Only when no strip is ready does it wait, and a
// piece run alone (parallel_pieces runs pieces serially when the pool is busy) simply does everything in
// order. Which thread runs a strip changes nothing in the result.
class RegionWork {
 public:
  // `prepacked`: B is packed already (Problem::prepacked): every block is ready.
  RegionWork(std::int64_t first_strip, std::int64_t strips, int pieces, std::int64_t depth_blocks,
             std::int64_t micro_panels, bool prepacked)
      : first_strip_(first_strip),
        strips_(strips),
        pieces_(pieces),
        depth_blocks_(depth_blocks),
        micro_panels_(micro_panels),
        next_block_(static_cast<std::size_t>(strips)),
        progress_(static_cast<std::size_t>(strips)),
        pack_claimed_(static_cast<std::size_t>(depth_blocks)),
        packed_(static_cast<std::size_t>(depth_blocks)),
        strips_done_(static_cast<std::size_t>(depth_blocks)) {
    if (!prepacked) return;
    for (std::int64_t block = 0; block < depth_blocks; ++block) {
      pack_claimed_[index(block)].store(micro_panels, std::memory_order_relaxed);
      packed_[index(block)].store(micro_panels, std::memory_order_relaxed);
    }
  }

  std::int64_t depth_blocks() const { return depth_blocks_; }
  bool finished_claiming() const { return claimed_all_.load(std::memory_order_acquire); }

  // The oldest K block with strips not yet done (depth_blocks when all are).
  std::int64_t oldest_block() const {
    std::int64_t block = oldest_.load(std::memory_order_acquire);
    while (block < depth_blocks_ && strips_done_[index(block)].load(std::memory_order_acquire) == strips_) ++block;
    return block;
  }

  // Packs micro-panels of B block `block` while any is left to claim, if its buffer is free.
  void pack_b_block(const Problem& problem, std::int64_t first_step, std::int64_t block) {
    if (block >= depth_blocks_ || pack_claimed_[index(block)].load(std::memory_order_relaxed) >= micro_panels_) return;
    if (block >= kBBuffers && strips_done_[index(block - kBBuffers)].load(std::memory_order_acquire) != strips_) return;
    const Step step = make_step(problem, first_step + block);
    for (std::int64_t p; (p = pack_claimed_[index(block)].fetch_add(1, std::memory_order_relaxed)) < micro_panels_;) {
      pack_b_panels(problem, step, p, p + 1, problem.b_panels[block % kBBuffers]);
      packed_[index(block)].fetch_add(1, std::memory_order_release);
    }
  }

  // Where a piece's scan of its own strips resumes: it claims them in order within a block, so the scan
  // need not reread (and pull from the other core) the counters of strips it has already claimed.
  struct Cursor {
    std::int64_t block = -1, next = 0;
  };

  // Claims a ready (strip, K block): own strips first, then the others' from the far end; the oldest block
  // first. Returns false when none is ready now.
  bool claim(int piece, Cursor& cursor, std::int64_t& strip, std::int64_t& block) {
    const std::int64_t oldest = oldest_block();
    if (oldest >= depth_blocks_) return false;
    const std::int64_t own_begin = strips_ * piece / pieces_, own_end = strips_ * (piece + 1) / pieces_;
    const std::int64_t limit = std::min(depth_blocks_, oldest + kBBuffers);
    for (std::int64_t wanted = oldest; wanted < limit; ++wanted) {
      if (packed_[index(wanted)].load(std::memory_order_acquire) != micro_panels_) break;
      if (cursor.block != wanted) cursor = Cursor{wanted, own_begin};
      for (std::int64_t i = cursor.next; i < own_end; ++i) {
        if (try_claim(i, wanted)) {
          cursor.next = i + 1;
          return found(i, wanted, strip, block);
        }
        // Skipped strips stay claimable later only if their previous block is still running elsewhere.
        if (next_block_[index(i)].load(std::memory_order_relaxed) > wanted && i == cursor.next) ++cursor.next;
      }
      for (std::int64_t offset = strips_ - 1; offset >= 0; --offset) {
        const std::int64_t i = (own_end + offset) % strips_;
        if ((i < own_begin || i >= own_end) && try_claim(i, wanted)) return found(i, wanted, strip, block);
      }
    }
    return false;
  }

  void strip_done(std::int64_t strip, std::int64_t block) {
    progress_[index(strip - first_strip_)].store(block + 1, std::memory_order_release);
    if (strips_done_[index(block)].fetch_add(1, std::memory_order_acq_rel) + 1 == strips_) {
      std::int64_t oldest = oldest_.load(std::memory_order_relaxed);
      while (oldest <= block && !oldest_.compare_exchange_weak(oldest, block + 1, std::memory_order_acq_rel)) {
      }
    }
  }

  // Whether the strip after `strip` is in the same piece's share and still waits for `block` (worth
  // prefetching its A rows).
  bool next_is_likely(int piece, std::int64_t strip, std::int64_t block) const {
    const std::int64_t next = strip - first_strip_ + 1;
    return next < strips_ * (piece + 1) / pieces_ && next_block_[index(next)].load(std::memory_order_relaxed) == block;
  }

 private:
  static std::size_t index(std::int64_t value) { return static_cast<std::size_t>(value); }

  // Claims strip `i` (relative to first_strip_) for `block` if that is its next block and its previous one is
  // done.
  bool try_claim(std::int64_t i, std::int64_t block) {
    std::int64_t next = next_block_[index(i)].load(std::memory_order_relaxed);
    return next == block && progress_[index(i)].load(std::memory_order_acquire) == block &&
           next_block_[index(i)].compare_exchange_strong(next, block + 1, std::memory_order_acquire);
  }

  bool found(std::int64_t i, std::int64_t wanted, std::int64_t& strip, std::int64_t& block) {
    strip = first_strip_ + i;
    block = wanted;
    if (wanted == depth_blocks_ - 1 && last_claims_.fetch_add(1, std::memory_order_acq_rel) + 1 == strips_)
      claimed_all_.store(true, std::memory_order_release);
    return true;
  }

  std::int64_t first_strip_, strips_;
  int pieces_;
  std::int64_t depth_blocks_, micro_panels_;
  std::vector<std::atomic<std::int64_t>> next_block_, progress_;  // per strip: blocks claimed, blocks done
  std::vector<std::atomic<std::int64_t>> pack_claimed_, packed_, strips_done_;  // per K block
  std::atomic<std::int64_t> oldest_{0};                                         // a lower bound of oldest_block()
  std::atomic<std::int64_t> last_claims_{0};                                    // strips claimed for the last K block
  std::atomic<bool> claimed_all_{false};
};

// Piece `piece` of the region whose first step (K block 0) is `first_step`: claims and runs ready strips,
// keeps the next B block packed ahead, packs further ahead only when nothing else is ready (packed blocks
// take L2 room from the one in use), and waits (yielding) only when nothing at all is ready.
void run_region_piece(const Problem& problem, std::int64_t first_step, RegionWork& work, int piece, float* strip) {
  RegionWork::Cursor cursor;
  for (int idle = 0; !work.finished_claiming();) {
    const std::int64_t oldest = work.oldest_block();
    work.pack_b_block(problem, first_step, oldest);
    work.pack_b_block(problem, first_step, oldest + 1);
    std::int64_t s = 0, block = 0;
    bool claimed = work.claim(piece, cursor, s, block);
    if (!claimed) {
      for (std::int64_t ahead = oldest + 2; ahead < oldest + kBBuffers; ++ahead)
        work.pack_b_block(problem, first_step, ahead);
      claimed = work.claim(piece, cursor, s, block);
    }
    if (!claimed) {
      wait_a_little(idle);
      continue;
    }
    idle = 0;
    const Step step = make_step(problem, first_step + block);
    const NextStrip next = work.next_is_likely(piece, s, block) ? strip_below(problem, step, s) : NextStrip{};
    const float* b_panel = problem.prepacked ? prepacked_block(problem, step) : problem.b_panels[block % kBBuffers];
    run_strip(problem, step, b_panel, s, strip, c_tile_of(problem, step, s), next);
    work.strip_done(s, block);
  }
}

// Calls without C whose whole-depth B panel fits the budget (plan.whole_depth) take another order: per
// column panel, B is packed for all of K at once (k x nc floats, its K blocks one after another), and each
// thread finishes one row strip at a time, through all K blocks, in a C strip of its own (kMr x nc, in L1/L2).
// So B is packed once in all, where row panels would pack it once per row panel, and no C panel buffer is
// needed. Each element still sums its K blocks in order: the results are bitwise those of the other order.
// Pieces claim B micro-panels to pack (K blocks in order) and strips to run; a piece waits only for a
// micro-panel another piece is packing right now, so pieces run one after another need no one else.
class WholeDepthWork {
 public:
  // `panel`: where B's whole depth for the column panel is packed, or is already (Problem::prepacked).
  WholeDepthWork(const Problem& problem, std::int64_t column_panel, const float* panel, int pieces)
      : problem_(problem),
        first_step_(column_panel * depth_blocks_of(problem.plan)),
        depth_blocks_(depth_blocks_of(problem.plan)),
        micro_panels_(ceil_div(make_step(problem, first_step_).columns, kNr)),
        panel_(const_cast<float*>(panel)),  // written only when not prepacked
        shares_(static_cast<std::size_t>(pieces)),
        packed_(static_cast<std::size_t>(depth_blocks_)) {
    if (problem.prepacked) {
      for (auto& packed : packed_) packed.store(micro_panels_, std::memory_order_relaxed);
      next_pack_.store(depth_blocks_ * micro_panels_, std::memory_order_relaxed);
    }
    const std::int64_t strips = problem.plan.row_strips;
    for (int piece = 0; piece < pieces; ++piece) {
      shares_[static_cast<std::size_t>(piece)].next.store(strips * piece / pieces, std::memory_order_relaxed);
      shares_[static_cast<std::size_t>(piece)].end = strips * (piece + 1) / pieces;
    }
    // Every strip takes the same K blocks: their steps once (make_step's divisions took 1.5% of a convolution).
    for (std::int64_t block = 0; block < depth_blocks_; ++block)
      steps_.push_back(make_step(problem, first_step_ + block));
  }

  // A piece's work: strips until none is left, each through all K blocks.
  void run_piece(int piece, float* a_strip, float* c_strip) {
    const GemmPlan& plan = problem_.plan;
    std::int64_t claimed = 0, claimed_end = 0;  // strips claimed and not yet run
    while (claimed < claimed_end || claim(piece, claimed, claimed_end)) {
      const std::int64_t s = claimed++;
      for (std::int64_t block = 0; block < depth_blocks_; ++block) {
        const Step& step = steps_[static_cast<std::size_t>(block)];
        wait_until_packed(block);
        // Next: the same rows in the next K block (the next strip's rows are not known yet).
        NextStrip next;
        if (block + 1 < depth_blocks_) {
          const Step& following = steps_[static_cast<std::size_t>(block + 1)];
          next = {s * kMr, std::min<std::int64_t>(kMr, plan.m - s * kMr), following.depth_begin, following.depth};
        }
        run_strip(problem_, step, block_panel(step), s, a_strip, c_strip, next);
      }
    }
  }

 private:
  // K block `step`'s micro-panels: after those of the blocks before it.
  float* block_panel(const Step& step) const { return panel_ + step.depth_begin * micro_panels_ * kNr; }

  // Piece `piece` runs the strips of its own contiguous share in order, then helps with the others' shares. One
  // counter for all pieces dealt the strips out alternately, so both cores read the same input lines (a
  // convolution's neighbouring windows), and every strip (2-10 us) moved the counter's cache line, with the
  // fields beside it that every strip reads, from one core to the other. Two threads, median of paired rounds:
  // a 3x3 convolution 0.91x the time, a 7x7 stride-2 stem 0.94x; one thread unchanged. From its own share a piece
  // takes kOwnBatch strips at a time: perf had put a tenth of the stem's time at the atomic add, and four strips a
  // claim measured 0.95x the stem's time (kiln-bench, three alternating pairs; the 3x3 layer the same). The add is
  // a locked instruction, which waits for the streaming stores of the strips before it (an epilogue's results)
  // to reach memory: sixteen strips a claim, the stem 0.97-0.98x again. A batch another piece cannot take over
  // is ~25 us of the stem's strips, 0.5% of its time.
  bool claim(int piece, std::int64_t& first, std::int64_t& end) {
    const int pieces = static_cast<int>(shares_.size());
    for (int i = 0; i < pieces; ++i) {
      Share& share = shares_[static_cast<std::size_t>((piece + i) % pieces)];
      if (share.next.load(std::memory_order_relaxed) >= share.end) continue;
      const std::int64_t batch = i == 0 ? kOwnBatch : 1;
      first = share.next.fetch_add(batch, std::memory_order_relaxed);
      end = std::min(first + batch, share.end);
      if (first < share.end) return true;
    }
    return false;
  }
  static constexpr std::int64_t kOwnBatch = 16;

  // Packs micro-panels (in K order) until block `block` is packed; waits only for panels being packed now.
  void wait_until_packed(std::int64_t block) {
    for (int idle = 0; packed_[static_cast<std::size_t>(block)].load(std::memory_order_acquire) != micro_panels_;) {
      const std::int64_t task = next_pack_.fetch_add(1, std::memory_order_relaxed);
      if (task < depth_blocks_ * micro_panels_) {
        const std::int64_t task_block = task / micro_panels_, micro_panel = task % micro_panels_;
        const Step& step = steps_[static_cast<std::size_t>(task_block)];
        pack_b_panels(problem_, step, micro_panel, micro_panel + 1, block_panel(step));
        packed_[static_cast<std::size_t>(task_block)].fetch_add(1, std::memory_order_release);
        continue;
      }
      wait_a_little(idle);
    }
  }

  const Problem& problem_;
  const std::int64_t first_step_, depth_blocks_, micro_panels_;
  float* const panel_;
  std::vector<Step> steps_;  // per K block
  // Each piece's share of the strips: the next one to claim and its end, on a cache line of its own.
  struct alignas(64) Share {
    std::atomic<std::int64_t> next{0};
    std::int64_t end = 0;
  };
  std::vector<Share> shares_;
  alignas(64) std::atomic<std::int64_t> next_pack_{0};
  std::vector<std::atomic<std::int64_t>> packed_;  // per K block: micro-panels packed
};

// sgemm without C, in whole-depth order (see WholeDepthWork).
void sgemm_whole_depth(Problem& problem) {
  const GemmPlan& plan = problem.plan;
  const int threads = runtime::thread_count();
  const std::int64_t panel_floats = std::max<std::int64_t>(1, plan.k) * round_up(plan.panel_columns, kNr);
  const std::int64_t strip_floats = kMr * kKcMax, c_strip_floats = kMr * problem.ldc;
  auto work = runtime::allocate(
      Device::cpu(),
      sizeof(float) * static_cast<std::size_t>(panel_floats + threads * (strip_floats + c_strip_floats)));
  float* panel = static_cast<float*>(work->data());
  float* strips = panel + panel_floats;
  const int pieces = static_cast<int>(std::min<std::int64_t>(threads, plan.row_strips));
  for (std::int64_t column_panel = 0; column_panel < plan.column_panels; ++column_panel) {
    const float* packed = problem.prepacked ? problem.prepacked + column_panel * panel_floats : panel;
    WholeDepthWork panel_work(problem, column_panel, packed, pieces);
    runtime::parallel_pieces(pieces, [&](std::int64_t piece, std::int64_t) {
      float* own = strips + piece * (strip_floats + c_strip_floats);
      panel_work.run_piece(static_cast<int>(piece), own, own + strip_floats);
    });
  }
}

}  // namespace

GemmPlan plan_sgemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmPlan plan;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  plan.strip_rows = kMr;
  if (m <= 0 || n <= 0) return plan;
  // K blocks of equal depth (a K of 300 is two blocks of 150, not 256 + 44).
  const std::int64_t depth_blocks = std::max<std::int64_t>(1, ceil_div(k, kKcTarget));
  plan.depth_block = std::max<std::int64_t>(1, ceil_div(k, depth_blocks));
  const std::int64_t kc = plan.depth_block;

  const std::int64_t budget_floats = std::max<std::int64_t>(
      static_cast<std::int64_t>(kBudgetFraction * static_cast<double>(m) * static_cast<double>(n)),
      kBudgetFloorBytes / 4);
  plan.row_strips = ceil_div(m, kMr);
  std::int64_t nc = std::min(round_up(n, kNr), kNcTarget);
  // The C panel buffer (rows x (nc + padding)) and the packed B blocks (kc x nc each) share the budget; shrink nc
  // until a row panel of at least a quarter of the rows (or 8 strips) fits, then split the rows.
  auto strips_that_fit = [&](std::int64_t columns) {
    const std::int64_t left = budget_floats - b_buffer_count(depth_blocks) * kc * columns;
    return left <= 0 ? 0 : left / (kMr * (columns + kCBufferPadding));
  };
  const std::int64_t wanted_strips = std::min(plan.row_strips, std::max<std::int64_t>(8, ceil_div(plan.row_strips, 4)));
  while (nc > kNr && strips_that_fit(nc) < wanted_strips) nc -= kNr;
  plan.panel_columns = nc;
  plan.column_panels = ceil_div(n, nc);
  const std::int64_t max_strips = std::max<std::int64_t>(1, std::min(plan.row_strips, strips_that_fit(nc)));
  const std::int64_t row_panels = ceil_div(plan.row_strips, max_strips);
  plan.panel_row_strips = ceil_div(plan.row_strips, row_panels);

  // Several row panels pack B once each. The whole-depth order (WholeDepthWork) packs it once, if a panel of
  // B's whole depth fits the budget with no more column panels (A is copied once per column panel).
  if (row_panels > 1) {
    // Columns w such that the panel (k x w) and the reserved C strips (kMr x (w + padding) each) fit.
    const std::int64_t room = budget_floats - kReservedStrips * kMr * kCBufferPadding;
    const std::int64_t fitting = room / (std::max<std::int64_t>(k, 1) + kReservedStrips * kMr) / kNr * kNr;
    const std::int64_t whole_depth_columns = std::min(std::min(round_up(n, kNr), kNcTarget), fitting);
    if (whole_depth_columns >= kNr && ceil_div(n, whole_depth_columns) <= plan.column_panels) {
      plan.whole_depth = true;
      plan.column_panels = ceil_div(n, whole_depth_columns);
      plan.panel_columns = round_up(ceil_div(n, plan.column_panels), kNr);  // equal panels, as far as kNr allows
      plan.panel_row_strips = plan.row_strips;
    }
  }
  plan.block_count = plan.row_strips * plan.column_panels;
  return plan;
}

namespace {

// sgemm's loops on `problem`, whose plan, A, B and epilogue are set.
void run_sgemm(Problem& problem, float* c, std::int64_t ldc) {
  const GemmPlan& plan = problem.plan;

  const int threads = runtime::thread_count();
  const std::int64_t b_panel_floats = plan.depth_block * round_up(plan.panel_columns, kNr);
  std::shared_ptr<runtime::Buffer> c_buffer;
  if (c) {
    problem.c = c;
    problem.ldc = ldc;
    problem.c_is_buffer = false;
    problem.panel_row_strips = plan.row_strips;  // C needs no buffer: one row panel, B packed once
  } else if (plan.whole_depth) {
    problem.c = nullptr;  // each piece's own C strip (sgemm_whole_depth)
    problem.ldc = plan.panel_columns + kCBufferPadding;
    problem.c_is_buffer = true;
    problem.panel_row_strips = plan.row_strips;
    sgemm_whole_depth(problem);
    return;
  } else {
    problem.ldc = plan.panel_columns + kCBufferPadding;
    c_buffer = runtime::allocate(Device::cpu(),
                                 sizeof(float) * static_cast<std::size_t>(plan.panel_row_strips * kMr * problem.ldc));
    problem.c = static_cast<float*>(c_buffer->data());
    problem.c_is_buffer = true;
    problem.panel_row_strips = plan.panel_row_strips;
  }
  const std::int64_t strip_floats = kMr * kKcMax;
  const std::int64_t depth_blocks = depth_blocks_of(plan);
  const auto b_buffers = static_cast<int>(b_buffer_count(depth_blocks));
  auto work = runtime::allocate(
      Device::cpu(), sizeof(float) * static_cast<std::size_t>(b_buffers * b_panel_floats + threads * strip_floats));
  for (int buffer = 0; buffer < b_buffers; ++buffer)
    problem.b_panels[buffer] = static_cast<float*>(work->data()) + buffer * b_panel_floats;
  problem.a_strips = problem.b_panels[0] + b_buffers * b_panel_floats;

  const std::int64_t regions = step_count(problem) / depth_blocks;
  for (std::int64_t region = 0; region < regions; ++region) {
    const Step first = make_step(problem, region * depth_blocks);
    const std::int64_t strips = first.end_strip - first.first_strip;
    const int pieces = static_cast<int>(std::min<std::int64_t>(threads, strips));
    RegionWork work_of_region(first.first_strip, strips, pieces, depth_blocks, ceil_div(first.columns, kNr),
                              problem.prepacked != nullptr);
    runtime::parallel_pieces(pieces, [&](std::int64_t piece, std::int64_t) {
      run_region_piece(problem, region * depth_blocks, work_of_region, static_cast<int>(piece),
                       problem.a_strips + piece * strip_floats);
    });
  }
}

Problem make_problem(std::int64_t m, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb, bool transpose_b,
                     const GemmEpilogue& epilogue) {
  Problem problem{};
  problem.plan = plan_sgemm(m, n, k);
  problem.b = b;
  problem.ldb = ldb;
  problem.transpose_b = transpose_b;
  problem.epilogue = epilogue;
  return problem;
}

// Points problem.prepacked at a packing of all of op(B) if B lies in memory that the current InvariantOperands scope
// says stays unchanged (a loop's captured weight), packing it the first time.
void prepack_invariant_b(Problem& problem) {
  InvariantOperands* scope = InvariantOperands::current();
  const GemmPlan& plan = problem.plan;
  if (!scope || plan.k <= 0) return;
  const std::int64_t rows = problem.transpose_b ? plan.n : plan.k, columns = problem.transpose_b ? plan.k : plan.n;
  const auto bytes = static_cast<std::size_t>((rows - 1) * problem.ldb + columns) * sizeof(float);
  if (!scope->contains(problem.b, bytes)) return;
  const PackedOperandKey key{problem.b, problem.ldb,        problem.transpose_b, plan.n,
                             plan.k,    plan.panel_columns, plan.depth_block};
  const std::int64_t panel_floats = plan.k * round_up(plan.panel_columns, kNr);
  const std::int64_t depth_blocks = depth_blocks_of(plan);
  if (const float* found = scope->find(key)) {
    problem.prepacked = found;
    return;
  }
  float* out = scope->add(key, static_cast<std::size_t>(plan.column_panels * panel_floats));
  if (!out) return;
  problem.prepacked = out;
  for (std::int64_t column_panel = 0; column_panel < plan.column_panels; ++column_panel)
    for (std::int64_t block = 0; block < depth_blocks; ++block) {
      const Step step = make_step(problem, column_panel * depth_blocks + block);
      pack_b_panels(problem, step, 0, ceil_div(step.columns, kNr), out + prepacked_offset(plan, step));
    }
}

}  // namespace

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, bool transpose_a,
           const float* b, std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
           const GemmEpilogue& epilogue) {
  if (m <= 0 || n <= 0) return;
  Problem problem = make_problem(m, n, k, b, ldb, transpose_b, epilogue);
  problem.a = a;
  problem.lda = lda;
  problem.transpose_a = transpose_a;
  prepack_invariant_b(problem);
  if (gemm_detail::takes_short_product(problem.plan)) {
    gemm_detail::sgemm_short(problem.plan, a, lda, transpose_a, b, ldb, transpose_b, problem.prepacked, c, ldc,
                             epilogue);
    return;
  }
  run_sgemm(problem, c, ldc);
}

void sgemm_gathered(std::int64_t m, std::int64_t n, std::int64_t k, const GatheredRows& a, const float* b,
                    std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc, const GemmEpilogue& epilogue) {
  if (m <= 0 || n <= 0) return;
  if (n <= gemm_detail::kNarrowColumns) {
    gemm_detail::sgemm_gathered_narrow(plan_sgemm(m, n, k), a, b, ldb, transpose_b, c, ldc, epilogue);
    return;
  }
  Problem problem = make_problem(m, n, k, b, ldb, transpose_b, epilogue);
  problem.gathered = &a;
  problem.gathered_in_place = gemm_detail::reads_gathered_in_place(a);
  const gemm_detail::GatheredInterior interior = gemm_detail::find_interior(a);
  problem.interior = &interior;
  if (problem.gathered_in_place && problem.plan.whole_depth && !c)
    problem.plan.depth_block = gemm_detail::in_place_depth_block(k);
  run_sgemm(problem, c, ldc);
}

namespace {

// One column (n = 1: a convolution to one channel's filter gradient, the windows' transpose times the cotangent):
// the microkernel would pad B to kNr columns and multiply zeros, and packing A^T copies every window. Instead each
// gathered row is added where it lies, scaled by its element of b: c = sum_r b[r] A[r, :]. The rows are cut into
// chunks that depend on k only, each summed in order into partial sums of its own, and the partials are added in
// chunk order: the same sums whatever the thread count. At least 512 rows a chunk and at most 256 chunks, so the
// partials stay within 257 m floats however deep the product.
void gathered_transposed_column(std::int64_t m, std::int64_t k, const GatheredRows& a, const float* b,
                                std::int64_t b_stride, float* c, std::int64_t ldc, const GemmEpilogue& epilogue) {
  constexpr std::int64_t min_chunk_rows = 512, max_chunks = 256;
  const std::int64_t chunk_rows = std::max(min_chunk_rows, ceil_div(k, max_chunks));
  const std::int64_t chunks = std::max<std::int64_t>(1, ceil_div(k, chunk_rows));
  auto work = runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>((chunks + 1) * m));
  float* const partials = static_cast<float*>(work->data());
  std::fill(partials, partials + chunks * m, 0.0f);
  runtime::parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t chunk = begin; chunk < end; ++chunk) {
      const std::int64_t first = chunk * chunk_rows, rows = std::min(chunk_rows, k - first);
      if (rows > 0)
        gemm_detail::add_scaled_gathered_rows(a, first, rows, m, b + first * b_stride, b_stride, partials + chunk * m);
    }
  });
  float* const sums = partials + chunks * m;
  for (std::int64_t i = 0; i < m; ++i) {
    float sum = 0.0f;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials[chunk * m + i];
    sums[i] = sum;
    if (c) c[i * ldc] = sum;
  }
  if (!epilogue.function) return;
  // The blocks sgemm would hand it (plan_sgemm: one column panel), each tile a column of `sums`.
  const GemmPlan plan = plan_sgemm(m, 1, k);
  for (std::int64_t strip = 0; strip < plan.row_strips; ++strip) {
    const std::int64_t row_begin = strip * plan.strip_rows, row_end = std::min(m, row_begin + plan.strip_rows);
    epilogue.function(epilogue.context, sums + row_begin, 1, row_begin, row_end, 0, 1, strip);
  }
}

}  // namespace

void sgemm_gathered_transposed(std::int64_t m, std::int64_t n, std::int64_t k, const GatheredRows& a, const float* b,
                               std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
                               const GemmEpilogue& epilogue) {
  if (m <= 0 || n <= 0) return;
  if (n == 1) {
    // B is k x 1: its elements ldb apart, or, transposed (1 x k as stored), side by side.
    gathered_transposed_column(m, k, a, b, transpose_b ? 1 : ldb, c, ldc, epilogue);
    return;
  }
  Problem problem = make_problem(m, n, k, b, ldb, transpose_b, epilogue);
  problem.gathered = &a;
  problem.transpose_a = true;
  run_sgemm(problem, c, ldc);
}

}  // namespace kiln::kernels::cpu
