// inference: a small CNN trained by PyTorch, run by kiln. The weights come from a safetensors file that
// scripts/train-inference-weights wrote with PyTorch's model.state_dict() (committed as
// examples/inference/digits-cnn.safetensors, 25 KB); the images are the test images of the digits example
// (scikit-learn's 8x8 handwritten digits, examples/digits/digits.bin, every fifth image). The model,
//
//   8x8x1 -> conv 3x3 (16) -> relu -> max pool 2x2 -> conv 3x3 (32) -> relu -> max pool 2x2 -> dense 128 -> 10,
//
// is one kiln::function compiled with {.jit_compile = true}; the program checks it against the standard executor
// and against the accuracy PyTorch measured (written into the file's metadata), and prints the test accuracy.
//
//   build/examples/inference [--weights PATH] [--data PATH]
//
// PyTorch (2.15, CPU) classified 354 of the 360 test images correctly (98.33%); kiln classifies the same 354.
// Exit status 0 when the JIT agrees with the standard executor and kiln's count is within 2 images of PyTorch's,
// 1 otherwise, 2 for bad usage.

#include "digits/digits_data.h"

#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// The model's parameters in kiln's layouts.
struct Weights {
  kiln::Tensor conv1, conv1_bias;  // filters [3, 3, 1, 16] (HWIO), bias [16]
  kiln::Tensor conv2, conv2_bias;  // filters [3, 3, 16, 32], bias [32]
  kiln::Tensor dense, dense_bias;  // [128, 10] (in, out), bias [10]
};

// Reads the PyTorch state_dict and converts its layouts to kiln's, once, on load:
//
//  - Convolution filters. PyTorch's Conv2d weight is [out, in, height, width] (OIHW) and works on NCHW images;
//    kiln's conv2d, like tf.nn.conv2d, takes NHWC images and HWIO filters [height, width, in, out]. Both compute
//    the same cross-correlation (neither flips the kernel), so the filters only move their axes: OIHW's axes
//    (2, 3, 1, 0) are HWIO.
//  - The dense layer. PyTorch's Linear weight is [out, in] (x W^T), and its input is the pooled [32, 2, 2] (CHW)
//    block flattened in (channel, row, column) order. kiln's pooled block is [2, 2, 32] (HWC), flattened in
//    (row, column, channel) order. So the weight becomes [10, 32, 2, 2], moves its axes to [2, 2, 32, 10] (HWC,
//    then out) and is flattened to [128, 10]: row h*64 + w*32 + c is PyTorch's column c*4 + h*2 + w.
//    (Transposing the activations to CHW before flattening would work too, at the cost of a transpose per call.)
//    The shapes alone do not catch a mistake here: the plain transpose of the weight, [128, 10] too, runs and
//    classifies 8% of the test images correctly (chance), which is what the check against PyTorch is for.
//
// Biases need nothing: one per output channel in both.
Weights load_weights(const std::string& path) {
  // load_safetensors gives the tensors in the file's order, as (name, tensor) pairs; a map finds them by name.
  std::map<std::string, kiln::Tensor> named;
  for (auto& [name, tensor] : kiln::load_safetensors(path)) named[name] = tensor;
  auto take = [&](const std::string& name, const kiln::Shape& shape) {
    auto found = named.find(name);
    if (found == named.end()) throw std::runtime_error(path + ": no tensor '" + name + "'");
    if (found->second.shape() != shape)
      throw std::runtime_error(path + ": '" + name + "' is " + found->second.shape().to_string() + ", expected " +
                               shape.to_string());
    return found->second;
  };
  Weights weights;
  weights.conv1 = kiln::transpose(take("conv1.weight", {16, 1, 3, 3}), {2, 3, 1, 0});
  weights.conv1_bias = take("conv1.bias", {16});
  weights.conv2 = kiln::transpose(take("conv2.weight", {32, 16, 3, 3}), {2, 3, 1, 0});
  weights.conv2_bias = take("conv2.bias", {32});
  const kiln::Tensor dense = kiln::reshape(take("dense.weight", {10, 128}), {10, 32, 2, 2});
  weights.dense = kiln::reshape(kiln::transpose(dense, {2, 3, 1, 0}), {128, 10});
  weights.dense_bias = take("dense.bias", {10});
  return weights;
}

// The forward pass: NHWC images [batch, 8, 8, 1] to logits [batch, 10]. Padding::same keeps the 8x8 (PyTorch's
// padding=1 for a 3x3 filter); the pools' default window and stride are 2, as torch.max_pool2d(x, 2).
kiln::Tensor logits(const Weights& weights, const kiln::Tensor& images) {
  using kiln::nn::Padding;
  kiln::Tensor x = kiln::nn::conv2d(images, weights.conv1, {.padding = Padding::same}) + weights.conv1_bias;
  x = kiln::nn::max_pool2d(kiln::nn::relu(x));  // [batch, 4, 4, 16]
  x = kiln::nn::conv2d(x, weights.conv2, {.padding = Padding::same}) + weights.conv2_bias;
  x = kiln::nn::max_pool2d(kiln::nn::relu(x));  // [batch, 2, 2, 32]
  x = kiln::reshape(x, {x.dim(0), 128});
  return kiln::matmul(x, weights.dense) + weights.dense_bias;
}

