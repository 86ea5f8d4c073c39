// kiln-bench's training steps: forward, value_and_grad over every weight and the Adam update of each, as one
// function (what `jax.jit(jax.value_and_grad(loss))` plus an optimizer, `torch.compile` over forward, backward and
// torch.optim.Adam, and tf.function(jit_compile=True) around a GradientTape compile). Each step is a pure function:
// weights and Adam's moments in, the loss and the new weights and moments out, so every call does the same work
// and the JIT's results can be checked against the standard executor's (kiln-bench's judge_jit) and the peers'.

#include "device_timing.h"
#include "workload_making.h"

#include <cmath>
#include <stdexcept>

namespace kiln::bench {
namespace {

// Adam's moments of a parameter at step 10: a first moment of the gradients' size, a second of their square's, so
// that the gradients move both (and a wrong gradient shows in the updated parameter, m and v alike).
std::pair<Tensor, Tensor> moments(const Tensor& parameter, double gradient_scale, std::uint64_t seed) {
  const Device device = parameter.device();
  return {random::normal(parameter.shape(), {.seed = seed, .stddev = gradient_scale, .device = device}),
          random::uniform(parameter.shape(), {.seed = seed + 1,
                                              .low = 0.1 * gradient_scale * gradient_scale,
                                              .high = gradient_scale * gradient_scale,
                                              .device = device})};
}

// The step's results from its arguments (the `parameters` parameters, their first moments, their second moments,
// then the data) and the loss's value and gradients: the loss, the updated parameters, the new first and second
// moments.
std::vector<Tensor> adam_training_step(std::size_t parameters, const std::vector<Tensor>& arguments,
                                       const std::vector<Tensor>& gradients, const Tensor& value) {
  std::vector<Tensor> updated, first, second;
  for (std::size_t i = 0; i < parameters; ++i) {
    auto [parameter, m, v] =
        adam_body(arguments[i], gradients[i], arguments[parameters + i], arguments[2 * parameters + i]);
    updated.push_back(parameter);
    first.push_back(m);
    second.push_back(v);
  }
  std::vector<Tensor> results{value};
  for (const auto* part : {&updated, &first, &second}) results.insert(results.end(), part->begin(), part->end());
  return results;
}

// ---- mlp-train: an MLP classifier, `layers` linear layers of `width` (relu between them), softmax cross-entropy --

constexpr std::size_t mlp_layers = 3, mlp_parameters = 2 * mlp_layers;

struct MlpLoss {
  template <class... Tensors>
  Tensor operator()(const Tensors&... tensors) const {
    const std::vector<Tensor> arguments{tensors...};  // w1, b1, w2, b2, w3, b3, x, labels
    Tensor activations = arguments[mlp_parameters];
    for (std::size_t layer = 0; layer < mlp_layers; ++layer) {
      activations = matmul(activations, arguments[2 * layer]) + arguments[2 * layer + 1];
      if (layer + 1 < mlp_layers) activations = nn::relu(activations);
    }
    return reduce_mean(nn::sparse_softmax_cross_entropy(activations, arguments[mlp_parameters + 1]));
  }
};

// 20 arguments: the 6 parameters, 6 first moments, 6 second moments, x f32[batch, width], labels i32[batch].
std::vector<Tensor> mlp_training_step(const std::vector<Tensor>& a) {
  auto [loss, gradients] =
      value_and_grad(MlpLoss{}, {.argnums = {0, 1, 2, 3, 4, 5}})(a[0], a[1], a[2], a[3], a[4], a[5], a[18], a[19]);
  return adam_training_step(mlp_parameters, a, gradients.tensors(), loss);
}

Workload make_mlp_train(const WorkloadOptions& options) {
  const std::int64_t batch = options.mlp_batch, width = options.mlp_width;
  const Device device = options.device;
  std::vector<Tensor> parameters;
  std::uint64_t seed = 70;
  for (std::size_t layer = 0; layer < mlp_layers; ++layer) {
    parameters.push_back(
        random::normal({width, width}, {.seed = seed++, .stddev = std::sqrt(2.0 / double(width)), .device = device}));
    parameters.push_back(random::normal({width}, {.seed = seed++, .stddev = 0.1, .device = device}));
  }
  std::vector<Tensor> inputs = parameters, second;
  for (const Tensor& parameter : parameters) {
    // The gradients of a mean loss over 256 examples are of order 1e-4 to 1e-3 here.
    auto [m, v] = moments(parameter, 3e-4, seed);
    seed += 2;
    inputs.push_back(m);
    second.push_back(v);
  }
  inputs.insert(inputs.end(), second.begin(), second.end());
  inputs.push_back(random::normal({batch, width}, {.seed = seed++, .device = device}));
  inputs.push_back(
      cast(floor(random::uniform({batch}, {.seed = seed++, .high = static_cast<double>(width), .device = device})),
           DType::i32));
  Workload workload =
      make<20>("mlp-train", "mlp_train", dimensions({batch, width}) + "x" + std::to_string(mlp_layers) + "L", inputs,
               [](const auto&... tensors) { return mlp_training_step({tensors...}); });
  // Written once: the new parameters and moments, and the loss.
  workload.bytes += bytes_of(std::vector<Tensor>(inputs.begin(), inputs.begin() + 3 * mlp_parameters)) + 4;
  // The products: `layers` forward, a weight gradient for each layer and an input gradient for all but the first
  // (the examples' gradient is not wanted), each 2 * batch * width^2 flops.
  const double layers = mlp_layers, b = static_cast<double>(batch), w = static_cast<double>(width);
  workload.flops = (3 * layers - 1) * 2 * b * w * w;
  workload.matmul_output_bytes = w * w * 4;  // a weight's gradient
  const Tensor activations = random::normal({batch, width}, {.seed = seed++, .device = device});
  const Tensor activations_transposed = random::normal({width, batch}, {.seed = seed++, .device = device});
  const Tensor weight = parameters[0];
  // OpenBLAS on products of the same shapes: forward and input gradients [batch, width] x [width, width], weight
  // gradients [width, batch] x [batch, width] (without the transposes, which cost OpenBLAS little).
  workload.blas_alone = [activations, activations_transposed, weight](int runs) {
    const Timing forward = time_sgemm(activations, weight, runs);
    const Timing weight_gradient = time_sgemm(activations_transposed, activations, runs);
    const double products = 2 * mlp_layers - 1, weight_products = mlp_layers;
    auto total = [&](double Timing::*field) {
      return products * forward.*field + weight_products * weight_gradient.*field;
    };
    return Timing{total(&Timing::median_ms), total(&Timing::min_ms), total(&Timing::max_ms), total(&Timing::mean_ms)};
  };
  workload.kiln_matmuls_alone = [activations, activations_transposed, weight] {
    for (std::size_t i = 0; i + 1 < 2 * mlp_layers; ++i) matmul(activations, weight);
    for (std::size_t i = 0; i < mlp_layers; ++i) matmul(activations_transposed, activations);
  };
  if (device.is_cuda()) {
    workload.tf32 = true;  // as the block's: TF32 products for kiln and its peers alike
    // kiln's CUDA matmuls are one cuBLAS call each: its 8 products alone are cuBLAS alone on them.
    workload.blas_alone = [device, matmuls = workload.kiln_matmuls_alone](int runs) {
      return time_device_calls(device, matmuls, runs);
    };
  }
  return workload;
}

// ---- block-train: kiln-bench's transformer block, the mean of its output's squares as the loss ----------------

constexpr std::size_t block_parameters = 12;

struct BlockLoss {
  Tensor operator()(Tensor wq, Tensor wk, Tensor wv, Tensor wo, Tensor w1, Tensor b1, Tensor w2, Tensor b2,
                    Tensor gamma1, Tensor beta1, Tensor gamma2, Tensor beta2, Tensor x) const {
    return reduce_mean(square(block_body(x, wq, wk, wv, wo, w1, b1, w2, b2, gamma1, beta1, gamma2, beta2)));
  }
};

// 37 arguments: the block's 12 weights (block_body's order), their 12 first and 12 second moments, then x.
std::vector<Tensor> block_training_step(const std::vector<Tensor>& a) {
  auto [loss, gradients] = value_and_grad(BlockLoss{}, {.argnums = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}})(
      a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[36]);
  return adam_training_step(block_parameters, a, gradients.tensors(), loss);
}

Workload make_block_train(const WorkloadOptions& options) {
  // The block workload's inputs, then the moments: its weights with x moved last.
  const Workload block = make_workload("block", options);
  std::vector<Tensor> weights(block.inputs.begin() + 1, block.inputs.end()), inputs = weights, second;
  std::uint64_t seed = 90;
  for (const Tensor& weight : weights) {
    auto [m, v] = moments(weight, 1e-4, seed);  // the mean over 1024 x 512 outputs gives small gradients
    seed += 2;
    inputs.push_back(m);
    second.push_back(v);
  }
  inputs.insert(inputs.end(), second.begin(), second.end());
  inputs.push_back(block.inputs[0]);
  Workload workload = make<37>("block-train", "block_train", block.shape, inputs,
                               [](const auto&... tensors) { return block_training_step({tensors...}); });
  workload.tf32 = block.tf32;
  workload.bytes += bytes_of(std::vector<Tensor>(inputs.begin(), inputs.begin() + 3 * block_parameters)) + 4;
  // Every product of the block has two gradients of its own size (the input's gradient is wanted too: the layer
  // norm's gamma and beta need it): three times the forward's products, and OpenBLAS's time for them.
  workload.flops = 3 * block.flops;
  workload.matmul_output_bytes = block.matmul_output_bytes;
  workload.blas_alone = [alone = block.blas_alone](int runs) {
    Timing forward = alone(runs);
    return Timing{3 * forward.median_ms, 3 * forward.min_ms, 3 * forward.max_ms, 3 * forward.mean_ms};
  };
  workload.kiln_matmuls_alone = [alone = block.kiln_matmuls_alone] {
    for (int i = 0; i < 3; ++i) alone();
  };
  return workload;
}

// ---- rnn-train: the rnn workload's GRU over a shorter sequence, its states' mean square as the loss ---------------

constexpr std::size_t rnn_parameters = 3;  // w, u, b

struct RnnLoss {
  Tensor operator()(Tensor w, Tensor u, Tensor b, Tensor xs, Tensor h0) const {
    return reduce_mean(square(std::get<1>(rnn_body(xs, h0, w, u, b))));
  }
};

// 11 arguments: w, u, b, their first and second moments, then xs and h0. The gradients flow back through every
// step of the scan (kiln's reverse-mode scan: the steps' states stacked, then a reversed scan of the step's VJP).
std::vector<Tensor> rnn_training_step(const std::vector<Tensor>& a) {
  auto [loss, gradients] = value_and_grad(RnnLoss{}, {.argnums = {0, 1, 2}})(a[0], a[1], a[2], a[9], a[10]);
  return adam_training_step(rnn_parameters, a, gradients.tensors(), loss);
}

Workload make_rnn_train(const WorkloadOptions& options) {
  const std::int64_t steps = options.rnn_train_steps, batch = options.rnn_batch, hidden = options.rnn_hidden;
  const Device device = options.device;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  std::vector<Tensor> parameters{random::normal({hidden, 3 * hidden}, {.seed = 122, .stddev = scale, .device = device}),
                                 random::normal({hidden, 3 * hidden}, {.seed = 123, .stddev = scale, .device = device}),
                                 random::normal({3 * hidden}, {.seed = 124, .stddev = 0.1, .device = device})};
  std::vector<Tensor> inputs = parameters, second;
  std::uint64_t seed = 125;
  for (const Tensor& parameter : parameters) {
    auto [m, v] = moments(parameter, 1e-4, seed);  // a mean over steps x batch x hidden states: small gradients
    seed += 2;
    inputs.push_back(m);
    second.push_back(v);
  }
  inputs.insert(inputs.end(), second.begin(), second.end());
  inputs.push_back(random::normal({steps, batch, hidden}, {.seed = seed++, .device = device}));
  inputs.push_back(random::normal({batch, hidden}, {.seed = seed++, .stddev = 0.5, .device = device}));
  Workload workload = make<11>("rnn-train", "rnn_train", std::to_string(steps) + "x" + dimensions({batch, hidden}),
                               inputs, [](const auto&... tensors) { return rnn_training_step({tensors...}); });
  workload.bytes += bytes_of(std::vector<Tensor>(inputs.begin(), inputs.begin() + 3 * rnn_parameters)) + 4;
  // Per step, the forward's two products ([batch, hidden] x [hidden, 3 hidden]) and the backward's three: the
  // gradients of w and u ([hidden, batch] x [batch, 3 hidden]) and of the state ([batch, 3 hidden] x [3 hidden,
  // hidden]), each as many flops as [batch, hidden] x [hidden, 3 hidden].
  set_repeated_products(workload, inputs[10], inputs[1], 5.0 * static_cast<double>(steps));
  workload.matmul_output_bytes = static_cast<double>(hidden * 3 * hidden) * 4;  // a weight's gradient
  return workload;
}

// ---- cnn-train: a small image classifier (conv, max pool, conv, global mean, dense), softmax cross-entropy -----

constexpr std::size_t cnn_parameters = 6;  // filters1, bias1, filters2, bias2, weights, bias

struct CnnLoss {
  Tensor operator()(Tensor filters1, Tensor bias1, Tensor filters2, Tensor bias2, Tensor weights, Tensor bias,
                    Tensor images, Tensor labels) const {
    // kiln-bench's conv and pool layers as a ResNet stage stacks them: conv_body, pool_body (3x3/2, same), conv_body.
    Tensor features = conv_body(pool_body(conv_body(images, filters1, bias1)), filters2, bias2);
    Tensor logits = matmul(reduce_mean(features, {1, 2}), weights) + bias;
    return reduce_mean(nn::sparse_softmax_cross_entropy(logits, labels));
  }
};

// 20 arguments: the 6 parameters, their first and second moments, images f32[batch, size, size, 3], labels
// i32[batch]. The images' own gradient is not wanted, so the first convolution has a filter gradient only.
std::vector<Tensor> cnn_training_step(const std::vector<Tensor>& a) {
  auto [loss, gradients] =
      value_and_grad(CnnLoss{}, {.argnums = {0, 1, 2, 3, 4, 5}})(a[0], a[1], a[2], a[3], a[4], a[5], a[18], a[19]);
  return adam_training_step(cnn_parameters, a, gradients.tensors(), loss);
}

Workload make_cnn_train(const WorkloadOptions& options) {
  const std::int64_t batch = options.cnn_batch, size = options.cnn_image_size, classes = 10;
  const std::int64_t channels1 = options.cnn_channels, channels2 = 2 * options.cnn_channels;
  const Device device = options.device;
  auto he = [](std::int64_t fan_in) { return std::sqrt(2.0 / static_cast<double>(fan_in)); };
  std::vector<Tensor> parameters{
      random::normal({3, 3, 3, channels1}, {.seed = 130, .stddev = he(27), .device = device}),
      random::normal({channels1}, {.seed = 131, .stddev = 0.1, .device = device}),
      random::normal({3, 3, channels1, channels2}, {.seed = 132, .stddev = he(9 * channels1), .device = device}),
      random::normal({channels2}, {.seed = 133, .stddev = 0.1, .device = device}),
      random::normal({channels2, classes}, {.seed = 134, .stddev = he(channels2), .device = device}),
      random::normal({classes}, {.seed = 135, .stddev = 0.1, .device = device})};
  std::vector<Tensor> inputs = parameters, second;
  std::uint64_t seed = 136;
  for (const Tensor& parameter : parameters) {
    auto [m, v] = moments(parameter, 1e-3, seed);  // a mean loss over the batch: gradients of order 1e-3
    seed += 2;
    inputs.push_back(m);
    second.push_back(v);
  }
  inputs.insert(inputs.end(), second.begin(), second.end());
  inputs.push_back(random::normal({batch, size, size, 3}, {.seed = seed++, .device = device}));
  inputs.push_back(
      cast(floor(random::uniform({batch}, {.seed = seed++, .high = static_cast<double>(classes), .device = device})),
           DType::i32));
  Workload workload = make<20>("cnn-train", "cnn_train", dimensions({batch, size, size, 3}), inputs,
                               [](const auto&... tensors) { return cnn_training_step({tensors...}); });
  workload.bytes += bytes_of(std::vector<Tensor>(inputs.begin(), inputs.begin() + 3 * cnn_parameters)) + 4;
  // The convolutions' products as im2col has them: the first [positions, 27] x [27, c1] and its filters' gradient
  // [27, positions] x [positions, c1]; the second (a quarter of the positions, after the pool) [positions / 4,
  // 9 c1] x [9 c1, c2], its filters' gradient and its input's gradient [positions / 4, c2] x [c2, 9 c1].
  const std::int64_t positions = batch * size * size, pooled = batch * ((size + 1) / 2) * ((size + 1) / 2);
  const double first = 2.0 * static_cast<double>(positions * 27 * channels1);
  const double second_layer = 2.0 * static_cast<double>(pooled * 9 * channels1 * channels2);
  workload.flops = 2 * first + 3 * second_layer;
  workload.matmul_output_bytes = static_cast<double>(positions * channels1) * 4;  // the first layer's output
  std::uint64_t matrix_seed = seed;
  auto matrix = [&](std::int64_t rows, std::int64_t columns) {
    return random::normal({rows, columns}, {.seed = matrix_seed++, .device = device});
  };
  const std::vector<std::pair<Tensor, Tensor>> products{
      {matrix(positions, 27), matrix(27, channels1)},
      {matrix(27, positions), matrix(positions, channels1)},
      {matrix(pooled, 9 * channels1), matrix(9 * channels1, channels2)},
      {matrix(9 * channels1, pooled), matrix(pooled, channels2)},
      {matrix(pooled, channels2), matrix(channels2, 9 * channels1)}};
  workload.blas_alone = [products](int runs) {
    Timing total{};
    for (const auto& [left, right] : products) {
      const Timing one = time_sgemm(left, right, runs);
      total = Timing{total.median_ms + one.median_ms, total.min_ms + one.min_ms, total.max_ms + one.max_ms,
                     total.mean_ms + one.mean_ms};
    }
    return total;
  };
  workload.kiln_matmuls_alone = [products] {
    for (const auto& [left, right] : products) matmul(left, right);
  };
  return workload;
}

}  // namespace

Workload make_training_workload(const std::string& id, const WorkloadOptions& options) {
  Workload workload;
  if (id == "mlp-train")
    workload = make_mlp_train(options);
  else if (id == "block-train")
    workload = make_block_train(options);
  else if (options.device.is_cuda())
    throw std::invalid_argument("unknown workload '" + id + "': it runs on the CPU only");
  else if (id == "rnn-train")
    workload = make_rnn_train(options);
  else if (id == "cnn-train")
    workload = make_cnn_train(options);
  else
    throw std::invalid_argument("unknown workload '" + id + "'");
  // Where the calls run, and so how they are timed (a GPU's: each batch waited for).
  workload.device = options.device;
  return workload;
}

}  // namespace kiln::bench
