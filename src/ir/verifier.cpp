#include "ir/verifier.h"

#include "ir/printer.h"
#include "ir/type_rules.h"

#include <kiln/error.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::ir {
namespace {

// Thrown inside this file only; find_verifier_failure turns it into a value.
struct Problem {
  ValueId value;
  std::string detail;
};

bool op_in_range(Op op) { return static_cast<int>(op) >= 0 && static_cast<int>(op) < op_count; }
bool dtype_in_range(DType dtype) { return static_cast<int>(dtype) < dtype_count; }  // the enum is unsigned

std::string value_name(ValueId value) { return "%" + std::to_string(value); }

std::string node_name(ValueId value, const Node& node) {
  std::string op =
      op_in_range(node.op) ? std::string(name(node.op)) : "op " + std::to_string(static_cast<int>(node.op));
  return value_name(value) + " (" + op + ")";
}

class Verifier {
 public:
  explicit Verifier(const Graph& graph) : graph_(graph) {}

  void run() {
    check_parameter_list();
    for (ValueId value = 0; value < graph_.size(); ++value) check_node(value);
    check_outputs();
  }

 private:
  [[noreturn]] void fail(ValueId value, const std::string& detail) const {
    if (value < 0) throw Problem{-1, "graph @" + graph_.name + ": " + detail};
    throw Problem{value, node_name(value, graph_.node(value)) + ": " + detail};
  }

  void check_parameter_list() const {
    std::size_t count = graph_.parameters.size();
    if (count > graph_.nodes.size())
      fail(-1, "lists " + std::to_string(count) + " parameters but has only " + std::to_string(graph_.nodes.size()) +
                   " nodes");
    for (std::size_t position = 0; position < count; ++position) {
      ValueId parameter = graph_.parameters[position];
      if (parameter != static_cast<ValueId>(position))
        fail(-1, "parameter " + std::to_string(position) + " is " + value_name(parameter) +
                     "; the parameters must be the nodes %0..%" + std::to_string(count - 1) +
                     " in order (see canonicalize)");
    }
  }

  void check_node(ValueId value) const {
    const Node& node = graph_.node(value);
    if (!op_in_range(node.op)) fail(value, "op is not in the op table");
    check_type(value, node.type);
    check_parameter_position(value, node);
    check_operands(value, node);
    check_attributes(value, node);
    check_overflow(value, node);
    check_inferred_type(value, node);
  }

  // Valid dtype and dims, and an element count that fits in int64 so that
  // the type rules (numel, strides) cannot overflow.
  void check_type(ValueId value, const Type& type) const {
    if (!dtype_in_range(type.dtype))
      fail(value, "dtype " + std::to_string(static_cast<int>(type.dtype)) + " is invalid");
    std::int64_t count = 1;
    for (std::int64_t dim : type.shape.dims()) {
      if (dim < 0 && dim != Shape::dynamic) fail(value, "type has a negative dimension " + std::to_string(dim));
      if (dim > 1 && __builtin_mul_overflow(count, dim, &count))
        fail(value, "type " + type.to_string() + " has more than 2^63-1 elements");
    }
  }

  void check_parameter_position(ValueId value, const Node& node) const {
    auto count = static_cast<ValueId>(graph_.parameters.size());
    if (value < count && node.op != Op::parameter)
      fail(value, "the parameters are the nodes %0..%" + std::to_string(count - 1) + ", but this node is not one");
    if (value >= count && node.op == Op::parameter)
      fail(value, "a parameter outside the parameter list (which has " + std::to_string(count) +
                      " entries); parameters must be the first nodes (see canonicalize)");
    if (node.op == Op::parameter && node.attributes.index != value)
      fail(value, "parameter index is " + std::to_string(node.attributes.index) + ", but its position is " +
                      std::to_string(value));
  }

  void check_operands(ValueId value, const Node& node) const {
    for (ValueId operand : node.operands)
      if (operand < 0 || operand >= value)
        fail(value, "operand " + value_name(operand) + " does not refer to an earlier node");
    int arity = info(node.op).arity;
    if (arity >= 0 && static_cast<int>(node.operands.size()) != arity)
      fail(value, "expects " + std::to_string(arity) + " operands, has " + std::to_string(node.operands.size()));
  }

  void check_attributes(ValueId value, const Node& node) const {
    const Attributes& actual = node.attributes;
    // The attributes the op's kind uses, everything else at its default.
    Attributes expected;
    AttributeKind kind = info(node.op).attributes;
    if (kind == AttributeKind::parameter || kind == AttributeKind::callback) expected.index = actual.index;
    if (kind == AttributeKind::constant) {
      if (is_floating(node.type.dtype))
        expected.float_value = actual.float_value;
      else
        expected.int_value = actual.int_value;
    }
    for (const AttributeField& field : attribute_fields(kind)) {
      switch (field.form) {
        case AttributeField::Form::integer:
          expected.*field.integer = actual.*field.integer;
          break;
        case AttributeField::Form::boolean:
          expected.*field.boolean = actual.*field.boolean;
          break;
        case AttributeField::Form::list:
          expected.*field.list = actual.*field.list;
          break;
      }
    }
    report_unused_attribute(value, node, expected);

    if (kind == AttributeKind::constant) check_constant(value, node);
    if (kind == AttributeKind::callback) {
      if (actual.index < 0 || static_cast<std::size_t>(actual.index) >= graph_.host_functions.size())
        fail(value, "callback " + std::to_string(actual.index) + " is not in the host function table (size " +
                        std::to_string(graph_.host_functions.size()) + ")");
    }
    if (node.op == Op::iota && !node.type.shape.is_static()) fail(value, "iota needs a static shape");
  }

