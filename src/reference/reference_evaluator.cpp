#include "reference/reference_evaluator.h"

#include "ir/type_rules.h"
#include "reference/element_ops.h"

#include <kiln/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

namespace kiln::reference {
namespace {

using ir::Op;
using namespace element_ops;

[[noreturn]] void internal_error(const ir::Node& node, const std::string& detail) {
  throw InternalError("reference::evaluate", std::string(ir::name(node.op)) + ": " + detail, node.location);
}

// ---------------------------------------------------------------------------
// Multi-indices. Every op is a loop over the multi-indices of some shape; an
// operand is addressed through an affine map: flat = base + sum(index[a] *
// stride[a]), where a stride of 0 broadcasts.

// Calls visit(index) for every multi-index of `shape`, in row-major order.
template <class Visit>
void for_each_index(const Shape& shape, Visit&& visit) {
  if (shape.numel() <= 0) return;
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()), 0);
  while (true) {
    visit(std::span<const std::int64_t>(index));
    int axis = shape.rank() - 1;
    for (; axis >= 0; --axis) {
      auto position = static_cast<std::size_t>(axis);
      if (++index[position] < shape[axis]) break;
      index[position] = 0;
    }
    if (axis < 0) return;
  }
}

// The flat offsets base + sum(index[a] * strides[a]) of every multi-index of
// `shape`, in row-major order.
std::vector<std::int64_t> affine_map(const Shape& shape, std::int64_t base, std::span<const std::int64_t> strides) {
  std::vector<std::int64_t> offsets;
  offsets.reserve(static_cast<std::size_t>(std::max<std::int64_t>(shape.numel(), 0)));
  for_each_index(shape, [&](std::span<const std::int64_t> index) {
    std::int64_t offset = base;
    for (std::size_t axis = 0; axis < index.size(); ++axis) offset += index[axis] * strides[axis];
    offsets.push_back(offset);
  });
  return offsets;
}

std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  auto all = shape.strides();
  return {all.begin(), all.begin() + shape.rank()};
}

// For each element of `result`, the flat index of the element of `operand`
// it reads under NumPy broadcasting (shapes aligned at the right; a size-1
// axis repeats).
std::vector<std::int64_t> broadcast_map(const ir::Node& node, const Shape& operand, const Shape& result) {
  int offset = result.rank() - operand.rank();
  if (offset < 0) internal_error(node, "cannot broadcast " + operand.to_string() + " to " + result.to_string());
  std::vector<std::int64_t> operand_strides = row_major_strides(operand);
  std::vector<std::int64_t> strides(static_cast<std::size_t>(result.rank()), 0);
  for (int axis = 0; axis < operand.rank(); ++axis) {
    std::int64_t dim = operand[axis];
    if (dim != 1 && dim != result[axis + offset])
      internal_error(node, "cannot broadcast " + operand.to_string() + " to " + result.to_string());
    if (dim != 1) strides[static_cast<std::size_t>(axis + offset)] = operand_strides[static_cast<std::size_t>(axis)];
  }
  return affine_map(result, 0, strides);
}

// ---------------------------------------------------------------------------
// Values.

bool is_float(DType dtype) { return is_floating(dtype); }

Value make_value(DType dtype, const Shape& shape) {
  Value value;
  value.dtype = dtype;
  value.shape = shape;
  auto count = static_cast<std::size_t>(shape.numel());
  value.values.assign(count, 0.0);
  if (!is_float(dtype)) value.integers.assign(count, 0);
  return value;
}

// Integer results are computed into `integers`; this mirrors them into
// `values`. Float magnitudes that are all 0 are dropped (exact), NaN ones
// become +inf (unbounded).
void finish(Value& value) {
  if (!is_float(value.dtype)) {
    for (std::size_t i = 0; i < value.integers.size(); ++i) value.values[i] = static_cast<double>(value.integers[i]);
    value.magnitudes.clear();
    return;
  }
  bool any = false;
  for (double& magnitude : value.magnitudes) {
    if (std::isnan(magnitude)) magnitude = std::numeric_limits<double>::infinity();
    any = any || magnitude != 0;
  }
  if (!any) value.magnitudes.clear();
}

// ---------------------------------------------------------------------------
// The evaluator.

class Evaluator {
 public:
  Evaluator(const ir::Graph& graph, std::vector<Value> inputs) : graph_(graph), inputs_(std::move(inputs)) {}

  std::vector<Value> run() {
    if (inputs_.size() != graph_.parameters.size())
      throw ValueError("reference::evaluate",
                       "the graph takes " + std::to_string(graph_.parameters.size()) + " inputs, got " +
                           std::to_string(inputs_.size()),
                       std::string());
    std::vector<int> last_use(graph_.nodes.size(), -1);
    for (int id = 0; id < graph_.size(); ++id)
      for (ir::ValueId operand : graph_.node(id).operands) {
        if (operand < 0 || operand >= id)
          internal_error(graph_.node(id), "operand %" + std::to_string(operand) + " is not defined before it is used");
        last_use[static_cast<std::size_t>(operand)] = id;
      }
    for (ir::ValueId output : graph_.outputs) {
      if (output < 0 || output >= graph_.size())
        throw InternalError("reference::evaluate", "output %" + std::to_string(output) + " does not exist",
                            std::string());
      last_use[static_cast<std::size_t>(output)] = graph_.size();
    }

    values_.resize(graph_.nodes.size());
    for (int id = 0; id < graph_.size(); ++id) {
      values_[static_cast<std::size_t>(id)] = evaluate_node(id);
      // Free what no later node needs; a reference run may hold large values.
      if (last_use[static_cast<std::size_t>(id)] < 0) values_[static_cast<std::size_t>(id)] = Value();
      for (ir::ValueId operand : graph_.node(id).operands)
        if (last_use[static_cast<std::size_t>(operand)] == id) values_[static_cast<std::size_t>(operand)] = Value();
    }
    std::vector<Value> outputs;
    for (ir::ValueId output : graph_.outputs) outputs.push_back(values_[static_cast<std::size_t>(output)]);
    return outputs;
  }

 private:
  const Value& operand(const ir::Node& node, std::size_t index) const {
    return values_[static_cast<std::size_t>(node.operands[index])];
  }

