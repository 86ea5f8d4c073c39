#include "workloads.h"

#include "device_timing.h"
#include "kernels/cpu/gemm_bf16.h"
#include "workload_making.h"

#include <cmath>
#include <stdexcept>
#include <utility>

namespace kiln::bench {
namespace {

// The seed article's function.
Tensor seed_body(Tensor x, Tensor y) {
  Tensor z = matmul(x, y);
  z = z + sin(z);
  z = nn::relu(z);
  return reduce_sum(z);
}

// Scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, over the last two
// axes; head size 64, so the scale is exactly 1/8.
Tensor attention_body(Tensor q, Tensor k, Tensor v) {
  Tensor scores = matmul(q, k, {.transpose_b = true}) * 0.125;
  return matmul(nn::softmax(scores, -1), v);
}

}  // namespace

// A convolutional layer as a ResNet stage has it: a 3x3 convolution with same padding, a bias and relu.
Tensor conv_body(Tensor x, Tensor filters, Tensor bias) {
  return nn::relu(nn::conv2d(x, filters, {.padding = nn::Padding::same}) + bias);
}

namespace {

// A convolution's product as im2col makes it, [positions, KH KW C] x [KH KW C, O] for `filters` [KH, KW, C, O]: its
// flops and output, and, for the floor, OpenBLAS (and kiln's standard matmul) on random matrices of those shapes.
void add_im2col_product(Workload& workload, std::int64_t positions, const Tensor& filters, std::uint64_t seed) {
  const std::int64_t depth = filters.dim(0) * filters.dim(1) * filters.dim(2), outputs = filters.dim(3);
  workload.flops = 2.0 * static_cast<double>(positions * depth) * static_cast<double>(outputs);
  workload.matmul_output_bytes = static_cast<double>(positions * outputs) * 4;
  const Device device = filters.device();
  const Tensor windows = random::normal({positions, depth}, {.seed = seed, .device = device});
  const Tensor matrix = reshape(filters, {depth, outputs});
  workload.kiln_matmuls_alone = [windows, matrix] { matmul(windows, matrix); };
  if (device.is_cuda())  // kiln's CUDA matmul is one cuBLAS call: cuBLAS alone
    workload.blas_alone = [device, matmuls = workload.kiln_matmuls_alone](int runs) {
      return time_device_calls(device, matmuls, runs);
    };
  else
    workload.blas_alone = [windows, matrix](int runs) { return time_sgemm(windows, matrix, runs); };
}

// A ResNet stem's convolution: 7x7, stride 2, same padding, from 3 channels (an image), a bias and relu. Its im2col
// operand is 147 columns of 49 taps of 3 floats each: what it costs is finding and copying those short runs.
Tensor stem_body(Tensor x, Tensor filters, Tensor bias) {
  return nn::relu(nn::conv2d(x, filters, {.strides = {2, 2}, .padding = nn::Padding::same}) + bias);
}

}  // namespace

// A ResNet stem's pooling: a 3x3 max_pool with stride 2 and same padding, over images twice conv's size (what
// the stem's strided convolution leaves). It reads every input element and writes a quarter as many: bandwidth.
Tensor pool_body(Tensor x) {
  return nn::max_pool2d(x,
                        {.window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same});
}

namespace {

// The family of composites a user may spell by hand (issue 38's test of fusion by structure): each named
// composite beside the same computation written with primitives, which must get the same kernels and speed.
Tensor cross_entropy_body(Tensor logits, Tensor labels) { return nn::sparse_softmax_cross_entropy(logits, labels); }

Tensor cross_entropy_by_hand(Tensor logits, Tensor labels) {
  const Tensor largest = reduce_max(logits, {-1});
  const Tensor log_total = log(reduce_sum(exp(logits - expand_dims(largest, -1)), {-1})) + largest;
  return log_total - squeeze(take_along_axis(logits, expand_dims(labels, -1), -1), {-1});
}

Tensor layernorm_by_hand(Tensor x, Tensor gamma, Tensor beta) {
  const double width = static_cast<double>(x.dim(-1));
  const Tensor centered = x - expand_dims(reduce_sum(x, {-1}) / width, -1);
  const Tensor variance = reduce_sum(centered * centered, {-1}) / width;
  return centered / sqrt(expand_dims(variance, -1) + 1e-5) * gamma + beta;
}

Tensor softmax_first_axis_by_hand(Tensor x) {
  const Tensor exponentials = exp(x - reduce_max(x, {0}));
  return exponentials / reduce_sum(exponentials, {0});
}

Tensor logsumexp_by_hand(Tensor x) {
  const Tensor largest = reduce_max(x, {-1});
  return largest + log(reduce_sum(exp(x - expand_dims(largest, -1)), {-1}));
}

}  // namespace

// One Adam step (Kingma & Ba) at step 10 with the usual hyperparameters. The moments are f32; the parameter and
// its gradient may be bf16 (mixed precision: the update computed in f32, the new parameter rounded to bf16).
std::tuple<Tensor, Tensor, Tensor> adam_body(Tensor parameter, Tensor gradient, Tensor m, Tensor v) {
  constexpr double learning_rate = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  const double correction1 = 1 - std::pow(beta1, 10), correction2 = 1 - std::pow(beta2, 10);
  Tensor new_m = beta1 * m + (1 - beta1) * gradient;
  Tensor new_v = beta2 * v + (1 - beta2) * (gradient * gradient);
  Tensor step = (new_m / correction1) / (sqrt(new_v / correction2) + epsilon);
  return {cast(parameter - learning_rate * step, parameter.dtype()), new_m, new_v};
}

// A pre-norm transformer block, as a user writes one: layer_norm, attention with the heads split and merged
// by reshapes and transposes (head size 64: the scale is 1/8), the output projection and a residual, then
// layer_norm, an MLP with gelu (the tanh form) and a second residual.
Tensor block_body(Tensor x, Tensor wq, Tensor wk, Tensor wv, Tensor wo, Tensor w1, Tensor b1, Tensor w2, Tensor b2,
                  Tensor gamma1, Tensor beta1, Tensor gamma2, Tensor beta2) {
  const std::int64_t tokens = x.dim(0), width = x.dim(1), heads = width / 64;
  auto split_heads = [&](const Tensor& t) { return transpose(reshape(t, {tokens, heads, 64}), {1, 0, 2}); };
  Tensor h = nn::layer_norm(x, gamma1, beta1);
  Tensor q = split_heads(matmul(h, wq)), k = split_heads(matmul(h, wk)), v = split_heads(matmul(h, wv));
  Tensor probabilities = nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.125, -1);
  Tensor attended = reshape(transpose(matmul(probabilities, v), {1, 0, 2}), {tokens, width});
  Tensor x1 = x + matmul(attended, wo);
  Tensor m = nn::gelu(matmul(nn::layer_norm(x1, gamma2, beta2), w1) + b1);
  return x1 + matmul(m, w2) + b2;
}

