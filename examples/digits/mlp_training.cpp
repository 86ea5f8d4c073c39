#include "digits/mlp_training.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace digits {
namespace {

using kiln::Tensor;
constexpr double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;

Tensor mlp(const std::vector<Tensor>& parameters, const Tensor& examples) {
  Tensor hidden = kiln::nn::relu(kiln::matmul(examples, parameters[0]) + parameters[1]);
  hidden = kiln::nn::relu(kiln::matmul(hidden, parameters[2]) + parameters[3]);
  return kiln::matmul(hidden, parameters[4]) + parameters[5];
}

// The mean softmax cross-entropy of a batch: arguments the 6 parameters, the examples, the labels.
struct Loss {
  template <class... Tensors>
  Tensor operator()(const Tensors&... tensors) const {
    const std::vector<Tensor> arguments{tensors...};
    const std::vector<Tensor> parameters(arguments.begin(), arguments.begin() + TrainingStep::parameters);
    return kiln::reduce_mean(kiln::nn::sparse_softmax_cross_entropy(mlp(parameters, arguments[6]), arguments[7]));
  }
};

// Calls `callable` with the tensors of `arguments` as its `count` arguments.
template <std::size_t count, class Callable>
auto call_with(const Callable& callable, const std::vector<Tensor>& arguments) {
  return [&]<std::size_t... index>(std::index_sequence<index...>) {
    return callable(arguments.at(index)...);
  }(std::make_index_sequence<count>{});
}

Tensor scalar(double value) { return kiln::from_vector(std::vector<float>{static_cast<float>(value)}, kiln::Shape()); }

}  // namespace

std::vector<Tensor> TrainingStep::step(const std::vector<Tensor>& arguments) const {
  const auto at = [&](std::size_t index) -> const Tensor& { return arguments.at(index); };
  const Tensor &examples = at(18), &labels = at(19), &correction1 = at(20), &correction2 = at(21);
  auto [loss, gradients] = kiln::value_and_grad(Loss{}, {.argnums = {0, 1, 2, 3, 4, 5}})(
      at(0), at(1), at(2), at(3), at(4), at(5), examples, labels);
  // Adam (Kingma and Ba), as torch.optim.Adam and optax.adam compute it.
  std::vector<Tensor> updated, first, second;
  for (std::size_t i = 0; i < parameters; ++i) {
    const Tensor& gradient = gradients[i];
    Tensor m = at(parameters + i) * beta1 + gradient * (1 - beta1);
    Tensor v = at(2 * parameters + i) * beta2 + kiln::square(gradient) * (1 - beta2);
    updated.push_back(at(i) - (m * correction1) * learning_rate / (kiln::sqrt(v * correction2) + epsilon));
    first.push_back(m);
    second.push_back(v);
  }
  std::vector<Tensor> results{loss};
  for (const auto* part : {&updated, &first, &second}) results.insert(results.end(), part->begin(), part->end());
  return results;
}

Tensor Logits::logits(const std::vector<Tensor>& arguments) {
  return mlp(std::vector<Tensor>(arguments.begin(), arguments.begin() + TrainingStep::parameters),
             arguments.at(TrainingStep::parameters));
}

MlpTrainer::MlpTrainer(std::int64_t features, TrainingOptions options)
    : options_(options),
      features_(features),
      shuffle_(options.seed),
      step_(kiln::function(TrainingStep{.learning_rate = options.learning_rate},
                           {.jit_compile = true, .name = "mlp_training_step"})),
      logits_(kiln::function(Logits{}, {.name = "mlp_logits"})) {
  // He initialization for relu layers (weights of variance 2 / fan-in), zero biases and moments.
  const std::array<std::int64_t, 4> widths = {features, options.hidden, options.hidden, options.classes};
  std::vector<Tensor> parameters;
  for (std::size_t layer = 0; layer < 3; ++layer) {
    const double fan_in = static_cast<double>(widths[layer]);
    parameters.push_back(kiln::random::normal(
        {widths[layer], widths[layer + 1]}, {.seed = options.seed * 16 + layer, .stddev = std::sqrt(2 / fan_in)}));
    parameters.push_back(kiln::zeros({widths[layer + 1]}));
  }
  state_ = parameters;
  for (int moment = 0; moment < 2; ++moment)
    for (const Tensor& parameter : parameters) state_.push_back(kiln::zeros(parameter.shape()));
}

