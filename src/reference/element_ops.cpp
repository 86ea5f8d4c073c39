#include "reference/element_ops.h"

#include <kiln/error.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace kiln::reference::element_ops {

static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559,
              "the reference evaluator assumes IEEE 754 floats");

using ir::Op;

namespace {

[[noreturn]] void internal_error(const ir::Node& node, const std::string& detail) {
  throw InternalError("reference::evaluate", std::string(ir::name(node.op)) + ": " + detail, node.location);
}

int bits_in(DType dtype) { return dtype == DType::i32 ? 32 : 64; }

// The real quotient a / b rounded down, exactly (long double holds every double's fmod, and the quotient of a
// difference that is a multiple of b to within its last bits): Python's a // b.
long double floor_quotient(long double a, long double b) {
  const long double truncated_remainder = std::fmod(a, b);
  long double quotient = std::nearbyint((a - truncated_remainder) / b);  // truncated: an integer up to rounding
  if (truncated_remainder != 0 && (truncated_remainder < 0) != (b < 0)) quotient -= 1;
  return quotient;
}

}  // namespace

// Two's-complement wraparound of a 64-bit result to `dtype` (C++20 defines
// unsigned-to-signed conversion as modular).
std::int64_t wrap(std::uint64_t bits, DType dtype) {
  switch (dtype) {
    case DType::boolean: return bits != 0 ? 1 : 0;
    case DType::i32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    case DType::i64:
    case DType::f32:
    case DType::f64:
    case DType::bf16:
    case DType::f16: break;
  }
  return static_cast<std::int64_t>(bits);
}

double round_to(double value, DType dtype) {
  switch (dtype) {
    case DType::f32: return static_cast<double>(static_cast<float>(value));
    case DType::bf16: return static_cast<double>(to_float(to_bfloat16(value)));
    case DType::f16: return static_cast<double>(to_float(to_float16(value)));
    default: return value;
  }
}

std::int64_t lowest(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 0;
    case DType::i32: return std::numeric_limits<std::int32_t>::min();
    default: return std::numeric_limits<std::int64_t>::min();
  }
}
std::int64_t highest(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 1;
    case DType::i32: return std::numeric_limits<std::int32_t>::max();
    default: return std::numeric_limits<std::int64_t>::max();
  }
}

// Float -> integer: truncate toward zero, saturate at the dtype's range,
// NaN -> 0 (what Java, Rust `as` and XLA do; C++ leaves it undefined).
std::int64_t float_to_integer(double x, DType dtype) {
  if (std::isnan(x)) return 0;
  double limit = dtype == DType::i32 ? 2147483648.0 : 9223372036854775808.0;  // 2^31, 2^63
  if (x >= limit) return highest(dtype);
  if (x <= -limit) return lowest(dtype);
  return static_cast<std::int64_t>(std::trunc(x));
}

double unary_float(const ir::Node& node, double x) {
  switch (node.op) {
    case Op::neg: return -x;
    case Op::abs: return std::fabs(x);
    case Op::sign: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;  // keeps NaN (and the sign of 0)
    case Op::square: return x * x;
    case Op::relu: return std::isnan(x) ? x : x > 0 ? x : 0.0;
    case Op::floor: return std::floor(x);
    case Op::round:
      return std::nearbyint(x);  // the default rounding mode: ties to even
    case Op::ceil: return std::ceil(x);
    case Op::sin: return std::sin(x);
    case Op::cos: return std::cos(x);
    case Op::exp: return std::exp(x);
    case Op::log: return std::log(x);
    case Op::tanh: return std::tanh(x);
    case Op::sqrt: return std::sqrt(x);
    case Op::rsqrt: return 1.0 / std::sqrt(x);
    case Op::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Op::erf: return std::erf(x);
    case Op::erfc:
      return std::erfc(x);
    case Op::log1p: return std::log1p(x);
    case Op::expm1: return std::expm1(x);
    case Op::atan:
      return std::atan(x);
    default: internal_error(node, "is not a float unary op");
  }
}

std::int64_t unary_integer(const ir::Node& node, std::int64_t x, DType dtype) {
  switch (node.op) {
    case Op::neg: return wrap(0 - bits_of(x), dtype);
    case Op::abs: return wrap(x < 0 ? 0 - bits_of(x) : bits_of(x), dtype);  // abs(INT_MIN) wraps to INT_MIN
    case Op::sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case Op::square: return wrap(bits_of(x) * bits_of(x), dtype);
    case Op::relu: return x > 0 ? x : 0;
    case Op::floor:
    case Op::ceil:
    case Op::round:
      return x;
    case Op::logical_not: return x == 0 ? 1 : 0;
    case Op::bitwise_not:
      return dtype == DType::boolean ? (x == 0 ? 1 : 0) : ~x;  // ~ of a sign-extended i32 is one
    default: internal_error(node, "is not defined on " + std::string(to_string(dtype)));
  }
}