  // The node's result type for the concrete operands, checked by the IR's
  // type rules: this validates the node (axes, permutations, slice bounds,
  // operand dtypes and shapes), so the loops below can index without further
  // checks. Downstream of nonzero, the type rules also size the result.
  ir::Type result_type(const ir::Node& node) const {
    std::vector<ir::Type> types;
    for (std::size_t i = 0; i < node.operands.size(); ++i)
      types.push_back({operand(node, i).dtype, operand(node, i).shape});
    ir::Type declared = node.type;
    if (node.op == Op::cast && !types.empty()) declared.shape = types[0].shape;  // a cast keeps any shape
    if (ir::has_declared_type(node.op) && !declared.shape.is_static())
      throw ValueError(
          std::string(ir::name(node.op)),
          "the reference evaluator cannot size a declared shape " + node.type.to_string() + " that depends on data",
          node.location);
    ir::Type type = ir::infer_type(node.op, node.attributes, types, declared, node.location);
    bool matches = type.dtype == node.type.dtype && type.shape.rank() == node.type.shape.rank();
    for (int axis = 0; matches && axis < type.shape.rank(); ++axis)
      matches = node.type.shape[axis] == Shape::dynamic || node.type.shape[axis] == type.shape[axis];
    if (!matches)
      internal_error(node, "is typed " + node.type.to_string() + " but its operands give " + type.to_string());
    return type;
  }

  Value evaluate_node(int id) {
    const ir::Node& node = graph_.node(id);
    // Parameters and host calls are checked against what they receive.
    ir::Type type = node.op == Op::parameter || node.op == Op::host_call ? node.type : result_type(node);
    Value value;
    switch (node.op) {
      case Op::parameter: value = parameter(id, node); break;
      case Op::constant: value = constant(node, type); break;
      case Op::iota: value = iota(node, type); break;
        // The functions of their elements (meaning scalar or math in ir/ops.def): element_ops.h.
#define KILN_CASE_scalar(name) case Op::name:
#define KILN_CASE_math(name) case Op::name:
#define KILN_CASE_own(name)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) KILN_CASE_##meaning(name)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_CASE_own
#undef KILN_CASE_math
#undef KILN_CASE_scalar
        value = ir::info(node.op).arity == 1 ? unary(node, type) : binary(node, type);
        break;
      case Op::cast:
        value = cast(node, type);
        break;
      case Op::where: value = where(node, type); break;
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::reduce_max:
      case Op::reduce_min:
      case Op::reduce_prod: value = reduce(node, type); break;
      case Op::argmax:
      case Op::argmin: value = arg_extreme(node, type); break;
      case Op::cumsum:
      case Op::cumprod:
      case Op::cummax:
      case Op::cummin:
        value = scan(node, type);
        break;
      case Op::matmul: value = matmul(node, type); break;
      case Op::reshape:
      case Op::expand_dims:
      case Op::squeeze: value = reshape(node, type); break;
      case Op::transpose: value = transpose(node, type); break;
      case Op::broadcast_to: value = broadcast_to(node, type); break;
      case Op::slice: value = slice(node, type); break;
      case Op::concat: value = concat(node, type); break;
      case Op::gather:
        value = gather_along_axis(node, type);
        break;
      case Op::take_along_axis: value = take_along_axis(node, type); break;
      case Op::scatter_add:
        value = scatter_add(node, type);
        break;
      case Op::sort:
      case Op::argsort:
      case Op::top_k:
        value = ordering(node, type);
        break;
      case Op::host_call: value = host_call(node); break;
      case Op::nonzero: value = nonzero(node); break;
      case Op::cond:
      case Op::while_loop:
      case Op::scan_loop:
        value = control(id, node);
        break;
      case Op::result:
        value = result(node);
        break;
    }
    finish(value);
    return value;
  }

  Value parameter(int id, const ir::Node& node) const {
    auto position = std::find(graph_.parameters.begin(), graph_.parameters.end(), id);
    if (position == graph_.parameters.end())
      internal_error(node, "node %" + std::to_string(id) + " is not in the parameter list");
    const Value& input = inputs_[static_cast<std::size_t>(position - graph_.parameters.begin())];
    bool shape_matches = input.shape.rank() == node.type.shape.rank();
    for (int axis = 0; shape_matches && axis < input.shape.rank(); ++axis)
      shape_matches = node.type.shape[axis] == Shape::dynamic || node.type.shape[axis] == input.shape[axis];
    if (input.dtype != node.type.dtype || !shape_matches)
      throw ValueError("reference::evaluate",
                       "input " + std::to_string(position - graph_.parameters.begin()) + " is " +
                           ir::Type{input.dtype, input.shape}.to_string() + ", the parameter is " +
                           node.type.to_string(),
                       node.location);
    return input;
  }

  // Every element is the value; an f32 constant holds the float nearest it.
  Value constant(const ir::Node& node, const ir::Type& type) const {
    Value value = make_value(type.dtype, type.shape);
    for (std::size_t i = 0; i < value.values.size(); ++i) {
      if (is_float(value.dtype))
        value.values[i] = round_to(node.attributes.float_value, value.dtype);
      else
        value.integers[i] = wrap(bits_of(node.attributes.int_value), value.dtype);
    }
    return value;
  }

  // Element [i0, i1, ...] is i_axis.
  Value iota(const ir::Node& node, const ir::Type& type) const {
    Value value = make_value(type.dtype, type.shape);
    auto axis = static_cast<std::size_t>(node.attributes.axis);
    std::size_t flat = 0;
    for_each_index(value.shape, [&](std::span<const std::int64_t> index) {
      if (is_float(value.dtype))
        value.values[flat] = static_cast<double>(index[axis]);
      else
        value.integers[flat] = wrap(bits_of(index[axis]), value.dtype);
      ++flat;
    });
    return value;
  }

  Value unary(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    Value value = make_value(type.dtype, type.shape);
    if (is_float(value.dtype)) {
      value.magnitudes.assign(value.values.size(), 0.0);
      for (std::size_t i = 0; i < value.values.size(); ++i) {
        double x = input.values[i];
        value.values[i] = unary_float(node, x);
        value.magnitudes[i] =
            unary_magnitude(node.op, x, value.values[i], input.magnitude(static_cast<std::int64_t>(i)));
      }
    } else {
      for (std::size_t i = 0; i < value.integers.size(); ++i)
        value.integers[i] = unary_integer(node, input.integers[i], value.dtype);
    }
    return value;
  }

