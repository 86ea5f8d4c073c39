// sgemm_gathered for products a few columns wide (gemm.h): a convolution to one or a few channels, or a grouped
// convolution's product per group. The microkernel computes kNr columns at a time, so a product one column wide
// would spend 15 of every 16 of its multiply-adds on padding. Here a step along K is one vector of B's row (its n
// columns, zeros after them) times each row's element broadcast: kMr vectors of sums per strip, n lanes of each
// used. The rows are read where they lie where the strip is inside the windows' interior (interior_strided_runs:
// a grouped convolution's runs are a few channels wide, and copying them into the strip first had taken 41% of
// the product's time, against 26% for the multiply-adds, as dot products along K then); elsewhere the strip is
// gathered as sgemm gathers it.
//
// The sums are the microkernel's, in its order: each K block's from zero, fused multiply-adds along K, then added to
// the earlier blocks' in order; so the product does not depend on the threads.

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_packing.h"
#include "kernels/cpu/gemm_strided.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::cpu::gemm_detail {
namespace {

static_assert(kNarrowColumns <= kLanes, "a narrow product's row of B is one vector");

// Runs read in place per strip at most; a strip needing more is gathered.
constexpr int kNarrowRunCapacity = 64;

// sums[r] += the K block's row r of A times B's rows (one vector per step along K), for the `rows` rows of A given by
// `runs` and `row_stride`; Rows = kMr unrolls a whole strip's rows.
template <int Rows>
[[gnu::always_inline]] inline void add_block(int rows, const StridedRun* runs, int run_count, std::int64_t row_stride,
                                             const float* b_rows, Vector* sums) {
  for (int run = 0; run < run_count; ++run) {
    const float* row = runs[run].first_row;
    for (std::int64_t p = 0; p < runs[run].depth; ++p, ++row, b_rows += kLanes) {
      const Vector bp = load_vector(b_rows);
      if constexpr (Rows > 0) {
#pragma GCC unroll 16
        for (int r = 0; r < Rows; ++r) sums[r] = multiply_add(broadcast_vector(row[r * row_stride]), bp, sums[r]);
      } else {
        for (int r = 0; r < rows; ++r) sums[r] = multiply_add(broadcast_vector(row[r * row_stride]), bp, sums[r]);
      }
    }
  }
}

void add_block(int rows, const StridedRun* runs, int run_count, std::int64_t row_stride, const float* b_rows,
               Vector* sums) {
  if (rows == kMr)
    add_block<kMr>(rows, runs, run_count, row_stride, b_rows, sums);
  else
    add_block<0>(rows, runs, run_count, row_stride, b_rows, sums);
}

}  // namespace

void sgemm_gathered_narrow(const GemmPlan& plan, const GatheredRows& a, const float* b, std::int64_t ldb,
                           bool transpose_b, float* c, std::int64_t ldc, const GemmEpilogue& epilogue) {
  const std::int64_t m = plan.m, n = plan.n, k = plan.k;
  // B's rows, each one vector: its n columns, then zeros.
  auto rows_buffer =
      runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(std::max<std::int64_t>(k, 1) * kLanes));
  float* b_rows = static_cast<float*>(rows_buffer->data());
  for (std::int64_t p = 0; p < k; ++p)
    for (std::int64_t j = 0; j < kLanes; ++j)
      b_rows[p * kLanes + j] = j < n ? (transpose_b ? b[j * ldb + p] : b[p * ldb + j]) : 0.0f;
  const GatheredInterior interior = find_interior(a);
  const std::int64_t depth_blocks = std::max<std::int64_t>(1, ceil_div(k, plan.depth_block));
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(kMr * k, 1));
  runtime::parallel_for(plan.row_strips, grain, [&](std::int64_t begin, std::int64_t end) {
    alignas(64) float strip[kMr * kKcMax];
    alignas(64) float lanes[kMr * kLanes];
    StridedRun runs[kNarrowRunCapacity];
    for (std::int64_t s = begin; s < end; ++s) {
      const std::int64_t row_begin = s * kMr;
      const int rows = static_cast<int>(std::min<std::int64_t>(kMr, m - row_begin));
      Vector tile[kMr] = {};
      for (std::int64_t block = 0; block < depth_blocks; ++block) {
        const std::int64_t depth_begin = block * plan.depth_block;
        const std::int64_t depth = std::min(plan.depth_block, k - depth_begin);
        if (depth <= 0) break;
        std::int64_t row_stride = 0;
        int run_count = interior_strided_runs(a, interior, row_begin, rows, depth_begin, depth, runs,
                                              kNarrowRunCapacity, row_stride);
        if (run_count < 0) {
          gather_a_strip(a, interior, row_begin, rows, depth_begin, depth, strip);
          runs[0] = {strip, depth};
          run_count = 1;
          row_stride = kKcMax;
        }
        Vector sums[kMr] = {};
        add_block(rows, runs, run_count, row_stride, b_rows + depth_begin * kLanes, sums);
        for (int r = 0; r < rows; ++r) tile[r] = block == 0 ? sums[r] : tile[r] + sums[r];
      }
      for (int r = 0; r < rows; ++r) store_vector(lanes + r * kLanes, tile[r]);
      const float* finished = lanes;
      std::int64_t ld = kLanes;
      if (c) {
        for (int r = 0; r < rows; ++r)
          std::memcpy(c + (row_begin + r) * ldc, lanes + r * kLanes, sizeof(float) * static_cast<std::size_t>(n));
        finished = c + row_begin * ldc;
        ld = ldc;
      }
      // One column panel: block s of the plan.
      if (epilogue.function) epilogue.function(epilogue.context, finished, ld, row_begin, row_begin + rows, 0, n, s);
    }
  });
}

}  // namespace kiln::kernels::cpu::gemm_detail
