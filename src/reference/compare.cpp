#include "reference/compare.h"

#include "core/half_precision.h"

#include <kiln/error.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace kiln::reference {
namespace {

using ir::Op;

// Relative bound for sums, matmuls and chains of ops (see compare.h): bf16 and f16, four units of their rounding.
double chain_relative(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 0x1p-6;
    case DType::f16: return 0x1p-9;
    case DType::f32: return 1e-5;
    default: return 1e-12;
  }
}

double smallest_normal(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x1p-14;
    case DType::bf16:
    case DType::f32: return static_cast<double>(std::numeric_limits<float>::min());
    default: return std::numeric_limits<double>::min();
  }
}

// Significand bits: the least precise of two float dtypes has fewer.
int precision(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 8;
    case DType::f16: return 11;
    case DType::f32: return 24;
    default: return 53;
  }
}

// `value` rounded to a float dtype's nearest (f32 and the 16-bit formats; f64 as it is).
double rounded_to(double value, DType dtype) {
  if (dtype == DType::f32) return static_cast<double>(static_cast<float>(value));
  if (is_half_precision(dtype)) return half_precision_value(dtype, half_precision_bits(dtype, value));
  return value;
}

// The float bound of op (its accuracy in the op table, ir/ops.def), before the subnormal allowance; all zero means
// exact.
Tolerance float_tolerance(Op op, DType dtype) {
  Tolerance tolerance;
  const ir::Accuracy accuracy = ir::accuracy(op);
  switch (accuracy.kind) {
    case ir::Accuracy::Kind::exact:
      return tolerance;
    case ir::Accuracy::Kind::ulps:
      tolerance.ulps = accuracy.ulps;
      break;
    case ir::Accuracy::Kind::reassociated:
      tolerance.relative = chain_relative(dtype);
      break;
  }
  tolerance.absolute = smallest_normal(dtype);
  return tolerance;
}

bool is_exact(const Tolerance& tolerance) {
  return tolerance.relative == 0 && tolerance.absolute == 0 && tolerance.ulps == 0;
}

// Maps a float's bits to an integer line on which adjacent floats are
// adjacent integers (+0 and -0 both map to 0).
std::int64_t ordered(double value, DType dtype) {
  if (is_half_precision(dtype)) {
    const auto bits = static_cast<std::int64_t>(half_precision_bits(dtype, value));
    return bits < 0x8000 ? bits : 0x8000 - bits;
  }
  if (dtype == DType::f32) {
    auto bits = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(static_cast<float>(value)));
    return bits >= 0 ? bits : std::int64_t{std::numeric_limits<std::int32_t>::min()} - bits;
  }
  auto bits = std::bit_cast<std::int64_t>(value);
  return bits >= 0 ? bits : std::numeric_limits<std::int64_t>::min() - bits;
}

double ulp_distance(double a, double b, DType dtype) {
  std::int64_t x = ordered(a, dtype), y = ordered(b, dtype);
  // Unsigned difference: exact even across the whole f64 line.
  std::uint64_t distance = x >= y ? static_cast<std::uint64_t>(x) - static_cast<std::uint64_t>(y)
                                  : static_cast<std::uint64_t>(y) - static_cast<std::uint64_t>(x);
  return static_cast<double>(distance);
}

// Enough digits to tell neighbouring floats apart.
std::string format_number(double value, DType dtype) {
  char text[64];
  std::snprintf(text, sizeof text, dtype == DType::f64 ? "%.17g" : "%.9g", value);
  return text;
}

std::string format_error(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

std::string describe(const Tolerance& tolerance) {
  if (is_exact(tolerance)) return "exact";
  return "relative " + format_error(tolerance.relative) + ", absolute " + format_error(tolerance.absolute) + ", ulps " +
         format_error(tolerance.ulps);
}

// "[1,0,2]": the multi-index of flat element `flat` of `shape`.
std::string multi_index(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    index[static_cast<std::size_t>(axis)] = flat % shape[axis];
    flat /= shape[axis];
  }
  std::string text = "[";
  for (std::size_t axis = 0; axis < index.size(); ++axis) text += (axis ? "," : "") + std::to_string(index[axis]);
  return text + "]";
}