  // Float -> float rounds to the target (the one rounding a float64 reference
  // keeps: it is what cast means); float -> integer truncates toward zero and
  // saturates, NaN -> 0; integer -> integer wraps; anything -> bool is != 0
  // (NaN -> true); integer -> f32 rounds once, to nearest.
  Value cast(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    DType from = input.dtype, to = type.dtype;
    Value value = make_value(to, type.shape);
    if (is_float(to) && is_float(from)) value.magnitudes.assign(value.values.size(), 0.0);
    for (std::size_t i = 0; i < value.values.size(); ++i) {
      if (to == DType::boolean) {
        value.integers[i] = is_float(from) ? (input.values[i] != 0 ? 1 : 0) : (input.integers[i] != 0 ? 1 : 0);
      } else if (!is_float(to)) {
        value.integers[i] =
            is_float(from) ? float_to_integer(input.values[i], to) : wrap(bits_of(input.integers[i]), to);
      } else if (is_float(from)) {
        value.values[i] = round_to(input.values[i], to);
        value.magnitudes[i] = input.magnitude(static_cast<std::int64_t>(i));
      } else {
        value.values[i] = to == DType::f32 ? static_cast<double>(static_cast<float>(input.integers[i]))
                                           : round_to(static_cast<double>(input.integers[i]), to);
      }
    }
    return value;
  }

  Value binary(const ir::Node& node, const ir::Type& type) const {
    const Value& a = operand(node, 0);
    const Value& b = operand(node, 1);
    Value value = make_value(type.dtype, type.shape);
    std::vector<std::int64_t> map_a = broadcast_map(node, a.shape, value.shape);
    std::vector<std::int64_t> map_b = broadcast_map(node, b.shape, value.shape);
    bool float_operands = is_float(a.dtype);
    if (float_operands && !is_comparison(node.op)) value.magnitudes.assign(value.values.size(), 0.0);
    for (std::size_t i = 0; i < value.values.size(); ++i) {
      std::int64_t index_a = map_a[i], index_b = map_b[i];
      if (is_comparison(node.op)) {
        bool result = float_operands ? compare_elements(node.op, a.values[static_cast<std::size_t>(index_a)],
                                                        b.values[static_cast<std::size_t>(index_b)])
                                     : compare_elements(node.op, a.integers[static_cast<std::size_t>(index_a)],
                                                        b.integers[static_cast<std::size_t>(index_b)]);
        value.integers[i] = result ? 1 : 0;
      } else if (float_operands) {
        double x = a.values[static_cast<std::size_t>(index_a)], y = b.values[static_cast<std::size_t>(index_b)];
        value.values[i] = binary_float(node, x, y);
        value.magnitudes[i] =
            binary_magnitude(node.op, x, y, value.values[i], a.magnitude(index_a), b.magnitude(index_b));
      } else {
        value.integers[i] = binary_integer(node, a.integers[static_cast<std::size_t>(index_a)],
                                           b.integers[static_cast<std::size_t>(index_b)], value.dtype);
      }
    }
    return value;
  }

  // where(condition, x, y): x where condition is true, else y; broadcasting.
  Value where(const ir::Node& node, const ir::Type& type) const {
    const Value& condition = operand(node, 0);
    const Value& x = operand(node, 1);
    const Value& y = operand(node, 2);
    Value value = make_value(type.dtype, type.shape);
    std::vector<std::int64_t> map_condition = broadcast_map(node, condition.shape, value.shape);
    std::vector<std::int64_t> map_x = broadcast_map(node, x.shape, value.shape);
    std::vector<std::int64_t> map_y = broadcast_map(node, y.shape, value.shape);
    if (is_float(value.dtype)) value.magnitudes.assign(value.values.size(), 0.0);
    for (std::size_t i = 0; i < value.values.size(); ++i) {
      bool take_x = condition.integers[static_cast<std::size_t>(map_condition[i])] != 0;
      const Value& chosen = take_x ? x : y;
      auto index = static_cast<std::size_t>(take_x ? map_x[i] : map_y[i]);
      if (is_float(value.dtype)) {
        value.values[i] = chosen.values[index];
        value.magnitudes[i] = chosen.magnitude(static_cast<std::int64_t>(index));
      } else {
        value.integers[i] = chosen.integers[index];
      }
    }
    return value;
  }

  // For each input element, the flat index of the result element it reduces
  // into. (keepdims does not matter: size-1 axes do not change row-major
  // offsets.)
  static std::vector<std::int64_t> reduction_map(const Shape& input, const std::vector<std::int64_t>& axes) {
    std::vector<std::int64_t> kept_dims;
    std::vector<bool> reduced(static_cast<std::size_t>(input.rank()), false);
    for (std::int64_t axis : axes) reduced[static_cast<std::size_t>(axis)] = true;
    for (int axis = 0; axis < input.rank(); ++axis)
      if (!reduced[static_cast<std::size_t>(axis)]) kept_dims.push_back(input[axis]);
    std::vector<std::int64_t> kept_strides = row_major_strides(Shape(kept_dims));
    std::vector<std::int64_t> strides(static_cast<std::size_t>(input.rank()), 0);
    std::size_t kept = 0;
    for (int axis = 0; axis < input.rank(); ++axis)
      if (!reduced[static_cast<std::size_t>(axis)]) strides[static_cast<std::size_t>(axis)] = kept_strides[kept++];
    return affine_map(input, 0, strides);
  }

