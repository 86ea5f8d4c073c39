// CUDA kernels: scans (cumsum, cumprod, cummax, cummin) along one axis, as the CPU's (kernels/cpu/scan.cpp). The
// input is viewed as [outer, length, inner]; every line (one outer and one inner index) is combined in order by
// one thread, so a scan equals the CPU's bit for bit: the same operations in the same order (+ and * are IEEE in
// both places, and kiln's CUDA code is built with --fmad=false).
//   inner > 1:  one thread per line, neighbouring threads on neighbouring lines: every step reads and writes
//               consecutive addresses across the warp.
//   inner == 1: rows, 32 per block of one warp, through shared memory a 32 x 32 tile at a time: the warp loads
//               the tile row by row (a row's 32 elements in one access), each thread then scans its row's 32
//               elements with its running value, and the warp stores the tile back row by row. Reading the rows
//               directly, the threads of a warp would each touch another cache line at every step.

#include "kernels/cuda/combining_ops.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/scan_shape.h"

#include <string>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;
using std::int64_t;

template <class Op, class T>
__global__ void scan_columns_kernel(const T* x, T* out, ScanShape shape) {
  using V = typename AccumulatorOf<Op, T>::type;
  const Op op;
  for (int64_t line = thread_index(); line < shape.outer * shape.inner; line += thread_count()) {
    const int64_t base = line / shape.inner * shape.length * shape.inner + line % shape.inner;
    const int64_t stride = shape.reverse ? -shape.inner : shape.inner;
    int64_t at = base + (shape.reverse ? (shape.length - 1) * shape.inner : 0);
    V running = static_cast<V>(x[at]);
    out[at] = shape.exclusive ? static_cast<T>(Op::template identity<V>()) : static_cast<T>(running);
    for (int64_t step = 1; step < shape.length; ++step) {
      at += stride;
      if (shape.exclusive) out[at] = static_cast<T>(running);
      running = op(running, static_cast<V>(x[at]));
      if (!shape.exclusive) out[at] = static_cast<T>(running);
    }
  }
}

template <class Op, class T>
__global__ void scan_rows_kernel(const T* x, T* out, ScanShape shape) {
  using V = typename AccumulatorOf<Op, T>::type;
  const Op op;
  __shared__ T tile[warp_size][warp_size + 1];  // + 1: a thread's row and a warp's column fall in distinct banks
  const int lane = threadIdx.x;
  const int64_t tiles = (shape.length + warp_size - 1) / warp_size;
  for (int64_t first_row = blockIdx.x * int64_t{warp_size}; first_row < shape.outer;
       first_row += gridDim.x * int64_t{warp_size}) {
    const int rows = static_cast<int>(shape.outer - first_row < warp_size ? shape.outer - first_row : warp_size);
    const int64_t own_row = first_row + lane;
    V running = Op::template identity<V>();
    for (int64_t step = 0; step < tiles; ++step) {
      const int64_t tile_index = shape.reverse ? tiles - 1 - step : step;
      const int64_t first_column = tile_index * warp_size;
      const int columns =
          static_cast<int>(shape.length - first_column < warp_size ? shape.length - first_column : warp_size);
      for (int r = 0; r < rows; ++r)
        if (lane < columns) tile[r][lane] = x[(first_row + r) * shape.length + first_column + lane];
      __syncthreads();
      if (own_row < shape.outer) {
        for (int k = 0; k < columns; ++k) {
          const int column = shape.reverse ? columns - 1 - k : k;
          const V value = static_cast<V>(tile[lane][column]);
          const bool first = step == 0 && k == 0;
          if (shape.exclusive) tile[lane][column] = static_cast<T>(running);
          running = first ? value : op(running, value);
          if (!shape.exclusive) tile[lane][column] = static_cast<T>(running);
        }
      }
      __syncthreads();
      for (int r = 0; r < rows; ++r)
        if (lane < columns) out[(first_row + r) * shape.length + first_column + lane] = tile[r][lane];
      __syncthreads();
    }
  }
}

template <class Op, class T>
void scan_typed(const char* name, runtime::cuda::DeviceContext& context, const T* x, T* out, const ScanShape& shape) {
  if (shape.inner > 1) {
    launch(name, context, shape.outer * shape.inner, &scan_columns_kernel<Op, T>, x, out, shape);
    return;
  }
  const int64_t blocks = std::min<int64_t>((shape.outer + warp_size - 1) / warp_size,
                                           int64_t{32} * context.properties.multiProcessorCount);
  launch_grid(name, context, dim3(static_cast<unsigned>(blocks)), dim3(warp_size), &scan_rows_kernel<Op, T>, x, out,
              shape);
}

template <class Op>
void scan_with(const char* name, const Array& input, const Array& output, const ScanShape& shape) {
  auto& context = context_of(output, name);
  visit_dtype(input.dtype,
              [&]<class T>() { scan_typed<Op>(name, context, input.data<T>(), output.mutable_data<T>(), shape); });
}

}  // namespace

void scan(ir::Op op, const ir::Attributes& attributes, const Array& input, const Array& output) {
  const ScanShape shape = scan_shape(op, attributes, input, output);
  if (input.shape.numel() == 0) return;
  const std::string name(ir::name(op));
  switch (op) {
    case ir::Op::cumsum:
      scan_with<SumOp>(name.c_str(), input, output, shape);
      break;
    case ir::Op::cumprod:
      scan_with<ProdOp>(name.c_str(), input, output, shape);
      break;
    case ir::Op::cummax:
      scan_with<MaxOp>(name.c_str(), input, output, shape);
      break;
    default:
      scan_with<MinOp>(name.c_str(), input, output, shape);
      break;
  }
}

}  // namespace kiln::kernels::cuda
