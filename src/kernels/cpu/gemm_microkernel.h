#pragma once
// The register-blocked inner kernel of kiln's GEMM (gemm.cpp): one kMr x kNr tile of C from a packed A
// micro-panel and a packed B micro-panel. Private to gemm.cpp; a header of its own so the kernel can be read
// (and its assembly inspected) apart from the loop nest around it.
//
// Written with GCC vector extensions, not intrinsics: the same source is the AVX-512 kernel (16-lane vectors,
// 14 x 32 tile: 28 zmm accumulators, 2 zmm of B, broadcasts of A from memory) under -march=native on this
// machine, and narrower generic kernels elsewhere: 6 x 16 in ymm registers with AVX/AVX2, 6 x 8 in SSE or
// NEON registers. Only the fused multiply-add is target-specific.
//
// Summation order, the contract the driver relies on for results that do not depend on the thread count:
// every element of the tile is acc = 0; acc = fma(a[k], b[k], acc) for k = 0..kc-1 in order; then C = acc
// (first K block) or C = C + acc (later blocks). Tails (fewer rows or columns) compute their elements the same
// way.

#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

// Passing 64-byte vectors by value without AVX-512 makes GCC warn about the ABI (-Wpsabi); everything here is
// inlined into the kernel functions, so no such call is emitted.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kiln::kernels::cpu::gemm_detail {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;  // one zmm
inline constexpr int kMr = 14;     // rows of the C tile: 14 x 2 = 28 of the 32 zmm registers accumulate
#elif defined(__AVX__)
inline constexpr int kLanes = 8;   // one ymm
inline constexpr int kMr = 6;      // 6 x 2 = 12 of the 16 ymm registers accumulate
#else
inline constexpr int kLanes = 4;   // one SSE / NEON register (wider vectors would change the ABI: -Wpsabi)
inline constexpr int kMr = 6;
#endif
inline constexpr int kVectorsPerRow = 2;
inline constexpr int kNr = kLanes * kVectorsPerRow;  // columns of the C tile
// Longest K block a strip buffer holds. The row-major A micro-panel has this fixed row stride, so that the
// kernel addresses its rows with constant offsets.
inline constexpr int kKcMax = 384;
// The K block the drivers (sgemm, attention) aim for. Long enough to amortize loading and storing the C tile
// (once per kc * kMr * kNr FMAs); short enough that the A strip (kMr x kc) stays in L1 next to the B
// micro-panel streaming through it. Blocks are of equal depth, at most this (a K of 300 is two of 150).
inline constexpr std::int64_t kKcTarget = 256;
static_assert(kKcTarget <= kKcMax);

using Vector = float __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline Vector load_vector(const float* source) {
  Vector value;
  std::memcpy(&value, source, sizeof(value));
  return value;
}

[[gnu::always_inline]] inline void store_vector(float* destination, Vector value) {
  std::memcpy(destination, &value, sizeof(value));
}

// All lanes = value; written lane by lane so that it is one vbroadcastss (from memory, where the value comes
// from memory) and not an add of zero, which would also turn -0 into +0.
[[gnu::always_inline]] inline Vector broadcast_vector(float value) {
#if defined(__AVX512F__)
  return Vector{value, value, value, value, value, value, value, value,
                value, value, value, value, value, value, value, value};
#elif defined(__AVX__)
  return Vector{value, value, value, value, value, value, value, value};
#else
  return Vector{value, value, value, value};
#endif
}

// a * b + c with one rounding where the hardware has FMA (-std=c++20 turns off GCC's contraction of a * b + c,
// so it is spelled out); elsewhere a multiply and an add.
[[gnu::always_inline]] inline Vector multiply_add(Vector a, Vector b, Vector c) {
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<unsigned short>(0xffff), 4);
#elif defined(__AVX__) && defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  return a * b + c;
#endif
}

// How the packed A micro-panel is laid out (gemm.cpp packs it with a plain copy either way):
//   rows:    element (r, k) at a[r * kKcMax + k]  -- A not transposed: each row of A is copied;
//   k-major: element (r, k) at a[k * kMr + r]     -- A transposed: each row of the stored A^T is copied.
enum class ALayout { rows, k_major };

// The pieces both microkernels below are made of. A tile's sums live in Rows x kVectorsPerRow registers.
template <int Rows>
using TileSums = Vector[Rows][kVectorsPerRow];

