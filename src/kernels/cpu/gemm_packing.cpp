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

// A run of a gathered row: short (a convolution's channels, often 64 floats), so copied inline rather than by a
// call to memcpy, which took more time than the copying (7% of a 3x3 convolution against 2%).
[[gnu::always_inline]] inline void copy_run(float* target, const float* source, std::int64_t count) {
  std::int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) store_vector(target + j, load_vector(source + j));
  for (; j < count; ++j) target[j] = source[j];
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

void gather_a_strip(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                    std::int64_t depth, float* strip) {
  if (depth <= 0) return;
  std::int64_t coordinates[kGatherMaxAxes] = {};
  for (std::int64_t rest = row_begin, t = a.axes - 1; t >= 0; --t) {
    coordinates[t] = rest % a.extents[t];
    rest /= a.extents[t];
  }
  const std::int64_t depth_end = depth_begin + depth;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* target = strip + r * kKcMax;  // holds columns [depth_begin, depth_end) of the row
    std::int64_t first = 0;              // the part's first column in A
    for (int p = 0; p < a.part_count && first < depth_end; first += a.parts[p].width, ++p) {
      const GatheredPart& part = a.parts[p];
      const std::int64_t begin = std::max(first, depth_begin), end = std::min(first + part.width, depth_end);
      if (begin >= end) continue;
      bool inside = true;
      std::int64_t offset = part.offset + (begin - first);
      for (int t = 0; t < a.axes; ++t) {
        inside = inside && coordinates[t] >= part.lower[t] && coordinates[t] < part.upper[t];
        offset += coordinates[t] * part.strides[t];
      }
      if (inside)
        copy_run(target + (begin - depth_begin), part.source + offset, end - begin);
      else
        std::fill(target + (begin - depth_begin), target + (end - depth_begin), 0.0f);
    }
    for (int t = a.axes - 1; t >= 0 && ++coordinates[t] == a.extents[t]; --t) coordinates[t] = 0;
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
