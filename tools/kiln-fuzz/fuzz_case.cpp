#include "fuzz_case.h"

#include "ir/printer.h"
#include "ir/type_rules.h"
#include "ir/verifier.h"
#include "random_source.h"

#include <kiln/error.h>

#include <algorithm>
#include <cstdio>

namespace kiln::fuzz {
namespace {

void store(const runtime::Array& array, std::int64_t index, double value) {
  auto position = static_cast<std::size_t>(index);
  switch (array.dtype) {
    case DType::boolean: array.mutable_data<std::uint8_t>()[position] = value != 0 ? 1 : 0; break;
    case DType::i32: array.mutable_data<std::int32_t>()[position] = static_cast<std::int32_t>(value); break;
    case DType::i64: array.mutable_data<std::int64_t>()[position] = static_cast<std::int64_t>(value); break;
    case DType::f32: array.mutable_data<float>()[position] = static_cast<float>(value); break;
    case DType::f64: array.mutable_data<double>()[position] = value; break;
    case DType::bf16: array.mutable_data<std::uint16_t>()[position] = to_bfloat16(value).bits; break;
    case DType::f16: array.mutable_data<std::uint16_t>()[position] = to_float16(value).bits; break;
  }
}

// Row-major multi-index of flat element `flat` of `shape`.
std::vector<std::int64_t> unflatten(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    index[static_cast<std::size_t>(axis)] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

std::int64_t flatten(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (int axis = 0; axis < shape.rank(); ++axis) flat = flat * shape[axis] + index[static_cast<std::size_t>(axis)];
  return flat;
}

// The leading block of `array` with shape `shape` (each dim <= the old one);
// where a dim grows, elements repeat cyclically.
runtime::Array leading_block(const runtime::Array& array, const Shape& shape) {
  runtime::Array result = runtime::allocate_array(array.dtype, shape);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    std::vector<std::int64_t> index = unflatten(i, shape);
    bool inside = array.shape.rank() == shape.rank() && array.shape.numel() > 0;
    for (int axis = 0; inside && axis < shape.rank(); ++axis)
      index[static_cast<std::size_t>(axis)] %= array.shape[axis];
    double value = inside ? element(array, flatten(index, array.shape)) : 1.0;
    if (array.dtype == DType::i64 && inside) {
      result.mutable_data<std::int64_t>()[i] = array.data<std::int64_t>()[flatten(index, array.shape)];
      continue;
    }
    store(result, i, value);
  }
  return result;
}

std::string format_element(const runtime::Array& array, std::int64_t index) {
  char text[40];
  switch (array.dtype) {
    case DType::boolean: return array.data<std::uint8_t>()[index] ? "true" : "false";
    case DType::i32: return std::to_string(array.data<std::int32_t>()[index]);
    case DType::i64: return std::to_string(array.data<std::int64_t>()[index]);
    case DType::f32: std::snprintf(text, sizeof text, "%.9g", static_cast<double>(array.data<float>()[index])); break;
    case DType::f64: std::snprintf(text, sizeof text, "%.17g", array.data<double>()[index]); break;
    case DType::bf16:
    case DType::f16: std::snprintf(text, sizeof text, "%.9g", element(array, index)); break;
  }
  return text;
}

}  // namespace

runtime::Array random_input(const ir::Type& type, RandomSource& random) {
  runtime::Array array = runtime::allocate_array(type.dtype, type.shape);
  std::int64_t count = type.shape.numel();
  if (is_floating(type.dtype)) {
    // Mostly N(0, 1) pushed away from 0; sometimes wider or narrower; sometimes
    // small integers (exact, with ties).
    std::size_t style = random.weighted({6, 1, 1, 2});
    double scale = style == 1 ? 10.0 : style == 2 ? 0.1 : 1.0;
    for (std::int64_t i = 0; i < count; ++i) {
      double value;
      if (style == 3) {
        value = static_cast<double>(random.nonzero(9));
      } else {
        double sample = random.normal();
        value = (sample + (sample >= 0 ? 0.05 : -0.05)) * scale;
      }
      store(array, i, value);
    }
  } else if (is_integral(type.dtype)) {
    std::int64_t limit = random.chance(0.1) ? 1000 : 9;
    for (std::int64_t i = 0; i < count; ++i)
      store(array, i, static_cast<double>(random.nonzero(limit)));
  } else {
    for (std::int64_t i = 0; i < count; ++i) store(array, i, random.chance(0.5) ? 1 : 0);
    if (count > 1) {  // both values
      store(array, 0, 1);
      store(array, count - 1, 0);
    }
  }
  return array;
}

double element(const runtime::Array& array, std::int64_t index) {
  auto position = static_cast<std::size_t>(index);
  switch (array.dtype) {
    case DType::boolean: return array.data<std::uint8_t>()[position];
    case DType::i32: return array.data<std::int32_t>()[position];
    case DType::i64: return static_cast<double>(array.data<std::int64_t>()[position]);
    case DType::f32: return array.data<float>()[position];
    case DType::bf16: return to_float(bfloat16{array.data<std::uint16_t>()[position]});
    case DType::f16: return to_float(float16{array.data<std::uint16_t>()[position]});
    case DType::f64: break;
  }
  return array.data<double>()[position];
}

void prune(FuzzCase& fuzz_case) {
  ir::Graph& graph = fuzz_case.graph;
  ir::canonicalize(graph);  // parameters added by edits come first, before their users
  std::vector<bool> live(graph.nodes.size(), false);
  for (ir::ValueId output : graph.outputs) live[static_cast<std::size_t>(output)] = true;
  for (std::size_t i = graph.nodes.size(); i-- > 0;)
    if (live[i])
      for (ir::ValueId operand : graph.nodes[i].operands) live[static_cast<std::size_t>(operand)] = true;
  std::vector<ir::ValueId> parameters;
  std::vector<runtime::Array> inputs;
  for (std::size_t position = 0; position < graph.parameters.size(); ++position) {
    if (!live[static_cast<std::size_t>(graph.parameters[position])]) continue;
    parameters.push_back(graph.parameters[position]);
    inputs.push_back(fuzz_case.inputs[position]);
  }
  graph.parameters = std::move(parameters);
  fuzz_case.inputs = std::move(inputs);
  ir::compact(graph, live);
  ir::canonicalize(graph);  // resets each parameter's index to its new position
}

void replace_uses(ir::Graph& graph, ir::ValueId from, ir::ValueId to) {
  for (ir::Node& node : graph.nodes) {
    if (node.op == ir::Op::result) continue;  // it names its control node's result, not a value
    for (ir::ValueId& operand : node.operands)
      if (operand == from) operand = to;
  }
  for (ir::ValueId& output : graph.outputs)
    if (output == from) output = to;
}

FuzzCase replace_with_parameters(const FuzzCase& fuzz_case,
                                 const std::vector<std::pair<ir::ValueId, runtime::Array>>& replacements) {
  FuzzCase result = fuzz_case;
  // The new parameters come after their users until prune canonicalizes.
  for (const auto& [value, input] : replacements) {
    ir::Type type = result.graph.type(value);
    ir::ValueId parameter = result.graph.add_parameter(type);
    result.inputs.push_back(input);
    replace_uses(result.graph, value, parameter);
  }
  prune(result);
  return result;
}

FuzzCase replace_with_parameters(const FuzzCase& fuzz_case, const std::vector<Replacement>& replacements) {
  FuzzCase result = fuzz_case;
  // Every node keeps its number until the end (new parameters are appended: after their users until the
  // canonicalization), so that each replacement's path and value still name what they named.
  for (const Replacement& replacement : replacements) {
    const ir::Graph* holder = &result.graph;
    for (std::size_t step = 0; step + 1 < replacement.region_path.size(); step += 2)
      holder = &holder->node(static_cast<ir::ValueId>(replacement.region_path[step]))
                    .regions.at(static_cast<std::size_t>(replacement.region_path[step + 1]));
    const ir::Type type = holder->type(replacement.value);
    ir::ValueId current = result.graph.add_parameter(type);
    result.inputs.push_back(replacement.input);
    ir::Graph* graph = &result.graph;
    for (std::size_t step = 0; step + 1 < replacement.region_path.size(); step += 2) {
      ir::Node& control = graph->node(static_cast<ir::ValueId>(replacement.region_path[step]));
      const auto into = static_cast<std::size_t>(replacement.region_path[step + 1]);
      control.operands.push_back(current);  // a capture: the last operands
      ir::ValueId inside = -1;
      for (std::size_t region = 0; region < control.regions.size(); ++region) {
        const ir::ValueId parameter = control.regions[region].add_parameter(type);
        if (region == into) inside = parameter;
      }
      current = inside;
      graph = &control.regions[into];
    }
    replace_uses(*graph, replacement.value, current);
  }
  tidy_regions(result.graph);
  prune(result);
  return result;
}

void tidy_regions(ir::Graph& graph) {
  for (ir::Node& node : graph.nodes)
    for (ir::Graph& region : node.regions) {
      tidy_regions(region);
      ir::canonicalize(region);
      ir::remove_dead_nodes(region);
    }
}

bool has_control_flow(const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes)
    if (!node.regions.empty()) return true;
  return false;
}