  // Reductions over sorted attributes.axes. Empty: sum 0, prod 1, mean NaN,
  // max -inf (the dtype's lowest for integers, false for bool), min +inf
  // (highest, true). A NaN anywhere makes max/min NaN. Integer sum and prod
  // wrap. A reduction of one element (no axes, or axes of size 1) is that
  // element, as the kernels and XLA have it: a sum of -0 alone stays -0 where
  // 0 + -0 would give +0.
  Value reduce(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    Value value = make_value(type.dtype, type.shape);
    std::vector<std::int64_t> map = reduction_map(input.shape, node.attributes.axes);
    double count = 1;
    for (std::int64_t axis : node.attributes.axes) count *= static_cast<double>(input.shape[static_cast<int>(axis)]);
    const double infinity = std::numeric_limits<double>::infinity();
    bool floating = is_float(value.dtype);
    std::vector<std::uint64_t> integer_accumulators(value.values.size());
    for (std::size_t out = 0; out < value.values.size(); ++out) {
      switch (node.op) {
        case Op::reduce_prod:
          value.values[out] = 1;
          integer_accumulators[out] = 1;
          break;
        case Op::reduce_max:
          value.values[out] = -infinity;
          if (!floating) value.integers[out] = lowest(value.dtype);
          break;
        case Op::reduce_min:
          value.values[out] = infinity;
          if (!floating) value.integers[out] = highest(value.dtype);
          break;
        default: break;
      }
    }
    if (floating) value.magnitudes.assign(value.values.size(), node.op == Op::reduce_prod ? 1.0 : 0.0);

    for (std::size_t in = 0; in < input.values.size(); ++in) {
      auto out = static_cast<std::size_t>(map[in]);
      if (floating) {
        double x = input.values[in];
        double error = input.magnitude(static_cast<std::int64_t>(in));
        double& result = value.values[out];
        double& magnitude = value.magnitudes[out];
        switch (node.op) {
          case Op::reduce_sum:
          case Op::reduce_mean:
            result = count == 1 ? x : result + x;
            magnitude += std::fabs(x) + error;
            break;
          case Op::reduce_prod:
            result *= x;
            magnitude *= std::fabs(x) + error;
            break;
          case Op::reduce_max:
            if (std::isnan(x) || x > result) result = std::isnan(result) ? result : x;
            magnitude = std::max(magnitude, error);
            break;
          case Op::reduce_min:
            if (std::isnan(x) || x < result) result = std::isnan(result) ? result : x;
            magnitude = std::max(magnitude, error);
            break;
          default: internal_error(node, "is not a reduction");
        }
      } else {
        std::int64_t x = input.integers[in];
        switch (node.op) {
          case Op::reduce_sum: integer_accumulators[out] += bits_of(x); break;
          case Op::reduce_prod: integer_accumulators[out] *= bits_of(x); break;
          case Op::reduce_max: value.integers[out] = std::max(value.integers[out], x); break;
          case Op::reduce_min: value.integers[out] = std::min(value.integers[out], x); break;
          default: internal_error(node, "is not defined on " + std::string(to_string(value.dtype)));
        }
      }
    }

    if (node.op == Op::reduce_mean) {
      for (std::size_t out = 0; out < value.values.size(); ++out) {
        value.values[out] /= count;  // 0 / 0 = NaN for an empty mean
        value.magnitudes[out] /= count;
      }
    }
    if (!floating && (node.op == Op::reduce_sum || node.op == Op::reduce_prod))
      for (std::size_t out = 0; out < value.integers.size(); ++out)
        value.integers[out] = wrap(integer_accumulators[out], value.dtype);
    return value;
  }

  // cumsum, cumprod, cummax, cummin along attributes.axis: element i combines elements 0..i in order (reverse:
  // i..n-1 from the end); exclusive shifts that by one, the identity first (sum 0, product 1, max -inf or the
  // dtype's lowest, min +inf or highest). The first element combined is itself, as a reduction of one element is:
  // a running sum that starts at -0 is -0. Max and min keep the first NaN from where it appears. Integer sums and
  // products wrap. Errors as the reductions': a running sum |t| + E(t), a running product of |t| + E(t), the
  // largest E so far.
  Value scan(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    Value value = make_value(type.dtype, type.shape);
    const auto axis = static_cast<int>(node.attributes.axis);
    std::int64_t outer = 1, inner = 1;
    for (int a = 0; a < axis; ++a) outer *= input.shape[a];
    for (int a = axis + 1; a < input.shape.rank(); ++a) inner *= input.shape[a];
    const std::int64_t length = input.shape[axis];
    const bool floating = is_float(value.dtype);
    if (floating) value.magnitudes.assign(value.values.size(), 0.0);
    const double infinity = std::numeric_limits<double>::infinity();
    for (std::int64_t line = 0; line < outer * inner; ++line) {
      const std::int64_t base = line / inner * length * inner + line % inner;
      double result = node.op == Op::cumprod  ? 1
                      : node.op == Op::cummax ? -infinity
                      : node.op == Op::cummin ? infinity
                                              : 0;
      double magnitude = node.op == Op::cumprod ? 1 : 0;
      std::uint64_t accumulator = node.op == Op::cumprod ? 1 : 0;
      std::int64_t extreme =
          node.op == Op::cummax ? (floating ? 0 : lowest(value.dtype)) : (floating ? 0 : highest(value.dtype));
      for (std::int64_t step = 0; step < length; ++step) {
        const auto at = static_cast<std::size_t>(base + (node.attributes.reverse ? length - 1 - step : step) * inner);
        auto write = [&] {
          if (floating) {
            value.values[at] = result;
            value.magnitudes[at] = magnitude;
          } else {
            value.integers[at] =
                node.op == Op::cumsum || node.op == Op::cumprod ? wrap(accumulator, value.dtype) : extreme;
          }
        };
        if (node.attributes.exclusive) write();
        if (floating) {
          const double x = input.values[at], error = input.magnitude(static_cast<std::int64_t>(at));
          switch (node.op) {
            case Op::cumsum:
              result = step == 0 ? x : result + x;
              magnitude += std::fabs(x) + error;
              break;
            case Op::cumprod:
              result *= x;
              magnitude *= std::fabs(x) + error;
              break;
            case Op::cummax:
              if (std::isnan(x) || x > result) result = std::isnan(result) ? result : x;
              magnitude = std::max(magnitude, error);
              break;
            case Op::cummin:
              if (std::isnan(x) || x < result) result = std::isnan(result) ? result : x;
              magnitude = std::max(magnitude, error);
              break;
            default:
              internal_error(node, "is not a scan");
          }
        } else {
          const std::int64_t x = input.integers[at];
          switch (node.op) {
            case Op::cumsum:
              accumulator += bits_of(x);
              break;
            case Op::cumprod:
              accumulator *= bits_of(x);
              break;
            case Op::cummax:
              extreme = std::max(extreme, x);
              break;
            case Op::cummin:
              extreme = std::min(extreme, x);
              break;
            default:
              internal_error(node, "is not a scan");
          }
        }
        if (!node.attributes.exclusive) write();
      }
    }
    return value;
  }

