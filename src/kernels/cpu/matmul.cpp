// matmul: batched matrix products over the last two axes, with NumPy
// broadcasting of the batch axes.
//
// f32/f64 go through OpenBLAS (blas.h). A batch runs as runtime::parallel_for
// over its GEMMs with OpenBLAS single-threaded. Measured on the 2-core
// development machine (tools/reduction_bandwidth, quiet machine): attention
// scores, 64 GEMMs [512,64]x[64,512], 151 GFLOP/s this way against 127 for a
// loop of multithreaded OpenBLAS calls; attention values, 64 GEMMs
// [512,512]x[512,64], 139 against 116 (each multithreaded call pays a
// thread hand-off and splits a small problem in two). When the batch does
// not divide evenly among the threads, the last `batch % threads` GEMMs run
// one by one with OpenBLAS multithreaded, so no thread gets a whole extra
// GEMM. A single GEMM is one multithreaded OpenBLAS call (2048^3: the same
// rate as cblas_sgemm called directly).
//
// i32/i64 use a plain blocked i-k-j loop in unsigned arithmetic (wraparound,
// no undefined behaviour), multithreaded over batch and rows.
//
// bf16 operands with an f32 or bf16 output (kernels::run's bf16 matmul where
// the CPU has AMX or AVX512_BF16) go through gemm_bf16.h's blocks.

#include "core/half_precision_bits.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/matmul_batches.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <type_traits>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using runtime::Array;

// Sizes of one product and where each GEMM of the batch finds its operands.
struct Problem {
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::int64_t batch = 1;
  std::vector<std::int64_t> a_offsets, b_offsets;  // element offsets per output batch index
};

Problem make_problem(bool transpose_a, bool transpose_b, const Array& a, const Array& b, const Array& output) {
  Problem problem;
  int rank_a = a.shape.rank(), rank_b = b.shape.rank(), rank_out = output.shape.rank();
  const bool bf16_to_f32 = a.dtype == DType::bf16 && output.dtype == DType::f32;  // gemm_bf16
  if (rank_a < 2 || rank_b < 2 || rank_out < 2 || a.dtype != b.dtype || (a.dtype != output.dtype && !bf16_to_f32))
    throw InternalError("matmul", "kernel called with mismatched operands", std::string());
  problem.transpose_a = transpose_a;
  problem.transpose_b = transpose_b;
  problem.m = output.shape[rank_out - 2];
  problem.n = output.shape[rank_out - 1];
  problem.k = transpose_a ? a.shape[rank_a - 2] : a.shape[rank_a - 1];
  MatmulBatches batches = matmul_batches(a.shape, b.shape, output.shape, problem.m * problem.k, problem.k * problem.n);
  problem.batch = batches.count;
  // (Offsets are empty when the output is empty: nothing to multiply.)
  problem.a_offsets = std::move(batches.a_offsets);
  problem.b_offsets = std::move(batches.b_offsets);
  return problem;
}

// ---- f32 / f64 through OpenBLAS ------------------------------------------------