FuzzCase replace_parameter_with_constant(const FuzzCase& fuzz_case, ir::ValueId parameter, double value) {
  FuzzCase result = fuzz_case;
  ir::Node constant;
  constant.op = ir::Op::constant;
  constant.type = result.graph.type(parameter);
  if (is_floating(constant.type.dtype))
    constant.attributes.float_value = value;
  else
    constant.attributes.int_value = static_cast<std::int64_t>(value);
  ir::ValueId id = result.graph.add(constant);
  replace_uses(result.graph, parameter, id);
  // The constant sits after its users; move it to the front of the body by
  // listing it as if it were a parameter for canonicalize, then unlisting it.
  ir::Graph& graph = result.graph;
  std::vector<ir::Node> nodes;
  std::vector<ir::ValueId> new_id(graph.nodes.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i)
    if (graph.nodes[i].op == ir::Op::parameter) {
      new_id[i] = static_cast<ir::ValueId>(nodes.size());
      nodes.push_back(graph.nodes[i]);
    }
  new_id[static_cast<std::size_t>(id)] = static_cast<ir::ValueId>(nodes.size());
  nodes.push_back(graph.nodes[static_cast<std::size_t>(id)]);
  for (std::size_t i = 0; i < graph.nodes.size(); ++i)
    if (graph.nodes[i].op != ir::Op::parameter && static_cast<ir::ValueId>(i) != id) {
      new_id[i] = static_cast<ir::ValueId>(nodes.size());
      nodes.push_back(graph.nodes[i]);
    }
  for (ir::Node& node : nodes)
    for (ir::ValueId& operand : node.operands) operand = new_id[static_cast<std::size_t>(operand)];
  for (ir::ValueId& output : graph.outputs) output = new_id[static_cast<std::size_t>(output)];
  for (ir::ValueId& listed : graph.parameters) listed = new_id[static_cast<std::size_t>(listed)];
  graph.nodes = std::move(nodes);
  prune(result);
  return result;
}

