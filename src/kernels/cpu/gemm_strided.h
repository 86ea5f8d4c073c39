#pragma once
// The microkernel's product (gemm_microkernel.h) for a gathered strip read where it lies, on AVX-512: a strip of
// kMr = 14 rows whose rows are all inside a convolution's interior (gemm_packing.h) are one pointer and one stride
// apart in every run -- row r of a run at first_row + r * row_stride -- so the fourteen addresses of a step along
// K are the run's pointer plus multiples of the stride that x86 addressing forms from four registers (1, 3, 5 and 7
// strides, scaled by 1, 2, 4 or 8) and a second pointer nine rows on. Nothing is copied: the gather had been 17-22%
// of a 7x7 stem's time and ~10% of a 3x3 layer's. Written in assembly because the tile's 28 accumulators, two B
// vectors and a broadcast fill 31 of the 32 vector registers, and in C++ GCC kept the sums in memory across the
// loop over runs (the note "Convolutions as implicit GEMMs" in docs/design-notes.md).
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
#else
inline constexpr bool kStridedMicrokernel = false;
#endif

// C[0:14, 0:columns] (=|+=) A * B: A's rows given by `runs` (run_count >= 1; their depths add up to the K block's)
// and `row_stride` (floats), B as microkernel's (the block's rows of kNr floats, zero beyond `columns`). Needs
// kStridedMicrokernel.
void strided_microkernel(const StridedRun* runs, int run_count, std::int64_t row_stride, const float* b, float* c,
                         std::int64_t ldc, int columns, bool accumulate);

}  // namespace kiln::kernels::cpu::gemm_detail
