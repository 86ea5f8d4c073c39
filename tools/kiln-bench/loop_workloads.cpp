// kiln-bench's loops (include/kiln/control_flow.h): a recurrent network stepped through a sequence with scan, and
// an iterative solver run with while_loop until its residual is small -- the "heavy control flow" the article says
// XLA handles badly. The peers run the same bodies: jax.jit over lax.scan and lax.while_loop, tf.function
// (jit_compile=True) over tf.scan and tf.while_loop, torch.compile over the Python loops.

#include "workload_making.h"

#include "compiler/cache/module_cache.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

}  // namespace

void set_repeated_products(Workload& workload, const Tensor& left, const Tensor& right, double products) {
  workload.flops = products * 2 * static_cast<double>(left.dim(0)) * static_cast<double>(left.dim(1)) *
                   static_cast<double>(right.dim(1));
  workload.blas_alone = [left, right, products](int runs) {
    const Timing one = time_sgemm(left, right, runs);
    return Timing{products * one.median_ms, products * one.min_ms, products * one.max_ms, products * one.mean_ms};
  };
  workload.kiln_matmuls_alone = [left, right, products] {
    for (double product = 0; product < products; ++product) matmul(left, right);
  };
}

std::tuple<Tensor, Tensor> rnn_body(Tensor xs, Tensor h0, Tensor w, Tensor u, Tensor b) {
  auto [last, states] = scan(
      [&](const Tensor& h, const Tensor& x) {
        const Tensor next = gru_step(h, x, w, u, b);
        return std::pair<Tensor, Tensor>{next, next};
      },
      h0, xs);
  return {last, states};
}

namespace {

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
  set_repeated_products(workload, inputs[1], inputs[3], 2.0 * static_cast<double>(steps));
  workload.matmul_output_bytes = static_cast<double>(batch * 3 * hidden) * 4;
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

// A scan of `steps` steps of an RNN-like cell on small tensors: the run is short beside the compile.
struct LoopFirstCall {
  double trace_ms = 0, compile_ms = 0, call_ms = 0;
};

LoopFirstCall first_call_of_scan(std::int64_t steps, const std::filesystem::path& cache) {
  ::setenv("KILN_CACHE_DIR", cache.c_str(), 1);
  compiler::clear_memory_cache_for_testing();
  const Tensor xs = random::normal({steps, 8}, {.seed = 130}), h0 = random::normal({8}, {.seed = 131});
  const Tensor w = random::normal({8, 8}, {.seed = 132, .stddev = 0.3});
  auto function = kiln::function(
      [&](Tensor sequence, Tensor start) {
        return scan(
            [&](const Tensor& h, const Tensor& x) {
              const Tensor next = tanh(reshape(matmul(reshape(h, {1, 8}), w), {8}) + x);
              return std::pair<Tensor, Tensor>{next, reduce_sum(next)};
            },
            start, sequence);
      },
      {.jit_compile = true, .name = "loop_compile"});
  const auto start = std::chrono::steady_clock::now();
  function(xs, h0);
  LoopFirstCall result;
  result.call_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.trace_ms = function.statistics().trace_seconds * 1e3;
  result.compile_ms = function.statistics().compile_seconds * 1e3;
  return result;
}

}  // namespace

int report_loop_compile_times(int runs) {
  namespace fs = std::filesystem;
  const char* previous = std::getenv("KILN_CACHE_DIR");
  const std::string saved = previous ? previous : "";
  std::printf("a scan's first call, best of %d fresh functions with empty caches each (ms)\n", runs);
  std::printf("%-8s %10s %12s %16s\n", "steps", "trace", "compile", "first call");
  std::vector<LoopFirstCall> best;
  for (std::int64_t steps : {10, 10000}) {
    LoopFirstCall fastest{1e30, 1e30, 1e30};
    for (int run = 0; run < runs; ++run) {
      const fs::path cache = fs::temp_directory_path() / ("kiln-bench-loop-cache-" + std::to_string(::getpid()) + "-" +
                                                          std::to_string(steps) + "-" + std::to_string(run));
      const LoopFirstCall call = first_call_of_scan(steps, cache);
      std::error_code ignored;
      fs::remove_all(cache, ignored);
      fastest.trace_ms = std::min(fastest.trace_ms, call.trace_ms);
      fastest.compile_ms = std::min(fastest.compile_ms, call.compile_ms);
      fastest.call_ms = std::min(fastest.call_ms, call.call_ms);
    }
    std::printf("%-8lld %10.2f %12.1f %16.1f\n", static_cast<long long>(steps), fastest.trace_ms, fastest.compile_ms,
                fastest.call_ms);
    best.push_back(fastest);
  }
  std::printf("10,000 steps / 10 steps: compile %.2fx, first call %.2fx\n", best[1].compile_ms / best[0].compile_ms,
              best[1].call_ms / best[0].call_ms);
  previous ? ::setenv("KILN_CACHE_DIR", saved.c_str(), 1) : ::unsetenv("KILN_CACHE_DIR");
  return 0;
}

Workload make_loop_workload(const std::string& id, const WorkloadOptions& options) {
  if (!options.device.is_cpu()) throw std::invalid_argument(id + ": the loop workloads run on the CPU only so far");
  if (id == "rnn") return make_rnn(options);
  if (id == "solver") return make_solver(options);
  throw std::invalid_argument("unknown workload '" + id + "'");
}

}  // namespace kiln::bench
