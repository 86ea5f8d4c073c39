#pragma once
// Where each matrix of a batched matmul lives, for every device's kernels:
// the output's batch axes broadcast against both operands' (NumPy rules), so
// batch item i of the output multiplies the matrix of `a` starting at element
// a_offsets[i] by the matrix of `b` at b_offsets[i].

#include <kiln/shape.h>

#include <cstdint>
#include <vector>

namespace kiln::kernels {

struct MatmulBatches {
  std::int64_t count = 1;  // product of the output's batch dimensions
  std::vector<std::int64_t> a_offsets, b_offsets;
};

// a, b: the operands' shapes (rank >= 2); output: the result's (rank >= 2);
// a_matrix, b_matrix: elements per matrix of a and b. Offsets are filled only
// when no output dimension is zero.
MatmulBatches matmul_batches(const Shape& a, const Shape& b, const Shape& output, std::int64_t a_matrix,
                             std::int64_t b_matrix);

}  // namespace kiln::kernels
