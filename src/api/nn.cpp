// Neural-network composites, written with the primitive ops so that the JIT
// sees (and fuses) every step.

#include "api/dispatch.h"

#include <kiln/autodiff.h>
#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/nn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace kiln::nn {

Tensor relu(const Tensor& x, Location location) { return kiln::relu(x, location); }

Tensor sigmoid(const Tensor& x, Location location) { return kiln::sigmoid(x, location); }

// Where gelu's result is below ~2e-37 in magnitude (x below -9.97 in the tanh form, -12.87 in the erf form) it is -0:
// the float result would be subnormal, or an intermediate would (e^(2u), erfc), and on x86 every instruction
// producing a subnormal takes a microcode assist of some 150 cycles. A dense layer's gelu over inputs of a
// standard deviation of 16 (x @ w of N(0, 1) entries, 256 deep) took 10x-20x its time (Emerald Rapids:
// gelu(x @ w) for 4096 x 256 x 1024 27 ms, the product alone 10); PyTorch's 0.5 x (1 + tanh(u)) is 0 from x = -9
// on, and TensorFlow flushes subnormals to zero altogether. The limits keep every intermediate normal: sigmoid's
// argument at -87 (e^-87 = 1.6e-38), erfc's at 9.1 (7e-38).
constexpr double sigmoid_limit = -87.0;
constexpr double erfc_limit = 9.1;

namespace {
// x sigmoid(z), and -0 where z < sigmoid_limit, for gelu's tanh form (z = 2u) and silu (z = x): there the result's
// magnitude is below 2e-37 (gelu) or 1.4e-36 (silu), a hundred times the smallest normal float at most, and -0
// keeps every intermediate normal.
Tensor times_sigmoid(const Tensor& x, const Tensor& z, const Location& location) {
  const Tensor probability = kiln::sigmoid(maximum(z, sigmoid_limit, location), location);
  return where(lt(z, sigmoid_limit, location), -0.0, mul(x, probability, location), location);
}
}  // namespace

Tensor gelu(const Tensor& x, GeluApproximation approximation, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return gelu(wide, approximation, location); }, x);
  if (approximation == GeluApproximation::erf) {
    // x Phi(x) = 0.5 x erfc(-x / sqrt 2), the same as 0.5 x (1 + erf(x / sqrt 2)) without its cancellation:
    // for x < 0, 1 + erf loses the bits that erfc keeps (at x = -4 a float keeps about 12 of 24, and from
    // x = -5.9 it is 0). JAX and TensorFlow compute it so too.
    // Beyond erfc_limit the result is below 5e-37 in magnitude, and -0 here (see sigmoid_limit above).
    const Tensor argument = mul(x, -1.0 / std::numbers::sqrt2, location);
    Tensor phi_twice = erfc(minimum(argument, erfc_limit, location), location);
    return where(gt(argument, erfc_limit, location), -0.0, mul(mul(x, 0.5, location), phi_twice, location), location);
  }
  // 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as x sigmoid(2u): the same function, since
  // 1 + tanh(u) = 2 sigmoid(2u). Where u is very negative, 1 + tanh(u) cancels (at u = -3 a float keeps about
  // 12 of its 24 bits) while sigmoid keeps its relative accuracy; and sigmoid is one exponential and a
  // division, where tanh also needs a polynomial for small arguments. 2u = x (a + b x^2).
  const double a = 2.0 * std::sqrt(2.0 / std::numbers::pi), b = a * 0.044715;
  return times_sigmoid(x, mul(x, add(mul(square(x, location), b, location), a, location), location), location);
}

Tensor silu(const Tensor& x, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return silu(wide, location); }, x);
  return times_sigmoid(x, x, location);
}

// max(x, 0) + log1p(e^-|x|): e^-|x| <= 1 never overflows, and log1p keeps the term's relative accuracy where it is
// tiny (x very negative: softplus(-30) is 9.4e-14, where log(1 + e^x) gives 0). e^-|x| is held to e^sigmoid_limit,
// a normal float (see sigmoid_limit); below x = sigmoid_limit the result, under 1.7e-38, is 0.
Tensor softplus(const Tensor& x, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return softplus(wide, location); }, x);
  const Tensor decay = exp(maximum(neg(abs(x, location), location), sigmoid_limit, location), location);
  const Tensor result = add(maximum(x, 0, location), log1p(decay, location), location);
  return where(lt(x, sigmoid_limit, location), 0.0, result, location);
}

Tensor log_sigmoid(const Tensor& x, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return log_sigmoid(wide, location); }, x);
  return neg(softplus(neg(x, location), location), location);
}

Tensor elu(const Tensor& x, double alpha, Location location) {
  return where(gt(x, 0, location), x, mul(expm1(minimum(0.0, x, location), location), alpha, location), location);
}

Tensor leaky_relu(const Tensor& x, double negative_slope, Location location) {
  return where(ge(x, 0, location), x, mul(x, negative_slope, location), location);
}