  // The index of the first maximum along attributes.axis; a NaN counts as
  // larger than everything (so the first NaN wins).
  // argmax, argmin: the index of the first largest (smallest) element along the axis; the first NaN wins.
  Value arg_extreme(const ir::Node& node, const ir::Type& type) const {
    const bool smallest = node.op == Op::argmin;
    const Value& input = operand(node, 0);
    Value value = make_value(type.dtype, type.shape);
    std::vector<std::int64_t> map = reduction_map(input.shape, {node.attributes.axis});
    auto axis = static_cast<std::size_t>(node.attributes.axis);
    std::vector<bool> seen(value.values.size(), false);
    std::vector<std::size_t> best(value.values.size(), 0);  // flat input index of the best so far
    std::size_t in = 0;
    for_each_index(input.shape, [&](std::span<const std::int64_t> index) {
      auto out = static_cast<std::size_t>(map[in]);
      bool better;
      if (!seen[out]) {
        better = true;
      } else if (is_float(input.dtype)) {
        double x = input.values[in], current = input.values[best[out]];
        better = !std::isnan(current) && (std::isnan(x) || (smallest ? x < current : x > current));
      } else {
        const std::int64_t x = input.integers[in], current = input.integers[best[out]];
        better = smallest ? x < current : x > current;
      }
      if (better) {
        seen[out] = true;
        best[out] = in;
        value.integers[out] = index[axis];
      }
      ++in;
    });
    return value;
  }

  // Batched matmul: [..., m, k] x [..., k, n] -> [..., m, n] (the last two
  // axes swapped by transpose_a / transpose_b), batch axes broadcast. The
  // plain triple loop, accumulating in double (floats) or wrapping uint64.
  Value matmul(const ir::Node& node, const ir::Type& type) const {
    const Value& a = operand(node, 0);
    const Value& b = operand(node, 1);
    Value value = make_value(type.dtype, type.shape);
    bool transpose_a = node.attributes.transpose_a, transpose_b = node.attributes.transpose_b;
    int rank_a = a.shape.rank(), rank_b = b.shape.rank(), rank = value.shape.rank();
    std::vector<std::int64_t> strides_a = row_major_strides(a.shape), strides_b = row_major_strides(b.shape);
    auto stride_a = [&](int axis) { return strides_a[static_cast<std::size_t>(axis)]; };
    auto stride_b = [&](int axis) { return strides_b[static_cast<std::size_t>(axis)]; };
    // Operand element (row, column) of the (possibly transposed) matrix.
    std::int64_t a_row_stride = transpose_a ? stride_a(rank_a - 1) : stride_a(rank_a - 2);
    std::int64_t a_k_stride = transpose_a ? stride_a(rank_a - 2) : stride_a(rank_a - 1);
    std::int64_t b_k_stride = transpose_b ? stride_b(rank_b - 1) : stride_b(rank_b - 2);
    std::int64_t b_column_stride = transpose_b ? stride_b(rank_b - 2) : stride_b(rank_b - 1);
    std::int64_t depth = transpose_a ? a.shape[rank_a - 2] : a.shape[rank_a - 1];
    std::int64_t depth_b = transpose_b ? b.shape[rank_b - 1] : b.shape[rank_b - 2];
    if (depth != depth_b) internal_error(node, "contracting dimensions differ");

    // Offset of the batch part of an output index in an operand (aligned at
    // the right; size-1 batch axes broadcast).
    auto batch_offset = [&](std::span<const std::int64_t> index, const Shape& shape,
                            const std::vector<std::int64_t>& strides) {
      int batch_rank = shape.rank() - 2, offset = (rank - 2) - batch_rank;
      std::int64_t result = 0;
      for (int axis = 0; axis < batch_rank; ++axis)
        if (shape[axis] != 1)
          result += index[static_cast<std::size_t>(axis + offset)] * strides[static_cast<std::size_t>(axis)];
      return result;
    };

    bool floating = is_float(value.dtype);
    if (floating) value.magnitudes.assign(value.values.size(), 0.0);
    std::size_t out = 0;
    for_each_index(value.shape, [&](std::span<const std::int64_t> index) {
      std::int64_t row = index[static_cast<std::size_t>(rank - 2)], column = index[static_cast<std::size_t>(rank - 1)];
      std::int64_t base_a = batch_offset(index, a.shape, strides_a) + row * a_row_stride;
      std::int64_t base_b = batch_offset(index, b.shape, strides_b) + column * b_column_stride;
      double sum = 0, magnitude = 0;
      std::uint64_t integer_sum = 0;
      for (std::int64_t k = 0; k < depth; ++k) {
        std::int64_t index_a = base_a + k * a_k_stride, index_b = base_b + k * b_k_stride;
        if (floating) {
          double x = a.values[static_cast<std::size_t>(index_a)], y = b.values[static_cast<std::size_t>(index_b)];
          sum += x * y;
          magnitude += (std::fabs(x) + a.magnitude(index_a)) * (std::fabs(y) + b.magnitude(index_b));
        } else {
          integer_sum += bits_of(a.integers[static_cast<std::size_t>(index_a)]) *
                         bits_of(b.integers[static_cast<std::size_t>(index_b)]);
        }
      }
      if (floating) {
        value.values[out] = sum;
        value.magnitudes[out] = magnitude;
      } else {
        value.integers[out] = wrap(integer_sum, value.dtype);
      }
      ++out;
    });
    return value;
  }

