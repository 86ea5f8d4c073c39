#pragma once
// Reproducible random tensors. The generator is counter-based (Philox-4x32-10,
// as in JAX and TensorFlow): the same seed gives the same values on every
// device and thread count. normal and uniform with a seed run at once (in a
// traced function they are constants); the functions of a key below are ops
// of the graph, drawn inside compiled functions.

#include <kiln/tensor.h>

#include <cstdint>
#include <vector>

namespace kiln::random {

struct NormalOptions {
  std::uint64_t seed = 0;
  double mean = 0;
  double stddev = 1;
  DType dtype = DType::f32;
  Device device = Device::cpu();
};
struct UniformOptions {
  std::uint64_t seed = 0;
  double low = 0;  // inclusive
  double high = 1; // exclusive
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

Tensor normal(const Shape& shape, NormalOptions options = {}, Location location = Location::current());
Tensor normal(const Shape& shape, Device device, Location location = Location::current());
Tensor uniform(const Shape& shape, UniformOptions options = {}, Location location = Location::current());

// ---- Keys: random values as pure functions of a key tensor -------------------------------------------------------
// As jax.random and TensorFlow's stateless ops: a key is an i64 scalar tensor, and every draw is a function of the
// key alone (Philox-4x32-10 of the key and each element's counter). Inside kiln::function a key is traced like any
// tensor, so a compiled training step takes its key as an argument and draws its dropout masks inside the kernels
// that apply them; the standard executor, the JIT and CUDA give the same values for every thread count. Never draw
// twice from one key where the values should differ: split it, or fold_in a step number.

// A key from a seed.
Tensor key(std::int64_t seed, Device device = Device::cpu(), Location location = Location::current());
// `count` keys derived from `key`, independent of each other and of what `key` itself draws (jax.random.split).
std::vector<Tensor> split(const Tensor& key, std::int64_t count = 2, Location location = Location::current());
// A key derived from `key` and an integer scalar (jax.random.fold_in): a training step's key from its step number.
Tensor fold_in(const Tensor& key, const Tensor& data, Location location = Location::current());
Tensor fold_in(const Tensor& key, std::int64_t data, Location location = Location::current());
// 64 random bits per element, as i64 (jax.random.bits).
Tensor bits(const Tensor& key, const Shape& shape, Location location = Location::current());

struct KeyedUniformOptions {
  double low = 0;   // inclusive
  double high = 1;  // exclusive
  DType dtype = DType::f32;
};
struct KeyedNormalOptions {
  double mean = 0;
  double stddev = 1;
  DType dtype = DType::f32;
};
// Uniform in [low, high): multiples of 2^-24 (f32) or 2^-53 (f64) of the interval.
Tensor uniform(const Tensor& key, const Shape& shape, KeyedUniformOptions options = {},
               Location location = Location::current());
// Normal, by Box-Muller from two uniform draws per element.
Tensor normal(const Tensor& key, const Shape& shape, KeyedNormalOptions options = {},
              Location location = Location::current());
// Bools, true with `probability` (a float tensor broadcast to `shape`, or a number in [0, 1]).
Tensor bernoulli(const Tensor& key, const Tensor& probability, const Shape& shape,
                 Location location = Location::current());
Tensor bernoulli(const Tensor& key, double probability, const Shape& shape, Location location = Location::current());

}  // namespace kiln::random
