// Counter-based random tensors (Philox-4x32-10, Salmon et al., SC'11): the
// value of element i depends only on (seed, i), so generation parallelizes
// and gives the same tensor for every thread count and device.

#include "api/dispatch.h"
#include "api/tensor_impl.h"
#include "core/half_precision.h"
#include "kernels/scalar_ops.h"
#include "runtime/parallel.h"

#include <kiln/error.h>
#include <kiln/random.h>

#if KILN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_context.h"
#endif

#include <array>
#include <cmath>
#include <numbers>

namespace kiln::random {
namespace {

// Philox-4x32-10 of a block counter under the seed: the same function random_bits and the CUDA kernels compute.
std::array<std::uint32_t, 4> philox(std::uint64_t counter, std::uint64_t seed) {
  const scalar::PhiloxBlock block = scalar::philox_block(counter, seed);
  return {block.word[0], block.word[1], block.word[2], block.word[3]};
}
using Block = std::array<std::uint32_t, 4>;

// Uniform in (0, 1] from 32 random bits (never 0, so log() is finite).
double open_unit(std::uint32_t bits) { return (static_cast<double>(bits) + 1.0) / 4294967296.0; }
// Uniform in [0, 1) with 53 random bits.
double unit53(std::uint32_t high, std::uint32_t low) {
  return static_cast<double>((std::uint64_t{high} << 21) ^ low) / 9007199254740992.0;
}

void check(const Shape& shape, DType dtype, Device device, const char* op, const Location& location) {
  if (!shape.is_static()) throw ShapeError(op, "shape " + shape.to_string() + " has an unknown dimension", location);
  if (!is_floating(dtype))
    throw DTypeError(op, "random values are float; got dtype " + std::string(to_string(dtype)), location);
#if KILN_HAVE_CUDA  // kiln-cuda: a missing GPU or bad index throws here
  if (device.is_cuda()) runtime::cuda::context(device, op, to_string(location));
#else
  if (!device.is_cpu())
    throw DeviceError(op, "cannot create tensors on " + device.to_string() + ": kiln was built without CUDA support",
                      location);
#endif
}

// Fills `count` values; value(i) for element i. Blocks of 4 elements share one
// Philox call.
template <class Generate>
Tensor generate(const Shape& shape, DType dtype, Device device, Generate value) {
  runtime::Array array = runtime::allocate_array(dtype, shape, device);
  std::int64_t count = shape.numel();
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      T* out = array.mutable_data<T>();
      runtime::parallel_for((count + 3) / 4, 4096, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t block = begin; block < end; ++block) {
          std::array<double, 4> values = value(static_cast<std::uint64_t>(block));
          for (std::int64_t lane = 0; lane < 4 && block * 4 + lane < count; ++lane)
            out[block * 4 + lane] = static_cast<T>(values[static_cast<std::size_t>(lane)]);
        }
      });
    }
  });
  return detail::make_tensor(std::move(array));
}

// The bf16 or f16 value next to `bits` (a finite value's) toward +infinity (direction 1) or -infinity (-1).
float half_step(std::uint16_t bits, int direction, DType dtype) {
  const bool negative = (bits & 0x8000u) != 0;
  const bool zero = (bits & 0x7FFFu) == 0;
  std::uint16_t next;
  if (zero)
    next = direction > 0 ? 0x0001 : 0x8001;
  else if (negative == (direction < 0))
    next = static_cast<std::uint16_t>(bits + 1);  // away from zero
  else
    next = static_cast<std::uint16_t>(bits - 1);  // toward zero
  return half_precision_value(dtype, next);
}

// The largest bf16 or f16 value below `high`, and the smallest at or above `low`.
float half_below(double high, DType dtype) {
  const std::uint16_t bits = half_precision_bits(dtype, high);
  const float value = half_precision_value(dtype, bits);
  return static_cast<double>(value) < high ? value : half_step(bits, -1, dtype);
}
float half_at_or_above(double low, DType dtype) {
  const std::uint16_t bits = half_precision_bits(dtype, low);
  const float value = half_precision_value(dtype, bits);
  return static_cast<double>(value) >= low ? value : half_step(bits, 1, dtype);
}

}  // namespace

