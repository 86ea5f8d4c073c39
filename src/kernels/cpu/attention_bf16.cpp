// attention() of bf16 operands in AMX tiles: a strip of 32 query rows at a time, the scores' f32 sums to the
// generated row code, its bf16 probabilities multiplied by op(C) at once, so neither the scores nor the
// probabilities reach memory. Unfused, block-bf16's attention wrote and read back 8 x 1024 x 1024 scores and
// probabilities (16 MiB each in bf16) around two library products.
//
// Both products are gemm_bf16's: op(B) and op(C) packed by bf16_tiles::pack_b_panel, the queries' strip by
// bf16_tiles::pack_a_block, and every 32 x 32 block of sums accumulated chunk of k by chunk from zero
// tiles. So the scores are, bit for bit, the sums the standard executor's bf16 matmul rounds, and the output is
// its second matmul's: the fused kernel and the standard executor agree exactly wherever the row code does.

#include "core/half_precision_bits.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace kiln::kernels::cpu {

#if KILN_AMX_POSSIBLE
namespace {

using namespace bf16_tiles;

constexpr std::int64_t strip_rows = 32;  // rows of a strip: a block of C's rows

// A strip's rows are `ld` elements apart, a multiple of 32 (whole tiles of k for the second product) and 32 more, so
// that the 16 rows of a tile load do not all fall in one set of L1 when n is a multiple of 1024.
std::int64_t row_stride(std::int64_t n) { return round_up(std::max<std::int64_t>(n, 1), block) + block; }

// A thread's scratch, each part 64-byte aligned: the current item's packed op(B) and op(C), the queries' strip in
// tiles, the scores' sums, the probabilities, one block of the output's sums, and the row function's own.
struct Scratch {
  Scratch(const AttentionProblem& problem, char* memory)
      : b_panels(round_up(problem.n, block) / block),
        c_panels(round_up(problem.d, block) / block),
        b_panel_elements(panel_elements(problem.k)),
        c_panel_elements(panel_elements(problem.n)),
        chunks(round_up(std::max<std::int64_t>(problem.k, 1), block) / block),
        ld(row_stride(problem.n)) {
    packed_b = reinterpret_cast<std::uint16_t*>(memory);
    packed_c = packed_b + b_panels * b_panel_elements;
    queries = packed_c + c_panels * c_panel_elements;
    scores = reinterpret_cast<float*>(queries + strip_rows * chunks * block);
    probabilities = reinterpret_cast<std::uint16_t*>(scores + strip_rows * ld);
    sums = reinterpret_cast<float*>(probabilities + strip_rows * ld);
    row_scratch = sums + block * block;
    // The probabilities' columns past n are read by the second product's last chunk (against op(C)'s zero rows):
    // zeros, never a NaN's bits. The row function writes columns [0, n) only.
    std::memset(probabilities, 0, static_cast<std::size_t>(strip_rows * ld) * sizeof(std::uint16_t));
  }

  static std::int64_t bytes(std::int64_t n, std::int64_t k, std::int64_t d) {
    const std::int64_t kp = round_up(std::max<std::int64_t>(k, 1), block);
    const std::int64_t halves = round_up(n, block) / block * panel_elements(k) +
                                round_up(d, block) / block * panel_elements(n) + strip_rows * kp +
                                strip_rows * row_stride(n);  // bf16: B's and C's panels, queries, probabilities
    const std::int64_t floats = strip_rows * row_stride(n) + block * block;  // scores, a block of the output
    return 2 * halves + 4 * floats;
  }