template <int Rows>
[[gnu::always_inline]] inline void clear_tile(TileSums<Rows>& acc) {
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectorsPerRow; ++v) acc[r][v] = Vector{};
  }
}

// One step along K: acc[r] += row_value(r) * b_row for every row, b_row being kNr floats of the packed B.
template <int Rows, class RowValue>
[[gnu::always_inline]] inline void multiply_step(TileSums<Rows>& acc, const float* __restrict b_row,
                                                 RowValue row_value) {
  Vector bk[kVectorsPerRow];
#pragma GCC unroll 4
  for (int v = 0; v < kVectorsPerRow; ++v) bk[v] = load_vector(b_row + v * kLanes);
  // B streams from L2: ask for the row 8 steps ahead (kNr floats: one or two cache lines).
  __builtin_prefetch(b_row + 8 * kNr, 0, 3);
  if constexpr (kNr * sizeof(float) > 64) __builtin_prefetch(b_row + 8 * kNr + 64 / sizeof(float), 0, 3);
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
    const Vector ar = broadcast_vector(row_value(r));
#pragma GCC unroll 4
    for (int v = 0; v < kVectorsPerRow; ++v) acc[r][v] = multiply_add(ar, bk[v], acc[r][v]);
  }
}

// The C tile is needed only after the K loop. The kernels ask for it into L2 (Locality 2) when they start (it may
// come from L3: a K block of a large C is visited once per K block), and into L1 (Locality 3) some steps before the
// end, late enough that the B rows streaming through L1 do not evict it first.
template <int Rows, int Locality>
[[gnu::always_inline]] inline void prefetch_tile(const float* c, std::int64_t ldc) {
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
    __builtin_prefetch(c + r * ldc, 0, Locality);
    __builtin_prefetch(c + r * ldc + kNr - 1, 0, Locality);
  }
}

// C[0:Rows, 0:columns] = acc (or C + acc when accumulating).
template <int Rows>
[[gnu::always_inline]] inline void store_tile(const TileSums<Rows>& acc, float* __restrict c, std::int64_t ldc,
                                              int columns, bool accumulate) {
  if (columns == kNr) {
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectorsPerRow; ++v) {
        float* target = c + r * ldc + v * kLanes;
        store_vector(target, accumulate ? load_vector(target) + acc[r][v] : acc[r][v]);
      }
    }
    return;
  }
  // A partial tile: through a full-width row so that only C[r, 0:columns] is read or written.
  for (int r = 0; r < Rows; ++r) {
    float row[kNr];
    for (int v = 0; v < kVectorsPerRow; ++v) store_vector(row + v * kLanes, acc[r][v]);
    float* target = c + r * ldc;
    if (accumulate) {
      for (int j = 0; j < columns; ++j) target[j] += row[j];
    } else {
      for (int j = 0; j < columns; ++j) target[j] = row[j];
    }
  }
}

// C[0:Rows, 0:columns] (=|+=) A[0:Rows, 0:kc] * B[0:kc, 0:kNr], where b holds kc rows of kNr floats (zero
// beyond `columns`) and c has leading dimension ldc. 1 <= Rows <= kMr, 1 <= columns <= kNr.
template <int Rows, ALayout Layout>
void microkernel(std::int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                 std::int64_t ldc, int columns, bool accumulate) {
  TileSums<Rows> acc;
  clear_tile<Rows>(acc);
  auto step = [&](std::int64_t k) __attribute__((always_inline)) {
    auto a_value = [&](int r) __attribute__((always_inline)) {
      return Layout == ALayout::rows ? a[r * kKcMax + k] : a[k * kMr + r];
    };
    multiply_step<Rows>(acc, b + k * kNr, a_value);
  };
  if (accumulate) prefetch_tile<Rows, 2>(c, ldc);
  const std::int64_t prefetch_at = kc > 32 ? kc - 32 : 0;
  std::int64_t k = 0;
#pragma GCC unroll 2
  for (; k < prefetch_at; ++k) step(k);
  if (accumulate) prefetch_tile<Rows, 3>(c, ldc);
#pragma GCC unroll 2
  for (; k < kc; ++k) step(k);
  store_tile<Rows>(acc, c, ldc, columns, accumulate);
}

// A K block of A read where it lies instead of from a packed strip (a convolution's input, sgemm_gathered): runs
// along K, over each of which every row of the strip is contiguous in memory. Row r's elements k0..k0+depth-1 of
// the run are rows[r][0..depth-1]; a row that falls on padding points at zeros. No initializers: a driver's array
// of them is filled as far as it is used, once per strip and K block, and clearing all of it each time showed in
// profiles.
struct ARun {
  std::int64_t depth;
  const float* rows[kMr];
};