// A transformer's MLP at decoding time, a token of each of a few sequences at once: two dense layers with gelu
// (the tanh form) between, as block's. With a few rows, each weight is read once for a few products per element:
// the time is reading the weights.
Tensor decode_body(Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor b2) {
  return matmul(nn::gelu(matmul(x, w1) + b1), w2) + b2;
}

double bytes_of(const std::vector<Tensor>& tensors) {
  double bytes = 0;
  for (const Tensor& tensor : tensors) bytes += static_cast<double>(tensor.numel() * size_of(tensor.dtype()));
  return bytes;
}

std::string dimensions(std::initializer_list<std::int64_t> sizes) {
  std::string text;
  for (std::int64_t size : sizes) text += (text.empty() ? "" : "x") + std::to_string(size);
  return text;
}

std::vector<std::string> family_ids() {
  return {"xent",     "xent-hand",     "layernorm", "layernorm-hand",
          "softmax0", "softmax0-hand", "logsumexp", "logsumexp-hand"};
}

WorkloadOptions options_for(Device device) {
  WorkloadOptions options;
  options.device = device;
  if (device.is_cuda()) {
    options.rows = options.columns = 8192;
    options.elements = std::int64_t{64} << 20;
    options.sequence = 2048;  // attention b4 h16 s2048 d64: the flash-style kernel's workload
    // The model workloads (not in the GPU suite: name them, as scripts/gpu-check's KILN_GPU_CHECK_WORKLOADS
    // does): a block of 2048 tokens 1024 wide in 16 heads (69 GFLOP), and 32 images where the CPU takes 8.
    options.tokens = 2048;
    options.width = 1024;
    options.block_heads = 16;
    options.images = 32;
  }
  return options;
}

