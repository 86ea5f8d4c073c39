// Keys as tensors (jax.random's keys, TensorFlow's stateless random ops): every value drawn is random_bits(key,
// counter) (ops.def; Philox-4x32-10 in kernels/scalar_ops.h) of an element's own counter, then ordinary ops that
// turn bits into floats. A draw is therefore a pure function of its key: inside kiln::function it is a few nodes
// that fuse into the kernel reading them (a dropout mask is computed where it is applied, never stored), and the
// standard executor, the JIT and CUDA give the same values.
//
// Streams: a sample's element i draws counter i (or 2i and 2i + 1 where it needs two draws), never negative;
// split's keys come from the key random_bits(key, -1), fold_in's from random_bits(key, -2), so what a key draws and
// the keys derived from it never share a counter under one key.

#include "api/dispatch.h"

#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/nn.h>
#include <kiln/ops.h>
#include <kiln/random.h>

#include <cmath>
#include <numbers>
#include <string>

namespace kiln::random {
namespace {

constexpr std::int64_t split_stream = -1;
constexpr std::int64_t fold_in_stream = -2;

// A ValueError, DTypeError or ShapeError naming `op` unless `key` is an i64 scalar.
void check_key(const Tensor& key, const char* op, const Location& location) {
  if (!key.defined()) throw ValueError(op, "the key is an undefined Tensor", location);
  if (key.dtype() != DType::i64)
    throw DTypeError(
        op, "a key is an i64 scalar (kiln::random::key(seed)); got dtype " + std::string(to_string(key.dtype())),
        location);
  if (key.shape().rank() != 0)
    throw ShapeError(op, "a key is an i64 scalar (kiln::random::key(seed)); got shape " + key.shape().to_string(),
                     location);
}

void check_shape(const Shape& shape, const char* op, const Location& location) {
  if (!shape.is_static()) throw ShapeError(op, "shape " + shape.to_string() + " has an unknown dimension", location);
}

void check_float(DType dtype, const char* op, const Location& location) {
  if (!is_floating(dtype))
    throw DTypeError(op, "random values are float; got dtype " + std::string(to_string(dtype)), location);
  if (is_half_precision(dtype))
    throw DTypeError(op,
                     "draws f32 or f64 values; for " + std::string(to_string(dtype)) +
                         " ones, draw f32 and cast (kiln::cast(values, kiln::DType::" + std::string(to_string(dtype)) +
                         "))",
                     location);
}

Tensor bits_at(const Tensor& key, const Tensor& counters, const Location& location) {
  return detail::apply(ir::Op::random_bits, {key, counters}, {}, location);
}

// Each element's position in row-major order, times `stride` plus `offset`, as i64 on the key's device: iotas
// along each axis, scaled and summed (inside a compiled function, index arithmetic in the reading kernel).
Tensor counters(const Tensor& key, const Shape& shape, std::int64_t stride, std::int64_t offset,
                const Location& location) {
  Tensor position = detail::scalar_constant(Scalar(offset), DType::i64, key.device(), location);
  std::int64_t step = stride;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    std::vector<std::int64_t> along(static_cast<std::size_t>(shape.rank()), 1);
    along[static_cast<std::size_t>(axis)] = shape[axis];
    ir::Attributes attributes;
    attributes.axis = axis;
    Tensor index = detail::apply(ir::Op::iota, {}, attributes, location, ir::Type{DType::i64, Shape(along)});
    if (index.device() != key.device()) index = index.to(key.device());
    position = add(position, step == 1 ? index : mul(index, step, location), location);
    step *= shape[axis];
  }
  return position;  // of `shape`: the sum of iotas along every axis
}

// random_bits of each element's counter, position * stride + offset.
Tensor draw(const Tensor& key, const Shape& shape, std::int64_t stride, std::int64_t offset, const Location& location) {
  return bits_at(key, counters(key, shape, stride, offset, location), location);
}

// Uniform in [0, 1) of `dtype` from 64 bits: their top 24 bits for f32, 53 for f64, each value a multiple of
// 2^-24 or 2^-53 (jax.random.uniform's mantissa bits, in another form). `open_at_zero` adds one unit: (0, 1].
Tensor unit_interval(const Tensor& bits, DType dtype, bool open_at_zero, const Location& location) {
  const int kept = dtype == DType::f32 ? 24 : 53;
  Tensor top = bitwise_and(right_shift(bits, 64 - kept, location), (std::int64_t{1} << kept) - 1, location);
  if (open_at_zero) top = add(top, 1, location);
  return mul(cast(top, dtype, location), std::ldexp(1.0, -kept), location);
}

}  // namespace

Tensor key(std::int64_t seed, Device device, Location location) {
  return detail::scalar_constant(Scalar(seed), DType::i64, device, location);
}

std::vector<Tensor> split(const Tensor& key, std::int64_t count, Location location) {
  check_key(key, "random::split", location);
  if (count < 0) throw ValueError("random::split", "count " + std::to_string(count) + " is negative", location);
  const Tensor parent =
      bits_at(key, detail::scalar_constant(Scalar(split_stream), DType::i64, key.device(), location), location);
  std::vector<Tensor> keys;
  for (std::int64_t i = 0; i < count; ++i)
    keys.push_back(bits_at(parent, detail::scalar_constant(Scalar(i), DType::i64, key.device(), location), location));
  return keys;
}

