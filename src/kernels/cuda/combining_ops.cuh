#pragma once
// The combining operations of the CUDA reductions and scans (reduction.cu, scan.cu), the CPU kernels' SumOp,
// ProdOp, MaxOp and MinOp (kernels/cpu/combining_ops.h): a NaN wins a maximum or minimum (the elementwise ops'
// meaning, kernels/scalar_ops.h); integer sums and products accumulate unsigned (AccumulatorOf) so that they wrap.

#include "kernels/cuda/device_traits.cuh"
#include "kernels/scalar_ops.h"

#include <cuda_runtime.h>

#include <limits>
#include <type_traits>

namespace kiln::kernels::cuda {

struct SumOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
  template <class V>
  __host__ __device__ static V identity() {
    return V(0);
  }
};
struct ProdOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return a * b;
  }
  template <class V>
  __host__ __device__ static V identity() {
    return V(1);
  }
};
// b wins if it is larger or NaN; a NaN in `a` compares false and stays.
struct MaxOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return scalar::maximum{}(b, a);
  }
  template <class V>
  __host__ __device__ static V identity() {
    if constexpr (std::numeric_limits<V>::has_infinity)
      return -std::numeric_limits<V>::infinity();
    else
      return std::numeric_limits<V>::lowest();
  }
};
struct MinOp {
  template <class V>
  __device__ V operator()(V a, V b) const {
    return scalar::minimum{}(b, a);
  }
  template <class V>
  __host__ __device__ static V identity() {
    if constexpr (std::numeric_limits<V>::has_infinity)
      return std::numeric_limits<V>::infinity();
    else if constexpr (std::is_same_v<V, Bool>)
      return 1;  // bool: all() of nothing
    else
      return std::numeric_limits<V>::max();
  }
};

// Unsigned accumulators for integer sum and prod, so that they wrap.
template <class Op, class T>
struct AccumulatorOf {
  using type = T;
};
template <class Op, class T>
requires(std::is_integral_v<T> &&
         (std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>)) struct AccumulatorOf<Op, T> {
  using type = std::make_unsigned_t<T>;
};

}  // namespace kiln::kernels::cuda
