#include "workloads.h"

#include <cmath>
#include <stdexcept>
#include <utility>

namespace kiln::bench {
namespace {

// Wraps a kiln::Function of N tensor arguments as a Call on a vector.
template <std::size_t count, class F> Call as_call(F function) {
  return [function](const std::vector<Tensor>& inputs) {
    return [&]<std::size_t... index>(std::index_sequence<index...>) {
      auto result = function(inputs.at(index)...);
      if constexpr (std::is_same_v<decltype(result), Tensor>) return std::vector<Tensor>{result};
      else return std::apply([](auto... tensors) { return std::vector<Tensor>{tensors...}; }, result);
    }(std::make_index_sequence<count>{});
  };
}

template <std::size_t count, class Body>
Workload make(std::string name, std::string shape, std::vector<Tensor> inputs, Body body, double flops) {
  Workload workload;
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
  workload.traced_ir = [standard, inputs = workload.inputs] {
    return [&]<std::size_t... index>(std::index_sequence<index...>) {
      return standard.get_compiler_ir(Stage::traced, inputs.at(index)...);
    }(std::make_index_sequence<count>{});
  };
  workload.jit_statistics = [jit] { return jit.statistics(); };
  workload.flops = flops;
  for (const Tensor& input : workload.inputs) workload.bytes += static_cast<double>(input.numel()) * 4;
  return workload;
}

double bytes_of(const std::vector<Tensor>& outputs) {
  double bytes = 0;
  for (const Tensor& output : outputs) bytes += static_cast<double>(output.numel()) * 4;
  return bytes;
}

// The seed article's function.
Tensor seed_body(Tensor x, Tensor y) {
  Tensor z = matmul(x, y);
  z = z + sin(z);
  z = nn::relu(z);
  return reduce_sum(z);
}

// One Adam step (Kingma & Ba) at step 10 with the usual hyperparameters.
std::tuple<Tensor, Tensor, Tensor> adam_body(Tensor parameter, Tensor gradient, Tensor m, Tensor v) {
  constexpr double learning_rate = 1e-3, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  const double correction1 = 1 - std::pow(beta1, 10), correction2 = 1 - std::pow(beta2, 10);
  Tensor new_m = beta1 * m + (1 - beta1) * gradient;
  Tensor new_v = beta2 * v + (1 - beta2) * (gradient * gradient);
  Tensor step = (new_m / correction1) / (sqrt(new_v / correction2) + epsilon);
  return {parameter - learning_rate * step, new_m, new_v};
}

}  // namespace

std::vector<std::string> workload_names() { return {"seed", "gelu", "softmax", "layernorm", "adam"}; }

Workload make_workload(const std::string& name, const WorkloadOptions& options) {
  Workload workload;
  if (name == "seed") {
    std::int64_t n = options.seed_size;
    std::vector<Tensor> inputs{random::normal({n, n}, {.seed = 1}), random::normal({n, n}, {.seed = 2})};
    double nd = static_cast<double>(n);
    workload = make<2>("seed", std::to_string(n) + "x" + std::to_string(n), inputs, seed_body, 2 * nd * nd * nd);
    workload.bytes += 4;
  } else if (name == "gelu") {
    std::vector<Tensor> inputs{random::normal({options.elements}, {.seed = 3})};
    workload = make<1>("gelu", std::to_string(options.elements >> 20) + "M", inputs,
                       [](Tensor x) { return nn::gelu(x); }, 0);
    workload.bytes += bytes_of(inputs);
  } else if (name == "softmax") {
    std::vector<Tensor> inputs{random::normal({options.rows, options.columns}, {.seed = 4})};
    workload = make<1>("softmax", std::to_string(options.rows) + "x" + std::to_string(options.columns), inputs,
                       [](Tensor x) { return nn::softmax(x, -1); }, 0);
    workload.bytes += bytes_of(inputs);
  } else if (name == "layernorm") {
    std::vector<Tensor> inputs{random::normal({options.rows, options.columns}, {.seed = 5}),
                               random::normal({options.columns}, {.seed = 6}),
                               random::normal({options.columns}, {.seed = 7})};
    workload = make<3>("layernorm", std::to_string(options.rows) + "x" + std::to_string(options.columns), inputs,
                       [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); }, 0);
    workload.bytes += static_cast<double>(options.rows * options.columns) * 4;
  } else if (name == "adam") {
    std::int64_t n = options.elements;
    std::vector<Tensor> inputs{random::normal({n}, {.seed = 8}), random::normal({n}, {.seed = 9}),
                               random::normal({n}, {.seed = 10, .stddev = 0.1}),
                               random::uniform({n}, {.seed = 11, .low = 0, .high = 0.01})};
    workload = make<4>("adam", std::to_string(n >> 20) + "M", inputs, adam_body, 0);
    workload.bytes += 3.0 * static_cast<double>(n) * 4;
  } else {
    throw std::invalid_argument("unknown workload '" + name + "'");
  }
  return workload;
}

}  // namespace kiln::bench
