#include "ir/printer.h"

#include <array>
#include <charconv>
#include <cmath>
#include <vector>

namespace kiln::ir {
namespace {

using Form = AttributeField::Form;

constexpr AttributeField axis_field{"axis", Form::integer, &Attributes::axis};
constexpr AttributeField axes_field{"axes", Form::list, nullptr, nullptr, &Attributes::axes};
constexpr AttributeField keepdims_field{"keepdims", Form::boolean, nullptr, &Attributes::keepdims};
constexpr AttributeField exclusive_field{"exclusive", Form::boolean, nullptr, &Attributes::exclusive};
constexpr AttributeField reverse_field{"reverse", Form::boolean, nullptr, &Attributes::reverse};
constexpr AttributeField descending_field{"descending", Form::boolean, nullptr, &Attributes::descending};
constexpr AttributeField k_field{"k", Form::integer, &Attributes::k};
constexpr AttributeField permutation_field{"permutation", Form::list, nullptr, nullptr, &Attributes::axes};
constexpr AttributeField start_field{"start", Form::list, nullptr, nullptr, &Attributes::start};
constexpr AttributeField step_field{"step", Form::list, nullptr, nullptr, &Attributes::step};
constexpr AttributeField transpose_a_field{"transpose_a", Form::boolean, nullptr, &Attributes::transpose_a};
constexpr AttributeField transpose_b_field{"transpose_b", Form::boolean, nullptr, &Attributes::transpose_b};
constexpr AttributeField callback_field{"callback", Form::integer, &Attributes::index};
constexpr AttributeField carry_count_field{"carry_count", Form::integer, &Attributes::carry_count};
constexpr AttributeField sequence_count_field{"sequence_count", Form::integer, &Attributes::sequence_count};
constexpr AttributeField length_field{"length", Form::integer, &Attributes::length};
constexpr AttributeField result_field{"index", Form::integer, &Attributes::index};

constexpr std::array<AttributeField, 1> axis_fields{axis_field};
constexpr std::array<AttributeField, 1> axes_fields{axes_field};
constexpr std::array<AttributeField, 2> axes_keepdims_fields{axes_field, keepdims_field};
constexpr std::array<AttributeField, 2> axis_keepdims_fields{axis_field, keepdims_field};
constexpr std::array<AttributeField, 3> scan_fields{axis_field, exclusive_field, reverse_field};
constexpr std::array<AttributeField, 2> sort_fields{axis_field, descending_field};
constexpr std::array<AttributeField, 1> top_k_fields{k_field};
constexpr std::array<AttributeField, 1> permutation_fields{permutation_field};
constexpr std::array<AttributeField, 2> slice_fields{start_field, step_field};
constexpr std::array<AttributeField, 2> matmul_fields{transpose_a_field, transpose_b_field};
constexpr std::array<AttributeField, 1> callback_fields{callback_field};
constexpr std::array<AttributeField, 4> control_fields{carry_count_field, sequence_count_field, length_field,
                                                       reverse_field};
constexpr std::array<AttributeField, 1> result_fields{result_field};

bool is_plain_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool op_in_range(Op op) { return static_cast<int>(op) >= 0 && static_cast<int>(op) < op_count; }

void append_value(std::string& out, ValueId value) {
  out += '%';
  out += std::to_string(value);
}

void append_list(std::string& out, const std::vector<std::int64_t>& values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(values[i]);
  }
  out += ']';
}

void append_constant(std::string& out, const Node& node) { out += format_constant(node); }

void append_attributes(std::string& out, const Node& node) {
  std::span<const AttributeField> fields = attribute_fields(info(node.op).attributes);
  if (fields.empty()) return;
  out += " {";
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const AttributeField& field = fields[i];
    if (i) out += ", ";
    out += field.key;
    out += '=';
    switch (field.form) {
      case Form::integer:
        out += std::to_string(node.attributes.*field.integer);
        break;
      case Form::boolean:
        out += (node.attributes.*field.boolean) ? "true" : "false";
        break;
      case Form::list:
        append_list(out, node.attributes.*field.list);
        break;
    }
  }
  out += '}';
}

void append_location(std::string& out, const Node& node, const PrintOptions& options) {
  if (!options.locations || node.location.empty()) return;
  out += " loc(";
  out += quote_string(node.location);
  out += ')';
}

