#include "kernels/cpu/gemm_short.h"

#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_packing.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>

// Passing 64-byte vectors by value without AVX-512 makes GCC warn about the ABI (-Wpsabi); the helpers below are
// inlined into the functions that use them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kiln::kernels::cpu::gemm_detail {
namespace {

// Columns a thread takes at a time: whole plan panels adding up to about this many, so that each row of B is read in
// runs of about 4 KiB.
constexpr std::int64_t kChunkColumns = 1024;
// Rows of B a walk across a chunk's columns takes before the next: their runs are read side by side (8 streams the
// prefetchers follow), and each tile's sums are loaded and stored once per group.
constexpr std::int64_t kGroupRows = 8;

// The sums of `Rows` rows of A (one strip, at `a`, packed as pack_a_strip packs it, from the group's first column) and
// one tile of kNr columns over B rows [0, count) read in place (row stride ldb), continued from `sums` (ld floats per
// row) or, when `first`, from zero.
template <int Rows, ALayout Layout>
[[gnu::always_inline]] inline void strip_steps(std::int64_t count, const float* __restrict a, const float* b,
                                               std::int64_t ldb, float* sums, std::int64_t ld, bool first) {
  TileSums<Rows> acc;
  if (first) {
    clear_tile<Rows>(acc);
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectorsPerRow; ++v) acc[r][v] = load_vector(sums + r * ld + v * kLanes);
    }
  }
  const float* row = b;
  for (std::int64_t k = 0; k < count; ++k, row += ldb) {
    Vector bk[kVectorsPerRow];
#pragma GCC unroll 4
    for (int v = 0; v < kVectorsPerRow; ++v) bk[v] = load_vector(row + v * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const Vector ar = broadcast_vector(Layout == ALayout::rows ? a[r * kKcMax + k] : a[k * kMr + r]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectorsPerRow; ++v) acc[r][v] = multiply_add(ar, bk[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectorsPerRow; ++v) store_vector(sums + r * ld + v * kLanes, acc[r][v]);
  }
}

// All `Rows` rows of a product (its strips, kMr x kKcMax floats apart from `a`) over B rows [0, count) read in place,
// across `tiles` tiles of kNr columns: tile t at b + t * kNr, its sums at sums + t * kNr. Each tile's B rows are read
// by the first strip and found in L1 by the others.
template <int Rows, ALayout Layout>
void strided_steps(std::int64_t count, std::int64_t tiles, const float* a, const float* b, std::int64_t ldb,
                   float* sums, std::int64_t ld, bool first) {
  constexpr int full_strips = Rows / kMr, rest = Rows % kMr;
  for (std::int64_t tile = 0; tile < tiles; ++tile) {
#pragma GCC unroll 4
    for (int strip = 0; strip < full_strips; ++strip)
      strip_steps<kMr, Layout>(count, a + strip * kMr * kKcMax, b + tile * kNr, ldb,
                               sums + strip * kMr * ld + tile * kNr, ld, first);
    if constexpr (rest > 0)
      strip_steps<rest, Layout>(count, a + full_strips * kMr * kKcMax, b + tile * kNr, ldb,
                                sums + full_strips * kMr * ld + tile * kNr, ld, first);
  }
}

using StridedSteps = void (*)(std::int64_t count, std::int64_t tiles, const float* a, const float* b, std::int64_t ldb,
                              float* sums, std::int64_t ld, bool first);
template <ALayout Layout, int... Rows>
constexpr auto make_strided_table(std::integer_sequence<int, Rows...>) {
  return std::array<StridedSteps, sizeof...(Rows)>{&strided_steps<Rows + 1, Layout>...};
}
// strided_table<Layout>[m - 1] computes m rows.
template <ALayout Layout>
inline constexpr auto strided_table = make_strided_table<Layout>(std::make_integer_sequence<int, kShortRows>{});

class ShortProduct {
 public:
  ShortProduct(const GemmPlan& plan, const float* a, std::int64_t lda, bool transpose_a, const float* b,
               std::int64_t ldb, bool transpose_b, const float* prepacked, float* c, std::int64_t ldc,
               const GemmEpilogue& epilogue)
      : plan_(plan),
        b_(b),
        ldb_(ldb),
        transpose_b_(transpose_b),
        transpose_a_(transpose_a),
        prepacked_(prepacked),
        c_(c),
        ldc_(ldc),
        epilogue_(epilogue),
        depth_blocks_(depth_blocks_of(plan)),
        chunk_panels_(std::max<std::int64_t>(1, kChunkColumns / std::max<std::int64_t>(plan.panel_columns, 1))),
        chunks_(ceil_div(plan.column_panels, chunk_panels_)),
        chunk_stride_(chunk_panels_ * round_up(plan.panel_columns, kNr)) {
    // A, every K block of every strip, packed once for all threads: m x k floats and some (strips are kKcMax long).
    a_packed_ = runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(a_floats()));
    for (std::int64_t block = 0; block < depth_blocks_; ++block)
      for (std::int64_t strip = 0; strip < plan_.row_strips; ++strip)
        pack_a_strip(a, lda, transpose_a, strip * kMr, strip_rows(strip), block * plan_.depth_block, block_depth(block),
                     a_strip(block, strip));
  }

  void run() {
    const int pieces = static_cast<int>(std::min<std::int64_t>(runtime::thread_count(), chunks_));
    // Per piece: a tile of B (kKcMax x kNr floats), and the sums of a chunk's rows (and C's, without c).
    const std::int64_t tile_floats = kKcMax * kNr;
    const std::int64_t rows_floats = plan_.row_strips * kMr * chunk_stride_;
    const std::int64_t piece_floats = tile_floats + rows_floats * (c_ ? 1 : 2);
    auto work = runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(pieces * piece_floats));
    float* base = static_cast<float*>(work->data());
    // Chunks are claimed as threads get to them: on a loaded machine one thread may be preempted for a time slice,
    // and the other then takes its share.
    std::atomic<std::int64_t> next{0};
    runtime::parallel_pieces(pieces, [&](std::int64_t piece, std::int64_t) {
      float* own = base + piece * piece_floats;
      Buffers buffers{own, own + tile_floats, c_ ? nullptr : own + tile_floats + rows_floats};
      for (std::int64_t chunk = next++; chunk < chunks_; chunk = next++) run_chunk(chunk, buffers);
    });
  }

 private:
  struct Buffers {
    float* tile;    // a packed B micro-panel
    float* sums;    // the chunk's sums in the current K block (untransposed B)
    float* c_rows;  // the chunk's C rows when c is null
  };

  std::int64_t strip_rows(std::int64_t strip) const { return std::min<std::int64_t>(kMr, plan_.m - strip * kMr); }
  std::int64_t block_depth(std::int64_t block) const {
    return std::min(plan_.depth_block, plan_.k - block * plan_.depth_block);
  }
  std::int64_t a_floats() const { return depth_blocks_ * plan_.row_strips * kMr * kKcMax; }
  float* a_strip(std::int64_t block, std::int64_t strip) const {
    return static_cast<float*>(a_packed_->data()) + (block * plan_.row_strips + strip) * kMr * kKcMax;
  }

  void run_chunk(std::int64_t chunk, const Buffers& buffers) const {
    const std::int64_t first_panel = chunk * chunk_panels_;
    const std::int64_t end_panel = std::min(plan_.column_panels, first_panel + chunk_panels_);
    const std::int64_t column_begin = first_panel * plan_.panel_columns;
    const std::int64_t columns = std::min(plan_.n, end_panel * plan_.panel_columns) - column_begin;
    float* c = c_ ? c_ + column_begin : buffers.c_rows;
    const std::int64_t ldc = c_ ? ldc_ : chunk_stride_;
    if (transpose_b_ || prepacked_)
      tiles_through_depth(first_panel, end_panel, buffers.tile, c, ldc);
    else
      rows_in_groups(column_begin, columns, buffers, c, ldc);
    if (!epilogue_.function) return;
    for (std::int64_t panel = first_panel; panel < end_panel; ++panel) {
      const std::int64_t panel_begin = panel * plan_.panel_columns;
      const std::int64_t panel_end = std::min(plan_.n, panel_begin + plan_.panel_columns);
      for (std::int64_t strip = 0; strip < plan_.row_strips; ++strip)
        epilogue_.function(epilogue_.context, c + strip * kMr * ldc + (panel_begin - column_begin), ldc, strip * kMr,
                           strip * kMr + strip_rows(strip), panel_begin, panel_end, panel * plan_.row_strips + strip);
    }
  }

  // Untransposed B, read a row at a time across the chunk: for each K block, groups of kGroupRows rows, each walked
  // across the chunk tile by tile with every strip's sums, which continue in buffers.sums from group to group; then
  // C = the sums (first K block) or C + the sums, as the microkernel stores its tile. Each element's sum is the
  // microkernel's: from zero, one fused multiply-add per row in order.
  void rows_in_groups(std::int64_t column_begin, std::int64_t columns, const Buffers& buffers, float* c,
                      std::int64_t ldc) const {
    for (std::int64_t block = 0; block < depth_blocks_; ++block) {
      const std::int64_t depth_begin = block * plan_.depth_block;
      block_times_rows_in_place(plan_.m, block_depth(block), a_strip(block, 0), transpose_a_,
                                b_ + depth_begin * ldb_ + column_begin, ldb_, columns, buffers.tile, buffers.sums,
                                chunk_stride_, c, ldc, block > 0);
    }
  }

  // Transposed (or prepacked) B, a micro-panel of kNr columns at a time through all K blocks: each block's panel
  // packed from kNr rows of the stored B^T, read along their length (or taken where the loop's packing put it), and
  // multiplied by every strip into C with the microkernel.
  void tiles_through_depth(std::int64_t first_panel, std::int64_t end_panel, float* tile_buffer, float* c,
                           std::int64_t ldc) const {
    const auto& table = transpose_a_ ? kernel_table<ALayout::k_major> : kernel_table<ALayout::rows>;
    const std::int64_t column_begin = first_panel * plan_.panel_columns;
    for (std::int64_t panel = first_panel; panel < end_panel; ++panel) {
      const std::int64_t panel_begin = panel * plan_.panel_columns;
      const std::int64_t panel_columns = std::min(plan_.panel_columns, plan_.n - panel_begin);
      for (std::int64_t tile = 0; tile < ceil_div(panel_columns, kNr); ++tile) {
        const std::int64_t columns = std::min<std::int64_t>(kNr, panel_columns - tile * kNr);
        float* c_tile = c + (panel_begin - column_begin) + tile * kNr;
        for (std::int64_t block = 0; block < depth_blocks_; ++block) {
          const std::int64_t depth_begin = block * plan_.depth_block, depth = block_depth(block);
          const float* b = tile_buffer;
          if (prepacked_) {
            b = prepacked_ + prepacked_offset(plan_, panel, depth_begin, panel_columns) + tile * depth * kNr;
          } else {
            pack_b_micro_panel(b_, ldb_, transpose_b_, depth_begin, depth, panel_begin + tile * kNr, columns,
                               tile_buffer);
          }
          for (std::int64_t strip = 0; strip < plan_.row_strips; ++strip)
            table[strip_rows(strip) - 1](depth, a_strip(block, strip), b, c_tile + strip * kMr * ldc, ldc,
                                         static_cast<int>(columns), block > 0);
        }
      }
    }
  }

  const GemmPlan& plan_;
  const float* b_;
  std::int64_t ldb_;
  bool transpose_b_;
  bool transpose_a_;
  const float* prepacked_;
  float* c_;
  std::int64_t ldc_;
  const GemmEpilogue& epilogue_;
  std::int64_t depth_blocks_;
  std::int64_t chunk_panels_;  // plan panels per chunk
  std::int64_t chunks_;
  std::int64_t chunk_stride_;  // floats per row of a chunk's sums and C rows
  std::shared_ptr<runtime::Buffer> a_packed_;
};

}  // namespace

