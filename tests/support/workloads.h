#pragma once
// The functions the fusion contract is stated for (issue tracker and
// kernel_count_test.cpp), shared by the CPU and CUDA tests: the seed
// article's function and one Adam step with three outputs; and a 16-bit
// elementwise chain both devices' JIT tests run.

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

// Mixed precision: f32 master weights, a bf16 forward and backward (the weights cast once per step), the loss in f32,
// Adam's update in f32 writing the new master weights and their bf16 copy for the next step. Returns the loss, the
// new weights, their bf16 copy and the new moments.
inline auto mixed_precision_step(Tensor weights, Tensor m, Tensor v, Tensor x, Tensor labels) {
  auto loss = [](Tensor w, Tensor inputs, Tensor classes) {
    const Tensor logits = matmul(inputs, cast(w, DType::bf16));
    return reduce_mean(nn::sparse_softmax_cross_entropy(cast(logits, DType::f32), classes));
  };
  auto [value, gradient] = value_and_grad(loss)(weights, x, labels);
  auto [updated, new_m, new_v] = adam_step(weights, gradient, m, v);
  return std::tuple{value, updated, cast(updated, DType::bf16), new_m, new_v};
}

// An elementwise chain on two bf16 or f16 tensors (`half`) that rounds every way: arithmetic, transcendentals and a
// composite, compares and selects, casts to the other 16-bit type, to and from integers, from f64 and bool. The JIT
// tests of both devices compare it with the standard executor, bit for bit.
inline auto half_precision_chain(DType half) {
  const DType other = half == DType::bf16 ? DType::f16 : DType::bf16;
  return [half, other](Tensor x, Tensor y) {
    return std::tuple{x * y - x / (abs(y) + 1),
                      exp(x) * 0.1 + tanh(y) - sigmoid(x * y) + nn::gelu(x),
                      where(gt(x, y), x, -y),
                      maximum(x, y),
                      lt(x, 0.5),
                      cast(x, other),
                      cast(x * 3, DType::i32),
                      cast(cast(y * 100, DType::i32), half),
                      cast(cast(x, DType::f64) / 3, half),
                      cast(gt(x, 0), half),
                      cast(y, DType::f32) * 2};
  };
}

}  // namespace kiln::testing
