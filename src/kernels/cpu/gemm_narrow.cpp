// sgemm_gathered for products a few columns wide (gemm.h): a convolution to one or a few channels. The microkernel
// computes kNr columns at a time, so a product one column wide would spend 15 of every 16 of its multiply-adds on
// padding; here each row of a gathered strip is multiplied by each column of B as a dot product along K, vectors
// across K.

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_packing.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu::gemm_detail {
namespace {

// sum over p < depth of a[p] * b[p]: lane l of a vector accumulates the p = l (mod kLanes), the lanes are then added
// in order and the tail after them.
float dot(const float* a, const float* b, std::int64_t depth) {
  Vector sum{};
  std::int64_t p = 0;
  for (; p + kLanes <= depth; p += kLanes) sum = multiply_add(load_vector(a + p), load_vector(b + p), sum);
  float total = 0;
  for (int lane = 0; lane < kLanes; ++lane) total += sum[lane];
  for (; p < depth; ++p) total = __builtin_fmaf(a[p], b[p], total);
  return total;
}

}  // namespace

void sgemm_gathered_narrow(const GemmPlan& plan, const GatheredRows& a, const float* b, std::int64_t ldb,
                           bool transpose_b, float* c, std::int64_t ldc, const GemmEpilogue& epilogue) {
  const std::int64_t m = plan.m, n = plan.n, k = plan.k;
  // B's columns, each contiguous along K.
  auto columns_buffer =
      runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(std::max<std::int64_t>(n * k, 1)));
  float* columns = static_cast<float*>(columns_buffer->data());
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t p = 0; p < k; ++p) columns[j * k + p] = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
  const GatheredInterior interior = find_interior(a);
  const std::int64_t depth_blocks = std::max<std::int64_t>(1, ceil_div(k, plan.depth_block));
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(kMr * k, 1));
  runtime::parallel_for(plan.row_strips, grain, [&](std::int64_t begin, std::int64_t end) {
    alignas(64) float strip[kMr * kKcMax];
    float tile[kMr * kNarrowColumns];
    for (std::int64_t s = begin; s < end; ++s) {
      const std::int64_t row_begin = s * kMr, rows = std::min<std::int64_t>(kMr, m - row_begin);
      std::fill(tile, tile + rows * n, 0.0f);
      // K blocks in order, as sgemm sums them.
      for (std::int64_t block = 0; block < depth_blocks; ++block) {
        const std::int64_t depth_begin = block * plan.depth_block;
        const std::int64_t depth = std::min(plan.depth_block, k - depth_begin);
        if (depth <= 0) break;
        gather_a_strip(a, interior, row_begin, rows, depth_begin, depth, strip);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < n; ++j)
            tile[r * n + j] += dot(strip + r * kKcMax, columns + j * k + depth_begin, depth);
      }
      const float* finished = tile;
      std::int64_t ld = n;
      if (c) {
        for (std::int64_t r = 0; r < rows; ++r)
          std::memcpy(c + (row_begin + r) * ldc, tile + r * n, sizeof(float) * static_cast<std::size_t>(n));
        finished = c + row_begin * ldc;
        ld = ldc;
      }
      // One column panel: block s of the plan.
      if (epilogue.function) epilogue.function(epilogue.context, finished, ld, row_begin, row_begin + rows, 0, n, s);
    }
  });
}

}  // namespace kiln::kernels::cpu::gemm_detail
