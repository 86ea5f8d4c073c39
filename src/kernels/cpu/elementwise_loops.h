#pragma once
// Private to the CPU elementwise kernels (elementwise.cpp,
// elementwise_binary.cpp): how they split work across threads and how they
// walk NumPy-broadcast operands.
//
// Broadcasting is planned once per call, not per element: the operands are
// aligned to the output's rank with stride 0 on broadcast dims, output dims
// of size 1 are dropped, and neighbouring dims that are contiguous for every
// operand are merged. What is left is a short loop nest whose innermost dim
// has stride 1 or 0 in every operand, so the work is a sequence of "runs":
// plain loops over contiguous or constant operands that GCC vectorizes.
// Same-shape operands collapse to a single run per thread; a scalar operand
// is a stride-0 run; [4096,4096] + [4096,1] is 4096 runs of 4096 against a
// constant; [4096,4096] + [4096] is 4096 runs of two contiguous operands.
//
// Stores are plain (cached) stores. Non-temporal stores were measured
// (2 cores, 16M f32, 64 MiB in + 64 MiB out): no faster when one op is
// repeated, and ~1.5x slower in the op-by-op pattern where the next op reads
// the output right away, because the output then comes from DRAM instead of
// the (300 MiB) L3.

#include "runtime/parallel.h"

#include <kiln/shape.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace kiln::kernels::cpu::elementwise {

// Minimum elements per thread piece. A piece must outweigh the thread
// pool's hand-off (about a microsecond while its workers spin, more once
// they sleep). Cheap ops (a load, an operation and a store per element,
// ~0.1 ns per f32 element and core from L2) get 32K elements per piece, as
// PyTorch's elementwise kernels do; ops calling transcendental functions
// (~0.3-0.6 ns per element for vector_math, ~10 ns for libm's f64 functions)
// split at 8K.
inline constexpr std::int64_t cheap_grain = 32 * 1024;
inline constexpr std::int64_t costly_grain = 8 * 1024;
// The grain of an op of this cost (ir::flops_per_element): costly from a
// transcendental's or an integer division's 20.
inline constexpr std::int64_t grain_for(int flops_per_element) {
  return flops_per_element >= 20 ? costly_grain : cheap_grain;
}

// Element i of one operand within a run: the operand's element i when it is
// contiguous along the run, its one element when it is broadcast along it.
template <class T, bool Contiguous> struct RunOperand {
  const T* data;
  explicit RunOperand(const T* pointer) : data(pointer) {}
  T operator[](std::int64_t i) const { return data[i]; }
};
template <class T> struct RunOperand<T, false> {
  T value;
  explicit RunOperand(const T* pointer) : value(*pointer) {}
  T operator[](std::int64_t) const { return value; }
};

// Calls visitor.template operator()<flags...>() with the runtime flags as
// template arguments, so that each combination gets its own specialized,
// vectorizable loop.
template <bool... Chosen, class Visitor> void visit_flags(Visitor&& visitor) {
  visitor.template operator()<Chosen...>();
}
template <bool... Chosen, class Visitor, class... Flags>
void visit_flags(Visitor&& visitor, bool flag, Flags... flags) {
  if (flag) visit_flags<Chosen..., true>(visitor, flags...);
  else visit_flags<Chosen..., false>(visitor, flags...);
}

// The collapsed loop nest over the output of an N-operand elementwise op.
template <int N> struct BroadcastWalk {
  int rank = 1;  // >= 1
  std::array<std::int64_t, Shape::max_rank> dims{};
  // strides[k][d]: element stride of operand k along collapsed dim d (0 where broadcast).
  std::array<std::array<std::int64_t, Shape::max_rank>, N> strides{};

  // True if operand k advances along the innermost dim (stride 1), false if
  // it is constant along it (stride 0). At least one operand advances unless
  // the output is a single element (then it makes no difference).
  bool inner_contiguous(int k) const { return strides[static_cast<std::size_t>(k)][inner()] != 0 || dims[0] == 1; }
  // Element stride of operand k from one row (innermost run) to the next.
  std::int64_t row_stride(int k) const { return rank > 1 ? strides[static_cast<std::size_t>(k)][inner() - 1] : 0; }
  std::size_t inner() const { return static_cast<std::size_t>(rank - 1); }
};

