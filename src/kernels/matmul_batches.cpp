#include "kernels/matmul_batches.h"

namespace kiln::kernels {
namespace {

// Batch strides (in elements) of `shape`'s batch axes aligned to the output
// batch axes: 0 for a missing or broadcast (size-1) axis.
std::vector<std::int64_t> batch_strides(const Shape& shape, const Shape& output, std::int64_t matrix_size) {
  int out_batch_rank = output.rank() - 2;
  int batch_rank = shape.rank() - 2;
  std::vector<std::int64_t> strides(static_cast<std::size_t>(out_batch_rank), 0);
  std::int64_t stride = matrix_size;
  for (int axis = batch_rank - 1; axis >= 0; --axis) {
    int out_axis = out_batch_rank - batch_rank + axis;
    if (shape[axis] != 1) strides[static_cast<std::size_t>(out_axis)] = stride;
    stride *= shape[axis];
  }
  return strides;
}

}  // namespace

MatmulBatches matmul_batches(const Shape& a, const Shape& b, const Shape& output, std::int64_t a_matrix,
                             std::int64_t b_matrix) {
  MatmulBatches batches;
  for (int axis = 0; axis < output.rank() - 2; ++axis) batches.count *= output[axis];
  if (output.numel() == 0) return batches;
  std::vector<std::int64_t> stride_a = batch_strides(a, output, a_matrix);
  std::vector<std::int64_t> stride_b = batch_strides(b, output, b_matrix);
  batches.a_offsets.resize(static_cast<std::size_t>(batches.count));
  batches.b_offsets.resize(static_cast<std::size_t>(batches.count));
  std::vector<std::int64_t> index(stride_a.size(), 0);
  std::int64_t offset_a = 0, offset_b = 0;
  for (std::int64_t item = 0; item < batches.count; ++item) {
    batches.a_offsets[static_cast<std::size_t>(item)] = offset_a;
    batches.b_offsets[static_cast<std::size_t>(item)] = offset_b;
    // Advance the batch odometer (last axis fastest).
    for (int axis = static_cast<int>(index.size()) - 1; axis >= 0; --axis) {
      auto d = static_cast<std::size_t>(axis);
      offset_a += stride_a[d];
      offset_b += stride_b[d];
      if (++index[d] < output[axis]) break;
      offset_a -= stride_a[d] * index[d];
      offset_b -= stride_b[d] * index[d];
      index[d] = 0;
    }
  }
  return batches;
}

}  // namespace kiln::kernels