template <class T>
void blas_matmul(const Problem& problem, const T* a, const T* b, T* c) {
  std::int64_t lda = problem.transpose_a ? problem.m : problem.k;
  std::int64_t ldb = problem.transpose_b ? problem.k : problem.n;
  for (std::int64_t size : {problem.m, problem.n, problem.k, lda, ldb})
    if (size > INT_MAX)
      throw ValueError("matmul", "matrix dimension " + std::to_string(size) + " exceeds OpenBLAS's 32-bit limit",
                       std::string());
  const blas::Functions& functions = blas::functions("matmul");
  int transpose_a = problem.transpose_a ? blas::transpose : blas::no_transpose;
  int transpose_b = problem.transpose_b ? blas::transpose : blas::no_transpose;
  auto m = static_cast<int>(problem.m), n = static_cast<int>(problem.n), k = static_cast<int>(problem.k);
  std::int64_t c_size = problem.m * problem.n;
  // Where the BLAS runs A^T B slowly on one thread for a narrow B (blas::Functions), the batch's single-threaded
  // products go as C^T = B^T A, an untransposed A, into a buffer of the thread's own, then moved into C (n x m into
  // m x n: a few hundred KiB).
  const bool through_transpose = functions.narrow_transposed_left_slow && problem.transpose_a && problem.n <= 64;
  auto transposed_gemm = [&](const T* a_item, const T* b_item, T* c_item) {
    thread_local std::vector<T> transposed;
    transposed.resize(static_cast<std::size_t>(c_size));
    const int b_transpose = problem.transpose_b ? blas::no_transpose : blas::transpose;
    if constexpr (std::is_same_v<T, float>)
      functions.sgemm(blas::row_major, b_transpose, blas::no_transpose, n, m, k, 1.0f, b_item, static_cast<int>(ldb),
                      a_item, static_cast<int>(lda), 0.0f, transposed.data(), m);
    else
      functions.dgemm(blas::row_major, b_transpose, blas::no_transpose, n, m, k, 1.0, b_item, static_cast<int>(ldb),
                      a_item, static_cast<int>(lda), 0.0, transposed.data(), m);
    for (std::int64_t row = 0; row < problem.m; ++row)
      for (std::int64_t column = 0; column < problem.n; ++column)
        c_item[row * problem.n + column] = transposed[static_cast<std::size_t>(column * problem.m + row)];
  };
  auto gemm = [&](std::int64_t item, bool single_threaded) {
    const T* a_item = a + problem.a_offsets[static_cast<std::size_t>(item)];
    const T* b_item = b + problem.b_offsets[static_cast<std::size_t>(item)];
    T* c_item = c + item * c_size;
    if (through_transpose && single_threaded) {
      transposed_gemm(a_item, b_item, c_item);
      return;
    }
    if constexpr (std::is_same_v<T, float>)
      functions.sgemm(blas::row_major, transpose_a, transpose_b, m, n, k, 1.0f, a_item, static_cast<int>(lda), b_item,
                      static_cast<int>(ldb), 0.0f, c_item, n);
    else
      functions.dgemm(blas::row_major, transpose_a, transpose_b, m, n, k, 1.0, a_item, static_cast<int>(lda), b_item,
                      static_cast<int>(ldb), 0.0, c_item, n);
  };

  std::int64_t threads = runtime::thread_count();
  std::int64_t even = threads > 1 ? problem.batch / threads * threads : 0;
  if (even > 0) {
    blas::SingleThreadedScope single_threaded;
    runtime::parallel_for(even, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t item = begin; item < end; ++item) gemm(item, true);
    });
  }
  if (even < problem.batch) {
    blas::sync_thread_count();
    for (std::int64_t item = even; item < problem.batch; ++item) gemm(item, false);
  }
}

// ---- i32 / i64: blocked i-k-j loop ---------------------------------------------

// Copies each of `count` row-major [rows, cols] matrices into [cols, rows].
template <class U>
std::vector<U> transposed_copy(const U* source, std::int64_t count, std::int64_t rows, std::int64_t cols) {
  std::vector<U> result(static_cast<std::size_t>(count * rows * cols));
  runtime::parallel_for(count * rows, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t index = begin; index < end; ++index) {
      std::int64_t item = index / rows, row = index % rows;
      const U* from = source + index * cols;
      U* to = result.data() + item * rows * cols + row;
      for (std::int64_t col = 0; col < cols; ++col) to[col * rows] = from[col];
    }
  });
  return result;
}

template <class T>
void integer_matmul(const Problem& problem, const Array& a_array, const Array& b_array, T* c_signed) {
  using U = std::make_unsigned_t<T>;  // wraps like two's complement; signed and unsigned may alias
  const U* a = reinterpret_cast<const U*>(a_array.data<T>());
  const U* b = reinterpret_cast<const U*>(b_array.data<T>());
  U* c = reinterpret_cast<U*>(c_signed);
  std::int64_t m = problem.m, n = problem.n, k = problem.k;
  // Bring transposed operands to [m, k] and [k, n] once: the loop below wants
  // unit stride along k for A's rows and along n for B's rows.
  std::vector<U> a_copy, b_copy;
  if (problem.transpose_a) {
    a_copy = transposed_copy(a, a_array.shape.numel() / (m * k), k, m);
    a = a_copy.data();
  }
  if (problem.transpose_b) {
    b_copy = transposed_copy(b, b_array.shape.numel() / (k * n), n, k);
    b = b_copy.data();
  }
  // Blocks keep a [k_block, n_block] panel of B in L2 while rows of A stream.
  constexpr std::int64_t n_block = 512, k_block = 256, rows_per_task = 16;
  std::int64_t row_tasks = (m + rows_per_task - 1) / rows_per_task;
  runtime::parallel_for(problem.batch * row_tasks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t task = begin; task < end; ++task) {
      std::int64_t item = task / row_tasks;
      std::int64_t row_begin = task % row_tasks * rows_per_task, row_end = std::min(m, row_begin + rows_per_task);
      const U* a_item = a + problem.a_offsets[static_cast<std::size_t>(item)];
      const U* b_item = b + problem.b_offsets[static_cast<std::size_t>(item)];
      U* c_item = c + item * m * n;
      for (std::int64_t col0 = 0; col0 < n; col0 += n_block) {
        std::int64_t cols = std::min(n_block, n - col0);
        for (std::int64_t row = row_begin; row < row_end; ++row) std::fill_n(c_item + row * n + col0, cols, U{0});
        for (std::int64_t k0 = 0; k0 < k; k0 += k_block) {
          std::int64_t k1 = std::min(k, k0 + k_block);
          for (std::int64_t row = row_begin; row < row_end; ++row) {
            U* c_row = c_item + row * n + col0;
            for (std::int64_t inner = k0; inner < k1; ++inner) {
              U scale = a_item[row * k + inner];
              const U* b_row = b_item + inner * n + col0;
              for (std::int64_t col = 0; col < cols; ++col) c_row[col] += scale * b_row[col];
            }
          }
        }
      }
    }
  });
}