// The shift by the row's maximum keeps exp from overflowing and changes no result, so its derivative is zero:
// stop_gradient says so (as JAX's softmax and logsumexp do), and the backward is the softmax's own,
// y * (g - sum(g * y)), without the terms through the maximum that would cancel (to rounding) at its ties.
Tensor softmax(const Tensor& x, std::int64_t axis, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return softmax(wide, axis, location); }, x);
  Tensor shifted = sub(x, stop_gradient(reduce_max(x, {axis}, true, location), location), location);
  Tensor exponent = exp(shifted, location);
  return div(exponent, reduce_sum(exponent, {axis}, true, location), location);
}

Tensor log_softmax(const Tensor& x, std::int64_t axis, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return log_softmax(wide, axis, location); }, x);
  Tensor shifted = sub(x, stop_gradient(reduce_max(x, {axis}, true, location), location), location);
  Tensor total = reduce_sum(exp(shifted, location), {axis}, true, location);
  return sub(shifted, log(total, location), location);
}

Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype, Location location) {
  if (!indices.defined())
    throw ValueError("one_hot", "operand 0 is an undefined (default-constructed) Tensor", location);
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    throw DTypeError("one_hot", "indices must be i32 or i64, got " + std::string(to_string(indices.dtype())), location);
  if (depth < 0) throw ValueError("one_hot", "depth must be >= 0, got " + std::to_string(depth), location);
  Tensor classes = arange(0, static_cast<double>(depth), 1, indices.dtype(), indices.device(), location);
  return cast(eq(expand_dims(indices, -1, location), classes, location), dtype, location);
}

namespace {
// The ops over the last axis need one: errors under their own name for an undefined Tensor or a scalar.
void require_an_axis(const char* op, const Tensor& x, const Location& location) {
  if (!x.defined()) throw ValueError(op, "operand 0 is an undefined (default-constructed) Tensor", location);
  if (x.rank() == 0)
    throw ShapeError(op, "needs rank >= 1, got a scalar " + std::string(to_string(x.dtype())) + "[]", location);
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, Location location) {
  if (detail::is_half_precision_tensor(x) || detail::is_half_precision_tensor(gamma) ||
      detail::is_half_precision_tensor(beta))
    return detail::computed_in_f32(
        detail::promoted_dtype(x, gamma, beta), location,
        [&](const Tensor& wide, const Tensor& scale, const Tensor& offset) {
          return layer_norm(wide, scale, offset, epsilon, location);
        },
        x, gamma, beta);
  require_an_axis("layer_norm", x, location);
  Tensor mean = reduce_mean(x, {-1}, true, location);
  Tensor centered = sub(x, mean, location);
  Tensor variance = reduce_mean(mul(centered, centered, location), {-1}, true, location);
  Tensor result = mul(centered, rsqrt(add(variance, epsilon, location), location), location);
  if (gamma.defined()) result = mul(result, gamma, location);
  if (beta.defined()) result = add(result, beta, location);
  return result;
}

std::pair<Tensor, Tensor> moments(const Tensor& x, Axes axes, bool keepdims, Location location) {
  const int rank = detail::checked_rank(x, "moments", location);
  const std::vector<std::int64_t> normalized = detail::normalize_axes(axes, rank, "moments", location);
  const Tensor values = detail::cast_to(x, floating_result(x.dtype()), location);
  const Tensor mean = reduce_mean(values, Axes(normalized), true, location);
  const Tensor centered = sub(values, mean, location);
  const Tensor variance = reduce_mean(mul(centered, centered, location), Axes(normalized), true, location);
  if (keepdims) return {mean, variance};
  return {squeeze(mean, Axes(normalized), location), squeeze(variance, Axes(normalized), location)};
}

Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma, const Tensor& beta,
                  double epsilon, Location location) {
  if (detail::is_half_precision_tensor(x) || detail::is_half_precision_tensor(mean) ||
      detail::is_half_precision_tensor(variance) || detail::is_half_precision_tensor(gamma) ||
      detail::is_half_precision_tensor(beta))
    return detail::computed_in_f32(
        detail::promoted_dtype(x, mean, variance, gamma, beta), location,
        [&](const Tensor& wide, const Tensor& m, const Tensor& v, const Tensor& scale, const Tensor& offset) {
          return batch_norm(wide, m, v, scale, offset, epsilon, location);
        },
        x, mean, variance, gamma, beta);
  detail::checked_rank(x, "batch_norm", location);
  detail::checked_rank(mean, "batch_norm", location);
  detail::checked_rank(variance, "batch_norm", location);
  Tensor factor = rsqrt(add(variance, epsilon, location), location);
  if (gamma.defined()) factor = mul(factor, gamma, location);
  const Tensor result = mul(sub(x, mean, location), factor, location);
  return beta.defined() ? add(result, beta, location) : result;
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, double epsilon, Location location) {
  if (detail::is_half_precision_tensor(x) || detail::is_half_precision_tensor(gamma))
    return detail::computed_in_f32(
        detail::promoted_dtype(x, gamma), location,
        [&](const Tensor& wide, const Tensor& scale) { return rms_norm(wide, scale, epsilon, location); }, x, gamma);
  require_an_axis("rms_norm", x, location);
  Tensor mean_square = reduce_mean(square(x, location), {-1}, true, location);
  Tensor result = mul(x, rsqrt(add(mean_square, epsilon, location), location), location);
  return gamma.defined() ? mul(result, gamma, location) : result;
}

