#include "kernels/cpu/gemm_bf16.h"

#include "kernels/cpu/bf16_tiles.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#if KILN_AMX_POSSIBLE
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#endif

namespace kiln::kernels::cpu {

#if KILN_AMX_POSSIBLE
namespace {

using namespace bf16_tiles;

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t column_bytes[16] = {};
  std::uint8_t rows[16] = {};
};

TileConfig tile_config() {
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.column_bytes[tile] = 64;
    config.rows[tile] = 16;
  }
  return config;
}

// Bytes of packed B a run of panels may hold: the panels a thread sweeps every row block of A over, kept in its L2
// (2 MiB a core on Sapphire and Emerald Rapids) beside the strip of A that each row block reads.
constexpr std::int64_t panel_run_bytes = std::int64_t{1} << 20;

// Both operands packed tile by tile: each 16 x 32 piece of A (16 rows, 32 of k) and each 16 x 16 piece of B (32
// of k as 16 interleaved pairs, 16 columns) is 1 KiB in a row, in the order the micro-kernel reads them, so a tile
// load reads consecutive lines. Read from A itself, the 16 rows of a tile were k * 2 bytes apart: at k = 2048,
// 4 KiB, all in one set of L1's.
struct Packed {
  std::int64_t m_padded, n_padded, k_padded;
  std::uint16_t* a;  // per 16-row strip, per 32 of k: 16 rows of 32 (zeros past m and k)
  std::uint16_t* b;  // per 32-column panel, per 32 of k, per 16 columns: 16 pairs of k x 16 columns (zeros past)
};

// Packing space kept by each calling thread between calls up to 64 MiB an operand (larger is allocated per call):
// fresh pages for 2 x 8 MiB at 2048^2 cost 5% of the product in page faults, zeroing them more. Aligned to a page:
// a tile's 64-byte rows must each be one cache line. malloc's large blocks start 16 bytes into a page, and every
// row then spanning two lines cost 40% of the product's time at 2048^3 (0.9 against 1.2 TFLOP/s a core).
class PackingSpace {
  struct Free {
    void operator()(std::uint16_t* pointer) const { ::operator delete[](pointer, std::align_val_t{4096}); }
  };
  using Buffer = std::unique_ptr<std::uint16_t[], Free>;

 public:
  std::uint16_t* get(std::size_t count) {
    if (count <= capacity_) return kept_.get();
    Buffer fresh(static_cast<std::uint16_t*>(::operator new[](count * sizeof(std::uint16_t), std::align_val_t{4096})));
    if (count * sizeof(std::uint16_t) > (std::size_t{64} << 20)) {
      once_ = std::move(fresh);
      return once_.get();
    }
    kept_ = std::move(fresh);
    capacity_ = count;
    return kept_.get();
  }
  void release_once() { once_.reset(); }

 private:
  Buffer kept_, once_;
  std::size_t capacity_ = 0;
};

