#pragma once
// The text form of a Graph. print() and parse() (parser.h) round-trip:
// print(parse(text)) == text for any text print() produced, and
// parse(print(graph)) equals `graph` (locations included when printed with
// PrintOptions::locations; host callbacks become nullptr placeholders).
//
//   func @seed(%0: f32[4,4], %1: f32[4,4]) -> (f32[]) {
//     %2 = f32[4,4] matmul(%0, %1) {transpose_a=false, transpose_b=false}
//     %3 = f32[4,4] sin(%2)
//     %4 = f32[] constant(0.5)
//     %5 = f32[] reduce_sum(%3) {axes=[0,1], keepdims=false}
//     return %5
//   }
//
// The canonical form printed here: one node per line, two-space indent, a
// final newline, no comments. Parameters are declared in the header only
// (the graph must be in the canonical layout, see canonicalize in graph.h).
// The grammar and the details the parser accepts are in parser.h.

#include "ir/graph.h"

#include <span>
#include <string>
#include <string_view>

namespace kiln::ir {

struct PrintOptions {
  // Append ` loc("file.cpp:12")` to nodes (and parameters) with a location.
  bool locations = false;
};

// Prints `graph` in the text format. Never throws on a malformed graph (it
// prints what is there, which then may not parse); run verify() first when
// the text must parse.
std::string print(const Graph& graph, const PrintOptions& options = {});

// One attribute as spelled in the text format: `key=value` inside braces.
// The same table tells the parser what to read and the verifier which
// Attributes fields an AttributeKind uses.
struct AttributeField {
  enum class Form { integer, boolean, list };
  std::string_view key;
  Form form;
  std::int64_t Attributes::*integer = nullptr;            // Form::integer
  bool Attributes::*boolean = nullptr;                    // Form::boolean
  std::vector<std::int64_t> Attributes::*list = nullptr;  // Form::list
};

// The attributes printed in braces for `kind`, in their fixed order. Empty for
// `none`, and for `parameter` (the index is the position in the header) and
// `constant` (the value is printed inside the parentheses).
std::span<const AttributeField> attribute_fields(AttributeKind kind);

// The shortest text that reads back as the same double (std::to_chars), or
// `nan`, `inf`, `-inf`; -0.0 prints as `-0`.
std::string format_double(double value);

// A constant node's value as the printer writes it: `1.5`, `-inf`, `true`, `7`.
std::string format_constant(const Node& node);

// `"text"` with `"` and `\` escaped as \" and \\, newline and tab as \n and
// \t, and other control bytes as \xHH; other bytes (UTF-8) as they are.
std::string quote_string(std::string_view text);

}  // namespace kiln::ir