Tensor fold_in(const Tensor& key, const Tensor& data, Location location) {
  check_key(key, "random::fold_in", location);
  if (!data.defined() || (data.dtype() != DType::i32 && data.dtype() != DType::i64) || data.shape().rank() != 0)
    throw DTypeError("random::fold_in", "data is an integer scalar", location);
  const Tensor parent =
      bits_at(key, detail::scalar_constant(Scalar(fold_in_stream), DType::i64, key.device(), location), location);
  return bits_at(parent, cast(data, DType::i64, location), location);
}

Tensor fold_in(const Tensor& key, std::int64_t data, Location location) {
  check_key(key, "random::fold_in", location);
  return fold_in(key, detail::scalar_constant(Scalar(data), DType::i64, key.device(), location), location);
}

Tensor bits(const Tensor& key, const Shape& shape, Location location) {
  check_key(key, "random::bits", location);
  check_shape(shape, "random::bits", location);
  return draw(key, shape, 1, 0, location);
}

Tensor uniform(const Tensor& key, const Shape& shape, KeyedUniformOptions options, Location location) {
  check_key(key, "random::uniform", location);
  check_shape(shape, "random::uniform", location);
  check_float(options.dtype, "random::uniform", location);
  if (!(options.low < options.high) || !std::isfinite(options.low) || !std::isfinite(options.high))
    throw ValueError("random::uniform", "needs finite low < high", location);
  const Tensor unit = unit_interval(draw(key, shape, 1, 0, location), options.dtype, false, location);
  if (options.low == 0 && options.high == 1) return unit;
  // low + (high - low) u can round up to high; the largest value below high stands in for it.
  const Tensor scaled = add(mul(unit, options.high - options.low, location), options.low, location);
  const double below_high = options.dtype == DType::f32
                                ? static_cast<double>(std::nextafter(static_cast<float>(options.high), -INFINITY))
                                : std::nextafter(options.high, -INFINITY);
  return minimum(scaled, below_high, location);
}

Tensor normal(const Tensor& key, const Shape& shape, KeyedNormalOptions options, Location location) {
  check_key(key, "random::normal", location);
  check_shape(shape, "random::normal", location);
  check_float(options.dtype, "random::normal", location);
  if (!(options.stddev >= 0) || !std::isfinite(options.stddev) || !std::isfinite(options.mean))
    throw ValueError("random::normal", "needs a finite mean and a finite stddev >= 0", location);
  // Box-Muller, one value per element from two draws: sqrt(-2 log u) cos(2 pi v), u in (0, 1] (log finite).
  const Tensor u = unit_interval(draw(key, shape, 2, 0, location), options.dtype, true, location);
  const Tensor v = unit_interval(draw(key, shape, 2, 1, location), options.dtype, false, location);
  const Tensor radius = sqrt(mul(log(u, location), -2.0, location), location);
  Tensor values = mul(radius, cos(mul(v, 2 * std::numbers::pi, location), location), location);
  if (options.stddev != 1) values = mul(values, options.stddev, location);
  if (options.mean != 0) values = add(values, options.mean, location);
  return values;
}

Tensor bernoulli(const Tensor& key, const Tensor& probability, const Shape& shape, Location location) {
  check_key(key, "random::bernoulli", location);
  check_shape(shape, "random::bernoulli", location);
  if (!probability.defined() || !is_floating(probability.dtype()))
    throw DTypeError("random::bernoulli", "the probability is a float tensor", location);
  const Tensor unit = unit_interval(draw(key, shape, 1, 0, location), probability.dtype(), false, location);
  return lt(unit, probability, location);
}

Tensor bernoulli(const Tensor& key, double probability, const Shape& shape, Location location) {
  if (!(probability >= 0 && probability <= 1))
    throw ValueError("random::bernoulli", "probability " + std::to_string(probability) + " is outside [0, 1]",
                     location);
  check_key(key, "random::bernoulli", location);
  return bernoulli(key, detail::scalar_constant(Scalar(probability), DType::f32, key.device(), location), shape,
                   location);
}

}  // namespace kiln::random

namespace kiln::nn {

Tensor dropout(const Tensor& x, double rate, const Tensor& key, Location location) {
  if (!(rate >= 0 && rate <= 1))
    throw ValueError("nn::dropout", "rate " + std::to_string(rate) + " is outside [0, 1]", location);
  if (!x.defined() || !is_floating(x.dtype())) throw DTypeError("nn::dropout", "x is a float tensor", location);
  if (rate == 0) return x;
  if (rate == 1) return detail::constant(Scalar(0.0), x.dtype(), x.shape(), x.device(), location);
  // Each element kept with probability 1 - rate and scaled by 1 / (1 - rate), so the expectation is x's.
  const Tensor keep = random::bernoulli(key, 1 - rate, x.shape(), location);
  return where(keep, mul(x, 1 / (1 - rate), location), 0.0, location);
}

}  // namespace kiln::nn