std::int64_t count_correct(const kiln::Tensor& logits, const std::vector<std::int32_t>& labels) {
  const std::vector<std::int64_t> predicted = kiln::argmax(logits, -1).to_vector<std::int64_t>();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  return correct;
}

}  // namespace

int main(int argc, char** argv) {
  std::string weights_path = KILN_INFERENCE_WEIGHTS, data_path = KILN_DIGITS_DATA;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--weights" && i + 1 < argc)
      weights_path = argv[++i];
    else if (argument == "--data" && i + 1 < argc)
      data_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--weights PATH] [--data PATH]\n", argv[0]);
      return 2;
    }
  }
  try {
    const Weights weights = load_weights(weights_path);
    const digits::DataSet test = digits::split_every_fifth(digits::read_digits(data_path)).test;
    const kiln::Tensor images = kiln::from_vector(test.examples, {test.size(), 8, 8, 1});  // NHWC, one channel
    std::printf("inference: %lld test digits %s, weights from %s\n", static_cast<long long>(test.size()),
                images.shape().to_string().c_str(), weights_path.c_str());

    // The weights are captured by value: the lambda keeps its own handles, and each captured tensor becomes an
    // input of the graph (referenced, not copied into it). Only the images are arguments, so a batch of another
    // size traces (and compiles) once more.
    auto model = [weights](kiln::Tensor images) { return logits(weights, images); };
    auto standard = kiln::function(model, {.name = "digits_cnn"});
    auto jit = kiln::function(model, {.jit_compile = true, .name = "digits_cnn_jit"});

    const kiln::Tensor jit_logits = jit(images);
    const kiln::Tensor standard_logits = standard(images);
    const kiln::FunctionStatistics statistics = jit.statistics();
    if (statistics.fallbacks > 0) {
      std::fprintf(stderr, "inference: the JIT fell back to the standard executor:\n%s",
                   jit.get_compiler_ir(kiln::Stage::fused, images).c_str());
      return 1;
    }
    std::printf("JIT: %lld kernels per call (the standard executor: %lld, one per primitive op); ",
                static_cast<long long>(statistics.kernels_per_call),
                static_cast<long long>(standard.statistics().kernels_per_call));
    if (statistics.compiles > 0)
      std::printf("compiled in %.2f s\n", statistics.compile_seconds);
    else
      std::printf("loaded from the disk cache\n");

    // Executor agreement: the logits may differ by rounding (the two executors may sum the convolutions' products
    // in other orders), far below the gap between the two best classes, so every prediction is the same.
    const double scale = kiln::reduce_max(kiln::abs(standard_logits)).item<float>();
    const double difference = kiln::reduce_max(kiln::abs(jit_logits - standard_logits)).item<float>() / scale;
    const std::int64_t correct = count_correct(jit_logits, test.labels);
    const std::int64_t standard_correct = count_correct(standard_logits, test.labels);
    const bool same_predictions =
        kiln::reduce_all(kiln::argmax(jit_logits, -1) == kiln::argmax(standard_logits, -1)).item<bool>();
    std::printf("JIT vs standard executor: largest logit difference %.2g of the largest logit; %s\n", difference,
                same_predictions ? "the same predictions" : "DIFFERENT predictions");
    if (!(difference < 1e-4) || !same_predictions || correct != standard_correct) {
      std::fprintf(stderr, "inference: the JIT and the standard executor disagree\n");
      return 1;
    }
    std::printf("JIT and standard executor agree\n");

    // The training script wrote PyTorch's own count into the file's metadata (strings, as safetensors keeps them).
    const std::map<std::string, std::string> metadata = kiln::load_safetensors_metadata(weights_path);
    const std::int64_t torch_correct = std::stoll(metadata.at("test_correct"));
    const double images_count = static_cast<double>(test.size());
    std::printf("test accuracy: kiln %lld/%lld = %.2f%%, PyTorch %lld/%s = %.2f%% (torch %s)\n",
                static_cast<long long>(correct), static_cast<long long>(test.size()), 100 * correct / images_count,
                static_cast<long long>(torch_correct), metadata.at("test_images").c_str(),
                100 * torch_correct / images_count, metadata.at("torch_version").c_str());
    // Float rounding may tip an image whose two best logits are nearly equal, not more.
    if (std::abs(correct - torch_correct) > 2) {
      std::fprintf(stderr, "inference: kiln's accuracy is not PyTorch's: a layout is converted wrongly\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "inference: %s\n", error.what());
    return 1;
  }
}