// microkernel's product with A given as runs (their depths add up to the K block's): the same sums in the same
// order, so the same bits as the packed strip the runs describe. The row pointers are held in registers across
// a run, which needs Rows + a few of them: drivers use it only where kMr is small (sgemm_gathered).
template <int Rows>
void microkernel_runs(const ARun* runs, int run_count, const float* __restrict b, float* __restrict c, std::int64_t ldc,
                      int columns, bool accumulate) {
  TileSums<Rows> acc;
  clear_tile<Rows>(acc);
  if (accumulate) prefetch_tile<Rows, 2>(c, ldc);
  for (int i = 0; i < run_count; ++i) {
    const float* rows[Rows];
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) rows[r] = runs[i].rows[r];
    if (accumulate && i == run_count - 1) prefetch_tile<Rows, 3>(c, ldc);
    const std::int64_t depth = runs[i].depth;
    // The run's sums in a tile of its own: with `acc` itself in the loop GCC stored every sum to the stack after
    // each step (it keeps an array live across two loops in memory).
    TileSums<Rows> sums;
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectorsPerRow; ++v) sums[r][v] = acc[r][v];
    }
#pragma GCC unroll 2
    for (std::int64_t k = 0; k < depth; ++k) {
      auto a_value = [&](int r) __attribute__((always_inline)) { return rows[r][k]; };
      multiply_step<Rows>(sums, b + k * kNr, a_value);
    }
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectorsPerRow; ++v) acc[r][v] = sums[r][v];
    }
    b += depth * kNr;
  }
  store_tile<Rows>(acc, c, ldc, columns, accumulate);
}

// Transposes a kLanes x kLanes block held as kLanes row vectors, in place: log2(kLanes) stages, each
// exchanging the off-diagonal h x h sub-blocks of every 2h x 2h block (h = kLanes/2, ..., 1) with two-source
// shuffles (vpermt2ps on AVX-512). Used to pack a transposed B.
template <int H, int... Lanes>
[[gnu::always_inline]] inline void transpose_stage(Vector* rows, std::integer_sequence<int, Lanes...>) {
#pragma GCC unroll 16
  for (int i = 0; i < kLanes; ++i) {
    if (i & H) continue;
    const Vector low = rows[i], high = rows[i + H];
    rows[i] = __builtin_shufflevector(low, high, ((Lanes & H) ? kLanes + Lanes - H : Lanes)...);
    rows[i + H] = __builtin_shufflevector(low, high, ((Lanes & H) ? kLanes + Lanes : Lanes + H)...);
  }
}

[[gnu::always_inline]] inline void transpose_block(Vector* rows) {
  constexpr auto lanes = std::make_integer_sequence<int, kLanes>{};
  if constexpr (kLanes >= 16) transpose_stage<8>(rows, lanes);
  if constexpr (kLanes >= 8) transpose_stage<4>(rows, lanes);
  transpose_stage<2>(rows, lanes);
  transpose_stage<1>(rows, lanes);
}

using Microkernel = void (*)(std::int64_t kc, const float* a, const float* b, float* c, std::int64_t ldc, int columns,
                             bool accumulate);

// kernel_table<Layout>[rows - 1] computes a tile of `rows` rows.
template <ALayout Layout, int... Rows>
constexpr auto make_kernel_table(std::integer_sequence<int, Rows...>) {
  return std::array<Microkernel, sizeof...(Rows)>{&microkernel<Rows + 1, Layout>...};
}
template <ALayout Layout>
inline constexpr auto kernel_table = make_kernel_table<Layout>(std::make_integer_sequence<int, kMr>{});

using RunsMicrokernel = void (*)(const ARun* runs, int run_count, const float* b, float* c, std::int64_t ldc,
                                 int columns, bool accumulate);

// runs_kernel_table[rows - 1] computes a tile of `rows` rows from runs.
template <int... Rows>
constexpr auto make_runs_kernel_table(std::integer_sequence<int, Rows...>) {
  return std::array<RunsMicrokernel, sizeof...(Rows)>{&microkernel_runs<Rows + 1>...};
}
inline constexpr auto runs_kernel_table = make_runs_kernel_table(std::make_integer_sequence<int, kMr>{});

}  // namespace kiln::kernels::cpu::gemm_detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