std::vector<std::string> suite_ids(bool big, Device device) {
  if (device.is_cuda())
    return {"seed-256",     "seed-8192",      "seed-8192-tf32", "gelu",          "gelu-erf",       "softmax",
            "layernorm",    "adam",           "attention",      "mlp-train",     "seed-8192-bf16", "gelu-bf16",
            "softmax-bf16", "layernorm-bf16", "adam-bf16",      "attention-bf16"};
  std::vector<std::string> ids{"seed-256", "seed-1024", "seed-2048"};
  if (big) ids.push_back("seed-8192");
  for (const char* id : {"gelu",
                         "gelu-erf",
                         "softmax",
                         "layernorm",
                         "adam",
                         "attention",
                         "block",
                         "stem",
                         "conv",
                         "pool",
                         "depthwise",
                         "mlp-train",
                         "block-train",
                         "rnn",
                         "rnn-train",
                         "cnn-train",
                         "solver",
                         "decode",
                         "attention-decode",
                         "call",
                         "seed-2048-bf16",
                         "gelu-bf16",
                         "softmax-bf16",
                         "layernorm-bf16",
                         "attention-bf16",
                         "block-bf16"})
    ids.push_back(id);
  return ids;
}

Workload make_workload(const std::string& id, const WorkloadOptions& options) {
  if (id.ends_with("-bf16") && options.dtype == DType::f32) {
    WorkloadOptions half = options;
    half.dtype = DType::bf16;
    const std::string base = id.substr(0, id.size() - 5);
    if (!base.starts_with("seed-") && base != "gelu" && base != "gelu-erf" && base != "softmax" &&
        base != "layernorm" && base != "attention" && base != "block" && base != "adam" && base != "block-train")
      throw std::invalid_argument("unknown workload '" + id +
                                  "' (-bf16: of seed-<N>, gelu, gelu-erf, softmax, "
                                  "layernorm, attention, block, block-train and adam)");
    Workload workload = make_workload(base, half);
    workload.id = id;
    // No BLAS on the CPU multiplies bf16: the floor of a workload with products is kiln's own products alone: the
    // seed's its bf16 GEMM alone where the CPU has one (AMX tiles, AVX512_BF16), the block's its standard
    // executor's matmuls (each with its rounding pass). A GPU's is cuBLAS's bf16 GEMM (seed's, in make_workload).
    const std::vector<Tensor>& inputs = workload.inputs;
    if (!options.device.is_cuda() && base.starts_with("seed-") && kernels::cpu::has_bf16_products())
      workload.blas_alone = [inputs](int runs) { return time_gemm_bf16(inputs[0], inputs[1], runs); };
    else if (!options.device.is_cuda() && workload.kiln_matmuls_alone)
      workload.blas_alone = [matmuls = workload.kiln_matmuls_alone](int runs) { return time_calls(matmuls, runs); };
    return workload;
  }
  const Device device = options.device;
  // The float inputs of seed, gelu, softmax, layernorm and block in the options' dtype.
  auto in_dtype = [&](std::vector<Tensor> inputs) {
    for (Tensor& input : inputs) input = cast(input, options.dtype);
    return inputs;
  };
  Workload workload;
  if (id.starts_with("seed-")) {
    std::string size = id.substr(5);
    const bool tf32 = size.ends_with("-tf32");
    if (tf32) size.resize(size.size() - 5);
    std::int64_t n = 0;
    if (!size.empty() && size.find_first_not_of("0123456789") == std::string::npos) n = std::stoll(size);
    if (n <= 0) throw std::invalid_argument("unknown workload '" + id + "' (seed-<N> needs a size N > 0)");
    if (tf32 && !device.is_cuda()) throw std::invalid_argument(id + ": TF32 is a GPU precision (use --device cuda)");
    std::vector<Tensor> inputs = in_dtype(
        {random::normal({n, n}, {.seed = 1, .device = device}), random::normal({n, n}, {.seed = 2, .device = device})});
    double nd = static_cast<double>(n);
    workload = make<2>(id, "seed", dimensions({n, n}), inputs, seed_body);
    workload.bytes += static_cast<double>(size_of(options.dtype));
    workload.flops = 2 * nd * nd * nd;
    workload.matmul_output_bytes = nd * nd * 4;
    if (device.is_cuda()) {
      workload.tf32 = tf32;
      workload.blas_alone = [inputs, device](int runs) {
        auto gemm = [&] { time_cublas_gemm(inputs[0], inputs[1], 1, 1); };
        return time_cublas_gemm(inputs[0], inputs[1], runs, batch_for(single_call_ms(device, gemm)));
      };
    } else {
      workload.blas_alone = [inputs](int runs) { return time_sgemm(inputs[0], inputs[1], runs); };
    }
    workload.kiln_matmuls_alone = [inputs] { matmul(inputs[0], inputs[1]); };
  } else if (id == "gelu" || id == "gelu-erf") {  // gelu-erf: the exact gelu, PyTorch's default
    const bool exact = id == "gelu-erf";
    const nn::GeluApproximation approximation = exact ? nn::GeluApproximation::erf : nn::GeluApproximation::tanh;
    std::vector<Tensor> inputs = in_dtype({random::normal({options.rows, options.columns}, {.seed = 3, .device = device})});
    workload = make<1>(id, exact ? "gelu_erf" : "gelu", dimensions({options.rows, options.columns}), inputs,
                       [approximation](Tensor x) { return nn::gelu(x, approximation); });
    workload.bytes += bytes_of(inputs);
  } else if (id == "softmax") {
    std::vector<Tensor> inputs = in_dtype({random::normal({options.rows, options.columns}, {.seed = 4, .device = device})});
    workload = make<1>(id, id, dimensions({options.rows, options.columns}), inputs,
                       [](Tensor x) { return nn::softmax(x, -1); });
    workload.bytes += bytes_of(inputs);
  } else if (id == "layernorm") {
    std::vector<Tensor> inputs = in_dtype({random::normal({options.rows, options.columns}, {.seed = 5, .device = device}),
                                           random::normal({options.columns}, {.seed = 6, .device = device}),
                                           random::normal({options.columns}, {.seed = 7, .device = device})});
    workload = make<3>(id, id, dimensions({options.rows, options.columns}), inputs,
                       [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); });
    workload.bytes += static_cast<double>(options.rows * options.columns * size_of(options.dtype));
  } else if (id == "layernorm-hand") {
    std::vector<Tensor> inputs{random::normal({options.rows, options.columns}, {.seed = 5, .device = device}),
                               random::normal({options.columns}, {.seed = 6, .device = device}),
                               random::normal({options.columns}, {.seed = 7, .device = device})};
    workload = make<3>(id, "layernorm_by_hand", dimensions({options.rows, options.columns}), inputs, layernorm_by_hand);
    workload.bytes += static_cast<double>(options.rows * options.columns) * 4;
  } else if (id == "xent" || id == "xent-hand") {
    // Logits of `columns` classes for `rows` examples, labels in range: one loss per example.
    const Tensor logits = random::normal({options.rows, options.columns}, {.seed = 60, .device = device});
    const Tensor labels = cast(
        floor(random::uniform({options.rows},
                              {.seed = 61, .low = 0, .high = static_cast<double>(options.columns), .device = device})),
        DType::i32);
    const bool by_hand = id == "xent-hand";
    workload =
        make<2>(id, by_hand ? "cross_entropy_by_hand" : "cross_entropy", dimensions({options.rows, options.columns}),
                {logits, labels}, by_hand ? cross_entropy_by_hand : cross_entropy_body);
    workload.bytes += static_cast<double>(options.rows) * 4;
  } else if (id == "softmax0" || id == "softmax0-hand") {
    std::vector<Tensor> inputs{random::normal({options.rows, options.columns}, {.seed = 62, .device = device})};
    const bool by_hand = id == "softmax0-hand";
    workload = make<1>(
        id, by_hand ? "softmax_first_axis_by_hand" : "softmax_first_axis", dimensions({options.rows, options.columns}),
        inputs, by_hand ? softmax_first_axis_by_hand : [](Tensor x) { return nn::softmax(x, 0); });
    workload.bytes += bytes_of(inputs);
  } else if (id == "logsumexp" || id == "logsumexp-hand") {
    std::vector<Tensor> inputs{random::normal({options.rows, options.columns}, {.seed = 63, .device = device})};
    const bool by_hand = id == "logsumexp-hand";
    workload = make<1>(
        id, by_hand ? "logsumexp_by_hand" : "logsumexp", dimensions({options.rows, options.columns}), inputs,
        by_hand ? logsumexp_by_hand : [](Tensor x) { return reduce_logsumexp(x, {-1}); });
    workload.bytes += static_cast<double>(options.rows) * 4;
  } else if (id == "call") {
    std::vector<Tensor> inputs{random::normal({16}, {.seed = 70, .device = device})};
    workload = make<1>(id, "add_one", "16", inputs, [](Tensor x) { return x + 1; });
    workload.bytes += bytes_of(inputs);
    workload.calls_per_run = 1000;
  } else if (id == "adam") {
    std::int64_t n = options.elements;
    // The parameter and its gradient in the options' dtype, the moments in f32.
    const std::vector<Tensor> weights = in_dtype(
        {random::normal({n}, {.seed = 8, .device = device}), random::normal({n}, {.seed = 9, .device = device})});
    std::vector<Tensor> inputs{weights[0], weights[1],
                               random::normal({n}, {.seed = 10, .stddev = 0.1, .device = device}),
                               random::uniform({n}, {.seed = 11, .low = 0, .high = 0.01, .device = device})};
    workload = make<4>(id, "adam", std::to_string(n >> 20) + "M", inputs, adam_body);
    workload.bytes += bytes_of({inputs[0], inputs[2], inputs[3]});  // the outputs
  } else if (id == "attention") {
    Shape shape({options.batch, options.heads, options.sequence, options.head_size});
    std::vector<Tensor> inputs = in_dtype({random::normal(shape, {.seed = 12, .device = device}),
                                           random::normal(shape, {.seed = 13, .device = device}),
                                           random::normal(shape, {.seed = 14, .device = device})});
    workload = make<3>(id, id, dimensions({options.batch, options.heads, options.sequence, options.head_size}), inputs,
                       attention_body);
    workload.bytes += bytes_of({inputs[0]});
    double slices = static_cast<double>(options.batch * options.heads);
    double s = static_cast<double>(options.sequence), d = static_cast<double>(options.head_size);
    workload.flops = slices * 2 * (2 * s * s * d);
    workload.matmul_output_bytes = slices * s * s * static_cast<double>(size_of(options.dtype));
    workload.kiln_matmuls_alone = [inputs] { matmul(matmul(inputs[0], inputs[1], {.transpose_b = true}), inputs[2]); };
    if (device.is_cuda()) {
      // TF32, as the peers' anchors (jax.jit, torch.compile with TF32 allowed): the JIT's flash-style kernel.
      workload.tf32 = true;
      // kiln's CUDA matmuls are one cublasGemmStridedBatchedEx each: cuBLAS alone.
      workload.blas_alone = [device, matmuls = workload.kiln_matmuls_alone](int runs) {
        return time_device_calls(device, matmuls, runs);
      };
    } else {
      workload.blas_alone = [inputs](int runs) { return time_attention_sgemms(inputs[0], inputs[1], inputs[2], runs); };
    }
  } else if (id == "block") {
    const std::int64_t t = options.tokens, d = options.width, hidden = 4 * options.width;
    std::uint64_t seed = 20;
    // Weights scaled by 1/sqrt(fan-in), as initializers do, so activations stay of order 1.
    auto weight = [&](std::int64_t rows, std::int64_t columns) {
      return random::normal({rows, columns}, {.seed = seed++, .stddev = 1 / std::sqrt(double(rows)), .device = device});
    };
    auto vector = [&](std::int64_t size, double mean) {
      return random::normal({size}, {.seed = seed++, .mean = mean, .stddev = 0.1, .device = device});
    };
    std::vector<Tensor> inputs =
        in_dtype({random::normal({t, d}, {.seed = seed++, .device = device}), weight(d, d), weight(d, d), weight(d, d),
                  weight(d, d), weight(d, hidden), vector(hidden, 0), weight(hidden, d), vector(d, 0), vector(d, 1),
                  vector(d, 0), vector(d, 1), vector(d, 0)});
    workload =
        make<13>(id, id, dimensions({t, d}) + "x" + std::to_string(options.block_heads) + "h", inputs, block_body);
    workload.bytes += static_cast<double>(t * d * size_of(options.dtype));
    const double tokens = static_cast<double>(t), width = static_cast<double>(d);
    workload.flops =
        4 * 2 * tokens * width * width + 2 * 2 * tokens * tokens * width + 2 * 2 * tokens * width * 4 * width;
    workload.matmul_output_bytes = static_cast<double>(options.block_heads) * tokens * tokens * 4;
    if (!device.is_cuda())
      workload.blas_alone = [options](int runs) {
        return time_block_sgemms(options.tokens, options.width, options.block_heads, 4 * options.width, runs);
      };
    workload.kiln_matmuls_alone = [inputs] {
      // The same products through kiln's standard matmuls (the heads as one batched product each way).
      const std::int64_t t = inputs[0].dim(0), d = inputs[0].dim(1), heads = d / 64;
      Tensor projected = matmul(inputs[0], inputs[1]);
      Tensor per_head = reshape(projected, {heads, t, 64});
      matmul(matmul(per_head, per_head, {.transpose_b = true}), per_head);
      for (int i = 0; i < 3; ++i) matmul(inputs[0], inputs[1]);
      matmul(matmul(inputs[0], inputs[5]), inputs[7]);
    };
    if (device.is_cuda()) {
      // TF32, as the peers run it (PyTorch's convolutions and JAX's products take TF32 by default on a GPU); the
      // floor is kiln's products alone, each one cuBLAS call.
      workload.tf32 = true;
      workload.blas_alone = [device, matmuls = workload.kiln_matmuls_alone](int runs) {
        return time_device_calls(device, matmuls, runs);
      };
    }
  } else if (id == "conv") {
    const std::int64_t n = options.images, size = options.image_size, c = options.image_channels;
    std::vector<Tensor> inputs{
        random::normal({n, size, size, c}, {.seed = 40, .device = device}),
        random::normal({3, 3, c, c}, {.seed = 41, .stddev = 1 / std::sqrt(9.0 * c), .device = device}),
        random::normal({c}, {.seed = 42, .stddev = 0.1, .device = device})};
    workload = make<3>(id, id, dimensions({n, size, size, c}) + "*3x3", inputs, conv_body);
    workload.bytes += bytes_of({inputs[0]});  // the output, as large as the input
    add_im2col_product(workload, n * size * size, inputs[1], 43);
    if (device.is_cuda()) workload.tf32 = true;  // as block's
  } else if (id == "stem") {
    // The images whose stem leaves `pool`'s input: four times conv's size, 3 channels, to conv's channels.
    const std::int64_t n = options.images, size = 4 * options.image_size, c = options.image_channels;
    std::vector<Tensor> inputs{
        random::normal({n, size, size, 3}, {.seed = 48, .device = device}),
        random::normal({7, 7, 3, c}, {.seed = 49, .stddev = 1 / std::sqrt(147.0), .device = device}),
        random::normal({c}, {.seed = 50, .stddev = 0.1, .device = device})};
    workload = make<3>(id, id, dimensions({n, size, size, 3}) + "*7x7s2", inputs, stem_body);
    const std::int64_t positions = n * (size / 2) * (size / 2);
    workload.bytes += static_cast<double>(positions * c) * 4;  // the output
    add_im2col_product(workload, positions, inputs[1], 51);
    if (device.is_cuda()) workload.tf32 = true;  // as block's
  } else if (id == "pool") {
    const std::int64_t n = options.images, size = 2 * options.image_size, c = options.image_channels;
    std::vector<Tensor> inputs{random::normal({n, size, size, c}, {.seed = 44, .device = device})};
    workload = make<1>(id, id, dimensions({n, size, size, c}) + "/3x3s2", inputs, pool_body);
    workload.bytes += bytes_of(inputs) / 4;  // the output: a quarter of the positions
  } else if (id == "depthwise") {
    const std::int64_t n = options.images, size = 2 * options.image_size, c = options.image_channels / 2;
    std::vector<Tensor> inputs{random::normal({n, size, size, c}, {.seed = 45, .device = device}),
                               random::normal({3, 3, 1, c}, {.seed = 46, .stddev = 1 / 3.0, .device = device}),
                               random::normal({c}, {.seed = 47, .stddev = 0.1, .device = device})};
    // A MobileNet depthwise layer: conv_body with one 3x3 filter per channel ([3, 3, 1, c]), over images twice
    // conv's size with half its channels (MobileNet v1's first such layer is 112x112x32). Nine multiply-adds an
    // element: it moves as much as it computes, and writes what it reads.
    workload = make<3>(id, id, dimensions({n, size, size, c}) + "*3x3dw", inputs, conv_body);
    workload.bytes += bytes_of({inputs[0]});  // the output, as large as the input
  } else if (id == "attention-decode") {
    // attention's body at a decoder's step: one query per head against a cache of decode_keys keys and values.
    const std::int64_t b = options.decode_batch, h = options.heads, s = options.decode_keys, d = options.head_size;
    std::vector<Tensor> inputs{random::normal({b, h, 1, d}, {.seed = 76, .device = device}),
                               random::normal({b, h, s, d}, {.seed = 77, .device = device}),
                               random::normal({b, h, s, d}, {.seed = 78, .device = device})};
    workload = make<3>(id, "attention", dimensions({b, h, 1, s, d}), inputs, attention_body);
    workload.bytes += bytes_of({inputs[0]});  // the output, as large as the queries
    workload.flops = 2 * 2 * static_cast<double>(b * h * s * d);
    workload.matmul_output_bytes = static_cast<double>(b * h * s) * 4;
    workload.kiln_matmuls_alone = [inputs] { matmul(matmul(inputs[0], inputs[1], {.transpose_b = true}), inputs[2]); };
    workload.blas_alone = [matmuls = workload.kiln_matmuls_alone](int runs) { return time_calls(matmuls, runs); };
  } else if (id == "decode") {
    const std::int64_t rows = options.decode_rows, d = options.decode_width, hidden = 4 * options.decode_width;
    std::vector<Tensor> inputs{
        random::normal({rows, d}, {.seed = 70, .device = device}),
        random::normal({d, hidden}, {.seed = 71, .stddev = 1 / std::sqrt(double(d)), .device = device}),
        random::normal({hidden}, {.seed = 72, .stddev = 0.1, .device = device}),
        random::normal({hidden, d}, {.seed = 73, .stddev = 1 / std::sqrt(double(hidden)), .device = device}),
        random::normal({d}, {.seed = 74, .stddev = 0.1, .device = device})};
    workload = make<5>(id, id, dimensions({rows, d, hidden}), inputs, decode_body);
    workload.bytes += static_cast<double>(rows * d) * 4;  // the output
    workload.flops = 2 * 2 * static_cast<double>(rows) * static_cast<double>(d) * static_cast<double>(hidden);
    workload.matmul_output_bytes = static_cast<double>(rows * hidden) * 4;
    // The products alone through the standard executor's matmuls (OpenBLAS): the compute floor's rate, if higher
    // than the best of the run.
    const Tensor hidden_rows = random::normal({rows, hidden}, {.seed = 75, .device = device});
    workload.kiln_matmuls_alone = [inputs, hidden_rows] {
      matmul(inputs[0], inputs[1]);
      matmul(hidden_rows, inputs[3]);
    };
    workload.blas_alone = [matmuls = workload.kiln_matmuls_alone](int runs) { return time_calls(matmuls, runs); };
  } else if (id == "mlp-train" || id == "block-train" || id == "rnn-train" || id == "cnn-train") {
    return make_training_workload(id, options);
  } else if (id == "rnn" || id == "solver") {
    return make_loop_workload(id, options);
  } else {
    throw std::invalid_argument("unknown workload '" + id + "'");
  }
  workload.device = device;
  return workload;
}

}  // namespace kiln::bench