std::vector<Tensor> MlpTrainer::step_arguments(const DataSet& data, const std::vector<std::int64_t>& rows,
                                               std::int64_t first) const {
  std::vector<float> examples;
  std::vector<std::int32_t> labels;
  examples.reserve(static_cast<std::size_t>(options_.batch * features_));
  for (std::int64_t i = first; i < first + options_.batch; ++i) {
    const std::int64_t row = rows[static_cast<std::size_t>(i)];
    const auto begin = data.examples.begin() + row * features_;
    examples.insert(examples.end(), begin, begin + features_);
    labels.push_back(data.labels[static_cast<std::size_t>(row)]);
  }
  const double step = static_cast<double>(steps_ + 1);
  std::vector<Tensor> arguments = state_;
  arguments.push_back(kiln::from_vector(examples, {options_.batch, features_}));
  arguments.push_back(kiln::from_vector(labels, {options_.batch}));
  arguments.push_back(scalar(1 / (1 - std::pow(beta1, step))));
  arguments.push_back(scalar(1 / (1 - std::pow(beta2, step))));
  return arguments;
}

double MlpTrainer::train_epoch(const DataSet& train) {
  if (train.size() < options_.batch) throw std::invalid_argument("digits: fewer examples than one batch");
  std::vector<std::int64_t> rows(static_cast<std::size_t>(train.size()));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), shuffle_);
  double total_loss = 0;
  std::int64_t batches = 0;
  for (std::int64_t first = 0; first + options_.batch <= train.size(); first += options_.batch, ++batches) {
    std::vector<Tensor> results = call_with<TrainingStep::arguments>(step_, step_arguments(train, rows, first));
    total_loss += results[0].item<float>();
    state_.assign(results.begin() + 1, results.end());
    ++steps_;
  }
  return total_loss / static_cast<double>(batches);
}

double MlpTrainer::accuracy(const DataSet& data) const {
  std::vector<Tensor> arguments(state_.begin(), state_.begin() + TrainingStep::parameters);
  arguments.push_back(kiln::from_vector(data.examples, {data.size(), features_}));
  const std::vector<float> logits = call_with<TrainingStep::parameters + 1>(logits_, arguments).to_vector<float>();
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const auto row = logits.begin() + i * options_.classes;
    right += std::max_element(row, row + options_.classes) - row == data.labels[static_cast<std::size_t>(i)];
  }
  return static_cast<double>(right) / static_cast<double>(data.size());
}

double MlpTrainer::jit_against_standard(const DataSet& train) const {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(options_.batch));
  std::iota(rows.begin(), rows.end(), 0);
  const std::vector<Tensor> arguments = step_arguments(train, rows, 0);
  const auto standard = kiln::function(TrainingStep{.learning_rate = options_.learning_rate}, {.name = "mlp_step"});
  return relative_difference(call_with<TrainingStep::arguments>(standard, arguments),
                             call_with<TrainingStep::arguments>(step_, arguments));
}

double relative_difference(const std::vector<Tensor>& standard, const std::vector<Tensor>& compiled) {
  if (standard.size() != compiled.size()) throw std::invalid_argument("relative_difference: result counts differ");
  const auto largest = [](const Tensor& x) {
    return x.shape().numel() == 0 ? 0.0 : kiln::reduce_max(kiln::abs(x)).to_vector<double>()[0];
  };
  double worst = 0;
  for (std::size_t i = 0; i < standard.size(); ++i) {
    const Tensor expected = kiln::cast(standard[i], kiln::DType::f64),
                 actual = kiln::cast(compiled[i], kiln::DType::f64);
    worst = std::max(worst, largest(expected - actual) / std::max(1e-30, largest(expected)));
  }
  return worst;
}

}  // namespace digits
