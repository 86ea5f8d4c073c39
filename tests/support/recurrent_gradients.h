#pragma once
// A recurrent loss and its gradients through kiln::scan, shared by the control-flow tests of the JIT and of the
// GPU: h <- tanh(x_t W + h U) over the sequence, the loss the sum of every state's square plus the last state's
// sum, differentiated with respect to W and U (the weights the loop captures).

#include <kiln/kiln.h>

#include <tuple>
#include <utility>

namespace kiln::testing {

// The loss and its gradients with respect to input_weight (W) and state_weight (U).
inline std::tuple<Tensor, Tensor, Tensor> recurrent_loss_and_gradients(const Tensor& h, const Tensor& sequence,
                                                                       const Tensor& input_weight,
                                                                       const Tensor& state_weight) {
  auto loss = [&](const Tensor& w, const Tensor& u) {
    const auto [last, states] = scan(
        [&](const Tensor& state, const Tensor& x) {
          const Tensor next = tanh(matmul(x, w) + matmul(state, u));
          return std::pair<Tensor, Tensor>{next, next};
        },
        h, sequence);
    return reduce_sum(square(states)) + reduce_sum(last);
  };
  auto [value, gradients] = value_and_grad(loss, {.argnums = {0, 1}})(input_weight, state_weight);
  return {value, gradients[0], gradients[1]};
}

}  // namespace kiln::testing
