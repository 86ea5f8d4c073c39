// Large products for the JIT through OpenBLAS, with sgemm's blocks and epilogue calls (see gemm.h).

#include "kernels/cpu/blas.h"
#include "kernels/cpu/gemm.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <climits>

namespace kiln::kernels::cpu {
namespace {

// Products at least this deep (see prefers_openblas in gemm.h) ...
constexpr std::int64_t kDeepProduct = 768;
// ... with an output of at least this many elements: at 64 x 64 x 2^20 kiln's loops were 1.1x faster, at
// 256 x 256 x 2^16 OpenBLAS 1.3x (gemm_benchmark, 2026-12-01).
constexpr double kWideOutput = 256.0 * 256.0;
// Products with at most this many rows or columns, at any depth: sgemm packs the wide operand for a few dot
// products per element packed, and OpenBLAS then the same epilogue ran 1.15-2x faster (2048 x n x 2048 for n = 1,
// 4, 8, 16: 0.62, 0.69, 0.69, 0.83 of it; 1-8 x 2048 x 2048: 0.73-0.87; 512 x 1 x 512: 0.21; at 32 columns the
// fused loops were at par, 1.04; Zen 4, 2026-12-01). A matrix-vector product is the extreme case.
constexpr std::int64_t kNarrowProduct = 16;
// ... except products with fewer rows than this, which sgemm computes without packing B (gemm_short.h): OpenBLAS
// 0.3.21's Haswell kernels packed all of B for them (Zen 3, two threads, 2026-12-07: m x 4096 x 4096 for m = 2, 4,
// 8, 12, 15 in 2.5, 3.4, 4.0, 5.3, 6.4 ms against OpenBLAS's 5.4, 8.5, 8.7, 13.8, 7.3; B transposed 4.0-7.4 against
// 7.2-14.7; 4-8 x 1024^2 0.17-0.37 ms against 0.43-0.52). At 16 rows, a whole tile of its kernel, OpenBLAS was ahead
// (5.7-5.8 ms against 6.7-7.0; 2048^2 1.29-1.37 ms against 1.72-1.76).
constexpr std::int64_t kRowsBeforeOpenBlas = 16;
// The row panel buffer when C is not given: at least this many bytes, or a quarter of C (sgemm's own buffers
// take up to 23% of C). Fewer, larger panels pack B fewer times.
constexpr std::int64_t kPanelFloorBytes = std::int64_t{64} << 20;
constexpr double kPanelFractionOfC = 0.25;

bool fits_int(std::int64_t value) { return value <= INT_MAX; }

// Passes the blocks of rows [row_begin, row_end) (whole strips) to the epilogue, in parallel; `tile` holds
// row row_begin at column 0, `ld` floats per row.
void run_epilogue(const GemmPlan& plan, const GemmEpilogue& epilogue, const float* tile, std::int64_t ld,
                  std::int64_t row_begin, std::int64_t row_end) {
  const std::int64_t first_strip = row_begin / plan.strip_rows;
  const std::int64_t strips = (row_end - row_begin + plan.strip_rows - 1) / plan.strip_rows;
  runtime::parallel_for(strips * plan.column_panels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      // Along a row of blocks first: consecutive items read consecutive columns of the same rows.
      const std::int64_t strip = first_strip + item / plan.column_panels, panel = item % plan.column_panels;
      const std::int64_t rows_begin = strip * plan.strip_rows, columns_begin = panel * plan.panel_columns;
      const std::int64_t rows_end = std::min(plan.m, rows_begin + plan.strip_rows);
      const std::int64_t columns_end = std::min(plan.n, columns_begin + plan.panel_columns);
      epilogue.function(epilogue.context, tile + (rows_begin - row_begin) * ld + columns_begin, ld, rows_begin,
                        rows_end, columns_begin, columns_end, panel * plan.row_strips + strip);
    }
  });
}

}  // namespace