double read_element(const runtime::Array& array, std::size_t index) {
  switch (array.dtype) {
    case DType::boolean: return array.data<std::uint8_t>()[index];
    case DType::i32: return array.data<std::int32_t>()[index];
    case DType::i64: return static_cast<double>(array.data<std::int64_t>()[index]);
    case DType::f32: return array.data<float>()[index];
    case DType::bf16: return to_float(bfloat16{array.data<std::uint16_t>()[index]});
    case DType::f16: return to_float(float16{array.data<std::uint16_t>()[index]});
    case DType::f64: break;
  }
  return array.data<double>()[index];
}

std::int64_t read_integer(const runtime::Array& array, std::size_t index) {
  switch (array.dtype) {
    case DType::boolean: return array.data<std::uint8_t>()[index];
    case DType::i32: return array.data<std::int32_t>()[index];
    default: return array.data<std::int64_t>()[index];
  }
}

// The errors of one element.
struct ElementError {
  bool ok = true;
  bool finite = false;  // both values finite: the errors below are meaningful
  double absolute = 0, relative = 0, ulps = 0;
  std::string note;  // why a non-numeric mismatch failed
};

ElementError compare_float(double actual, double expected, double magnitude, DType dtype, const Tolerance& tolerance) {
  ElementError error;
  if (std::isnan(actual) || std::isnan(expected)) {
    error.ok = std::isnan(actual) && std::isnan(expected);
    if (!error.ok) error.note = "NaN on one side only";
    return error;
  }
  if (std::isinf(actual) || std::isinf(expected)) {
    error.ok = actual == expected;
    if (!error.ok) error.note = "an infinity must match the same infinity";
    return error;
  }
  error.finite = true;
  error.absolute = std::fabs(actual - expected);
  double scale = std::max(std::fabs(expected), magnitude);
  error.relative = error.absolute == 0 ? 0
                   : scale == 0        ? std::numeric_limits<double>::infinity()
                                       : error.absolute / scale;
  error.ulps = ulp_distance(actual, expected, dtype);
  error.ok =
      error.absolute <= tolerance.absolute || error.relative <= tolerance.relative || error.ulps <= tolerance.ulps;
  return error;
}

}  // namespace

Tolerance default_tolerance(Op op, DType dtype) {
  if (!is_floating(dtype)) return {};
  return float_tolerance(op, dtype);
}

Tolerance graph_tolerance(const ir::Graph& graph, ir::ValueId value) {
  DType dtype = graph.type(value).dtype;
  if (!is_floating(dtype)) return {};
  std::vector<bool> upstream(graph.nodes.size(), false);
  upstream[static_cast<std::size_t>(value)] = true;
  int inexact = 0;
  Op inexact_op = Op::parameter;
  bool one_dtype = true;
  // The chain bound follows the least precise inexact value on the way: an
  // f64 cast of an f32 sum carries the f32 sum's rounding.
  DType chain_dtype = dtype;
  for (ir::ValueId id = value; id >= 0; --id) {
    if (!upstream[static_cast<std::size_t>(id)]) continue;
    const ir::Node& node = graph.node(id);
    for (ir::ValueId operand : node.operands) upstream[static_cast<std::size_t>(operand)] = true;
    if (ir::is_control(node.op)) {
      // Its results come out of the regions' chains (through every step of a loop): held as a chain, at the
      // least precise float the regions compute in.
      inexact += 2;
      const ir::ValueId control = node.op == Op::result ? node.operands.at(0) : id;
      for (const ir::Graph& region : graph.node(control).regions)
        for (const ir::Node& inner : region.nodes)
          if (is_floating(inner.type.dtype) && precision(inner.type.dtype) < precision(chain_dtype))
            chain_dtype = inner.type.dtype;
      continue;
    }
    if (!is_floating(node.type.dtype)) continue;
    if (node.type.dtype != dtype) one_dtype = false;
    if (!is_exact(float_tolerance(node.op, node.type.dtype))) {
      ++inexact;
      inexact_op = node.op;
      if (precision(node.type.dtype) < precision(chain_dtype)) chain_dtype = node.type.dtype;
    }
  }
  if (inexact == 0) return {};
  if (inexact == 1 && one_dtype) return default_tolerance(inexact_op, dtype);
  return {.relative = chain_relative(chain_dtype), .absolute = smallest_normal(dtype), .ulps = 0};
}