Tensor normal(const Shape& shape, NormalOptions options, Location location) {
  if (is_half_precision(options.dtype)) {  // f32 values, rounded once (kiln/dtype.h: bf16 and f16 come by a cast)
    const DType half = options.dtype;
    options.dtype = DType::f32;
    return detail::cast_to(normal(shape, options, location), half, location);
  }
  check(shape, options.dtype, options.device, "random::normal", location);
  if (!(options.stddev >= 0)) throw ValueError("random::normal", "stddev must be >= 0", location);
#if KILN_HAVE_CUDA  // kiln-cuda: the same counter scheme, generated on the GPU
  if (options.device.is_cuda()) {
    runtime::Array array = runtime::allocate_array(options.dtype, shape, options.device);
    kernels::cuda::random_normal(options.seed, options.mean, options.stddev, array);
    return detail::make_tensor(std::move(array));
  }
#endif
  // Box-Muller: two uniforms give two normals.
  return generate(shape, options.dtype, options.device, [&](std::uint64_t block) {
    Block bits = philox(block, options.seed);
    std::array<double, 4> values;
    for (int pair = 0; pair < 2; ++pair) {
      double radius = std::sqrt(-2.0 * std::log(open_unit(bits[static_cast<std::size_t>(2 * pair)])));
      double angle = 2.0 * std::numbers::pi * open_unit(bits[static_cast<std::size_t>(2 * pair + 1)]);
      values[static_cast<std::size_t>(2 * pair)] = options.mean + options.stddev * radius * std::cos(angle);
      values[static_cast<std::size_t>(2 * pair + 1)] = options.mean + options.stddev * radius * std::sin(angle);
    }
    return values;
  });
}

Tensor normal(const Shape& shape, Device device, Location location) {
  return normal(shape, NormalOptions{.device = device}, location);
}

Tensor uniform(const Shape& shape, UniformOptions options, Location location) {
  if (is_half_precision(options.dtype)) {
    // f32 values kept within the half-precision values of [low, high) before they are rounded, so that none
    // rounds out of the interval.
    const DType half = options.dtype;
    options.dtype = DType::f32;
    const Tensor values = uniform(shape, options, location);
    const Tensor inside = minimum(maximum(values, half_at_or_above(options.low, half), location),
                                  half_below(options.high, half), location);
    return detail::cast_to(inside, half, location);
  }
  check(shape, options.dtype, options.device, "random::uniform", location);
  if (!(options.low < options.high) || !std::isfinite(options.low) || !std::isfinite(options.high))
    throw ValueError("random::uniform", "needs finite low < high", location);
#if KILN_HAVE_CUDA  // kiln-cuda
  if (options.device.is_cuda()) {
    runtime::Array array = runtime::allocate_array(options.dtype, shape, options.device);
    kernels::cuda::random_uniform(options.seed, options.low, options.high, array);
    return detail::make_tensor(std::move(array));
  }
#endif
  // Two Philox calls per block of four: 53 random bits per value.
  return generate(shape, options.dtype, options.device, [&](std::uint64_t block) {
    Block first = philox(2 * block, options.seed), second = philox(2 * block + 1, options.seed);
    std::array<double, 4> values;
    for (std::size_t lane = 0; lane < 4; ++lane) {
      std::uint32_t high = lane < 2 ? first[2 * lane] : second[2 * (lane - 2)];
      std::uint32_t low = lane < 2 ? first[2 * lane + 1] : second[2 * (lane - 2) + 1];
      double value = options.low + (options.high - options.low) * unit53(high, low);
      // Rounding to f32 could reach `high`; keep the interval half-open.
      if (options.dtype == DType::f32 && static_cast<float>(value) >= static_cast<float>(options.high))
        value = std::nextafter(static_cast<float>(options.high), -INFINITY);
      values[lane] = value;
    }
    return values;
  });
}

}  // namespace kiln::random
