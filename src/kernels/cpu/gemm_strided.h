#pragma once
// The microkernel's product (gemm_microkernel.h) for a gathered strip read where it lies, on AVX-512 and on AVX2
// with FMA: a strip of kMr rows whose rows are all inside a convolution's interior (gemm_packing.h) are one pointer
// and one stride apart in every run -- row r of a run at first_row + r * row_stride -- so the kMr addresses of a
// step along K are the run's pointer plus multiples of the stride that x86 addressing forms from a few registers
// (AVX-512's 14 rows: 1, 3, 5 and 7 strides, scaled by 1, 2, 4 or 8, and a second pointer nine rows on; AVX2's 6
// rows: 1, 3 and 5 strides). Nothing is copied: the gather had been 17-22% of a 7x7 stem's time on AVX-512 and 19%
// on Zen 3, ~10% of a 3x3 layer's. Written in assembly because the tile's accumulators, the B vectors and a
// broadcast fill the vector registers (31 of 32 zmm, 15 of 16 ymm), and in C++ GCC kept the sums in memory across
// the loop over runs (the note "Convolutions as implicit GEMMs" in docs/design-notes.md).
//
// The sums are the microkernel's, in the same order (fused multiply-adds along K, runs in column order), so the
// product is bitwise what the gathered strip gives.

#include "kernels/cpu/gemm_microkernel.h"

#include <cstdint>

namespace kiln::kernels::cpu::gemm_detail {

// A run of K along which every row of the strip is contiguous: `depth` columns, row r's at first_row + r * the
// strip's row stride.
struct StridedRun {
  const float* first_row;
  std::int64_t depth;
};

#if defined(__AVX512F__) && defined(__x86_64__)
inline constexpr bool kStridedMicrokernel = kMr == 14 && kNr == 32;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__x86_64__)
// AVX2 with FMA: 6 rows, all addressed from the run's pointer with 1, 3 and 5 strides (scaled by 1, 2 or 4).
inline constexpr bool kStridedMicrokernel = kMr == 6 && kNr == 16;
#else
inline constexpr bool kStridedMicrokernel = false;
#endif

// C[0:kMr, 0:columns] (=|+=) A * B: A's rows given by `runs` (run_count >= 1; their depths add up to the K
// block's) and `row_stride` (floats), B as microkernel's (the block's rows of kNr floats, zero beyond `columns`).
// Needs kStridedMicrokernel.
void strided_microkernel(const StridedRun* runs, int run_count, std::int64_t row_stride, const float* b, float* c,
                         std::int64_t ldc, int columns, bool accumulate);

}  // namespace kiln::kernels::cpu::gemm_detail
