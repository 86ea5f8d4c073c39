#pragma once
// The AMX tile machinery that gemm_bf16.cpp's products and attention_bf16.cpp's attention driver share: the tile
// instructions, the per-thread tile state, and B's packing into the pairs TDPBF16PS reads. Private to
// kernels/cpu; only on x86-64 Linux (KILN_AMX_POSSIBLE), and only run where has_amx_bf16() said yes.

#include <cstdint>

#if defined(__x86_64__) && defined(__linux__)
#define KILN_AMX_POSSIBLE 1
#else
#define KILN_AMX_POSSIBLE 0
#endif

#if KILN_AMX_POSSIBLE

// The tile instructions as the assembler spells them (AT&T order: sources first), so that no compiler flag is
// needed. Loads and stores touch memory the compiler cannot see.
#define KILN_TILE_LOAD(tile, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define KILN_TILE_STORE(tile, base, stride) \
  asm volatile("tilestored %%tmm" #tile ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define KILN_TILE_ZERO(tile) asm volatile("tilezero %%tmm" #tile ::)
// c += a b: a 16 x 32 bf16 of A's rows, b 16 pairs of B's rows interleaved (VNNI), c 16 x 16 f32.
#define KILN_TILE_DOT(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

namespace kiln::kernels::cpu::bf16_tiles {

constexpr std::int64_t block = 32;               // rows and columns of C per block product; K's step
constexpr std::int64_t tile_elements = 16 * 32;  // bf16 in a 1 KiB tile

inline std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Per thread: the tile state lives while a range of work items runs, released after (a thread holding tile state
// makes the kernel save it on every context switch). Palette 1 with tiles 0-7 all 16 rows of 64 bytes: 0-3 the
// accumulators of a 32 x 32 block of C, 4-5 two 16-row strips of A, 6-7 two 16-column strips of B.
class TileScope {
 public:
  TileScope();
  ~TileScope() { asm volatile("tilerelease" ::); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// One chunk of k of a 32 x 32 block: A's two 16-row tiles (rows a_stride bytes apart) and a packed panel's two tiles
// of the chunk into tiles 4-7, multiplied into accumulators 0-3.
inline void multiply_chunk(const std::uint16_t* a0, const std::uint16_t* a1, long a_stride,
                           const std::uint16_t* panel_chunk) {
  constexpr long tile_stride = 64;
  KILN_TILE_LOAD(4, a0, a_stride);
  KILN_TILE_LOAD(5, a1, a_stride);
  KILN_TILE_LOAD(6, panel_chunk, tile_stride);
  KILN_TILE_LOAD(7, panel_chunk + tile_elements, tile_stride);
  KILN_TILE_DOT(0, 4, 6);
  KILN_TILE_DOT(1, 4, 7);
  KILN_TILE_DOT(2, 5, 6);
  KILN_TILE_DOT(3, 5, 7);
}

inline void zero_accumulators() {
  KILN_TILE_ZERO(0);
  KILN_TILE_ZERO(1);
  KILN_TILE_ZERO(2);
  KILN_TILE_ZERO(3);
}

// Accumulators 0-3 to a 32 x 32 block of f32 at `out`, rows ld floats apart.
inline void store_accumulators(float* out, std::int64_t ld) {
  const long stride = static_cast<long>(ld) * 4;
  KILN_TILE_STORE(0, out, stride);
  KILN_TILE_STORE(1, out + 16, stride);
  KILN_TILE_STORE(2, out + 16 * ld, stride);
  KILN_TILE_STORE(3, out + 16 * ld + 16, stride);
}

// Rows [row, row + 32) of op(A) (m x k; stored k x m when transpose_a, lda apart) packed into a block's two strips
// of tiles: per 16 rows, per 32 of k, 16 rows of 32 (a tile of TDPBF16PS's A), the second strip `chunks` tiles
// after the first; zeros past m and k.
void pack_a_block(const std::uint16_t* a, std::int64_t lda, bool transpose_a, std::int64_t m, std::int64_t k,
                  std::int64_t row, std::int64_t chunks, std::uint16_t* strips);

// Bf16 of one 32-column panel of op(B) (k x n; stored n x k when transpose_b) packed: per 32 of k, per 16
// columns, 16 pairs of k interleaved (a tile of TDPBF16PS's B), zeros past k and n.
std::int64_t panel_elements(std::int64_t k);
void pack_b_panel(const std::uint16_t* b, std::int64_t ldb, bool transpose_b, std::int64_t k, std::int64_t n,
                  std::int64_t panel, std::uint16_t* out);

}  // namespace kiln::kernels::cpu::bf16_tiles

#endif
