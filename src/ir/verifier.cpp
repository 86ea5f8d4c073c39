#include "ir/verifier.h"

#include "ir/printer.h"
#include "ir/type_rules.h"

#include <kiln/error.h>

#include <algorithm>
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
    check_control(value, node);
  }

  // ---- Control flow (graph.h says what each control node's operands, regions and results are) ----

  void check_control(ValueId value, const Node& node) const {
    if (!has_regions(node.op)) {
      if (!node.regions.empty()) fail(value, "has regions, which only cond, while_loop and scan_loop have");
      if (node.op == Op::result) check_result(value, node);
      return;
    }
    for (std::size_t index = 0; index < node.regions.size(); ++index)
      if (std::optional<VerifierFailure> failure = find_verifier_failure(node.regions[index]))
        fail(value, "region " + std::to_string(index) + ": " + failure->detail);
    const Attributes& attributes = node.attributes;
    const auto operands = static_cast<std::int64_t>(node.operands.size());
    const std::int64_t leading = node.op == Op::cond ? 1 : 0;  // a cond's index
    const std::int64_t carried = attributes.carry_count, sequences = attributes.sequence_count;
    if (carried < 0 || sequences < 0 || leading + carried + sequences > operands)
      fail(value, "carry_count " + std::to_string(carried) + " and sequence_count " + std::to_string(sequences) +
                      " need more than its " + std::to_string(operands) + " operands");
    if (node.op != Op::scan_loop && (sequences != 0 || attributes.length != 0 || attributes.reverse))
      fail(value, "sequence_count, length and reverse are scan_loop's; they must be 0 and false");
    // Every region's parameters: the operands after a cond's index, a scan_loop's sequences less their leading axis.
    std::vector<Type> parameters;
    for (std::int64_t operand = leading; operand < operands; ++operand) {
      Type type = graph_.type(node.operands[static_cast<std::size_t>(operand)]);
      if (operand >= carried && operand < carried + sequences) type = element_type(value, type, operand);
      parameters.push_back(std::move(type));
    }
    const std::vector<Type> carries(parameters.begin(), parameters.begin() + carried);
    const std::size_t region_count = node.op == Op::while_loop ? 2 : node.op == Op::scan_loop ? 1 : 0;
    if (region_count ? node.regions.size() != region_count : node.regions.empty())
      fail(value, "has " + std::to_string(node.regions.size()) + " regions, needs " +
                      (region_count ? std::to_string(region_count) : std::string("at least one")));
    for (std::size_t index = 0; index < node.regions.size(); ++index)
      check_region_parameters(value, index, node.regions[index], parameters);
    if (node.op == Op::cond) {
      if (!(graph_.type(node.operands.at(0)) == Type{DType::i32, Shape()}))
        fail(value, "its index (operand 0) is " + graph_.type(node.operands[0]).to_string() + ", not i32[]");
      for (std::size_t index = 1; index < node.regions.size(); ++index)
        if (region_outputs(node.regions[index]) != region_outputs(node.regions[0]))
          fail(value, "branch " + std::to_string(index) + " returns (" +
                          describe_types(region_outputs(node.regions[index])) + "), branch 0 (" +
                          describe_types(region_outputs(node.regions[0])) + ")");
    } else if (node.op == Op::while_loop) {
      if (carried < 1) fail(value, "carries nothing (carry_count 0)");
      if (region_outputs(node.regions[0]) != std::vector<Type>{Type{DType::boolean, Shape()}})
        fail(value, "its condition returns (" + describe_types(region_outputs(node.regions[0])) + "), not (bool[])");
      if (region_outputs(node.regions[1]) != carries)
        fail(value, "its body returns (" + describe_types(region_outputs(node.regions[1])) + ") for carries (" +
                        describe_types(carries) + ")");
    } else {
      if (attributes.length < 0) fail(value, "length " + std::to_string(attributes.length) + " is negative");
      const std::vector<Type> outputs = region_outputs(node.regions[0]);
      if (outputs.size() < carries.size() || !std::equal(carries.begin(), carries.end(), outputs.begin()))
        fail(value, "its body returns (" + describe_types(outputs) + "), which must start with the carries (" +
                        describe_types(carries) + ")");
    }
    const std::vector<Type> results = result_types(graph_, value);
    if (results.empty()) fail(value, "has no results");
    if (!(results[0] == node.type))
      fail(value, "has type " + node.type.to_string() + ", but its result 0 is " + results[0].to_string());
  }

  // A scan_loop's sequence operand without its leading axis (of `length`).
  Type element_type(ValueId value, const Type& sequence, std::int64_t operand) const {
    const Shape& shape = sequence.shape;
    if (shape.rank() < 1 || shape[0] != graph_.node(value).attributes.length)
      fail(value, "sequence operand " + std::to_string(operand) + " is " + sequence.to_string() +
                      ": it needs a leading axis of the length " +
                      std::to_string(graph_.node(value).attributes.length));
    return Type{sequence.dtype, Shape(shape.dims().subspan(1))};
  }

  void check_region_parameters(ValueId value, std::size_t index, const Graph& region,
                               const std::vector<Type>& parameters) const {
    std::vector<Type> types;
    for (ValueId parameter : region.parameters) types.push_back(region.type(parameter));
    if (types != parameters)
      fail(value, "region " + std::to_string(index) + " (@" + region.name + ") takes (" + describe_types(types) +
                      "), but the node gives it (" + describe_types(parameters) + ")");
  }

  static std::vector<Type> region_outputs(const Graph& region) {
    std::vector<Type> types;
    for (ValueId output : region.outputs) types.push_back(region.type(output));
    return types;
  }

  void check_result(ValueId value, const Node& node) const {
    const ValueId control = node.operands.at(0);
    if (!has_regions(graph_.node(control).op)) fail(value, "reads " + value_name(control) + ", not a control node");
    const std::vector<Type> results = result_types(graph_, control);
    const std::int64_t index = node.attributes.index;
    if (index < 1 || index >= static_cast<std::int64_t>(results.size()))
      fail(value, "index " + std::to_string(index) + " is not among results 1.." +
                      std::to_string(static_cast<std::int64_t>(results.size()) - 1) + " of " + value_name(control));
    if (!(results[static_cast<std::size_t>(index)] == node.type))
      fail(value, "has type " + node.type.to_string() + ", but result " + std::to_string(index) + " of " +
                      value_name(control) + " is " + results[static_cast<std::size_t>(index)].to_string());
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
    if (kind == AttributeKind::parameter || kind == AttributeKind::callback || kind == AttributeKind::result)
      expected.index = actual.index;
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
    else if (actual.carry_count != wanted.carry_count)
      field = "carry_count";
    else if (actual.sequence_count != wanted.sequence_count)
      field = "sequence_count";
    else if (actual.length != wanted.length)
      field = "length";
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
