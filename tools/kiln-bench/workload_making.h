#pragma once
// What workloads.cpp and training_workloads.cpp share: turning a body of N tensors into a Workload (its
// standard and JIT functions as Calls on a vector), and the bodies that training workloads reuse.

#include "workloads.h"

#include <initializer_list>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::bench {

// Calls a kiln::Function of `count` tensor arguments (or any callable that
// takes them) on a vector.
template <std::size_t count, class F> auto call_on(const F& function, const std::vector<Tensor>& inputs) {
  return [&]<std::size_t... index>(std::index_sequence<index...>) {
    return function(inputs.at(index)...);
  }(std::make_index_sequence<count>{});
}

// Wraps a kiln::Function of N tensor arguments as a Call on a vector.
template <std::size_t count, class F> Call as_call(F function) {
  return [function](const std::vector<Tensor>& inputs) {
    auto result = call_on<count>(function, inputs);
    if constexpr (std::is_same_v<decltype(result), Tensor>) return std::vector<Tensor>{result};
    else if constexpr (std::is_same_v<decltype(result), std::vector<Tensor>>) return result;
    else return std::apply([](auto... tensors) { return std::vector<Tensor>{tensors...}; }, result);
  };
}

// Bytes of the tensors' elements.
double bytes_of(const std::vector<Tensor>& tensors);

template <std::size_t count, class Body>
Workload make(std::string id, std::string name, std::string shape, std::vector<Tensor> inputs, Body body) {
  Workload workload;
  workload.id = std::move(id);
  workload.name = name;
  workload.shape = std::move(shape);
  workload.inputs = std::move(inputs);
  auto standard = function(body, {.name = name + "_standard"});
  auto jit = function(body, {.jit_compile = true, .name = name + "_jit"});
  workload.standard = as_call<count>(standard);
  workload.jit = as_call<count>(jit);
  workload.fresh_jit = [body, name] {
    return as_call<count>(function(body, {.jit_compile = true, .name = name + "_jit"}));
  };
  workload.standard_ir = [standard, inputs = workload.inputs](Stage stage) {
    return call_on<count>([&](const auto&... arguments) { return standard.get_compiler_ir(stage, arguments...); },
                          inputs);
  };
  workload.jit_ir = [jit, inputs = workload.inputs](Stage stage) {
    return call_on<count>([&](const auto&... arguments) { return jit.get_compiler_ir(stage, arguments...); },
                          inputs);
  };
  workload.standard_statistics = [standard] { return standard.statistics(); };
  workload.jit_statistics = [jit] { return jit.statistics(); };
  workload.bytes += bytes_of(workload.inputs);
  return workload;
}

// "256x1024" from {256, 1024}.
std::string dimensions(std::initializer_list<std::int64_t> sizes);

// One Adam step (Kingma & Ba) at step 10 with the usual hyperparameters: the updated parameter, m and v.
std::tuple<Tensor, Tensor, Tensor> adam_body(Tensor parameter, Tensor gradient, Tensor m, Tensor v);

// kiln-bench's `block`: a pre-norm transformer block on x f32[tokens, width] (heads of 64).
Tensor block_body(Tensor x, Tensor wq, Tensor wk, Tensor wv, Tensor wo, Tensor w1, Tensor b1, Tensor w2, Tensor b2,
                  Tensor gamma1, Tensor beta1, Tensor gamma2, Tensor beta2);

// kiln-bench's conv: a 3x3 convolution (same padding), a bias and relu, NHWC images by HWIO filters.
Tensor conv_body(Tensor x, Tensor filters, Tensor bias);
// kiln-bench's pool: a 3x3 max pool, stride 2, same padding.
Tensor pool_body(Tensor x);

// The training workloads (training_workloads.cpp): mlp-train, block-train (CPU and CUDA), rnn-train and cnn-train
// (CPU only).
Workload make_training_workload(const std::string& id, const WorkloadOptions& options);
// The loops (loop_workloads.cpp): rnn and solver, CPU only.
Workload make_loop_workload(const std::string& id, const WorkloadOptions& options);
// The rnn workload's body: a GRU (gates z, r, candidate along the products' columns) stepped with scan over xs
// f32[steps, batch, input] from h0 f32[batch, hidden], with w f32[input, 3 hidden], u f32[hidden, 3 hidden], b f32[3
// hidden]; the last state and every step's.
std::tuple<Tensor, Tensor> rnn_body(Tensor xs, Tensor h0, Tensor w, Tensor u, Tensor b);
// A workload whose matmul work is `products` products of left [m, k] x right [k, n] (an RNN's steps): its flops,
// and OpenBLAS's and kiln's time for that many.
void set_repeated_products(Workload& workload, const Tensor& left, const Tensor& right, double products);

}  // namespace kiln::bench
