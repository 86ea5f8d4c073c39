#pragma once
// Training an MLP classifier with kiln: two hidden layers with relu, softmax cross-entropy, Adam. The whole
// training step -- the forward pass, the loss, value_and_grad over the six parameters and the Adam update of each
// -- is one kiln::function with jit_compile, so the JIT compiles forward, backward and optimizer into one module
// and fuses across them (the Adam update of a weight runs in the epilogue of the GEMM computing its gradient).

#include "digits/digits_data.h"

#include <kiln/kiln.h>

#include <cstdint>
#include <random>
#include <vector>

namespace digits {

struct TrainingOptions {
  std::int64_t hidden = 128;  // the width of each hidden layer
  std::int64_t classes = 10;
  std::int64_t batch = 32;    // examples per step; an epoch leaves out the last partial batch (a new shape traces anew)
  double learning_rate = 2e-3;
  std::uint64_t seed = 1;     // the initial weights and the order of the examples in each epoch
};

// The training step's function body, a functor (not a lambda) so that kiln::Function<TrainingStep> can be a
// member. Its 22 arguments: the 6 parameters (w1, b1, w2, b2, w3, b3), Adam's first and second moments of each
// (6 + 6), a batch of examples f32[batch, features] and their labels i32[batch], and Adam's two bias corrections
// 1 / (1 - beta^t) as f32 scalars (arguments, so that the step count does not retrace). Its 19 results: the batch's
// mean loss, the 6 updated parameters, their 6 first and 6 second moments.
struct TrainingStep {
  static constexpr std::size_t parameters = 6, arguments = 3 * parameters + 4, results = 1 + 3 * parameters;
  double learning_rate = 2e-3;

  template <class... Tensors>
  std::vector<kiln::Tensor> operator()(const Tensors&... tensors) const {
    static_assert(sizeof...(Tensors) == arguments);
    return step({tensors...});
  }
  std::vector<kiln::Tensor> step(const std::vector<kiln::Tensor>& arguments) const;
};

// The model's logits for a batch: arguments w1, b1, w2, b2, w3, b3, examples.
struct Logits {
  template <class... Tensors>
  kiln::Tensor operator()(const Tensors&... tensors) const {
    static_assert(sizeof...(Tensors) == TrainingStep::parameters + 1);
    return logits({tensors...});
  }
  static kiln::Tensor logits(const std::vector<kiln::Tensor>& arguments);
};

class MlpTrainer {
 public:
  MlpTrainer(std::int64_t features, TrainingOptions options);

  // One pass over `train` in a new random order; the mean of its steps' losses.
  double train_epoch(const DataSet& train);
  // The fraction of `data` the model classifies right.
  double accuracy(const DataSet& data) const;
  // The next step of training on the first batch of `train`, run by the JIT and by the standard executor from the
  // current state (which it leaves as it was): the largest difference between the two over the 19 results, each
  // relative to the largest magnitude of that result. Gradients show in Adam's moments and in the parameters.
  double jit_against_standard(const DataSet& train) const;

  const kiln::Function<TrainingStep>& compiled_step() const { return step_; }
  std::int64_t steps() const { return steps_; }

 private:
  // The step's 22 arguments for a batch, from the current state.
  std::vector<kiln::Tensor> step_arguments(const DataSet& data, const std::vector<std::int64_t>& rows,
                                           std::int64_t first) const;

  TrainingOptions options_;
  std::int64_t features_;
  std::vector<kiln::Tensor> state_;  // the parameters, then the first moments, then the second moments
  std::int64_t steps_ = 0;
  std::mt19937_64 shuffle_;
  kiln::Function<TrainingStep> step_;
  kiln::Function<Logits> logits_;  // on the standard executor: called once per evaluation, not worth a compile
};

// The largest relative difference between two lists of results, as kiln-bench measures it: per result, the
// largest |compiled - standard| over the largest |standard|, and the worst over the results.
double relative_difference(const std::vector<kiln::Tensor>& standard, const std::vector<kiln::Tensor>& compiled);

}  // namespace digits