  std::int64_t b_panels, c_panels, b_panel_elements, c_panel_elements, chunks, ld;
  std::uint16_t *packed_b, *packed_c, *queries, *probabilities;
  float *scores, *sums;
  void* row_scratch;
  // The matrices packed now (an item's own, or one shared by every item); none at first (a null operand of a
  // zero-size product is one too).
  const void* packed_b_source = nullptr;
  const void* packed_c_source = nullptr;
  bool packed = false;
};

// The 32 x 32 block of sums of 32 rows of A against one packed panel, chunk by chunk: A's two tiles of a chunk at
// `a0` and `a1` + chunk * a_step, each row a_stride bytes apart. Stored to `out`, ld floats a row.
void block_sums(const std::uint16_t* a0, const std::uint16_t* a1, std::int64_t a_step, long a_stride,
                const std::uint16_t* panel, std::int64_t chunks, float* out, std::int64_t ld) {
  zero_accumulators();
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
    multiply_chunk(a0 + chunk * a_step, a1 + chunk * a_step, a_stride, panel + chunk * 2 * tile_elements);
  store_accumulators(out, ld);
}

// An item's op(X) (depth x columns; stored columns x depth when transposed, ld apart) into `panels` packed panels.
void pack_panels(const std::uint16_t* x, std::int64_t ld, bool transposed, std::int64_t depth, std::int64_t columns,
                 std::int64_t panels, std::int64_t panel_size, std::uint16_t* target) {
  for (std::int64_t panel = 0; panel < panels; ++panel)
    pack_b_panel(x, ld, transposed, depth, columns, panel, target + panel * panel_size);
}

void run_strips(const AttentionProblem& problem, const StripUnits::Unit& unit, AttentionRows rows_function,
                void* context, Scratch& scratch) {
  const auto* a = static_cast<const std::uint16_t*>(problem.a) + unit.item * problem.a_batch_stride;
  const auto* b = static_cast<const std::uint16_t*>(problem.b) + unit.item * problem.b_batch_stride;
  const auto* c = static_cast<const std::uint16_t*>(problem.c) + unit.item * problem.c_batch_stride;
  if (!scratch.packed || scratch.packed_b_source != b)
    pack_panels(b, problem.transpose_b ? problem.k : problem.n, problem.transpose_b, problem.k, problem.n,
                scratch.b_panels, scratch.b_panel_elements, scratch.packed_b);
  if (!scratch.packed || scratch.packed_c_source != c)
    pack_panels(c, problem.transpose_c ? problem.n : problem.d, problem.transpose_c, problem.n, problem.d,
                scratch.c_panels, scratch.c_panel_elements, scratch.packed_c);
  scratch.packed_b_source = b;
  scratch.packed_c_source = c;
  scratch.packed = true;
  const std::int64_t lda = problem.transpose_a ? problem.m : problem.k;
  auto* out = static_cast<std::uint16_t*>(problem.out) + unit.item * problem.m * problem.d;
  const std::int64_t ld = scratch.ld, value_chunks = round_up(std::max<std::int64_t>(problem.n, 1), block) / block;
  for (std::int64_t strip = unit.strip_begin; strip < unit.strip_end; ++strip) {
    const std::int64_t row_begin = strip * strip_rows, rows = std::min(strip_rows, problem.m - row_begin);
    // The strip's queries as gemm_bf16 packs A (rows past the strip's zeros).
    pack_a_block(a, lda, problem.transpose_a, row_begin + rows, problem.k, row_begin, scratch.chunks, scratch.queries);
    const std::uint16_t* second_half = scratch.queries + scratch.chunks * tile_elements;
    for (std::int64_t panel = 0; panel < scratch.b_panels; ++panel)
      block_sums(scratch.queries, second_half, tile_elements, 64, scratch.packed_b + panel * scratch.b_panel_elements,
                 scratch.chunks, scratch.scores + panel * block, ld);
    const std::int64_t first_row = unit.item * problem.m + row_begin;
    rows_function(context, first_row, first_row + rows, scratch.scores, scratch.probabilities, ld, scratch.row_scratch);
    // The probabilities read where they lie: a tile's 16 rows ld bf16 apart.
    for (std::int64_t panel = 0; panel < scratch.c_panels; ++panel) {
      block_sums(scratch.probabilities, scratch.probabilities + 16 * ld, block, static_cast<long>(ld) * 2,
                 scratch.packed_c + panel * scratch.c_panel_elements, value_chunks, scratch.sums, block);
      const std::int64_t column = panel * block, columns = std::min(block, problem.d - column);
      for (std::int64_t r = 0; r < rows; ++r) {
        std::uint16_t* target = out + (row_begin + r) * problem.d + column;
        for (std::int64_t j = 0; j < columns; ++j)
          target[j] = half_bits::bf16_from_f32(std::bit_cast<std::uint32_t>(scratch.sums[r * block + j]));
      }
    }
  }
}

}  // namespace

void attention_bf16(const AttentionProblem& problem, AttentionRows rows_function, void* context) {
  if (!has_amx_bf16())
    throw InternalError("attention", "a bf16 attention kernel runs only where the CPU has AMX", std::string());
  if (problem.batch <= 0 || problem.m <= 0) return;
  StripUnits units(problem.batch, (problem.m + strip_rows - 1) / strip_rows);
  const std::int64_t piece_bytes =
      round_up(Scratch::bytes(problem.n, problem.k, problem.d) + problem.row_scratch_bytes, 64);
  auto memory = runtime::allocate(Device::cpu(), static_cast<std::size_t>(units.pieces() * piece_bytes));
  runtime::parallel_pieces(units.pieces(), [&](std::int64_t piece, std::int64_t) {
    char* base = static_cast<char*>(memory->data()) + piece * piece_bytes;
    Scratch scratch(problem, base);
    TileScope tiles;
    for (StripUnits::Unit unit; units.next(unit);) run_strips(problem, unit, rows_function, context, scratch);
  });
}

#else

void attention_bf16(const AttentionProblem&, AttentionRows, void*) {
  throw InternalError("attention", "a bf16 attention kernel runs only where the CPU has AMX", std::string());
}

#endif

}  // namespace kiln::kernels::cpu
