#pragma once
// The fuzzer's only source of randomness: SplitMix64 with its own integer
// and float helpers, so that a seed gives the same graphs and inputs with
// every compiler and standard library (std's distributions are
// implementation-defined).

#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::fuzz {

class RandomSource {
 public:
  explicit RandomSource(std::uint64_t seed) : state_(seed) {}
  // A stream for item `index` of a run seeded with `seed`, independent of how
  // many numbers other items drew.
  RandomSource(std::uint64_t seed, std::uint64_t index) : state_(mix(seed ^ mix(index + 0x632be59bd9b4e019ULL))) {}

  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  // Uniform in [0, count); count > 0. (The modulo bias is irrelevant here.)
  std::int64_t below(std::int64_t count) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(count)); }
  // Uniform in [low, high].
  std::int64_t between(std::int64_t low, std::int64_t high) { return low + below(high - low + 1); }
  bool chance(double probability) { return unit() < probability; }
  // Uniform in [-limit, -1] and [1, limit]. (One draw after the other: the
  // operands of `*` would be evaluated in an unspecified order.)
  std::int64_t nonzero(std::int64_t limit) {
    std::int64_t magnitude = between(1, limit);
    return chance(0.5) ? -magnitude : magnitude;
  }
  // Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    double u = unit(), v = unit();
    return std::sqrt(-2.0 * std::log1p(-u)) * std::cos(6.283185307179586 * v);
  }
  template <class T> const T& pick(const std::vector<T>& items) { return items[static_cast<std::size_t>(below(static_cast<std::int64_t>(items.size())))]; }
  // An index drawn with the given (non-negative) weights.
  std::size_t weighted(const std::vector<double>& weights) {
    double total = 0;
    for (double weight : weights) total += weight;
    double point = unit() * total;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (point < weights[i]) return i;
      point -= weights[i];
    }
    return weights.size() - 1;
  }

 private:
  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

}  // namespace kiln::fuzz
