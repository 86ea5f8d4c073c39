#pragma once
// Host-side planning for the CUDA kernels: how an op's index space maps onto
// its operands, decided once per call on the host and passed to the kernels
// as small plain structs (kernel parameters). Plain C++, no CUDA: the tests
// check it on machines without a GPU (tests/cuda/plan_test.cpp).

#include <kiln/shape.h>

#include <array>
#include <cstdint>
#include <vector>

namespace kiln::kernels::cuda {

inline constexpr int max_rank = Shape::max_rank;

// ---- elementwise broadcasting ----------------------------------------------------

// The output of an N-operand elementwise op as a collapsed loop nest: output
// dims of size 1 dropped, neighbouring dims merged where every operand is
// contiguous across them (the CPU kernels' plan_walk). Output element i,
// decomposed row-major over dims[0..rank), is operand k's element
// sum(index[d] * strides[k][d]); a stride is 0 where the operand broadcasts.
template <int N> struct BroadcastPlan {
  int rank = 1;  // >= 1
  std::int64_t dims[max_rank] = {};
  std::int64_t strides[N][max_rank] = {};

  // Operand k is read element by element along the output (stride 1 in a
  // rank-1 plan).
  bool contiguous(int k) const { return rank == 1 && strides[k][0] == 1; }
  // Operand k is one element for every output element.
  bool scalar(int k) const {
    for (int d = 0; d < rank; ++d)
      if (strides[k][d] != 0) return false;
    return true;
  }
  // Every operand is contiguous or a scalar: a flat, vectorizable loop.
  bool flat() const {
    for (int k = 0; k < N; ++k)
      if (!contiguous(k) && !scalar(k)) return false;
    return true;
  }
};

// Plans `output` (the broadcast shape of `operands`; each must broadcast to it
// under NumPy rules).
template <int N> BroadcastPlan<N> plan_broadcast(const Shape& output, const std::array<const Shape*, N>& operands);
extern template BroadcastPlan<1> plan_broadcast<1>(const Shape&, const std::array<const Shape*, 1>&);
extern template BroadcastPlan<2> plan_broadcast<2>(const Shape&, const std::array<const Shape*, 2>&);
extern template BroadcastPlan<3> plan_broadcast<3>(const Shape&, const std::array<const Shape*, 3>&);

// ---- strided views (transpose, broadcast_to, slice) --------------------------------

// out[i0, i1, ...] = source[offset + sum(i_d * strides[d])] with `sizes` the
// output's dims; strides in elements, may be 0 (broadcast) or negative
// (reversed slices).
struct ViewPlan {
  int rank = 0;
  std::int64_t offset = 0;
  std::int64_t sizes[max_rank] = {};
  std::int64_t strides[max_rank] = {};

  void push(std::int64_t size, std::int64_t stride) {
    sizes[rank] = size;
    strides[rank] = stride;
    ++rank;
  }
  std::int64_t numel() const {
    std::int64_t count = 1;
    for (int d = 0; d < rank; ++d) count *= sizes[d];
    return count;
  }
};

// Drops size-1 axes and merges neighbours whose strides chain; keeps at least
// one axis.
ViewPlan collapse(const ViewPlan& view);
ViewPlan transpose_view(const Shape& input, const std::vector<std::int64_t>& permutation);
ViewPlan broadcast_view(const Shape& input, const Shape& output);
ViewPlan slice_view(const Shape& input, const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& step,
                    const Shape& output);
// For a collapsed view whose innermost output axis does not read
// contiguously (stride other than 0 and 1) while some other axis does
// (stride 1): that axis, so the copy can run as tiled 2-D transposes between
// it and the innermost axis. -1 otherwise.
int tiled_transpose_axis(const ViewPlan& collapsed);

// ---- reductions ---------------------------------------------------------------------

// One pass of a reduction: rows [outer, length] -> [outer] (inner == 1), or
// columns [outer, length, inner] -> [outer, inner].
struct ReductionStage {
  bool rows = true;
  std::int64_t outer = 1, length = 1, inner = 1;
  friend bool operator==(const ReductionStage&, const ReductionStage&) = default;
};

// The passes reducing `input` over sorted `axes`, innermost reduced axis
// first (the CPU kernels' order): size-1 axes are dropped and neighbouring
// axes of the same kind merged, so [A, R, B, R2] reduced over R and R2 is
// rows [A*R*B, R2] then columns [A, R, B]. Empty when nothing is reduced
// (every reduced axis has size 1): the result is a copy. The input must have
// elements.
std::vector<ReductionStage> plan_reduction(const Shape& input, const std::vector<std::int64_t>& axes);

// ---- matmul -------------------------------------------------------------------------

// A run of consecutive batch items (output matrices first .. first+count-1)
// whose A and B offsets (in elements) advance by constant strides: one
// strided-batched GEMM.
struct BatchRun {
  std::int64_t first = 0, count = 0;
  std::int64_t a_offset = 0, b_offset = 0;
  std::int64_t a_stride = 0, b_stride = 0;
  friend bool operator==(const BatchRun&, const BatchRun&) = default;
};

struct MatmulPlan {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  std::vector<BatchRun> runs;
};

// Sizes and batch runs of matmul(a, b) -> output over the last two axes, the
// batch axes broadcast (NumPy). Without broadcasting, or with one operand
// broadcast along every batch axis, the whole batch is one run.
MatmulPlan plan_matmul(bool transpose_a, bool transpose_b, const Shape& a, const Shape& b, const Shape& output);
// Groups per-item offsets into runs (greedy, in order).
std::vector<BatchRun> batch_runs(const std::vector<std::int64_t>& a_offsets,
                                 const std::vector<std::int64_t>& b_offsets);

// ---- launch configuration -----------------------------------------------------------

struct Launch {
  unsigned blocks = 1;
  unsigned threads = 256;
};

// A grid-stride launch over `items` work items: `threads` per block, enough
// blocks to cover the items, but at most `blocks_per_multiprocessor` per
// multiprocessor (the rest is covered by the loop). At least one block.
Launch grid_stride_launch(std::int64_t items, int threads, int multiprocessors, int blocks_per_multiprocessor = 16);

}  // namespace kiln::kernels::cuda