// ---- bf16 through gemm_bf16 (AMX tiles, AVX512_BF16) ----------------------------------------------------------------
// A bf16 output is the f32 sums rounded once in gemm_bf16's epilogue (as the cast kernel rounds), so no f32 product is
// written and read back: attention's 8 x 1024 x 1024 scores in bf16 (block-bf16) were a 32 MiB f32 product and a cast
// pass.
struct RoundedOutput {
  std::uint16_t* out;
  std::int64_t n;
};

void round_block(void* context, const float* tile, std::int64_t ld, std::int64_t row_begin, std::int64_t row_end,
                 std::int64_t column_begin, std::int64_t column_end, std::int64_t) {
  const RoundedOutput& output = *static_cast<const RoundedOutput*>(context);
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    const float* sums = tile + (row - row_begin) * ld - column_begin;
    std::uint16_t* rounded = output.out + row * output.n;
    for (std::int64_t column = column_begin; column < column_end; ++column)
      rounded[column] = half_bits::bf16_from_f32(std::bit_cast<std::uint32_t>(sums[column]));
  }
}

// One product at a time, each on all of kiln's threads (gemm_bf16 splits it in blocks of 32 x 32), into `c` (f32) or,
// when `c` is null, rounded into `rounded` (bf16).
void tiled_bf16_matmul(const Problem& problem, const std::uint16_t* a, const std::uint16_t* b, float* c,
                       std::uint16_t* rounded) {
  const std::int64_t lda = problem.transpose_a ? problem.m : problem.k;
  const std::int64_t ldb = problem.transpose_b ? problem.k : problem.n;
  for (std::int64_t item = 0; item < problem.batch; ++item) {
    const std::int64_t offset = item * problem.m * problem.n;
    RoundedOutput output{c ? nullptr : rounded + offset, problem.n};  // (no offset added to a null `rounded`)
    gemm_bf16(problem.m, problem.n, problem.k, a + problem.a_offsets[static_cast<std::size_t>(item)], lda,
              problem.transpose_a, b + problem.b_offsets[static_cast<std::size_t>(item)], ldb, problem.transpose_b,
              c ? c + offset : nullptr, problem.n,
              c ? GemmEpilogue{} : GemmEpilogue{.function = round_block, .context = &output});
  }
}

}  // namespace

void matmul(bool transpose_a, bool transpose_b, const Array& a, const Array& b, const Array& output) {
  Problem problem = make_problem(transpose_a, transpose_b, a, b, output);
  if (problem.batch == 0 || problem.m == 0 || problem.n == 0) return;
  if (problem.k == 0) {  // an empty sum: zeros
    std::memset(output.mutable_raw(), 0, output.bytes());
    return;
  }
  if (a.dtype == DType::bf16) {  // into f32, or rounded block by block into bf16, through gemm_bf16
    const bool rounded = output.dtype == DType::bf16;
    tiled_bf16_matmul(problem, a.data<std::uint16_t>(), b.data<std::uint16_t>(),
                      rounded ? nullptr : output.mutable_data<float>(),
                      rounded ? output.mutable_data<std::uint16_t>() : nullptr);
    return;
  }
  switch (output.dtype) {
    case DType::f32:
      blas_matmul(problem, a.data<float>(), b.data<float>(), output.mutable_data<float>());
      break;
    case DType::f64:
      blas_matmul(problem, a.data<double>(), b.data<double>(), output.mutable_data<double>());
      break;
    case DType::i32:
      integer_matmul(problem, a, b, output.mutable_data<std::int32_t>());
      break;
    case DType::i64:
      integer_matmul(problem, a, b, output.mutable_data<std::int64_t>());
      break;
    case DType::boolean:
      throw DTypeError("matmul", "does not accept bool operands", std::string());
    case DType::bf16:
    case DType::f16:
      detail::half_precision_unsupported(output.dtype);
  }
}

}  // namespace kiln::kernels::cpu
