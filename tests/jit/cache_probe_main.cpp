// A separate process for the cross-process cache test: runs the seed
// function through the JIT and prints its statistics, so the test can see
// that a second process compiles nothing.

#include <kiln/kiln.h>

#include <cstdio>

int main() {
  using namespace kiln;
  auto seed = function(
      [](Tensor x, Tensor y) {
        Tensor z = matmul(x, y);
        z = z + sin(z);
        z = nn::relu(z);
        return reduce_sum(z);
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "seed"});
  Tensor x = random::normal({64, 64}, {.seed = 1}), y = random::normal({64, 64}, {.seed = 2});
  float total = seed(x, y).item<float>();
  FunctionStatistics statistics = seed.statistics();
  std::printf("compiles=%lld cache_hits=%lld fallbacks=%lld total=%.6g\n", static_cast<long long>(statistics.compiles),
              static_cast<long long>(statistics.cache_hits), static_cast<long long>(statistics.fallbacks),
              static_cast<double>(total));
  return 0;
}