void block_times_rows_in_place(std::int64_t rows, std::int64_t depth, const float* a, bool a_k_major, const float* b,
                               std::int64_t ldb, std::int64_t columns, float* tile, float* sums, std::int64_t ld,
                               float* c, std::int64_t ldc, bool accumulate) {
  const std::int64_t whole_tiles = columns / kNr, tail = columns - whole_tiles * kNr;
  const StridedSteps steps = (a_k_major ? strided_table<ALayout::k_major> : strided_table<ALayout::rows>)[rows - 1];
  // The last tile's columns past the end are not in B: its rows copied, zeros beyond, and read from there.
  if (tail) pack_b_micro_panel(b, ldb, false, 0, depth, whole_tiles * kNr, tail, tile);
  for (std::int64_t group = 0; group == 0 || group < depth; group += kGroupRows) {
    const std::int64_t count = std::min(kGroupRows, depth - group);
    const float* group_a = a + (a_k_major ? group * kMr : group);
    steps(count, whole_tiles, group_a, b + group * ldb, ldb, sums, ld, group == 0);
    if (tail) steps(count, 1, group_a, tile + group * kNr, kNr, sums + whole_tiles * kNr, ld, group == 0);
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* row_sums = sums + row * ld;
    float* out = c + row * ldc;
    if (!accumulate)
      std::copy_n(row_sums, columns, out);
    else
      for (std::int64_t j = 0; j < columns; ++j) out[j] += row_sums[j];
  }
}

bool takes_short_product(const GemmPlan& plan) {
  if (plan.m > kShortRows) return false;
  return depth_blocks_of(plan) * plan.row_strips * kMr * kKcMax * static_cast<std::int64_t>(sizeof(float)) <=
         kShortPackedABytes;
}

void sgemm_short(const GemmPlan& plan, const float* a, std::int64_t lda, bool transpose_a, const float* b,
                 std::int64_t ldb, bool transpose_b, const float* prepacked, float* c, std::int64_t ldc,
                 const GemmEpilogue& epilogue) {
  if (plan.m <= 0 || plan.n <= 0) return;
  ShortProduct(plan, a, lda, transpose_a, b, ldb, transpose_b, prepacked, c, ldc, epilogue).run();
}

}  // namespace kiln::kernels::cpu::gemm_detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