  // Result element i is input element sources[i] (values, integers and
  // magnitudes move together).
  static Value gather(const Value& input, DType dtype, const Shape& shape, const std::vector<std::int64_t>& sources) {
    Value value = make_value(dtype, shape);
    if (!input.magnitudes.empty()) value.magnitudes.assign(value.values.size(), 0.0);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      auto source = static_cast<std::size_t>(sources[i]);
      value.values[i] = input.values[source];
      if (!value.integers.empty()) value.integers[i] = input.integers[source];
      if (!value.magnitudes.empty()) value.magnitudes[i] = input.magnitudes[source];
    }
    return value;
  }

  // reshape, expand_dims and squeeze keep the row-major order of elements.
  Value reshape(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    const Shape& shape = type.shape;
    if (shape.numel() != input.numel()) internal_error(node, "changes the element count");
    std::vector<std::int64_t> sources(static_cast<std::size_t>(input.numel()));
    for (std::size_t i = 0; i < sources.size(); ++i) sources[i] = static_cast<std::int64_t>(i);
    return gather(input, type.dtype, shape, sources);
  }

  // Result axis i is input axis axes[i].
  Value transpose(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    const Shape& shape = type.shape;
    std::vector<std::int64_t> input_strides = row_major_strides(input.shape);
    std::vector<std::int64_t> strides;
    for (std::int64_t axis : node.attributes.axes) strides.push_back(input_strides[static_cast<std::size_t>(axis)]);
    return gather(input, type.dtype, shape, affine_map(shape, 0, strides));
  }

  Value broadcast_to(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    const Shape& shape = type.shape;
    return gather(input, type.dtype, shape, broadcast_map(node, input.shape, shape));
  }

  // Result element j reads input element start + j * step on every axis;
  // the result shape (the count per axis) is the node's type.
  Value slice(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    const Shape& shape = type.shape;
    const auto& start = node.attributes.start;
    const auto& step = node.attributes.step;
    std::vector<std::int64_t> input_strides = row_major_strides(input.shape);
    std::int64_t base = 0;
    std::vector<std::int64_t> strides;
    for (int axis = 0; axis < input.shape.rank(); ++axis) {
      auto position = static_cast<std::size_t>(axis);
      if (shape[axis] > 0) {
        std::int64_t last = start[position] + (shape[axis] - 1) * step[position];
        if (start[position] < 0 || start[position] >= input.shape[axis] || last < 0 || last >= input.shape[axis])
          internal_error(node, "reads outside axis " + std::to_string(axis));
      }
      base += start[position] * input_strides[position];
      // An axis of one element never moves by its step, which may then be
      // anything (even near 2^63: step * stride would overflow).
      strides.push_back(shape[axis] > 1 ? step[position] * input_strides[position] : 0);
    }
    return gather(input, type.dtype, shape, affine_map(shape, base, strides));
  }

  // Operands one after another along attributes.axis.
  Value concat(const ir::Node& node, const ir::Type& type) const {
    const Shape& shape = type.shape;
    Value value = make_value(type.dtype, shape);
    auto axis = static_cast<std::size_t>(node.attributes.axis);
    bool any_magnitudes = false;
    for (std::size_t i = 0; i < node.operands.size(); ++i)
      any_magnitudes = any_magnitudes || !operand(node, i).magnitudes.empty();
    if (any_magnitudes) value.magnitudes.assign(value.values.size(), 0.0);
    std::vector<std::int64_t> result_strides = row_major_strides(shape);
    std::int64_t axis_offset = 0;
    for (std::size_t i = 0; i < node.operands.size(); ++i) {
      const Value& input = operand(node, i);
      std::size_t in = 0;
      for_each_index(input.shape, [&](std::span<const std::int64_t> index) {
        std::int64_t out = axis_offset * result_strides[axis];
        for (std::size_t d = 0; d < index.size(); ++d) out += index[d] * result_strides[d];
        auto position = static_cast<std::size_t>(out);
        value.values[position] = input.values[in];
        if (!value.integers.empty()) value.integers[position] = input.integers[in];
        if (any_magnitudes) value.magnitudes[position] = input.magnitude(static_cast<std::int64_t>(in));
        ++in;
      });
      axis_offset += input.shape[static_cast<int>(axis)];
    }
    return value;
  }

  // Slices of operand 0 along attributes.axis, picked by operand 1's integers.
  Value gather_along_axis(const ir::Node& node, const ir::Type& type) const {
    const Value& params = operand(node, 0);
    const Value& indices = operand(node, 1);
    const auto axis = static_cast<int>(node.attributes.axis);
    const std::int64_t size = params.shape[axis], count = indices.numel();
    std::int64_t inner = 1;
    for (int d = axis + 1; d < params.shape.rank(); ++d) inner *= params.shape[d];
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t index = indices.integers[static_cast<std::size_t>(i)];
      if (index < -size || index >= size) throw ir::gather_index_error(node, index, i, size);
    }
    std::vector<std::int64_t> sources(static_cast<std::size_t>(type.shape.numel()));
    for (std::size_t r = 0; r < sources.size(); ++r) {
      const auto position = static_cast<std::int64_t>(r);
      const std::int64_t outer = position / (count * inner), element = position % inner;
      std::int64_t index = indices.integers[static_cast<std::size_t>(position / inner % count)];
      if (index < 0) index += size;
      sources[r] = (outer * size + index) * inner + element;
    }
    return gather(params, type.dtype, type.shape, sources);
  }

  // take_along_axis: result element [o, j, i] (as [outer, count, inner] around the axis) is values[o, index, i] for
  // index = indices[o, j, i], negative ones counted from the end; one outside [-size, size) is an error.
  Value take_along_axis(const ir::Node& node, const ir::Type& type) const {
    const Value& values = operand(node, 0);
    const Value& indices = operand(node, 1);
    const auto axis = static_cast<int>(node.attributes.axis);
    const std::int64_t size = values.shape[axis], count = type.shape[axis];
    std::int64_t inner = 1;
    for (int d = axis + 1; d < values.shape.rank(); ++d) inner *= values.shape[d];
    std::vector<std::int64_t> sources(static_cast<std::size_t>(type.shape.numel()));
    for (std::size_t r = 0; r < sources.size(); ++r) {
      const auto position = static_cast<std::int64_t>(r);
      std::int64_t index = indices.integers[r];
      if (index < -size || index >= size) throw ir::gather_index_error(node, index, position, size);
      if (index < 0) index += size;
      sources[r] = (position / (count * inner) * size + index) * inner + position % inner;
    }
    return gather(values, type.dtype, type.shape, sources);
  }

  // scatter_add: the operand, with update [o, j, i] (as [outer, count, inner] around the axis) added to element
  // [o, indices[j], i], in index order; integers wrap. An element that receives updates has the error of a sum:
  // |t| + E(t) over the operand's element and the updates.
  Value scatter_add(const ir::Node& node, const ir::Type& type) const {
    const Value& operand_value = operand(node, 0);
    const Value& indices = operand(node, 1);
    const Value& updates = operand(node, 2);
    const auto axis = static_cast<int>(node.attributes.axis);
    const std::int64_t size = operand_value.shape[axis], count = indices.numel();
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t index = indices.integers[static_cast<std::size_t>(j)];
      if (index < -size || index >= size) throw ir::gather_index_error(node, index, j, size);
    }
    Value value = operand_value;
    value.dtype = type.dtype;
    const bool floating = is_float(type.dtype);
    if (floating) value.magnitudes.assign(value.values.size(), 0.0);
    for (std::size_t e = 0; floating && e < value.values.size(); ++e)
      value.magnitudes[e] = operand_value.magnitude(static_cast<std::int64_t>(e));
    std::vector<bool> updated(value.values.size(), false);
    std::int64_t inner = 1;
    for (int d = axis + 1; d < operand_value.shape.rank(); ++d) inner *= operand_value.shape[d];
    for (std::int64_t u = 0; u < updates.numel(); ++u) {
      const std::int64_t outer = u / (count * inner), element = u % inner;
      std::int64_t index = indices.integers[static_cast<std::size_t>(u / inner % count)];
      if (index < 0) index += size;
      const auto target = static_cast<std::size_t>((outer * size + index) * inner + element);
      const auto from = static_cast<std::size_t>(u);
      if (floating) {
        if (!updated[target]) value.magnitudes[target] += std::fabs(value.values[target]);
        value.values[target] += updates.values[from];
        value.magnitudes[target] += std::fabs(updates.values[from]) + updates.magnitude(u);
      } else {
        value.integers[target] = wrap(bits_of(value.integers[target]) + bits_of(updates.integers[from]), type.dtype);
      }
      updated[target] = true;
    }
    return value;
  }

  // sort, argsort, top_k: each line's positions put in order by std::stable_sort with the ordering written out
  // plainly (NaN above every number, -0 equal to +0, so equal elements keep their order), not by the kernels'
  // integer keys. Descending (and top_k) compares the other way round, so ties stay in index order too.
  Value ordering(const ir::Node& node, const ir::Type& type) const {
    const Value& input = operand(node, 0);
    const int rank = input.shape.rank();
    const auto axis = node.op == Op::top_k ? rank - 1 : static_cast<int>(node.attributes.axis);
    const bool descending = node.op == Op::top_k || node.attributes.descending;
    const std::int64_t length = input.shape[axis], count = type.shape[axis];
    std::int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= input.shape[d];
    for (int d = axis + 1; d < rank; ++d) inner *= input.shape[d];
    const bool floating = is_float(input.dtype);
    auto less = [&](std::int64_t a, std::int64_t b) {
      const auto i = static_cast<std::size_t>(a), j = static_cast<std::size_t>(b);
      if (!floating) return input.integers[i] < input.integers[j];
      const double x = input.values[i], y = input.values[j];
      if (std::isnan(x)) return false;
      return std::isnan(y) || x < y;
    };
    std::vector<std::int64_t> sources(static_cast<std::size_t>(type.shape.numel())), positions, line;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) {
        line.clear();
        for (std::int64_t j = 0; j < length; ++j) line.push_back((o * length + j) * inner + i);
        std::stable_sort(line.begin(), line.end(),
                         [&](std::int64_t a, std::int64_t b) { return descending ? less(b, a) : less(a, b); });
        for (std::int64_t j = 0; j < count; ++j)
          sources[static_cast<std::size_t>((o * count + j) * inner + i)] = line[static_cast<std::size_t>(j)];
      }
    if (node.op == Op::sort) return gather(input, type.dtype, type.shape, sources);
    Value value = make_value(type.dtype, type.shape);
    for (std::size_t r = 0; r < sources.size(); ++r) value.integers[r] = sources[r] / inner % length;
    return value;
  }

  Value host_call(const ir::Node& node) const {
    auto index = static_cast<std::size_t>(node.attributes.index);
    if (node.attributes.index < 0 || index >= graph_.host_functions.size() || !graph_.host_functions[index])
      internal_error(node, "callback " + std::to_string(node.attributes.index) + " is not in the graph's table");
    std::vector<runtime::Array> arguments;
    for (std::size_t i = 0; i < node.operands.size(); ++i) arguments.push_back(to_array(operand(node, i)));
    runtime::Array result = graph_.host_functions[index]->call(arguments);
    bool shape_matches = result.shape.rank() == node.type.shape.rank();
    for (int axis = 0; shape_matches && axis < result.shape.rank(); ++axis)
      shape_matches = node.type.shape[axis] == Shape::dynamic || node.type.shape[axis] == result.shape[axis];
    if (result.dtype != node.type.dtype || !shape_matches)
      throw ValueError("host_call",
                       "the callback returned " + ir::Type{result.dtype, result.shape}.to_string() + ", declared " +
                           node.type.to_string(),
                       node.location);
    return from_array(result);
  }

  // The multi-indices of the nonzero elements (NaN counts as nonzero), in
  // row-major order: i64[count, rank].
  Value nonzero(const ir::Node& node) const {
    if (node.operands.size() != 1) internal_error(node, "needs one operand");
    const Value& input = operand(node, 0);
    std::vector<std::int64_t> coordinates;
    std::int64_t count = 0;
    std::size_t in = 0;
    for_each_index(input.shape, [&](std::span<const std::int64_t> index) {
      bool nonzero = is_float(input.dtype) ? input.values[in] != 0 : input.integers[in] != 0;
      if (nonzero) {
        coordinates.insert(coordinates.end(), index.begin(), index.end());
        ++count;
      }
      ++in;
    });
    Value value = make_value(DType::i64, Shape({count, static_cast<std::int64_t>(input.shape.rank())}));
    value.integers = std::move(coordinates);
    return value;
  }

  // ---- Control flow: each region evaluated by an evaluator of its own, on Values (nothing rounded between) ----

  std::vector<Value> run_region(const ir::Node& node, std::size_t region, std::vector<Value> inputs) const {
    if (region >= node.regions.size()) internal_error(node, "has no region " + std::to_string(region));
    return Evaluator(node.regions[region], std::move(inputs)).run();
  }

  static std::int64_t scalar_integer(const ir::Node& node, const Value& scalar) {
    if (scalar.integers.size() != 1) internal_error(node, "needs an integer or bool scalar");
    return scalar.integers[0];
  }

  // Results 1.. are kept for the `result` nodes; result 0 is the node's value.
  Value control(int id, const ir::Node& node) {
    std::vector<Value> operands;
    for (std::size_t i = 0; i < node.operands.size(); ++i) operands.push_back(operand(node, i));
    std::vector<Value> results;
    const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
    if (node.op == Op::cond) {
      // An index out of range takes the nearest branch (lax.switch clamps).
      const auto last = static_cast<std::int64_t>(node.regions.size()) - 1;
      const std::int64_t branch = std::clamp<std::int64_t>(scalar_integer(node, operands.at(0)), 0, last);
      operands.erase(operands.begin());
      results = run_region(node, static_cast<std::size_t>(branch), std::move(operands));
    } else if (node.op == Op::while_loop) {
      while (scalar_integer(node, run_region(node, 0, operands).at(0)) != 0) {
        std::vector<Value> carries = run_region(node, 1, operands);
        std::move(carries.begin(), carries.end(), operands.begin());
      }
      operands.resize(carried);
      results = std::move(operands);
    } else {
      results = scan_loop(id, node, std::move(operands));
    }
    if (results.empty()) internal_error(node, "has no results");
    control_results_[id] = results;
    return results[0];
  }

  // Steps through the sequences (rows of their leading axis), stacking each step's outputs.
  std::vector<Value> scan_loop(int id, const ir::Node& node, std::vector<Value> inputs) const {
    const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
    const auto sequences = static_cast<std::size_t>(node.attributes.sequence_count);
    const std::int64_t length = node.attributes.length;
    const std::vector<ir::Type> types = ir::result_types(graph_, id);
    const std::vector<Value> whole(inputs.begin() + static_cast<std::ptrdiff_t>(carried),
                                   inputs.begin() + static_cast<std::ptrdiff_t>(carried + sequences));
    std::vector<Value> results;
    for (const ir::Type& type : types) results.push_back(make_value(type.dtype, type.shape));
    for (std::int64_t count = 0; count < length; ++count) {
      const std::int64_t step = node.attributes.reverse ? length - 1 - count : count;
      for (std::size_t sequence = 0; sequence < sequences; ++sequence)
        inputs[carried + sequence] = row(whole[sequence], step);
      std::vector<Value> outputs = run_region(node, 0, inputs);
      for (std::size_t index = carried; index < outputs.size() && index < results.size(); ++index)
        put_row(results[index], outputs[index], step);
      std::move(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(carried), inputs.begin());
    }
    std::move(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(carried), results.begin());
    return results;
  }

  // Row `step` of `value`'s leading axis, as a value of the remaining axes.
  static Value row(const Value& value, std::int64_t step) {
    Value element = make_value(value.dtype, Shape(value.shape.dims().subspan(1)));
    const auto count = static_cast<std::size_t>(element.numel());
    const std::size_t begin = static_cast<std::size_t>(step) * count;
    std::copy_n(value.values.begin() + static_cast<std::ptrdiff_t>(begin), count, element.values.begin());
    if (!value.integers.empty())
      std::copy_n(value.integers.begin() + static_cast<std::ptrdiff_t>(begin), count, element.integers.begin());
    if (!value.magnitudes.empty())
      element.magnitudes.assign(value.magnitudes.begin() + static_cast<std::ptrdiff_t>(begin),
                                value.magnitudes.begin() + static_cast<std::ptrdiff_t>(begin + count));
    return element;
  }

  // Writes `element` as row `step` of `stacked`.
  static void put_row(Value& stacked, const Value& element, std::int64_t step) {
    const auto count = static_cast<std::size_t>(element.numel());
    const std::size_t begin = static_cast<std::size_t>(step) * count;
    std::copy_n(element.values.begin(), count, stacked.values.begin() + static_cast<std::ptrdiff_t>(begin));
    if (!element.integers.empty())
      std::copy_n(element.integers.begin(), count, stacked.integers.begin() + static_cast<std::ptrdiff_t>(begin));
    if (!element.magnitudes.empty()) {
      stacked.magnitudes.resize(stacked.values.size(), 0.0);
      std::copy_n(element.magnitudes.begin(), count, stacked.magnitudes.begin() + static_cast<std::ptrdiff_t>(begin));
    }
  }

  Value result(const ir::Node& node) const {
    const auto found = control_results_.find(node.operands.at(0));
    if (found == control_results_.end()) internal_error(node, "reads a value that is not a control node's");
    const auto index = static_cast<std::size_t>(node.attributes.index);
    if (index >= found->second.size()) internal_error(node, "names a result the control node does not have");
    return found->second[index];
  }

  const ir::Graph& graph_;
  std::vector<Value> inputs_;
  std::vector<Value> values_;
  std::map<int, std::vector<Value>> control_results_;
};

}  // namespace