bool prefers_openblas(std::int64_t m, std::int64_t n, std::int64_t k) {
  const double output = static_cast<double>(m) * static_cast<double>(n);
  if (m < kRowsBeforeOpenBlas) return false;
  return (k >= kDeepProduct && output >= kWideOutput) || std::min(m, n) <= kNarrowProduct;
}

void sgemm_through_openblas(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                            bool transpose_a, const float* b, std::int64_t ldb, bool transpose_b, float* c,
                            std::int64_t ldc, const GemmEpilogue& epilogue, std::int64_t panel_rows) {
  const blas::Functions& functions = blas::functions("matmul");
  const GemmPlan plan = plan_sgemm(m, n, k);
  if (m == 0 || n == 0) return;
  blas::sync_thread_count();
  const int a_transpose = transpose_a ? blas::transpose : blas::no_transpose;
  const int b_transpose = transpose_b ? blas::transpose : blas::no_transpose;
  // C's rows [row_begin, row_end) into `out` (ld floats per row).
  auto product_rows = [&](std::int64_t row_begin, std::int64_t row_end, float* out, std::int64_t ld) {
    if (k == 0) {  // zeros, whatever `out` held (OpenBLAS may scale it by beta = 0 instead)
      for (std::int64_t row = 0; row < row_end - row_begin; ++row) std::fill_n(out + row * ld, n, 0.0f);
      return;
    }
    const float* a_rows = transpose_a ? a + row_begin : a + row_begin * lda;
    functions.sgemm(blas::row_major, a_transpose, b_transpose, static_cast<int>(row_end - row_begin),
                    static_cast<int>(n), static_cast<int>(k), 1.0f, a_rows,
                    static_cast<int>(std::max<std::int64_t>(lda, 1)), b,
                    static_cast<int>(std::max<std::int64_t>(ldb, 1)), 0.0f, out, static_cast<int>(ld));
  };
  if (c) {
    product_rows(0, m, c, ldc);
    if (epilogue.function) run_epilogue(plan, epilogue, c, ldc, 0, m);
    return;
  }
  if (!epilogue.function) return;
  if (panel_rows <= 0) {
    const double budget = std::max(static_cast<double>(kPanelFloorBytes),
                                   kPanelFractionOfC * static_cast<double>(m) * static_cast<double>(n) * sizeof(float));
    const auto fitting = static_cast<std::int64_t>(budget / (static_cast<double>(n) * sizeof(float)));
    panel_rows = std::max(plan.strip_rows, fitting / plan.strip_rows * plan.strip_rows);
  }
  panel_rows = std::min(panel_rows, m);
  auto buffer = runtime::allocate(Device::cpu(), sizeof(float) * static_cast<std::size_t>(panel_rows * n));
  float* panel = static_cast<float*>(buffer->data());
  for (std::int64_t row_begin = 0; row_begin < m; row_begin += panel_rows) {
    const std::int64_t row_end = std::min(m, row_begin + panel_rows);
    product_rows(row_begin, row_end, panel, n);
    run_epilogue(plan, epilogue, panel, n, row_begin, row_end);
  }
}

void sgemm_or_openblas(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                       bool transpose_a, const float* b, std::int64_t ldb, bool transpose_b, float* c, std::int64_t ldc,
                       const GemmEpilogue& epilogue) {
  bool through_openblas = prefers_openblas(m, n, k) && fits_int(m) && fits_int(n) && fits_int(k) && fits_int(lda) &&
                          fits_int(ldb) && fits_int(ldc);
  if (through_openblas) {
    try {
      blas::functions("matmul");
    } catch (const Error&) {
      through_openblas = false;  // no OpenBLAS on this machine: kiln's own loops compute every size
    }
  }
  if (through_openblas)
    sgemm_through_openblas(m, n, k, a, lda, transpose_a, b, ldb, transpose_b, c, ldc, epilogue);
  else
    sgemm(m, n, k, a, lda, transpose_a, b, ldb, transpose_b, c, ldc, epilogue);
}

}  // namespace kiln::kernels::cpu
