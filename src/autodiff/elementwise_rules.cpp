// Derivatives of the elementwise ops, as JAX defines them (jax/_src/lax/lax.py): where an op is not
// differentiable at a point, the one-sided choices JAX makes -- abs and sign 0 at 0, relu 0 at 0, maximum and
// minimum half to each operand at a tie, pow's exponent derivative 0 where the base is 0.

#include "autodiff/rules.h"

#include <numbers>

namespace kiln::autodiff {
namespace {

using ir::Op;

// ---- JVP rules -------------------------------------------------------------------------------------------------

Tangent jvp_neg(JvpContext& context) { return context.negate(context.tangent(0)); }

Tangent jvp_abs(JvpContext& context) {
  return context.scale(context.tangent(0), context.emitter().unary(Op::sign, context.operand(0)));
}

Tangent jvp_square(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.scale(context.tangent(0), emit.scale(context.operand(0), 2));
}

// relu(x) > 0 exactly where x > 0 (NaN in neither), so the mask is read from the result, as PyTorch's
// threshold_backward does: the forward's input is then read by the relu alone, which a GEMM epilogue computes, and
// the backward reads the activation the next layer's product reads anyway.
Tangent jvp_relu(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.select(emit.binary(Op::gt, context.result(), context.constant(0)), context.tangent(0), {});
}

Tangent jvp_sin(JvpContext& context) {
  return context.scale(context.tangent(0), context.emitter().unary(Op::cos, context.operand(0)));
}

Tangent jvp_cos(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.scale(context.tangent(0), emit.negate(emit.unary(Op::sin, context.operand(0))));
}

Tangent jvp_exp(JvpContext& context) { return context.scale(context.tangent(0), context.result()); }

Tangent jvp_log(JvpContext& context) { return context.divide(context.tangent(0), context.operand(0)); }

// 1 - tanh(x)^2.
Tangent jvp_tanh(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId result = context.result();
  return context.scale(context.tangent(0), emit.subtract(context.constant(1), emit.multiply(result, result)));
}

// 1 / (2 sqrt(x)).
Tangent jvp_sqrt(JvpContext& context) {
  return context.divide(context.tangent(0), context.emitter().scale(context.result(), 2));
}

// -x^(-3/2) / 2 = -rsqrt(x) / (2 x).
Tangent jvp_rsqrt(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.scale(context.tangent(0), emit.divide(emit.scale(context.result(), -0.5), context.operand(0)));
}

// sigmoid(x) (1 - sigmoid(x)).
Tangent jvp_sigmoid(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId result = context.result();
  return context.scale(context.tangent(0), emit.multiply(result, emit.subtract(context.constant(1), result)));
}

// +-2/sqrt(pi) e^(-x^2).
Tangent error_function_jvp(JvpContext& context, double sign) {
  Emitter& emit = context.emitter();
  const ValueId x = context.operand(0);
  const ValueId gaussian = emit.unary(Op::exp, emit.negate(emit.multiply(x, x)));
  return context.scale(context.tangent(0), emit.scale(gaussian, sign * 2 * std::numbers::inv_sqrtpi));
}
Tangent jvp_erf(JvpContext& context) { return error_function_jvp(context, 1); }
Tangent jvp_erfc(JvpContext& context) { return error_function_jvp(context, -1); }

Tangent jvp_log1p(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.divide(context.tangent(0), emit.add(context.constant(1), context.operand(0)));
}

// e^x = expm1(x) + 1.
Tangent jvp_expm1(JvpContext& context) {
  Emitter& emit = context.emitter();
  return context.scale(context.tangent(0), emit.add(context.result(), context.constant(1)));
}

Tangent jvp_atan(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId x = context.operand(0);
  return context.divide(context.tangent(0), emit.add(context.constant(1), emit.multiply(x, x)));
}

// A cast between float types carries the tangent (rounded as the value is); to or from integers or bools, nothing.
Tangent jvp_cast(JvpContext& context) {
  if (!is_floating(context.operand_type(0).dtype) || !is_floating(context.dtype())) return {};
  return context.same_op(context.tangent(0));
}

Tangent jvp_add(JvpContext& context) { return context.add(context.tangent(0), context.tangent(1)); }

Tangent jvp_sub(JvpContext& context) { return context.subtract(context.tangent(0), context.tangent(1)); }

Tangent jvp_mul(JvpContext& context) {
  return context.add(context.scale(context.tangent(0), context.operand(1)),
                     context.scale(context.tangent(1), context.operand(0)));
}

// d(a / b) = da / b - db a / b^2, with a / b the result.
Tangent jvp_div(JvpContext& context) {
  Emitter& emit = context.emitter();
  Tangent from_divisor;
  if (!context.tangent(1).is_zero())
    from_divisor = context.scale(context.tangent(1), emit.negate(emit.divide(context.result(), context.operand(1))));
  return context.add(context.divide(context.tangent(0), context.operand(1)), from_divisor);
}

// d(x^y) = y x^(y - 1) dx + log(x) x^y dy; JAX's choices: the first factor 0 where y = 0 (so 0^0 has none), the
// second 0 where x = 0 (log 0 times 0^y would be NaN or -inf times 0).
Tangent jvp_pow(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId x = context.operand(0), y = context.operand(1);
  Tangent from_base, from_exponent;
  if (!context.tangent(0).is_zero()) {
    const ValueId power = emit.binary(Op::pow, x, emit.subtract(y, context.constant(1)));
    const ValueId factor =
        emit.select(emit.binary(Op::eq, y, context.constant(0)), context.constant(0), emit.multiply(y, power));
    from_base = context.scale(context.tangent(0), factor);
  }
  if (!context.tangent(1).is_zero()) {
    const ValueId zero_base = emit.binary(Op::eq, x, context.constant(0));
    const ValueId logarithm = emit.unary(Op::log, emit.select(zero_base, context.constant(1), x));
    from_exponent = context.scale(context.tangent(1), emit.multiply(logarithm, context.result()));
  }
  return context.add(from_base, from_exponent);
}

// x - y q with q = floor_divide(x, y), piecewise constant: da - db q.
Tangent jvp_remainder(JvpContext& context) {
  Emitter& emit = context.emitter();
  Tangent from_divisor;
  if (!context.tangent(1).is_zero())
    from_divisor =
        context.scale(context.tangent(1), emit.binary(Op::floor_divide, context.operand(0), context.operand(1)));
  return context.subtract(context.tangent(0), from_divisor);
}

// x - y q with q = trunc(x / y).
Tangent jvp_fmod(JvpContext& context) {
  Emitter& emit = context.emitter();
  Tangent from_divisor;
  if (!context.tangent(1).is_zero()) {
    const ValueId quotient = emit.divide(context.operand(0), context.operand(1));
    const ValueId truncated = emit.select(emit.binary(Op::lt, quotient, context.constant(0)),
                                          emit.unary(Op::ceil, quotient), emit.unary(Op::floor, quotient));
    from_divisor = context.scale(context.tangent(1), truncated);
  }
  return context.subtract(context.tangent(0), from_divisor);
}

// |a| with b's sign: da sign(a) times b's sign (0 at a = 0, as jnp.copysign's derivative); b's sign is constant.
Tangent jvp_copysign(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId sign_of_b = emit.binary(Op::copysign, context.constant(1), context.operand(1));
  return context.scale(context.tangent(0), emit.multiply(emit.unary(Op::sign, context.operand(0)), sign_of_b));
}

// maximum and minimum: the tangent of the operand chosen, half of each at a tie (JAX's balanced rule, so that
// maximum(x, x) has derivative 1 and relu written as maximum(x, 0) has 1/2 at 0).
Tangent extremum_jvp(JvpContext& context, Op wins) {
  Emitter& emit = context.emitter();
  const ValueId x = context.operand(0), y = context.operand(1);
  const ValueId tie = emit.scale(emit.indicator(Op::eq, x, y, context.dtype()), 0.5);
  Tangent from_x, from_y;
  if (!context.tangent(0).is_zero())
    from_x = context.scale(context.tangent(0), emit.add(emit.indicator(wins, x, y, context.dtype()), tie));
  if (!context.tangent(1).is_zero())
    from_y = context.scale(context.tangent(1), emit.add(emit.indicator(wins, y, x, context.dtype()), tie));
  return context.add(from_x, from_y);
}
Tangent jvp_maximum(JvpContext& context) { return extremum_jvp(context, Op::gt); }
Tangent jvp_minimum(JvpContext& context) { return extremum_jvp(context, Op::lt); }

Tangent jvp_where(JvpContext& context) {
  return context.select(context.operand(0), context.tangent(1), context.tangent(2));
}

// ---- transpose rules -------------------------------------------------------------------------------------------

void transpose_neg(TransposeContext& context) { context.contribute(0, context.emitter().negate(context.cotangent())); }

void transpose_add(TransposeContext& context) {
  context.contribute(0, context.cotangent());
  context.contribute(1, context.cotangent());
}

void transpose_sub(TransposeContext& context) {
  context.contribute(0, context.cotangent());
  if (context.is_tangent(1)) context.contribute(1, context.emitter().negate(context.cotangent()));
}

// One operand is the tangent, the other the factor.
void transpose_mul(TransposeContext& context) {
  const std::size_t tangent = context.is_tangent(0) ? 0 : 1;
  context.contribute(tangent, context.emitter().multiply(context.cotangent(), context.value(1 - tangent)));
}

// Linear in the dividend only.
void transpose_div(TransposeContext& context) {
  context.contribute(0, context.emitter().divide(context.cotangent(), context.value(1)));
}

void transpose_cast(TransposeContext& context) {
  context.contribute(0, context.emitter().cast(context.cotangent(), context.operand_type(0).dtype));
}

void transpose_where(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const ValueId condition = context.value(0);
  const ValueId zero = emit.constant(0, emit.dtype(context.cotangent()));
  if (context.is_tangent(1)) context.contribute(1, emit.select(condition, context.cotangent(), zero));
  if (context.is_tangent(2)) context.contribute(2, emit.select(condition, zero, context.cotangent()));
}

constexpr Derivative rule = Derivative::rule;
constexpr Derivative none = Derivative::none;

const OpRule rules[] = {
    {Op::parameter, none},
    {Op::constant, none},
    {Op::iota, none},
    {Op::neg, rule, jvp_neg, transpose_neg},
    {Op::abs, rule, jvp_abs},
    {Op::sign, none},
    {Op::square, rule, jvp_square},
    {Op::relu, rule, jvp_relu},
    {Op::floor, none},
    {Op::ceil, none},
    {Op::round, none},
    {Op::sin, rule, jvp_sin},
    {Op::cos, rule, jvp_cos},
    {Op::exp, rule, jvp_exp},
    {Op::log, rule, jvp_log},
    {Op::tanh, rule, jvp_tanh},
    {Op::sqrt, rule, jvp_sqrt},
    {Op::rsqrt, rule, jvp_rsqrt},
    {Op::sigmoid, rule, jvp_sigmoid},
    {Op::erf, rule, jvp_erf},
    {Op::erfc, rule, jvp_erfc},
    {Op::log1p, rule, jvp_log1p},
    {Op::expm1, rule, jvp_expm1},
    {Op::atan, rule, jvp_atan},
    {Op::logical_not, none},
    {Op::bitwise_not, none},
    {Op::cast, rule, jvp_cast, transpose_cast},
    {Op::add, rule, jvp_add, transpose_add},
    {Op::sub, rule, jvp_sub, transpose_sub},
    {Op::mul, rule, jvp_mul, transpose_mul},
    {Op::div, rule, jvp_div, transpose_div},
    {Op::pow, rule, jvp_pow},
    {Op::floor_divide, none},
    {Op::remainder, rule, jvp_remainder},
    {Op::fmod, rule, jvp_fmod},
    {Op::copysign, rule, jvp_copysign},
    {Op::bitwise_and, none},
    {Op::bitwise_or, none},
    {Op::bitwise_xor, none},
    {Op::left_shift, none},
    {Op::right_shift, none},
    {Op::random_bits, none},
    {Op::maximum, rule, jvp_maximum},
    {Op::minimum, rule, jvp_minimum},
    {Op::eq, none},
    {Op::ne, none},
    {Op::lt, none},
    {Op::le, none},
    {Op::gt, none},
    {Op::ge, none},
    {Op::logical_and, none},
    {Op::logical_or, none},
    {Op::where, rule, jvp_where, transpose_where},
};

}  // namespace

std::span<const OpRule> elementwise_rules() { return rules; }

}  // namespace kiln::autodiff