// Error scale of a unary float op's result (see Value::magnitudes): `x` the
// operand, `result` the value, `error` the operand's magnitude.
double unary_magnitude(Op op, double x, double result, double error) {
  // error * factor, but 0 when the operand is exact (a factor may be inf there).
  auto scaled = [error](double factor) { return error == 0 ? 0.0 : error * factor; };
  double own = std::fabs(result);
  switch (op) {
    case Op::neg:
    case Op::abs:
    case Op::relu: return error;
    case Op::square: return (std::fabs(x) + error) * (std::fabs(x) + error);
    case Op::exp: return own + scaled(own);
    case Op::log: return own + scaled(1 / std::fabs(x));
    case Op::sqrt: return own + scaled(1 / (2 * std::sqrt(std::fabs(x))));
    case Op::rsqrt: return own + scaled(1 / (2 * std::pow(std::fabs(x), 1.5)));
    case Op::sin:
    case Op::cos:
    case Op::tanh: return own + error;
    case Op::sigmoid: return own + error / 4;
    case Op::erf:
    case Op::erfc:
      return own + error * 1.1283791670955126;  // 2/sqrt(pi)
    case Op::log1p: return own + scaled(1 / std::fabs(1 + x));
    case Op::expm1: return own + scaled(result + 1);  // e^x
    case Op::atan:
      return own + error / (1 + x * x);
    // sign, floor, ceil, round: a jump, not a bound.
    default: return 0;
  }
}

bool is_comparison(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt || op == Op::ge;
}

double binary_float(const ir::Node& node, double a, double b) {
  switch (node.op) {
    case Op::add: return a + b;
    case Op::sub: return a - b;
    case Op::mul: return a * b;
    case Op::div: return a / b;
    case Op::pow: return std::pow(a, b);
    // Python's // and % (NumPy's floor_divide and remainder): the exact quotient rounded down, and what is left,
    // in the divisor's sign (a zero remainder too); division by zero: a / b and NaN; an infinite dividend: NaN.
    case Op::floor_divide: {
      if (b == 0) return a / b;
      if (std::isinf(a)) return std::numeric_limits<double>::quiet_NaN();
      const long double quotient = floor_quotient(a, b);
      return quotient == 0 ? std::copysign(0.0, a / b) : static_cast<double>(quotient);
    }
    case Op::remainder: {
      long double left = std::fmod(static_cast<long double>(a), static_cast<long double>(b));
      if (left != 0 && (left < 0) != (b < 0)) left += b;
      return left == 0 ? std::copysign(0.0, b) : static_cast<double>(left);
    }
    case Op::fmod:
      return std::fmod(a, b);
    case Op::copysign:
      return std::copysign(a, b);
    // Equal operands give b, so maximum(-0, +0) = +0 and maximum(+0, -0) = -0: the kernels' a > b ? a : b
    // (and PyTorch's); std::max gives a.
    case Op::maximum:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : a > b ? a : b;
    case Op::minimum:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : a < b ? a : b;
    default: internal_error(node, "is not a float binary op");
  }
}

// Integer pow by squaring, wrapping like repeated multiplication. A negative
// exponent gives 0 (the truncated reciprocal), except 1 -> 1 and -1 -> +-1.
std::int64_t integer_pow(std::int64_t base, std::int64_t exponent, DType dtype) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  std::uint64_t result = 1, factor = bits_of(base);
  for (auto remaining = static_cast<std::uint64_t>(exponent); remaining != 0; remaining >>= 1) {
    if (remaining & 1) result *= factor;
    factor *= factor;
  }
  return wrap(result, dtype);
}

namespace {
// random_bits: the first two words of Philox-4x32-10's block (counter, 0) under `key`, written here from the
// algorithm's definition (Salmon et al., SC'11), apart from kernels/scalar_ops.h's, so that the reference checks
// it: a round maps the block (x0, x1, x2, x3) to (hi(M1 x2) ^ x1 ^ k0, lo(M1 x2), hi(M0 x0) ^ x3 ^ k1, lo(M0 x0)),
// then adds the Weyl constants to the key.
std::int64_t philox_bits(std::int64_t key, std::int64_t counter) {
  std::uint32_t x[4] = {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(bits_of(counter) >> 32), 0, 0};
  std::uint32_t k[2] = {static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(bits_of(key) >> 32)};
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t low_product = std::uint64_t{0xD2511F53} * x[0];
    const std::uint64_t high_product = std::uint64_t{0xCD9E8D57} * x[2];
    const std::uint32_t next[4] = {static_cast<std::uint32_t>(high_product >> 32) ^ x[1] ^ k[0],
                                   static_cast<std::uint32_t>(high_product),
                                   static_cast<std::uint32_t>(low_product >> 32) ^ x[3] ^ k[1],
                                   static_cast<std::uint32_t>(low_product)};
    std::copy(std::begin(next), std::end(next), std::begin(x));
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return static_cast<std::int64_t>((std::uint64_t{x[1]} << 32) | x[0]);
}
}  // namespace

