// CUDA random numbers: src/api/random.cpp's counter-based scheme, element
// for element. Block b of 4 elements takes Philox-4x32-10 of counter b
// (normal: Box-Muller on its two pairs of words) or of counters 2b and 2b + 1
// (uniform: 53 random bits per value), keyed by the seed. Every operation is
// written as on the CPU, in double, in the same order; kiln's CUDA code is
// built with --fmad=false, so nothing is fused that the CPU rounds twice.
// The block function is the CPU's own (scalar::philox_block, which
// random_bits computes too), compiled for the device.

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/scalar_ops.h"

#include <numbers>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;

// Uniform in (0, 1] from 32 random bits (never 0, so log() is finite).
__device__ __forceinline__ double open_unit(std::uint32_t bits) {
  return (static_cast<double>(bits) + 1.0) / 4294967296.0;
}
// Uniform in [0, 1) with 53 random bits.
__device__ __forceinline__ double unit53(std::uint32_t high, std::uint32_t low) {
  return static_cast<double>((std::uint64_t{high} << 21) ^ low) / 9007199254740992.0;
}

constexpr double two_pi = 2.0 * std::numbers::pi;  // exact: doubling

template <class T>
__global__ void normal_kernel(T* __restrict__ out, std::int64_t count, std::uint64_t seed, double mean, double stddev) {
  const std::int64_t blocks = (count + 3) / 4;
  for (std::int64_t block = thread_index(); block < blocks; block += thread_count()) {
    const scalar::PhiloxBlock bits = scalar::philox_block(static_cast<std::uint64_t>(block), seed);
    double values[4];
#pragma unroll
    for (int pair = 0; pair < 2; ++pair) {
      double radius = sqrt(-2.0 * log(open_unit(bits.word[2 * pair])));
      double angle = two_pi * open_unit(bits.word[2 * pair + 1]);
      values[2 * pair] = mean + stddev * radius * cos(angle);
      values[2 * pair + 1] = mean + stddev * radius * sin(angle);
    }
#pragma unroll
    for (int lane = 0; lane < 4; ++lane)
      if (block * 4 + lane < count) out[block * 4 + lane] = static_cast<T>(values[lane]);
  }
}

template <class T>
__global__ void uniform_kernel(T* __restrict__ out, std::int64_t count, std::uint64_t seed, double low, double high) {
  const std::int64_t blocks = (count + 3) / 4;
  for (std::int64_t block = thread_index(); block < blocks; block += thread_count()) {
    const scalar::PhiloxBlock first = scalar::philox_block(2 * static_cast<std::uint64_t>(block), seed);
    const scalar::PhiloxBlock second = scalar::philox_block(2 * static_cast<std::uint64_t>(block) + 1, seed);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      std::uint32_t high_bits = lane < 2 ? first.word[2 * lane] : second.word[2 * (lane - 2)];
      std::uint32_t low_bits = lane < 2 ? first.word[2 * lane + 1] : second.word[2 * (lane - 2) + 1];
      double value = low + (high - low) * unit53(high_bits, low_bits);
      // Rounding to f32 could reach `high`; keep the interval half-open.
      if (std::is_same_v<T, float> && static_cast<float>(value) >= static_cast<float>(high))
        value = nextafterf(static_cast<float>(high), -INFINITY);
      if (block * 4 + lane < count) out[block * 4 + lane] = static_cast<T>(value);
    }
  }
}

template <class Launcher> void dispatch_float(const char* op, const Array& output, Launcher&& launcher) {
  switch (output.dtype) {
    case DType::f32: launcher(output.mutable_data<float>()); break;
    case DType::f64: launcher(output.mutable_data<double>()); break;
    default: throw DTypeError(op, "random values are float; got dtype " + std::string(to_string(output.dtype)), std::string());
  }
}

}  // namespace

void random_normal(std::uint64_t seed, double mean, double stddev, const Array& output) {
  const std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, "random::normal");
  dispatch_float("random::normal", output, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    launch("random::normal", context, (count + 3) / 4, &normal_kernel<T>, out, count, seed, mean, stddev);
  });
}

void random_uniform(std::uint64_t seed, double low, double high, const Array& output) {
  const std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, "random::uniform");
  dispatch_float("random::uniform", output, [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    launch("random::uniform", context, (count + 3) / 4, &uniform_kernel<T>, out, count, seed, low, high);
  });
}

}  // namespace kiln::kernels::cuda