// Rows `even` and `odd` of 32 columns interleaved into words (each column's pair): columns 0-15 in `low`, 16-31 in
// `high`, two permutes of two 64-byte rows.
__attribute__((target("avx512f,avx512bw"))) inline void interleave_pairs(const std::uint16_t* even,
                                                                         const std::uint16_t* odd, __m512i& low,
                                                                         __m512i& high) {
  // Lane 2j takes column j of `even` (index j), lane 2j + 1 column j of `odd` (index 32 + j); the second half the
  // same from column 16.
  alignas(64) static constexpr std::uint16_t low_order[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                              37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                              11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::uint16_t high_order[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                               53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                               27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i first = _mm512_loadu_si512(even), second = _mm512_loadu_si512(odd);
  low = _mm512_permutex2var_epi16(first, _mm512_load_si512(low_order), second);
  high = _mm512_permutex2var_epi16(first, _mm512_load_si512(high_order), second);
}

// Rows `even` and `odd` of a 32-column panel of B interleaved into two tile rows (`pairs`: columns 0-15;
// pairs + tile_elements: 16-31). Every CPU with AMX or AVX512_BF16 (where gemm_bf16 runs) has AVX512BW; GCC had left
// the scalar form element by element, a third of the product's time at 2048^2 with the strided reads.
__attribute__((target("avx512f,avx512bw"))) void interleave_rows(const std::uint16_t* even, const std::uint16_t* odd,
                                                                 std::uint16_t* pairs) {
  __m512i low, high;
  interleave_pairs(even, odd, low, high);
  _mm512_storeu_si512(pairs, low);
  _mm512_storeu_si512(pairs + tile_elements, high);
}

bool has_avx512bw() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && ((ebx >> 30) & 1u);
}

// The 16 x 16 matrix of 4-byte words in `rows` transposed in place: pairs of words, then of pairs, interleaved
// within 128-bit lanes, then the lanes gathered in two rounds (as vpunpck*dq and vshufi32x4 do; written as
// shuffles of GCC's vectors, whose intrinsics GCC 12 warns about).
using Words = std::int32_t __attribute__((vector_size(64)));
// Lanes 0 and 2, or 1 and 3, of two registers. Functions of their own with the target, not lambdas: a lambda does
// not take its enclosing function's target, and returned its vector in another register convention (wrong results
// where it was not inlined: sanitizer builds).
__attribute__((target("avx512f"))) inline Words even_lanes(const Words& x, const Words& y) {
  return __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
}
__attribute__((target("avx512f"))) inline Words odd_lanes(const Words& x, const Words& y) {
  return __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}

__attribute__((target("avx512f"))) void transpose_words(__m512i rows_in[16]) {
  Words rows[16], pairs[16], quads[16], halves[16];
  for (int i = 0; i < 16; ++i) rows[i] = reinterpret_cast<Words>(rows_in[i]);
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = __builtin_shufflevector(rows[i], rows[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    pairs[i + 1] =
        __builtin_shufflevector(rows[i], rows[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  // quads[4g + c] holds, in 128-bit lane l, column c + 4l of rows 4g to 4g + 3.
  for (int g = 0; g < 4; ++g) {
    const Words &x = pairs[4 * g], &y = pairs[4 * g + 2], &z = pairs[4 * g + 1], &w = pairs[4 * g + 3];
    quads[4 * g] = __builtin_shufflevector(x, y, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    quads[4 * g + 1] = __builtin_shufflevector(x, y, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    quads[4 * g + 2] = __builtin_shufflevector(z, w, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    quads[4 * g + 3] = __builtin_shufflevector(z, w, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  // Columns c and c + 8 (then c + 4 and c + 12) of 8 rows, then of all 16.
  for (int c = 0; c < 4; ++c)
    for (int h = 0; h < 2; ++h) {
      halves[c + 8 * h] = even_lanes(quads[c + 8 * h], quads[c + 8 * h + 4]);
      halves[c + 4 + 8 * h] = odd_lanes(quads[c + 8 * h], quads[c + 8 * h + 4]);
    }
  for (int c = 0; c < 8; ++c) {
    rows_in[c] = reinterpret_cast<__m512i>(even_lanes(halves[c], halves[c + 8]));
    rows_in[c + 8] = reinterpret_cast<__m512i>(odd_lanes(halves[c], halves[c + 8]));
  }
}

// Rows [row, row + 32) of a transposed A (stored k x m, lda apart) into their two strips of tiles, one full chunk
// of k (32 x 32, inside m and k): pairs of k interleaved into words (as B's panels are), then each 16 x 16 block of
// words transposed, so that a tile row holds its row's 32 of k. Element by element, the strided reads had made a
// weight gradient's X^T dY in bf16 2.6x slower than the same product untransposed.
__attribute__((target("avx512f,avx512bw"))) void pack_transposed_a_chunk(const std::uint16_t* a, std::int64_t lda,
                                                                         std::int64_t row, std::int64_t chunk,
                                                                         std::uint16_t* first, std::uint16_t* second) {
  __m512i low[16], high[16];  // words (k = 2q, 2q + 1) of columns 0-15 and 16-31 of the block
  for (int q = 0; q < 16; ++q) {
    const std::uint16_t* even = a + (chunk * block + 2 * q) * lda + row;
    interleave_pairs(even, even + lda, low[q], high[q]);
  }
  transpose_words(low);
  transpose_words(high);
  for (int r = 0; r < 16; ++r) {
    _mm512_storeu_si512(first + r * block, low[r]);
    _mm512_storeu_si512(second + r * block, high[r]);
  }
}

// Columns [column, column + 32) of a transposed B (stored n x k, ldb apart) for one full chunk of k into the panel's
// two tiles of that chunk: a column's 32 of k are 16 words (its pairs) in a row of b, so each 16 x 16 block of
// words transposed is a tile, a row per pair.
__attribute__((target("avx512f,avx512bw"))) void pack_transposed_b_chunk(const std::uint16_t* b, std::int64_t ldb,
                                                                         std::int64_t column, std::int64_t chunk,
                                                                         std::uint16_t* tiles) {
  for (int half = 0; half < 2; ++half) {
    __m512i words[16];
    for (int j = 0; j < 16; ++j) words[j] = _mm512_loadu_si512(b + (column + 16 * half + j) * ldb + chunk * block);
    transpose_words(words);
    for (int q = 0; q < 16; ++q) _mm512_storeu_si512(tiles + half * tile_elements + q * block, words[q]);
  }
}

// One chunk of k of rows [row, row + 32) of a transposed A into its two tiles (`first`: rows 0-15, `second`:
// 16-31), zeros past m and k: transposed in registers where the chunk is whole, element by element at m's and k's
// ends.
void pack_transposed_a_block_chunk(const std::uint16_t* a, std::int64_t lda, std::int64_t m, std::int64_t k,
                                   std::int64_t row, std::int64_t chunk, std::uint16_t* first, std::uint16_t* second) {
  static const bool permutes = has_avx512bw();
  if (permutes && row + block <= m && (chunk + 1) * block <= k) {
    pack_transposed_a_chunk(a, lda, row, chunk, first, second);
    return;
  }
  for (std::int64_t r = 0; r < block; ++r) {
    std::uint16_t* target = (r < 16 ? first : second) + (r % 16) * block;
    for (std::int64_t p = 0; p < block; ++p) {
      const std::int64_t depth = chunk * block + p;
      target[p] = row + r < m && depth < k ? a[depth * lda + row + r] : std::uint16_t{0};
    }
  }
}

// Row blocks [begin, end) (32 rows each) of a transposed A into their strips of tiles, chunk of k by chunk, so that
// each of a chunk's 32 rows of A is read along the blocks' whole width: block by block, a block's 64 bytes of each
// of k rows, lda apart, left the prefetchers behind (a third of a bf16 training step's packing time).
void pack_transposed_a(const std::uint16_t* a, std::int64_t lda, std::int64_t m, std::int64_t k, std::int64_t begin,
                       std::int64_t end, std::int64_t chunks, std::uint16_t* packed) {
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
    for (std::int64_t row_block = begin; row_block < end; ++row_block) {
      std::uint16_t* first = packed + row_block * 2 * chunks * tile_elements + chunk * tile_elements;
      pack_transposed_a_block_chunk(a, lda, m, k, row_block * block, chunk, first, first + chunks * tile_elements);
    }
}

Packed pack(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda, bool transpose_a,
            const std::uint16_t* b, std::int64_t ldb, bool transpose_b, PackingSpace& a_space, PackingSpace& b_space) {
  Packed packed;
  packed.m_padded = round_up(m, block);
  packed.n_padded = round_up(n, block);
  packed.k_padded = round_up(std::max<std::int64_t>(k, 1), block);
  const std::int64_t chunks = packed.k_padded / block, kp = packed.k_padded;
  packed.a = a_space.get(static_cast<std::size_t>(packed.m_padded * kp));
  packed.b = b_space.get(static_cast<std::size_t>(packed.n_padded * kp));
  std::uint16_t* pa = packed.a;
  runtime::parallel_for(packed.m_padded / block, 1, [&](std::int64_t begin, std::int64_t end) {
    if (transpose_a) {
      pack_transposed_a(a, lda, m, k, begin, end, chunks, pa);
      return;
    }
    for (std::int64_t row_block = begin; row_block < end; ++row_block)
      pack_a_block(a, lda, false, m, k, row_block * block, chunks, pa + row_block * 2 * chunks * tile_elements);
  });
  std::uint16_t* pb = packed.b;
  runtime::parallel_for(packed.n_padded / block, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t panel = begin; panel < end; ++panel)
      pack_b_panel(b, ldb, transpose_b, k, n, panel, pb + panel * chunks * 2 * tile_elements);
  });
  return packed;
}

// Rows of a block per call of the epilogue. A block's epilogue runs in pieces between the next block's tile
// products: the tile unit works through them while the vector units run the epilogue (run after each block, the
// seed's sin, relu and sum had left the tiles idle for a sixth of its time).
constexpr std::int64_t piece_rows = 8;
constexpr std::int64_t pieces_per_block = block / piece_rows;

// A finished block whose epilogue has pieces left to run. Every piece is called, an empty one (past an edge
// block's rows) with no rows, so that each piece's number is seen once.
class PendingEpilogue {
 public:
  explicit PendingEpilogue(const GemmEpilogue& epilogue) : epilogue_(epilogue) {}
  void start(const float* tile, std::int64_t ld, std::int64_t row, std::int64_t rows, std::int64_t column,
             std::int64_t columns, std::int64_t block_number) {
    tile_ = tile;
    ld_ = ld;
    row_ = row;
    rows_ = rows;
    column_ = column;
    columns_ = columns;
    block_number_ = block_number;
    next_ = epilogue_.function ? 0 : pieces_per_block;
  }
  bool waiting() const { return next_ < pieces_per_block; }
  void run_piece() {
    const std::int64_t first = std::min(rows_, next_ * piece_rows), last = std::min(rows_, first + piece_rows);
    epilogue_.function(epilogue_.context, tile_ + first * ld_, ld_, row_ + first, row_ + last, column_,
                       column_ + columns_, block_number_ * pieces_per_block + next_);
    ++next_;
  }
  void finish() {
    while (waiting()) run_piece();
  }

 private:
  const GemmEpilogue& epilogue_;
  const float* tile_ = nullptr;
  std::int64_t ld_ = 0, row_ = 0, rows_ = 0, column_ = 0, columns_ = 0, block_number_ = 0;
  std::int64_t next_ = pieces_per_block;
};

// The 32 x 32 block of C at row block `row_block` and column panel `panel`, written to `out` (ld floats a row),
// running pieces of the previous block's epilogue between its steps along k.
void block_product(const Packed& packed, std::int64_t row_block, std::int64_t panel, float* out, std::int64_t ld,
                   PendingEpilogue& pending) {
  const std::int64_t chunks = packed.k_padded / block;
  const std::uint16_t* a0 = packed.a + row_block * 2 * chunks * tile_elements;
  const std::uint16_t* a1 = a0 + chunks * tile_elements;
  const std::uint16_t* b = packed.b + panel * chunks * 2 * tile_elements;
  constexpr long tile_stride = 64;
  // The pieces spread over k, a piece every `interval` steps; what a short k leaves runs after the block.
  const std::int64_t interval = std::max<std::int64_t>(1, chunks / (pieces_per_block + 1));
  zero_accumulators();
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::uint16_t* b0 = b + chunk * 2 * tile_elements;
    // The tiles two steps ahead into L1 while this step's products run: a tile load waits for its lines, and
    // from L2 that wait left the unit idle.
    if (chunk + 2 < chunks)
      for (int line = 0; line < 16; ++line) {
        __builtin_prefetch(a0 + (chunk + 2) * tile_elements + line * 32, 0, 3);
        __builtin_prefetch(a1 + (chunk + 2) * tile_elements + line * 32, 0, 3);
        __builtin_prefetch(b0 + 4 * tile_elements + line * 32, 0, 3);
        __builtin_prefetch(b0 + 5 * tile_elements + line * 32, 0, 3);
      }
    multiply_chunk(a0 + chunk * tile_elements, a1 + chunk * tile_elements, tile_stride, b0);
    if ((chunk + 1) % interval == 0 && pending.waiting()) pending.run_piece();
  }
  store_accumulators(out, ld);
}

// The same block with AVX512_BF16's dot products, for CPUs that have them and no AMX (Cooper Lake, AMD's Zen 4 and
// later). VDPBF16PS adds to each of 16 f32 lanes the products of a pair of bf16 from each operand, so the packed
// tiles serve as they are: a row of a B tile is 16 columns' pairs of k (a vector), and the pair of k of an A row is
// 4 bytes to broadcast. Eight rows at a time (16 accumulators, two of B, one of A: 19 of the 32 registers), the
// whole of k in registers; the rows' A pairs come from L1 (8 rows of k = 2048: 32 KiB), B's panel from L2.
// Like AMX, the instruction treats subnormal inputs and results as zero.
// The previous block's epilogue runs after it (the vector units are this kernel's).
__attribute__((target("avx512f,avx512bf16"))) void block_product_dot(const Packed& packed, std::int64_t row_block,
                                                                     std::int64_t panel, float* out, std::int64_t ld,
                                                                     PendingEpilogue&) {
  constexpr int rows = 8;
  const std::int64_t chunks = packed.k_padded / block;
  const std::uint16_t* b = packed.b + panel * chunks * 2 * tile_elements;
  for (int group = 0; group < block / rows; ++group) {
    // Rows 0-15 of the block are one strip of A's tiles, 16-31 the next; a group is half a strip.
    const std::uint16_t* strip =
        packed.a + (row_block * 2 + group / 2) * chunks * tile_elements + (group % 2) * rows * block;
    __m512 low[rows], high[rows];  // columns 0-15 and 16-31 of each row
#pragma GCC unroll 8
    for (int r = 0; r < rows; ++r) low[r] = high[r] = _mm512_setzero_ps();
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      const std::uint16_t* a_tile = strip + chunk * tile_elements;
      const std::uint16_t* b_low = b + chunk * 2 * tile_elements;
      const std::uint16_t* b_high = b_low + tile_elements;
      for (int pair = 0; pair < block / 2; ++pair) {
        const __m512bh columns_low = (__m512bh)_mm512_loadu_si512(b_low + pair * 32);
        const __m512bh columns_high = (__m512bh)_mm512_loadu_si512(b_high + pair * 32);
#pragma GCC unroll 8
        for (int r = 0; r < rows; ++r) {
          int both;
          std::memcpy(&both, a_tile + r * block + 2 * pair, sizeof both);
          const __m512bh a_pair = (__m512bh)_mm512_set1_epi32(both);
          low[r] = _mm512_dpbf16_ps(low[r], a_pair, columns_low);
          high[r] = _mm512_dpbf16_ps(high[r], a_pair, columns_high);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; ++r) {
      _mm512_storeu_ps(out + (group * rows + r) * ld, low[r]);
      _mm512_storeu_ps(out + (group * rows + r) * ld + 16, high[r]);
    }
  }
}

bool request_tile_state() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  constexpr long request_permission = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr long tile_data = 18;               // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, request_permission, tile_data) == 0;
}

// AVX512_BF16 (CPUID leaf 7, subleaf 1, EAX bit 5) with AVX-512 usable: AVX512F, and the OS saving the opmask and
// zmm state (XCR0 bits 1, 2, 5, 6, 7).
bool has_dot_instructions() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !((ebx >> 16) & 1u)) return false;  // AVX512F
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return false;           // OSXSAVE
  unsigned low = 0, high = 0;
  asm("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  if ((low & 0xE6u) != 0xE6u) return false;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && ((eax >> 5) & 1u);
}

// KILN_<name>=1 (anything but empty or 0) refuses an instruction set.
bool refused(const char* variable) {
  const char* value = std::getenv(variable);
  return value && *value && std::strcmp(value, "0") != 0;
}

// Seconds for `rounds` rounds of 16 independent accumulations by `step` (the best of three runs: the first may
// meet a lower clock).
template <class Step>
double seconds_for(long rounds, Step step) {
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    step(rounds);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// `rounds` (> 0) rounds of 16 independent VDPBF16PS, or of 16 independent FMAs, on zeros: written as assembly so
// that what is timed does not depend on the compiler's flags (at -O0, or under a sanitizer, the accumulators of a
// loop in C++ live in memory, and the comparison would be of loads and stores).
// clang-format off
#define KILN_SIXTEEN(instruction) \
  instruction " %%zmm16, %%zmm16, %%zmm0\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm1\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm2\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm3\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm4\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm5\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm6\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm7\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm8\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm9\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm10\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm11\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm12\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm13\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm14\n\t" \
  instruction " %%zmm16, %%zmm16, %%zmm15\n\t"
#define KILN_ROUNDS(instruction, rounds)                                       \
  asm volatile("vpxord %%zmm16, %%zmm16, %%zmm16\n\t"                          \
               "1:\n\t"                                                        \
               KILN_SIXTEEN(instruction)                                        \
               "dec %0\n\t"                                                    \
               "jnz 1b"                                                         \
               : "+r"(rounds)                                                   \
               :                                                                \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", \
                 "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",   \
                 "xmm15", "xmm16", "cc")
// clang-format on

__attribute__((target("avx512f,avx512bf16"))) void dot_rounds(long rounds) { KILN_ROUNDS("vdpbf16ps", rounds); }
__attribute__((target("avx512f"))) void fma_rounds(long rounds) { KILN_ROUNDS("vfmadd231ps", rounds); }
#undef KILN_ROUNDS
#undef KILN_SIXTEEN

// Whether VDPBF16PS (32 multiplies an instruction) runs at least 3/4 as many instructions a second as an f32 FMA
// (16), so that a product of its blocks beats the f32 product of widened operands (OpenBLAS, near the FMA's rate;
// the blocks reach ~70% of the instruction's). Measured once, ~1 ms: on this project's Emerald Rapids VM it ran a
// quarter as many (1.0 against 4.2 G/s a core), and the widened f32 product was 1.6x faster than its blocks.
bool dot_products_pay() {
  constexpr long rounds = 20000;
  return seconds_for(rounds, dot_rounds) <= seconds_for(rounds, fma_rounds) / 0.75;
}

}  // namespace

namespace bf16_tiles {

TileScope::TileScope() {
  static const TileConfig config = tile_config();
  asm volatile("ldtilecfg %0" ::"m"(config));
}

void pack_a_block(const std::uint16_t* a, std::int64_t lda, bool transpose_a, std::int64_t m, std::int64_t k,
                  std::int64_t row, std::int64_t chunks, std::uint16_t* strips) {
  if (transpose_a) {
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
      pack_transposed_a_block_chunk(a, lda, m, k, row, chunk, strips + chunk * tile_elements,
                                    strips + (chunks + chunk) * tile_elements);
    return;
  }
  for (std::int64_t r = 0; r < block; ++r) {
    std::uint16_t* strip_row = strips + (r / 16) * chunks * tile_elements + (r % 16) * block;
    const std::int64_t i = row + r;
    if (i >= m) {  // padding rows
      for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
        std::memset(strip_row + chunk * tile_elements, 0, block * sizeof(std::uint16_t));
      continue;
    }
    if (k % block != 0 || k == 0)  // the last chunk's tail
      std::memset(strip_row + (chunks - 1) * tile_elements, 0, block * sizeof(std::uint16_t));
    for (std::int64_t chunk = 0; chunk * block < k; ++chunk)
      std::memcpy(strip_row + chunk * tile_elements, a + i * lda + chunk * block,
                  static_cast<std::size_t>(std::min(block, k - chunk * block)) * sizeof(std::uint16_t));
  }
}

std::int64_t panel_elements(std::int64_t k) { return round_up(std::max<std::int64_t>(k, 1), block) * block; }

void pack_b_panel(const std::uint16_t* b, std::int64_t ldb, bool transpose_b, std::int64_t k, std::int64_t n,
                  std::int64_t panel, std::uint16_t* out) {
  const std::int64_t first = panel * block, columns = std::min(block, n - first);
  const std::int64_t kp = round_up(std::max<std::int64_t>(k, 1), block);
  if (columns < block || kp != k)
    std::memset(out, 0, static_cast<std::size_t>(panel_elements(k)) * sizeof(std::uint16_t));
  // Where the pair of k for a column lies at (p, j) of the packed panel: its chunk of 32, its half (16 columns).
  const auto pair_at = [&](std::int64_t p, std::int64_t j) {
    return out + (p / block) * 2 * tile_elements + (j / 16) * tile_elements + (p % block / 2) * block + (j % 16) * 2;
  };
  if (!transpose_b && columns == block) {
    // Rows p and p + 1 interleaved, 16 columns to a tile row.
    static const bool permutes = has_avx512bw();
    for (std::int64_t p = 0; p + 1 < k; p += 2) {
      const std::uint16_t* even = b + p * ldb + first;
      const std::uint16_t* odd = even + ldb;
      if (permutes) {
        interleave_rows(even, odd, pair_at(p, 0));
        continue;
      }
      for (std::int64_t j = 0; j < block; ++j) {
        pair_at(p, j)[0] = even[j];
        pair_at(p, j)[1] = odd[j];
      }
    }
    if (k % 2 != 0)  // the last row, its pair's second half zero (set above: kp != k)
      for (std::int64_t j = 0; j < block; ++j) pair_at(k - 1, j)[0] = b[(k - 1) * ldb + first + j];
    return;
  }
  if (transpose_b) {
    // Whole chunks of a whole panel transposed in registers (has_avx512bw: every CPU gemm_bf16 runs on).
    static const bool permutes = has_avx512bw();
    const std::int64_t whole = permutes && columns == block ? k / block : 0;
    for (std::int64_t chunk = 0; chunk < whole; ++chunk)
      pack_transposed_b_chunk(b, ldb, first, chunk, out + chunk * 2 * tile_elements);
    // The rest a word at a time: column j of op(B) is row first + j of b, and a pair of k one 4-byte word there.
    for (std::int64_t j = 0; j < columns && whole * block < k; ++j) {
      const std::uint16_t* column = b + (first + j) * ldb;
      for (std::int64_t p = whole * block; p + 1 < k; p += 2)
        std::memcpy(pair_at(p, j), column + p, 2 * sizeof(std::uint16_t));
      if (k % 2 != 0) pair_at(k - 1, j)[0] = column[k - 1];
    }
    return;
  }
  for (std::int64_t p = 0; p < k; ++p)
    for (std::int64_t j = 0; j < columns; ++j) pair_at(p, j)[p % 2] = b[p * ldb + first + j];
}

}  // namespace bf16_tiles

bool has_amx_bf16() {
  static const bool available = !refused("KILN_NO_AMX") && request_tile_state();
  return available;
}

bool has_avx512_bf16() {
  static const bool available = [] {
    if (refused("KILN_NO_AVX512_BF16") || !has_dot_instructions()) return false;
    // KILN_AVX512_BF16=1 takes them without asking whether they pay (what the tests of this path set).
    const char* forced = std::getenv("KILN_AVX512_BF16");
    return (forced && std::strcmp(forced, "1") == 0) || dot_products_pay();
  }();
  return available;
}

bool has_bf16_products() { return has_amx_bf16() || has_avx512_bf16(); }

std::int64_t gemm_bf16_block_count(std::int64_t m, std::int64_t n) {
  return m <= 0 || n <= 0 ? 0 : round_up(m, block) / block * (round_up(n, block) / block) * pieces_per_block;
}

void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
               bool transpose_a, const std::uint16_t* b, std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
               const GemmEpilogue& epilogue) {
  if (m <= 0 || n <= 0) return;
  thread_local PackingSpace a_space, b_space;
  const Packed packed = pack(m, n, k, a, lda, transpose_a, b, ldb, transpose_b, a_space, b_space);
  const std::int64_t row_blocks = packed.m_padded / block, panels = packed.n_padded / block;
  // An item is a row block against a run of panels; the items of a run are its row blocks in order. Each panel is
  // read from L2 by every row block (it was read from memory once for the run), and each row block's strip of A,
  // read from memory once for the run, is reused from L2 by the run's panels. Blocks of one row block against one
  // panel at a time (the former order) read a fresh panel from memory every fourth block: 0.85 against 1.2
  // TFLOP/s a core in a probe of the block loop at 2048^3.
  const std::int64_t panel_bytes = block * packed.k_padded * static_cast<std::int64_t>(sizeof(std::uint16_t));
  // Shorter runs where a product has too few row blocks to give every thread a few items.
  const std::int64_t enough_runs = 4 * runtime::thread_count() / row_blocks;
  const std::int64_t run = std::clamp<std::int64_t>(
      std::min(panel_run_bytes / panel_bytes, enough_runs > 0 ? panels / enough_runs : panels), 1, panels);
  const std::int64_t runs = (panels + run - 1) / run;
  const bool tiles = has_amx_bf16();
  if (!tiles && !has_avx512_bf16())
    throw InternalError("matmul", "gemm_bf16 called where has_bf16_products() is false", std::string());
  auto product = tiles ? &block_product : &block_product_dot;
  runtime::parallel_for(runs * row_blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    std::optional<TileScope> scope;
    if (tiles) scope.emplace();
    // Two buffers: a block's epilogue reads one while the next block is computed into the other.
    alignas(64) float edges[2][block * block];
    int next_edge = 0;
    PendingEpilogue pending(epilogue);
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t first_panel = item / row_blocks * run, row_block = item % row_blocks;
      const std::int64_t row = row_block * block, rows = std::min(block, m - row);
      for (std::int64_t panel = first_panel; panel < std::min(panels, first_panel + run); ++panel) {
        const std::int64_t column = panel * block, columns = std::min(block, n - column);
        float* edge = edges[next_edge];
        const float* tile = edge;
        std::int64_t ld = block;
        if (c && rows == block && columns == block) {
          product(packed, row_block, panel, c + row * ldc + column, ldc, pending);
          tile = c + row * ldc + column;
          ld = ldc;
        } else {
          product(packed, row_block, panel, edge, block, pending);  // C's edge, or no C: the block in a buffer
          next_edge ^= 1;
          if (c)
            for (std::int64_t i = 0; i < rows; ++i)
              std::memcpy(c + (row + i) * ldc + column, edge + i * block, static_cast<std::size_t>(columns) * 4);
        }
        pending.finish();
        pending.start(tile, ld, row, rows, column, columns, row_block * panels + panel);
      }
    }
    pending.finish();
  });
  a_space.release_once();
  b_space.release_once();
}

#else

bool has_amx_bf16() { return false; }
bool has_avx512_bf16() { return false; }
bool has_bf16_products() { return false; }

std::int64_t gemm_bf16_block_count(std::int64_t, std::int64_t) { return 0; }

void gemm_bf16(std::int64_t, std::int64_t, std::int64_t, const std::uint16_t*, std::int64_t, bool, const std::uint16_t*,
               std::int64_t, bool, float*, std::int64_t, const GemmEpilogue&) {
  throw InternalError("matmul", "gemm_bf16 called where has_bf16_products() is false", std::string());
}

#endif

}  // namespace kiln::kernels::cpu