// Plans the walk of `output` (the broadcast shape of `operands`, which must
// be broadcast-compatible with it).
template <int N> BroadcastWalk<N> plan_walk(const Shape& output, const std::array<const Shape*, N>& operands) {
  BroadcastWalk<N> walk;
  int rank = 0;
  for (int axis = 0; axis < output.rank(); ++axis) {
    if (output[axis] == 1) continue;  // contributes nothing to any offset
    std::array<std::int64_t, N> stride{};
    for (int k = 0; k < N; ++k) {
      const Shape& shape = *operands[static_cast<std::size_t>(k)];
      int operand_axis = axis - (output.rank() - shape.rank());
      if (operand_axis < 0 || shape[operand_axis] == 1) continue;  // broadcast: stride 0
      std::int64_t row_stride = 1;
      for (int d = operand_axis + 1; d < shape.rank(); ++d) row_stride *= shape[d];
      stride[static_cast<std::size_t>(k)] = row_stride;
    }
    bool merges = rank > 0;
    for (int k = 0; k < N && merges; ++k) {
      const std::int64_t previous = walk.strides[static_cast<std::size_t>(k)][static_cast<std::size_t>(rank - 1)];
      merges = previous == stride[static_cast<std::size_t>(k)] * output[axis];
    }
    if (merges) {
      walk.dims[static_cast<std::size_t>(rank - 1)] *= output[axis];
    } else {
      walk.dims[static_cast<std::size_t>(rank)] = output[axis];
      ++rank;
    }
    for (int k = 0; k < N; ++k)
      walk.strides[static_cast<std::size_t>(k)][static_cast<std::size_t>(rank - 1)] = stride[static_cast<std::size_t>(k)];
  }
  if (rank == 0) {  // every dim is 1: a single element
    walk.dims[0] = 1;
    rank = 1;
  }
  walk.rank = rank;
  return walk;
}

// Calls run(offsets, output_offset, length, rows) for the blocks of runs
// covering output elements [begin, end). A block is `rows` consecutive rows
// (steps along the second-innermost collapsed dim) of `length` elements
// each; rows > 1 only for whole rows. offsets[k] is operand k's element
// offset at the block's start; from one row to the next it advances by
// walk.row_stride(k); output elements are contiguous. Handing over blocks
// rather than single rows keeps the per-row cost to a few instructions,
// which matters when rows are short ([N,3] + [3], [N,2] + [N,1]).
template <int N, class Run>
void walk_runs(const BroadcastWalk<N>& walk, std::int64_t begin, std::int64_t end, Run&& run) {
  const std::size_t inner = walk.inner();
  const std::int64_t row_length = walk.dims[inner];
  std::array<std::int64_t, Shape::max_rank> index{};
  std::array<std::int64_t, N> offsets{};
  std::int64_t rest = begin;
  for (std::size_t d = inner + 1; d-- > 0;) {
    index[d] = rest % walk.dims[d];
    rest /= walk.dims[d];
    for (std::size_t k = 0; k < N; ++k) offsets[k] += index[d] * walk.strides[k][d];
  }
  std::int64_t position = begin;
  while (true) {
    std::int64_t length = std::min(row_length - index[inner], end - position);
    std::int64_t rows = 1;
    if (inner > 0 && index[inner] == 0 && length == row_length)
      rows = std::min(walk.dims[inner - 1] - index[inner - 1], (end - position) / row_length);
    run(offsets, position, length, rows);
    position += length * rows;
    if (position >= end || inner == 0) return;  // (rank 1 always ends after one run)
    // The block ended at the end of a row: go to the start of the next one.
    for (std::size_t k = 0; k < N; ++k)
      offsets[k] += (rows - 1) * walk.strides[k][inner - 1] - index[inner] * walk.strides[k][inner];
    index[inner] = 0;
    index[inner - 1] += rows - 1;
    for (std::size_t d = inner; d-- > 0;) {
      for (std::size_t k = 0; k < N; ++k) offsets[k] += walk.strides[k][d];
      if (++index[d] < walk.dims[d]) break;
      for (std::size_t k = 0; k < N; ++k) offsets[k] -= walk.dims[d] * walk.strides[k][d];
      index[d] = 0;
    }
  }
}

// Runs `run` (as in walk_runs) over all `count` output elements of `walk`,
// split into contiguous pieces across the thread pool.
template <int N, class Run>
void parallel_walk(const BroadcastWalk<N>& walk, std::int64_t count, std::int64_t grain, Run&& run) {
  runtime::parallel_for(count, grain,
                        [&](std::int64_t begin, std::int64_t end) { walk_runs(walk, begin, end, run); });
}

}  // namespace kiln::kernels::cpu::elementwise