FuzzCase keep_outputs(const FuzzCase& fuzz_case, const std::vector<std::size_t>& positions) {
  FuzzCase result = fuzz_case;
  result.graph.outputs.clear();
  for (std::size_t position : positions) result.graph.outputs.push_back(fuzz_case.graph.outputs[position]);
  prune(result);
  return result;
}

std::optional<FuzzCase> reshape_source(const FuzzCase& fuzz_case, ir::ValueId source, const Shape& shape) {
  FuzzCase result = fuzz_case;
  ir::Graph& graph = result.graph;
  std::vector<ir::Type> old_types;
  for (const ir::Node& node : graph.nodes) old_types.push_back(node.type);
  try {
    for (ir::ValueId id = 0; id < graph.size(); ++id) {
      ir::Node& node = graph.node(id);
      if (id == source) {
        node.type.shape = shape;
        continue;
      }
      std::vector<ir::Type> operand_types;
      bool changed = false;
      for (ir::ValueId operand : node.operands) {
        operand_types.push_back(graph.type(operand));
        changed = changed || !(graph.type(operand) == old_types[static_cast<std::size_t>(operand)]);
      }
      if (!changed) continue;
      ir::Type declared = node.type;
      const Shape& input = operand_types.empty() ? declared.shape : operand_types[0].shape;
      const Shape& old_input = node.operands.empty() ? declared.shape
                                                     : old_types[static_cast<std::size_t>(node.operands[0])].shape;
      if (node.op == ir::Op::cast) {
        declared.shape = input;
      } else if (node.op == ir::Op::broadcast_to) {
        int offset = declared.shape.rank() - input.rank();
        if (offset < 0 || old_input.rank() != input.rank()) return std::nullopt;
        for (int axis = 0; axis < input.rank(); ++axis)
          if (old_input[axis] == declared.shape[axis + offset]) declared.shape[axis + offset] = input[axis];
      } else if (node.op == ir::Op::slice) {
        if (old_input.rank() != input.rank()) return std::nullopt;
        for (int axis = 0; axis < input.rank(); ++axis) {
          auto index = static_cast<std::size_t>(axis);
          std::int64_t& start = node.attributes.start[index];
          std::int64_t step = node.attributes.step[index];
          std::int64_t size = input[axis];
          if (declared.shape[axis] == 0) continue;
          if (size == 0) {
            start = 0;
            declared.shape[axis] = 0;
            continue;
          }
          start = std::min(start, size - 1);
          std::int64_t available = step > 0 ? (size - 1 - start) / step + 1 : start / -step + 1;
          declared.shape[axis] = std::min(declared.shape[axis], available);
        }
      }
      node.type = ir::infer_type(node.op, node.attributes, operand_types, declared, node.location);
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  if (ir::find_verifier_failure(graph)) return std::nullopt;
  for (std::size_t position = 0; position < graph.parameters.size(); ++position)
    if (graph.parameters[position] == source)
      result.inputs[position] = leading_block(result.inputs[position], shape);
  return result;
}

FuzzCase merge(const std::vector<FuzzCase>& cases, const std::string& name, std::vector<std::size_t>* output_owner) {
  FuzzCase result;
  result.graph.name = name;
  std::vector<std::vector<ir::ValueId>> new_ids(cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const ir::Graph& graph = cases[c].graph;
    new_ids[c].assign(graph.nodes.size(), -1);
    for (std::size_t position = 0; position < graph.parameters.size(); ++position) {
      new_ids[c][static_cast<std::size_t>(graph.parameters[position])] =
          result.graph.add_parameter(graph.type(graph.parameters[position]));
      result.inputs.push_back(cases[c].inputs[position]);
    }
  }
  if (output_owner) output_owner->clear();
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const ir::Graph& graph = cases[c].graph;
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
      if (graph.nodes[i].op == ir::Op::parameter) continue;
      ir::Node node = graph.nodes[i];
      for (ir::ValueId& operand : node.operands) operand = new_ids[c][static_cast<std::size_t>(operand)];
      new_ids[c][i] = result.graph.add(std::move(node));
    }
    for (ir::ValueId output : graph.outputs) {
      result.graph.outputs.push_back(new_ids[c][static_cast<std::size_t>(output)]);
      if (output_owner) output_owner->push_back(c);
    }
  }
  return result;
}

std::string describe(const FuzzCase& fuzz_case) {
  std::string text = ir::print(fuzz_case.graph);
  for (std::size_t position = 0; position < fuzz_case.inputs.size(); ++position) {
    const runtime::Array& input = fuzz_case.inputs[position];
    text += "# input %" + std::to_string(position) + ": ";
    if (input.shape.numel() > 64) {
      text += "(" + std::to_string(input.shape.numel()) + " elements)\n";
      continue;
    }
    text += "[";
    for (std::int64_t i = 0; i < input.shape.numel(); ++i) text += (i ? ", " : "") + format_element(input, i);
    text += "]\n";
  }
  return text;
}

}  // namespace kiln::fuzz