double Value::magnitude(std::int64_t index) const {
  return magnitudes.empty() ? 0.0 : magnitudes[static_cast<std::size_t>(index)];
}

Value from_array(const runtime::Array& array) {
  if (!array.device().is_cpu())
    throw DeviceError("reference::from_array",
                      "the reference evaluator reads host memory; the array is on " + array.device().to_string(),
                      std::string());
  Value value = make_value(array.dtype, array.shape);
  auto count = static_cast<std::size_t>(array.shape.numel());
  switch (array.dtype) {
    case DType::boolean:
      for (std::size_t i = 0; i < count; ++i) value.integers[i] = array.data<std::uint8_t>()[i] != 0 ? 1 : 0;
      break;
    case DType::i32:
      for (std::size_t i = 0; i < count; ++i) value.integers[i] = array.data<std::int32_t>()[i];
      break;
    case DType::i64:
      for (std::size_t i = 0; i < count; ++i) value.integers[i] = array.data<std::int64_t>()[i];
      break;
    case DType::f32:
      for (std::size_t i = 0; i < count; ++i) value.values[i] = array.data<float>()[i];
      break;
    case DType::f64:
      for (std::size_t i = 0; i < count; ++i) value.values[i] = array.data<double>()[i];
      break;
    case DType::bf16:
      for (std::size_t i = 0; i < count; ++i) value.values[i] = to_float(bfloat16{array.data<std::uint16_t>()[i]});
      break;
    case DType::f16:
      for (std::size_t i = 0; i < count; ++i) value.values[i] = to_float(float16{array.data<std::uint16_t>()[i]});
      break;
  }
  finish(value);
  return value;
}

