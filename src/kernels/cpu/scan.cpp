// Scans along one axis: cumsum, cumprod, cummax, cummin, with TensorFlow's `exclusive` and `reverse`.
//
// The input is viewed as [outer, length, inner] with the scanned axis in the middle. Each line (one outer and one
// inner index) is combined in order, element after element: a running sum is sequential by definition, and the
// order depends on the shape only, never on the thread count.
//   inner == 1: the lines are contiguous rows, split among the threads and scanned four side by side;
//   inner > 1:  a block of up to `columns_per_block` neighbouring lines is scanned together, one row of the block
//               after the other, so every step reads and writes contiguous memory that the compiler vectorizes.
// The first element of a line is taken as it is (a running sum that starts at -0 is -0), as the reference does;
// with `exclusive` each output is the combination before its element, the identity first (combining_ops.h).

#include "kernels/cpu/combining_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/scan_shape.h"
#include "runtime/parallel.h"

#include <algorithm>

namespace kiln::kernels::cpu {
namespace {

using runtime::Array;
using std::int64_t;

// Lines of a column block: 1024 elements of the widest type is 8 KiB of accumulators, in L1 beside the rows.
constexpr int64_t columns_per_block = 1024;

// The offset of a line's element at `step` (counted in scan order) from the line's first element.
int64_t offset(const ScanShape& shape, int64_t step) {
  return (shape.reverse ? shape.length - 1 - step : step) * shape.inner;
}

// Rows scanned side by side, each with its own running value: within a row every step waits for the one before
// (an add's latency per element), while the rows of a group are independent. Not more than four: rows a multiple
// of 4 KiB apart fall into the same L1 sets, and eight rows in and eight out overflow them. f32[4096, 4096] cumsum
// along rows, 2 threads, Intel Xeon VM: one row at a time 7.2-8.0 ms, four 5.0-5.2, eight 8.9, sixteen 41 (x * 2
// 3.3-4.0 in the same runs).
constexpr int64_t rows_together = 4;

template <class Op, class T>
void scan_rows(const T* x, T* out, const ScanShape& shape) {
  using V = Accumulator<Op, T>;
  const int64_t groups = (shape.outer + rows_together - 1) / rows_together;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(shape.length * rows_together, 1));
  runtime::parallel_for(groups, grain, [&](int64_t begin, int64_t end) {
    V running[rows_together];
    for (int64_t group = begin; group < end; ++group) {
      const int64_t first_row = group * rows_together;
      const int64_t rows = std::min(rows_together, shape.outer - first_row);
      const T* in = x + first_row * shape.length;
      T* result = out + first_row * shape.length;
      const int64_t start = offset(shape, 0);
      for (int64_t r = 0; r < rows; ++r) {
        running[r] = static_cast<V>(in[r * shape.length + start]);
        result[r * shape.length + start] =
            shape.exclusive ? static_cast<T>(Op::template identity<V>()) : static_cast<T>(running[r]);
      }
      for (int64_t step = 1; step < shape.length; ++step) {
        const int64_t at = offset(shape, step);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t element = r * shape.length + at;
          if (shape.exclusive) result[element] = static_cast<T>(running[r]);
          running[r] = Op::apply(running[r], static_cast<V>(in[element]));
          if (!shape.exclusive) result[element] = static_cast<T>(running[r]);
        }
      }
    }
  });
}

template <class Op, class T>
void scan_columns(const T* x, T* out, const ScanShape& shape) {
  using V = Accumulator<Op, T>;
  const int64_t blocks = (shape.inner + columns_per_block - 1) / columns_per_block;
  const int64_t grain =
      std::max<int64_t>(1, 32768 / std::max<int64_t>(shape.length * std::min(shape.inner, columns_per_block), 1));
  runtime::parallel_for(shape.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    V running[columns_per_block];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t first = task % blocks * columns_per_block;
      const int64_t width = std::min(columns_per_block, shape.inner - first);
      const int64_t line = task / blocks * shape.length * shape.inner + first;
      const T* in = x + line;
      T* result = out + line;
      const int64_t start = offset(shape, 0);
      for (int64_t j = 0; j < width; ++j) {
        running[j] = static_cast<V>(in[start + j]);
        result[start + j] = shape.exclusive ? static_cast<T>(Op::template identity<V>()) : static_cast<T>(running[j]);
      }
      for (int64_t step = 1; step < shape.length; ++step) {
        const int64_t at = offset(shape, step);
        if (shape.exclusive)
          for (int64_t j = 0; j < width; ++j) result[at + j] = static_cast<T>(running[j]);
        for (int64_t j = 0; j < width; ++j) running[j] = Op::apply(running[j], static_cast<V>(in[at + j]));
        if (!shape.exclusive)
          for (int64_t j = 0; j < width; ++j) result[at + j] = static_cast<T>(running[j]);
      }
    }
  });
}

template <class Op>
void scan_with(const Array& input, const Array& output, const ScanShape& shape) {
  visit_dtype(input.dtype, [&]<class T>() {
    if (shape.inner == 1)
      scan_rows<Op>(input.data<T>(), output.mutable_data<T>(), shape);
    else
      scan_columns<Op>(input.data<T>(), output.mutable_data<T>(), shape);
  });
}

}  // namespace

void scan(ir::Op op, const ir::Attributes& attributes, const Array& input, const Array& output) {
  const ScanShape shape = scan_shape(op, attributes, input, output);
  if (input.shape.numel() == 0) return;
  switch (op) {
    case ir::Op::cumsum:
      scan_with<SumOp>(input, output, shape);
      break;
    case ir::Op::cumprod:
      scan_with<ProdOp>(input, output, shape);
      break;
    case ir::Op::cummax:
      scan_with<MaxOp>(input, output, shape);
      break;
    default:
      scan_with<MinOp>(input, output, shape);
      break;
  }
}

}  // namespace kiln::kernels::cpu