// A control node's regions, each a function of its own indented under the node:
//   %3 = f32[4] while_loop(%1, %2) {...} regions(
//     func @condition(...) -> (bool[]) {
//       ...
//     }
//     func @body(...) -> (f32[4]) {
//       ...
//     }
//   )
void append_regions(std::string& out, const Node& node, const PrintOptions& options) {
  if (node.regions.empty()) return;
  out += " regions(\n";
  for (const Graph& region : node.regions) {
    const std::string text = print(region, options);
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = text.find('\n', start);
      out += "    ";
      out.append(text, start, end - start);
      out += '\n';
      start = end + 1;
    }
  }
  out += "  )";
}

void append_node(std::string& out, ValueId id, const Node& node, const PrintOptions& options) {
  out += "  ";
  append_value(out, id);
  out += " = ";
  out += node.type.to_string();
  out += ' ';
  if (!op_in_range(node.op)) {
    // Only a corrupted graph gets here; print something a reader can see.
    out += "<op " + std::to_string(static_cast<int>(node.op)) + ">()";
    return;
  }
  out += name(node.op);
  out += '(';
  if (node.op == Op::constant) {
    append_constant(out, node);
  } else {
    for (std::size_t i = 0; i < node.operands.size(); ++i) {
      if (i) out += ", ";
      append_value(out, node.operands[i]);
    }
  }
  out += ')';
  append_attributes(out, node);
  append_location(out, node, options);
  append_regions(out, node, options);
}

}  // namespace

std::span<const AttributeField> attribute_fields(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::none:
    case AttributeKind::parameter:
    case AttributeKind::constant:
      return {};
    case AttributeKind::axis:
      return axis_fields;
    case AttributeKind::axes:
      return axes_fields;
    case AttributeKind::axes_keepdims:
      return axes_keepdims_fields;
    case AttributeKind::axis_keepdims:
      return axis_keepdims_fields;
    case AttributeKind::scan:
      return scan_fields;
    case AttributeKind::sort:
      return sort_fields;
    case AttributeKind::top_k:
      return top_k_fields;
    case AttributeKind::permutation:
      return permutation_fields;
    case AttributeKind::slice:
      return slice_fields;
    case AttributeKind::matmul:
      return matmul_fields;
    case AttributeKind::callback:
      return callback_fields;
    case AttributeKind::control:
      return control_fields;
    case AttributeKind::result:
      return result_fields;
  }
  return {};
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  std::array<char, 64> buffer;
  auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

std::string quote_string(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string print(const Graph& graph, const PrintOptions& options) {
  std::string out = "func @";
  out += is_plain_name(graph.name) ? graph.name : quote_string(graph.name);
  out += '(';
  std::vector<bool> in_header(graph.nodes.size(), false);
  for (std::size_t i = 0; i < graph.parameters.size(); ++i) {
    ValueId parameter = graph.parameters[i];
    if (i) out += ", ";
    append_value(out, parameter);
    out += ": ";
    if (parameter < 0 || parameter >= graph.size()) {
      out += "<missing>";
      continue;
    }
    in_header[static_cast<std::size_t>(parameter)] = true;
    const Node& node = graph.node(parameter);
    out += node.type.to_string();
    append_location(out, node, options);
  }
  out += ") -> (";
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    ValueId output = graph.outputs[i];
    if (i) out += ", ";
    out += output >= 0 && output < graph.size() ? graph.type(output).to_string() : "<missing>";
  }
  out += ") {\n";
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (in_header[static_cast<std::size_t>(id)]) continue;
    append_node(out, id, graph.node(id), options);
    out += '\n';
  }
  out += "  return";
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    out += i ? ", " : " ";
    append_value(out, graph.outputs[i]);
  }
  out += "\n}\n";
  return out;
}

std::string format_constant(const Node& node) {
  if (is_floating(node.type.dtype)) return format_double(node.attributes.float_value);
  if (node.type.dtype == DType::boolean && (node.attributes.int_value == 0 || node.attributes.int_value == 1))
    return node.attributes.int_value ? "true" : "false";
  return std::to_string(node.attributes.int_value);
}

}  // namespace kiln::ir