runtime::Array to_array(const Value& value) {
  runtime::Array array = runtime::allocate_array(value.dtype, value.shape);
  auto count = static_cast<std::size_t>(value.shape.numel());
  switch (value.dtype) {
    case DType::boolean:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<std::uint8_t>()[i] = value.integers[i] != 0 ? 1 : 0;
      break;
    case DType::i32:
      for (std::size_t i = 0; i < count; ++i)
        array.mutable_data<std::int32_t>()[i] = static_cast<std::int32_t>(wrap(bits_of(value.integers[i]), DType::i32));
      break;
    case DType::i64:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<std::int64_t>()[i] = value.integers[i];
      break;
    case DType::f32:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<float>()[i] = static_cast<float>(value.values[i]);
      break;
    case DType::f64:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<double>()[i] = value.values[i];
      break;
    case DType::bf16:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<std::uint16_t>()[i] = to_bfloat16(value.values[i]).bits;
      break;
    case DType::f16:
      for (std::size_t i = 0; i < count; ++i) array.mutable_data<std::uint16_t>()[i] = to_float16(value.values[i]).bits;
      break;
  }
  return array;
}

std::vector<Value> evaluate(const ir::Graph& graph, std::span<const runtime::Array> inputs) {
  std::vector<Value> values;
  for (const runtime::Array& input : inputs) values.push_back(from_array(input));
  return Evaluator(graph, std::move(values)).run();
}

}  // namespace kiln::reference
