// kiln-bench's loops (include/kiln/control_flow.h): a recurrent network stepped through a sequence with scan, and
// an iterative solver run with while_loop until its residual is small -- the "heavy control flow" the article says
// XLA handles badly. The peers run the same bodies: jax.jit over lax.scan and lax.while_loop, tf.function
// (jit_compile=True) over tf.scan and tf.while_loop, torch.compile over the Python loops.

#include "workload_making.h"

#include <cmath>
#include <stdexcept>

namespace kiln::bench {
namespace {

// ---- rnn: a GRU layer (Cho et al. 2014) over `steps` inputs --------------------------------------------------------

// One step of the GRU on a batch: the gates from the input's and the state's products (z, r, candidate in that
// order along the products' columns), the new state n + z (h - n).
Tensor gru_step(const Tensor& h, const Tensor& x, const Tensor& w, const Tensor& u, const Tensor& b) {
  const std::int64_t hidden = h.dim(-1);
  const Tensor from_input = matmul(x, w) + b, from_state = matmul(h, u);
  const auto gate = [&](const Tensor& products, std::int64_t index) {
    return slice(products, {.start = {0, index * hidden}, .stop = {products.dim(0), (index + 1) * hidden}});
  };
  const Tensor z = nn::sigmoid(gate(from_input, 0) + gate(from_state, 0));
  const Tensor r = nn::sigmoid(gate(from_input, 1) + gate(from_state, 1));
  const Tensor candidate = tanh(gate(from_input, 2) + r * gate(from_state, 2));
  return candidate + z * (h - candidate);
}

// xs f32[steps, batch, input], h0 f32[batch, hidden], w f32[input, 3 hidden], u f32[hidden, 3 hidden], b f32[3
// hidden]: the last state and every step's.
std::tuple<Tensor, Tensor> rnn_body(Tensor xs, Tensor h0, Tensor w, Tensor u, Tensor b) {
  auto [last, states] = scan(
      [&](const Tensor& h, const Tensor& x) {
        const Tensor next = gru_step(h, x, w, u, b);
        return std::pair<Tensor, Tensor>{next, next};
      },
      h0, xs);
  return {last, states};
}

Workload make_rnn(const WorkloadOptions& options) {
  const std::int64_t steps = options.rnn_steps, batch = options.rnn_batch, hidden = options.rnn_hidden;
  const Device device = options.device;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  std::vector<Tensor> inputs{random::normal({steps, batch, hidden}, {.seed = 110, .device = device}),
                             random::normal({batch, hidden}, {.seed = 111, .stddev = 0.5, .device = device}),
                             random::normal({hidden, 3 * hidden}, {.seed = 112, .stddev = scale, .device = device}),
                             random::normal({hidden, 3 * hidden}, {.seed = 113, .stddev = scale, .device = device}),
                             random::normal({3 * hidden}, {.seed = 114, .stddev = 0.1, .device = device})};
  Workload workload =
      make<5>("rnn", "rnn", std::to_string(steps) + "x" + dimensions({batch, hidden}), inputs, rnn_body);
  workload.bytes += static_cast<double>(steps + 1) * static_cast<double>(batch * hidden) * 4;  // the states out
  // Two products a step: [batch, hidden] x [hidden, 3 hidden].
  const double products = 2.0 * static_cast<double>(steps);
  workload.flops = products * 2 * static_cast<double>(batch * hidden) * static_cast<double>(3 * hidden);
  workload.matmul_output_bytes = static_cast<double>(batch * 3 * hidden) * 4;
  const Tensor state = inputs[1], weight = inputs[3];
  workload.blas_alone = [state, weight, products](int runs) {
    const Timing one = time_sgemm(state, weight, runs);
    return Timing{products * one.median_ms, products * one.min_ms, products * one.max_ms, products * one.mean_ms};
  };
  workload.kiln_matmuls_alone = [state, weight, products] {
    for (double product = 0; product < products; ++product) matmul(state, weight);
  };
  return workload;
}

// ---- solver: conjugate gradients on a symmetric positive definite system -----------------------------------------

constexpr double solver_tolerance = 1e-5;  // on the residual's norm, relative to b's
constexpr std::int32_t solver_iteration_limit = 1000;

// Conjugate gradients from x = 0 on a x = b, while |r|^2 > tolerance^2 |b|^2 (and below the iteration limit): the
// solution and the iterations it took.
std::tuple<Tensor, Tensor> solver_body(Tensor a, Tensor b) {
  const auto dot = [](const Tensor& p, const Tensor& q) { return reduce_sum(p * q); };
  const Tensor threshold = dot(b, b) * (solver_tolerance * solver_tolerance);
  using State = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;  // x, r, p, |r|^2, iterations
  const State start{zeros(b.shape()), b, b, dot(b, b), zeros(Shape(), DType::i32)};
  const State solved = while_loop(
      [&](const State& state) {
        return logical_and(std::get<3>(state) > threshold, std::get<4>(state) < solver_iteration_limit);
      },
      [&](const State& state) {
        const auto& [x, r, p, residual, iterations] = state;
        const Tensor ap = reshape(matmul(a, reshape(p, {p.dim(0), 1})), {p.dim(0)});
        const Tensor alpha = residual / dot(p, ap);
        const Tensor next_r = r - alpha * ap;
        const Tensor next_residual = dot(next_r, next_r);
        return State{x + alpha * p, next_r, next_r + (next_residual / residual) * p, next_residual, iterations + 1};
      },
      start);
  return {std::get<0>(solved), std::get<4>(solved)};
}

Workload make_solver(const WorkloadOptions& options) {
  const std::int64_t n = options.solver_size;
  const Device device = options.device;
  // a = m m^T / n + 0.05 I: eigenvalues from 0.05 to about 4 (Marchenko-Pastur), some 50-70 iterations.
  const Tensor m = random::normal({n, n}, {.seed = 120, .device = device});
  const Tensor a =
      matmul(m, m, {.transpose_b = true}) / static_cast<double>(n) + eye(n, n, 0, DType::f32, device) * 0.05;
  std::vector<Tensor> inputs{a, random::normal({n}, {.seed = 121, .device = device})};
  Workload workload = make<2>("solver", "solver", dimensions({n, n}), inputs, solver_body);
  // Each iteration reads a once (its product with p); the vectors are noise beside it. The iterations are the
  // standard executor's count on these inputs.
  const std::int32_t iterations = std::get<1>(solver_body(inputs[0], inputs[1])).item<std::int32_t>();
  workload.bytes = static_cast<double>(iterations) * bytes_of({a}) + bytes_of({inputs[1]}) * 2;
  workload.shape += " (" + std::to_string(iterations) + " iterations)";
  return workload;
}

}  // namespace

Workload make_loop_workload(const std::string& id, const WorkloadOptions& options) {
  if (!options.device.is_cpu()) throw std::invalid_argument(id + ": the loop workloads run on the CPU only so far");
  if (id == "rnn") return make_rnn(options);
  if (id == "solver") return make_solver(options);
  throw std::invalid_argument("unknown workload '" + id + "'");
}

}  // namespace kiln::bench
