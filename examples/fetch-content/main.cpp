// A program whose CMake project builds kiln from its sources (CMakeLists.txt beside it): one function compiled
// by the JIT, checked against the standard executor.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  auto f = [](kiln::Tensor x, kiln::Tensor y) { return kiln::reduce_sum(kiln::nn::relu(kiln::matmul(x, y))); };
  auto x = kiln::random::normal({64, 32}, {.seed = 1});
  auto y = kiln::random::normal({32, 16}, {.seed = 2});
  const kiln::Tensor expected = kiln::function(f)(x, y);
  const kiln::Tensor compiled = kiln::function(f, {.jit_compile = true})(x, y);
  const bool agree = kiln::allclose(compiled, expected, 1e-5, 1e-4).item<bool>();
  std::printf("kiln-fetch-content: jit %.6g, standard executor %.6g: %s\n", compiled.item<float>(),
              expected.item<float>(), agree ? "they agree" : "they DISAGREE");
  return agree ? 0 : 1;
}