Tensor l2_normalize(const Tensor& x, Axes axes, double epsilon, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return l2_normalize(wide, axes, epsilon, location); }, x);
  const int rank = detail::checked_rank(x, "l2_normalize", location);
  const std::vector<std::int64_t> normalized = detail::normalize_axes(axes, rank, "l2_normalize", location);
  const Tensor values = cast(x, floating_result(x.dtype()), location);
  const Tensor squares = reduce_sum(square(values, location), Axes(normalized), true, location);
  return mul(values, rsqrt(maximum(squares, epsilon, location), location), location);
}

Tensor softsign(const Tensor& x, Location location) {
  detail::checked_rank(x, "softsign", location);
  const Tensor values = cast(x, floating_result(x.dtype()), location);
  return div(values, add(abs(values, location), 1, location), location);
}

Tensor selu(const Tensor& x, Location location) {
  constexpr double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return mul(elu(x, alpha, location), scale, location);
}

Tensor relu6(const Tensor& x, Location location) { return clip(x, 0, 6, location); }

Tensor hard_sigmoid(const Tensor& x, Location location) {
  return div(relu6(add(x, 3, location), location), 6, location);
}

Tensor hard_swish(const Tensor& x, Location location) { return mul(x, hard_sigmoid(x, location), location); }

Tensor mish(const Tensor& x, Location location) {
  if (detail::is_half_precision_tensor(x))
    return detail::computed_in_f32(
        x.dtype(), location, [&](const Tensor& wide) { return mish(wide, location); }, x);
  return mul(x, tanh(softplus(x, location), location), location);
}

Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Location location) {
  if (detail::is_half_precision_tensor(logits))
    return detail::computed_in_f32(
        logits.dtype(), location,
        [&](const Tensor& wide) { return sparse_softmax_cross_entropy(wide, labels, location); }, logits);
  require_an_axis("sparse_softmax_cross_entropy", logits, location);
  if (!labels.defined() || (labels.dtype() != DType::i32 && labels.dtype() != DType::i64))
    throw DTypeError("sparse_softmax_cross_entropy", "labels must be i32 or i64 class indices", location);
  const Shape& shape = logits.shape();
  if (labels.shape().rank() != shape.rank() - 1 ||
      !std::equal(labels.shape().dims().begin(), labels.shape().dims().end(), shape.dims().begin()))
    throw ShapeError("sparse_softmax_cross_entropy",
                     "labels " + labels.shape().to_string() + " must have the shape of logits " + shape.to_string() +
                         " without its last (classes) axis",
                     location);
  const std::int64_t classes = shape[shape.rank() - 1];
  const Tensor values = cast(logits, floating_result(logits.dtype()), location);
  // Per-row values keep the classes axis (size 1) until the end, so they stay in the logits' row kernel.
  const Tensor chosen =
      reduce_sum(mul(one_hot(labels, classes, values.dtype(), location), values, location), {-1}, true, location);
  const Tensor loss = sub(reduce_logsumexp(values, {-1}, true, location), chosen, location);
  const Tensor label = expand_dims(labels, -1, location);
  const Tensor in_range = logical_and(ge(label, 0, location), lt(label, classes, location), location);
  return squeeze(where(in_range, loss, std::numeric_limits<double>::quiet_NaN(), location), {-1}, location);
}

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Location location) {
  if (detail::is_half_precision_tensor(logits) || detail::is_half_precision_tensor(labels))
    return detail::computed_in_f32(
        detail::promoted_dtype(logits, labels), location,
        [&](const Tensor& wide, const Tensor& targets) { return softmax_cross_entropy(wide, targets, location); },
        logits, labels);
  require_an_axis("softmax_cross_entropy", logits, location);
  const Tensor total = reduce_sum(mul(labels, log_softmax(logits, -1, location), location), {-1}, true, location);
  return squeeze(neg(total, location), {-1}, location);
}

// max(x, 0) - x z + softplus(-|x|): softplus's log1p keeps the last term's accuracy where e^-|x| is tiny.
Tensor sigmoid_cross_entropy(const Tensor& logits, const Tensor& labels, Location location) {
  if (detail::is_half_precision_tensor(logits) || detail::is_half_precision_tensor(labels))
    return detail::computed_in_f32(
        detail::promoted_dtype(logits, labels), location,
        [&](const Tensor& wide, const Tensor& targets) { return sigmoid_cross_entropy(wide, targets, location); },
        logits, labels);
  const Tensor linear = sub(maximum(logits, 0, location), mul(logits, labels, location), location);
  return add(linear, softplus(neg(abs(logits, location), location), location), location);
}

}  // namespace kiln::nn
