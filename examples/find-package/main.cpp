// A small program built against an installed kiln (CMakeLists.txt beside it):
// one function compiled by the JIT, checked against the standard executor.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  auto f = [](kiln::Tensor x, kiln::Tensor y) {
    auto z = kiln::matmul(x, y);
    z = z + kiln::sin(z);
    return kiln::reduce_sum(kiln::nn::relu(z));
  };
  auto standard = kiln::function(f);
  // Fallback::none: a module the JIT cannot build is an error here, not a quiet
  // run on the standard executor.
  auto jit = kiln::function(f, {.jit_compile = true, .on_compile_failure = kiln::Fallback::none});

  auto x = kiln::random::normal({64, 32}, {.seed = 1});
  auto y = kiln::random::normal({32, 16}, {.seed = 2});
  const kiln::Tensor expected = standard(x, y);
  const kiln::Tensor compiled = jit(x, y);
  const kiln::FunctionStatistics statistics = jit.statistics();
  std::printf("jit: %.6g, standard executor: %.6g (%lld kernels; modules: %lld built, %lld from the cache)\n",
              compiled.item<float>(), expected.item<float>(), static_cast<long long>(statistics.kernels_per_call),
              static_cast<long long>(statistics.compiles), static_cast<long long>(statistics.cache_hits));
  if (statistics.compiles + statistics.cache_hits == 0 || statistics.fallbacks != 0) {
    std::fprintf(stderr, "kiln-find-package: the function was not compiled by the JIT\n");
    return 1;
  }
  if (!kiln::allclose(compiled, expected, 1e-5, 1e-4).item<bool>()) {
    std::fprintf(stderr, "kiln-find-package: the compiled function disagrees with the standard executor\n");
    return 1;
  }
  std::printf("kiln-find-package: the JIT agrees with the standard executor\n");
  return 0;
}
