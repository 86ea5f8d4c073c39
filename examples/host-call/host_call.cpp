// host-call: a custom op written in plain C++, inside a traced function, with kiln::host_call -- and what the
// JIT does with it.
//
// The op here is the Bessel function J0, which kiln does not have and C++17's <cmath> does (std::cyl_bessel_j);
// any C++ code you already have (a library call, a lookup table, a file) fits the same way. The function around
// it,
//
//   y = softmax(J0(4 |x|) * x)  over each row of x,
//
// has work on both sides of the callback. The program runs it three ways and says what each ran:
//
//  1. one kiln::function with {.jit_compile = true}. The JIT never compiles a host_call (its code is not
//     kiln's to see), so the whole graph falls back to the standard executor -- every op its own kernel -- with
//     one warning per signature on stderr. It runs correctly, just not compiled.
//  2. the same work split at the callback: two compiled functions, before and after it, with the callback
//     called between them on concrete tensors. Each part is compiled and fused; the callback runs as plain C++.
//  3. {.on_compile_failure = kiln::Fallback::none}: the JIT throws kiln::CompileError instead of falling back
//     (TensorFlow's must-compile; KILN_JIT_STRICT=1 makes every function strict).
//
// Two more things a callback does not get: derivatives (kiln::grad through a host_call is a kiln::ValueError;
// wrap it in kiln::custom_vjp to give it one) and fusion across it (its input is written to memory, its output
// read back).
//
//   build/examples/host-call
//
// Exit status 0 when the three ways behave as described and 1 and 2 give the same results, 1 otherwise.

#include <kiln/kiln.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

// Counted to show when kiln calls the callback. Atomic because a kiln::Function may be called from several
// threads at once, and then so is its callback.
std::atomic<int> callback_calls = 0;

// The callback: it receives concrete tensors (on the CPU here), so it may read their values, and must return a
// tensor of the dtype and shape declared at the host_call (else the call is a kiln::ValueError). kiln calls it
// when the graph runs, once per call of the function -- never while tracing, when the values do not exist yet.
kiln::Tensor bessel_j0(const std::vector<kiln::Tensor>& inputs) {
  ++callback_calls;
  std::vector<float> values = inputs.at(0).to_vector<float>();
  for (float& value : values) value = std::cyl_bessel_j(0.0f, value);  // x >= 0 here: |x| is taken before
  return kiln::from_vector(values, inputs[0].shape());
}

// The parts of the computation, so that the whole and the split run the same code.
kiln::Tensor before_callback(kiln::Tensor x) { return kiln::abs(x) * 4; }
kiln::Tensor after_callback(kiln::Tensor j0, kiln::Tensor x) { return kiln::nn::softmax(j0 * x); }

// The whole: a host_call in the middle of traced ops. The declared dtype and shape are what the graph knows
// about the callback's result (shapes are static in a trace).
kiln::Tensor whole(kiln::Tensor x) {
  kiln::Tensor scaled = before_callback(x);
  kiln::Tensor j0 = kiln::host_call(bessel_j0, {scaled}, kiln::DType::f32, scaled.shape());
  return after_callback(j0, x);
}

double largest_difference(const kiln::Tensor& a, const kiln::Tensor& b) {
  return kiln::reduce_max(kiln::abs(a - b)).item<float>();
}

}  // namespace

int main() {
  try {
    const kiln::Tensor x = kiln::random::normal({256, 64}, {.seed = 7});
    bool as_described = true;

    // 1. One compiled function with the callback inside: it falls back, and says so (a warning on stderr naming
    //    the function, the host_call and this file's line; get_compiler_ir's fused stage says it too).
    auto jit = kiln::function(whole, {.jit_compile = true, .name = "j0_softmax"});
    const kiln::Tensor y = jit(x);
    jit(x);
    const kiln::FunctionStatistics statistics = jit.statistics();
    std::printf(
        "1. jit_compile with a host_call inside: %lld fallback, %lld kernels per call (the standard "
        "executor's, one per op), %lld compiled; the callback ran %d times in %lld calls\n",
        static_cast<long long>(statistics.fallbacks), static_cast<long long>(statistics.kernels_per_call),
        static_cast<long long>(statistics.compiles), callback_calls.load(), static_cast<long long>(statistics.calls));
    std::string fused = jit.get_compiler_ir(kiln::Stage::fused, x);
    std::printf("   its fused stage: %s", fused.c_str());
    if (!fused.ends_with("\n")) std::printf("\n");
    as_described &= statistics.fallbacks == 1 && statistics.compiles == 0 && callback_calls == 2;

    // 2. Split at the callback: compile what comes before and after it, call it between them. The callback may
    //    be called directly (it is plain C++), or through kiln::host_call outside any function, which checks the
    //    declared dtype and shape as it does in a trace.
    auto before = kiln::function(before_callback, {.jit_compile = true, .name = "before_j0"});
    auto after = kiln::function(after_callback, {.jit_compile = true, .name = "after_j0"});
    const kiln::Tensor scaled = before(x);
    const kiln::Tensor j0 = kiln::host_call(bessel_j0, {scaled}, kiln::DType::f32, scaled.shape());
    const kiln::Tensor split = after(j0, x);
    const long long split_kernels = before.statistics().kernels_per_call + after.statistics().kernels_per_call;
    const long long split_fallbacks = before.statistics().fallbacks + after.statistics().fallbacks;
    const double difference = largest_difference(y, split);
    std::printf(
        "2. split at the callback: %lld kernels per call in the two compiled parts (%lld fallbacks), "
        "plus the callback; largest difference from 1: %.2g\n",
        split_kernels, split_fallbacks, difference);
    as_described &= split_fallbacks == 0 && split_kernels < statistics.kernels_per_call;
    // Softmax values are at most 1; the two compute the same ops in the same precision, up to rounding.
    as_described &= difference < 1e-5;

    // 3. Must-compile: a function that cannot be compiled throws instead of falling back, and stays usable.
    auto strict = kiln::function(whole, {.jit_compile = true, .on_compile_failure = kiln::Fallback::none});
    try {
      strict(x);
      std::printf("3. Fallback::none: no error\n");
      as_described = false;
    } catch (const kiln::CompileError& error) {
      std::printf("3. Fallback::none: %s\n", error.what());  // what() starts "kiln::CompileError: "
    }

    if (!as_described) {
      std::fprintf(stderr, "host-call: kiln did not do what this example describes\n");
      return 1;
    }
    std::printf("host-call: as described\n");
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "host-call: %s\n", error.what());
    return 1;
  }
}