  void report_unused_attribute(ValueId value, const Node& node, const Attributes& expected) const {
    Attributes actual = node.attributes;
    Attributes wanted = expected;
    // float_value is compared bit for bit (== says NaN != NaN and -0 == 0),
    // everything else with Attributes' own ==, which covers every field.
    bool same_float =
        std::bit_cast<std::uint64_t>(actual.float_value) == std::bit_cast<std::uint64_t>(wanted.float_value);
    actual.float_value = wanted.float_value = 0;
    if (same_float && actual == wanted) return;
    const char* field = "an attribute";
    if (actual.index != wanted.index)
      field = "index";
    else if (!same_float)
      field = "float_value";
    else if (actual.int_value != wanted.int_value)
      field = "int_value";
    else if (actual.axis != wanted.axis)
      field = "axis";
    else if (actual.axes != wanted.axes)
      field = "axes";
    else if (actual.keepdims != wanted.keepdims)
      field = "keepdims";
    else if (actual.exclusive != wanted.exclusive)
      field = "exclusive";
    else if (actual.reverse != wanted.reverse)
      field = "reverse";
    else if (actual.descending != wanted.descending)
      field = "descending";
    else if (actual.k != wanted.k)
      field = "k";
    else if (actual.start != wanted.start)
      field = "start";
    else if (actual.step != wanted.step)
      field = "step";
    else if (actual.transpose_a != wanted.transpose_a)
      field = "transpose_a";
    else if (actual.transpose_b != wanted.transpose_b)
      field = "transpose_b";
    fail(value, std::string("sets attributes.") + field + ", which " + std::string(name(node.op)) +
                    " does not use (unused attributes must keep their defaults)");
  }

  void check_constant(ValueId value, const Node& node) const {
    if (!node.type.shape.is_static()) fail(value, "a constant needs a static shape");
    std::int64_t number = node.attributes.int_value;
    if (node.type.dtype == DType::boolean && number != 0 && number != 1)
      fail(value, "bool constant holds " + std::to_string(number) + ", not 0 or 1");
    if (node.type.dtype == DType::i32 &&
        (number < std::numeric_limits<std::int32_t>::min() || number > std::numeric_limits<std::int32_t>::max()))
      fail(value, "i32 constant " + std::to_string(number) + " does not fit in 32 bits");
  }

  // The type rules do plain int64 arithmetic on dimensions and slice
  // attributes; refuse values where that would overflow.
  void check_overflow(ValueId value, const Node& node) const {
    if (node.op == Op::slice && node.operands.size() == 1) {
      const Shape& input = graph_.type(node.operands[0]).shape;
      const Shape& result = node.type.shape;
      const auto& start = node.attributes.start;
      const auto& step = node.attributes.step;
      auto rank = static_cast<std::size_t>(input.rank());
      if (start.size() != rank || step.size() != rank || result.rank() != input.rank()) return;
      for (int axis = 0; axis < input.rank(); ++axis) {
        auto index = static_cast<std::size_t>(axis);
        if (result[axis] == 0) continue;
        std::int64_t offset = 0, last = 0;
        if (__builtin_mul_overflow(result[axis] - 1, step[index], &offset) ||
            __builtin_add_overflow(start[index], offset, &last))
          fail(value, "slice reads outside axis " + std::to_string(axis) + " (start + (size-1)*step overflows)");
      }
    }
    if (node.op == Op::concat && !node.operands.empty()) {
      std::int64_t axis = node.attributes.axis;
      std::int64_t total = 0;
      for (ValueId operand : node.operands) {
        const Shape& shape = graph_.type(operand).shape;
        if (axis < 0 || axis >= shape.rank()) return;  // the type rule reports it
        std::int64_t dim = shape[static_cast<int>(axis)];
        if (dim > 0 && __builtin_add_overflow(total, dim, &total))
          fail(value, "concatenated size along axis " + std::to_string(axis) + " overflows int64");
      }
    }
  }

  void check_inferred_type(ValueId value, const Node& node) const {
    std::vector<Type> operand_types;
    operand_types.reserve(node.operands.size());
    for (ValueId operand : node.operands) operand_types.push_back(graph_.type(operand));
    Type inferred;
    try {
      inferred = infer_type(node.op, node.attributes, operand_types, node.type, node.location);
    } catch (const Error& error) {
      fail(value, error.detail());
    }
    if (!(inferred == node.type))
      fail(value, "has type " + node.type.to_string() + ", but its operands give " + inferred.to_string());
  }

  void check_outputs() const {
    for (std::size_t i = 0; i < graph_.outputs.size(); ++i) {
      ValueId output = graph_.outputs[i];
      if (output < 0 || output >= graph_.size())
        fail(-1, "output " + std::to_string(i) + " is " + value_name(output) + ", which is not a node");
    }
  }

  const Graph& graph_;
};

}  // namespace

std::optional<VerifierFailure> find_verifier_failure(const Graph& graph) {
  try {
    Verifier(graph).run();
  } catch (Problem& problem) {
    return VerifierFailure{problem.value, std::move(problem.detail)};
  }
  return std::nullopt;
}

void verify(const Graph& graph) {
  if (auto failure = find_verifier_failure(graph)) throw InternalError("ir::verify", failure->detail, std::string());
}

}  // namespace kiln::ir
