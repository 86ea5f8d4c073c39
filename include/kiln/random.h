#pragma once
// Reproducible random tensors. The generator is counter-based (Philox-4x32-10,
// as in JAX and TensorFlow): the same seed gives the same values on every
// device and thread count.

#include <kiln/tensor.h>

#include <cstdint>

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

}  // namespace kiln::random