Comparison compare(const runtime::Array& actual, const Value& expected, const Tolerance& tolerance) {
  Comparison result;
  if (!actual.device().is_cpu())
    throw DeviceError("reference::compare", "compare reads host memory; the array is on " + actual.device().to_string(),
                      std::string());
  if (actual.dtype != expected.dtype) {
    result.message = "dtype mismatch: actual " + std::string(to_string(actual.dtype)) + ", expected " +
                     std::string(to_string(expected.dtype));
    return result;
  }
  if (!(actual.shape == expected.shape)) {
    result.message = "shape mismatch: actual " + actual.shape.to_string() + ", expected " + expected.shape.to_string();
    return result;
  }
  auto count = static_cast<std::size_t>(actual.shape.numel());
  if (expected.values.size() != count || (!is_floating(expected.dtype) && expected.integers.size() != count) ||
      (!expected.magnitudes.empty() && expected.magnitudes.size() != count))
    throw InternalError("reference::compare", "the expected Value's element vectors do not match its shape",
                        std::string());

  DType dtype = actual.dtype;
  bool floating = is_floating(dtype);
  std::int64_t first = -1;
  ElementError first_error;
  std::string first_actual, first_expected;
  std::int64_t worst_absolute = -1, worst_relative = -1, worst_ulps = -1;
  for (std::size_t i = 0; i < count; ++i) {
    ElementError error;
    double actual_value = read_element(actual, i), expected_value;
    if (floating) {
      expected_value = rounded_to(expected.values[i], dtype);
      error = compare_float(actual_value, expected_value, expected.magnitude(static_cast<std::int64_t>(i)), dtype,
                            tolerance);
    } else {
      std::int64_t actual_integer = read_integer(actual, i), expected_integer = expected.integers[i];
      expected_value = static_cast<double>(expected_integer);
      error.finite = true;
      error.ok = actual_integer == expected_integer;
      error.absolute = std::fabs(actual_value - expected_value);
      error.relative = error.absolute == 0 ? 0 : error.absolute / std::max(std::fabs(expected_value), 1.0);
      error.ulps = error.absolute;
      if (dtype == DType::boolean && actual_integer > 1) {
        error.ok = false;
        error.note = "a bool byte must be 0 or 1";
      }
    }
    if (error.finite) {
      auto index = static_cast<std::int64_t>(i);
      if (error.absolute > result.max_absolute_error || worst_absolute < 0) {
        result.max_absolute_error = error.absolute;
        worst_absolute = index;
      }
      if (error.relative > result.max_relative_error || worst_relative < 0) {
        result.max_relative_error = error.relative;
        worst_relative = index;
      }
      if (error.ulps > result.max_ulps || worst_ulps < 0) {
        result.max_ulps = error.ulps;
        worst_ulps = index;
      }
    }
    if (!error.ok) {
      if (result.mismatches == 0) {
        first = static_cast<std::int64_t>(i);
        first_error = error;
        first_actual = floating ? format_number(actual_value, dtype) : std::to_string(read_integer(actual, i));
        first_expected = floating ? format_number(expected_value, dtype) : std::to_string(expected.integers[i]);
      }
      ++result.mismatches;
    }
  }

  result.ok = result.mismatches == 0;
  std::string largest;
  if (worst_absolute >= 0)
    largest = "largest errors: absolute " + format_error(result.max_absolute_error) + " at " +
              multi_index(worst_absolute, actual.shape) + ", relative " + format_error(result.max_relative_error) +
              " at " + multi_index(worst_relative, actual.shape) + ", " + format_error(result.max_ulps) + " ulps at " +
              multi_index(worst_ulps, actual.shape);
  if (result.ok) {
    result.message = "all " + std::to_string(count) + " elements of " + std::string(to_string(dtype)) +
                     actual.shape.to_string() + " match (" + describe(tolerance) + ")";
    if (!largest.empty()) result.message += "; " + largest;
    return result;
  }
  result.message = std::to_string(result.mismatches) + " of " + std::to_string(count) + " elements of " +
                   std::string(to_string(dtype)) + actual.shape.to_string() +
                   " differ (tolerance: " + describe(floating ? tolerance : Tolerance{}) + ")\n  first at " +
                   multi_index(first, actual.shape) + ": actual " + first_actual + ", expected " + first_expected;
  if (!first_error.note.empty()) {
    result.message += " (" + first_error.note + ")";
  } else {
    result.message += " (error: " + format_error(first_error.ulps) + " ulps, relative " +
                      format_error(first_error.relative) + ", absolute " + format_error(first_error.absolute);
    double magnitude = floating ? expected.magnitude(first) : 0;
    if (magnitude > 0) result.message += ", magnitude " + format_error(magnitude);
    result.message += ")";
  }
  if (!largest.empty()) result.message += "\n  " + largest;
  return result;
}

}  // namespace kiln::reference
