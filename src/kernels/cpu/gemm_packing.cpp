#include "kernels/cpu/gemm_packing.h"

#include "kernels/cpu/gemm_microkernel.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu::gemm_detail {
namespace {

// One micro-panel of a transposed B: op(B)[kk, j] = B[j, kk], so each stored row (contiguous in K) becomes a
// column of the micro-panel. kLanes x kLanes blocks are transposed in registers; K tails go element by element.
void pack_transposed_b(const float* source, std::int64_t ldb, std::int64_t depth, std::int64_t columns, float* target) {
  std::int64_t kk = 0;
  for (; kk + kLanes <= depth; kk += kLanes) {
    for (int j0 = 0; j0 < kNr; j0 += kLanes) {
      Vector rows[kLanes];
      for (int j = 0; j < kLanes; ++j)
        rows[j] = j0 + j < columns ? load_vector(source + (j0 + j) * ldb + kk) : Vector{};
      transpose_block(rows);
      for (int t = 0; t < kLanes; ++t) store_vector(target + (kk + t) * kNr + j0, rows[t]);
    }
  }
  for (; kk < depth; ++kk) {
    for (std::int64_t j = 0; j < kNr; ++j) target[kk * kNr + j] = j < columns ? source[j * ldb + kk] : 0.0f;
  }
}

}  // namespace

// A plain copy, and cheap in sgemm: its source lines were prefetched while the previous strip ran.
void pack_a_strip(const float* a, std::int64_t lda, bool transpose_a, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, float* strip) {
  if (depth <= 0) return;  // nothing to copy, and `a` may be null (an empty operand)
  if (!transpose_a) {
    const float* source = a + row_begin * lda + depth_begin;
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(strip + r * kKcMax, source + r * lda, sizeof(float) * static_cast<std::size_t>(depth));
    return;
  }
  const float* source = a + depth_begin * lda + row_begin;
  if (rows == kMr) {
    for (std::int64_t kk = 0; kk < depth; ++kk) std::memcpy(strip + kk * kMr, source + kk * lda, sizeof(float) * kMr);
  } else {
    for (std::int64_t kk = 0; kk < depth; ++kk)
      for (std::int64_t r = 0; r < rows; ++r) strip[kk * kMr + r] = source[kk * lda + r];
  }
}

void pack_b_micro_panel(const float* b, std::int64_t ldb, bool transpose_b, std::int64_t depth_begin,
                        std::int64_t depth, std::int64_t column, std::int64_t columns, float* target) {
  if (transpose_b) {
    pack_transposed_b(b + column * ldb + depth_begin, ldb, depth, columns, target);
    return;
  }
  const float* source = b + depth_begin * ldb + column;
  if (columns < kNr) {
    for (std::int64_t kk = 0; kk < depth; ++kk) {
      for (std::int64_t j = 0; j < columns; ++j) target[kk * kNr + j] = source[kk * ldb + j];
      for (std::int64_t j = columns; j < kNr; ++j) target[kk * kNr + j] = 0.0f;
    }
    return;
  }
  // Rows of B are ldb apart, too far for the hardware prefetchers: ask for the row 16 ahead into L1 and the row
  // 64 ahead into L2 (the source is usually in L3, a few hundred cycles away).
  for (std::int64_t kk = 0; kk < depth; ++kk) {
    const float* near = source + std::min(kk + 16, depth - 1) * ldb;
    const float* far = source + std::min(kk + 64, depth - 1) * ldb;
    __builtin_prefetch(near, 0, 3);
    __builtin_prefetch(near + kNr - 1, 0, 3);
    __builtin_prefetch(far, 0, 2);
    __builtin_prefetch(far + kNr - 1, 0, 2);
    std::memcpy(target + kk * kNr, source + kk * ldb, sizeof(float) * kNr);
  }
}

}  // namespace kiln::kernels::cpu::gemm_detail