std::int64_t binary_integer(const ir::Node& node, std::int64_t a, std::int64_t b, DType dtype) {
  switch (node.op) {
    case Op::add: return wrap(bits_of(a) + bits_of(b), dtype);
    case Op::sub: return wrap(bits_of(a) - bits_of(b), dtype);
    case Op::mul: return wrap(bits_of(a) * bits_of(b), dtype);
    case Op::pow: return integer_pow(a, b, dtype);
    // Python's // and %, and C's truncating %; a zero divisor gives 0 (NumPy's), the lowest value // -1 wraps.
    case Op::floor_divide:
    case Op::remainder:
    case Op::fmod: {
      if (b == 0) return 0;
      if (b == -1) return node.op == Op::floor_divide ? wrap(0 - bits_of(a), dtype) : 0;
      const auto [quotient, left] = std::lldiv(a, b);  // truncated
      if (node.op == Op::fmod) return left;
      const bool moved = left != 0 && (left < 0) != (b < 0);
      return node.op == Op::floor_divide ? quotient - (moved ? 1 : 0) : left + (moved ? b : 0);
    }
    // Two's complement bits: the int64 of an i32 is its sign extension, and so are these results.
    case Op::bitwise_and:
      return a & b;
    case Op::bitwise_or:
      return a | b;
    case Op::bitwise_xor:
      return a ^ b;
    // A count outside [0, bits) shifts everything out: 0 to the left, the sign to the right.
    case Op::left_shift:
      return b < 0 || b >= bits_in(dtype) ? 0 : wrap(bits_of(a) << b, dtype);
    case Op::right_shift:
      return b < 0 || b >= bits_in(dtype) ? (a < 0 ? -1 : 0) : a >> b;
    case Op::maximum: return std::max(a, b);
    case Op::minimum: return std::min(a, b);
    case Op::random_bits: return philox_bits(a, b);
    case Op::logical_and: return a != 0 && b != 0 ? 1 : 0;
    case Op::logical_or: return a != 0 || b != 0 ? 1 : 0;
    default: internal_error(node, "is not defined on " + std::string(to_string(dtype)));
  }
}

double binary_magnitude(Op op, double a, double b, double result, double error_a, double error_b) {
  auto scaled = [](double error, double factor) { return error == 0 ? 0.0 : error * factor; };
  double own = std::fabs(result);
  switch (op) {
    case Op::add:
    case Op::sub:
      // An exact infinity makes the result that infinity (or NaN), exactly: nothing rounds, and the other operand's
      // error is absorbed (a masked score: x + -inf, whose exp is 0 exactly).
      if (std::isinf(result) && (std::isinf(a) || std::isinf(b)) && (!std::isinf(a) || error_a == 0) &&
          (!std::isinf(b) || error_b == 0))
        return 0;
      return own + error_a + error_b;
    case Op::mul: return (std::fabs(a) + error_a) * (std::fabs(b) + error_b);
    case Op::div: return own + scaled(error_a, 1 / std::fabs(b)) + scaled(error_b, std::fabs(a) / (b * b));
    case Op::pow:
      return own + (error_a == 0 ? 0.0 : std::fabs(std::pow(std::fabs(a) + error_a, b) - std::pow(std::fabs(a), b))) +
             scaled(error_b, std::fabs(result * std::log(std::fabs(a))));
    case Op::maximum:
    case Op::minimum: return std::max(error_a, error_b);
    // The magnitude's error; the sign is exact away from 0, where kiln-fuzz keeps inexact signs (hazards.cpp).
    case Op::copysign:
      return error_a;
    // a - n b for the integer n = a / b rounded down or toward zero, at most |a / b| in size: away from the jumps
    // (where n changes), a's error and n times b's. floor_divide is all jumps (default).
    case Op::remainder:
    case Op::fmod:
      return own + error_a + scaled(error_b, std::fabs(a / b));
    default: return 0;
  }
}

}  // namespace kiln::reference::element_ops
