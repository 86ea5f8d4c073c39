#pragma once
// The functions the fusion contract is stated for (issue tracker and
// kernel_count_test.cpp), shared by the CPU and CUDA tests: the seed
// article's function and one Adam step with three outputs.

#include <kiln/kiln.h>

#include <tuple>

namespace kiln::testing {

// reduce_sum(relu(z + sin(z))), z = x y: one GEMM kernel with its epilogue.
inline Tensor seed_function(Tensor x, Tensor y) {
  Tensor z = matmul(x, y);
  z = z + sin(z);
  z = nn::relu(z);
  return reduce_sum(z);
}

// An Adam update (bias corrections folded into constants): one kernel, three outputs.
inline std::tuple<Tensor, Tensor, Tensor> adam_step(Tensor parameter, Tensor gradient, Tensor m, Tensor v) {
  Tensor new_m = 0.9 * m + 0.1 * gradient;
  Tensor new_v = 0.999 * v + 0.001 * (gradient * gradient);
  Tensor step = (new_m / 0.65) / (sqrt(new_v / 0.01) + 1e-8);
  return {parameter - 1e-3 * step, new_m, new_v};
}

}  // namespace kiln::testing
