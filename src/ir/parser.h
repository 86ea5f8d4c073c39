#pragma once
// Reads the text form of a Graph (see printer.h for an example). Pass tests
// write their input as IR text, run one pass, and compare the printed result.
//
// Grammar (EBNF; tokens may be separated by any whitespace, `#` starts a
// comment that runs to the end of the line):
//
//   graph      = "func" "@" graph-name "(" [ parameter { "," parameter } ] ")"
//                "->" "(" [ type { "," type } ] ")"
//                "{" { node } "return" [ value { "," value } ] "}" .
//   graph-name = name-char { name-char } | string .    name-char = [A-Za-z0-9_.-]
//   parameter  = value ":" type [ location ] .
//   node       = value "=" type op "(" ( constant | [ value { "," value } ] ) ")"
//                [ attributes ] [ location ] [ regions ] .
//   regions    = "regions" "(" graph { graph } ")" .     a control node's nested functions
//   value      = "%" digits .                           no space after "%"
//   type       = dtype "[" [ dim { "," dim } ] "]" .    at most 8 dims
//   dtype      = "bool" | "i32" | "i64" | "f32" | "f64" .
//   dim        = digits | "?" .
//   op         = a name from ops.def, except "parameter" .
//   constant   = integer | float | "true" | "false" .   chosen by the node's dtype
//   float      = [ "-" ] ( decimal | "inf" ) | "nan" .  decimal: what std::from_chars reads
//   attributes = "{" field { "," field } "}" .
//   field      = key "=" ( integer | "true" | "false" | "[" [ integer { "," integer } ] "]" ) .
//   integer    = [ "-" ] digits .                       must fit in int64
//   location   = "loc" "(" string ")" .
//   string     = '"' { byte | "\"" | "\\" | "\n" | "\t" | "\x" hex hex } '"' .   on one line
//
// Rules beyond the grammar:
//   - Values are numbered by node index: the parameters are %0..%P-1 in
//     order, then the body's nodes continue from %P, consecutively. A
//     parameter may not appear in the body.
//   - An operand must name an earlier value; `return` names defined values.
//   - The attributes are exactly attribute_fields(kind) of the op, all of
//     them, in that order (a list holds at most 8 entries); ops without
//     attributes take no braces. A parameter's index is its position; a
//     constant's value goes to float_value for f32/f64, else int_value.
//   - A bool constant is `true` or `false`; an integer constant must fit its
//     dtype (checked by the verifier); a float constant is read as a double
//     (f32 constants too: the IR stores every float constant as a double).
//   - The header's output types must equal the types of the returned values.
//   - A host_call's callback index must be < 65536; the graph's
//     host_functions table gets max index + 1 null placeholders, for the
//     caller to fill in.
//   - The result is checked with verify() (verifier.h); its failures become
//     ParseErrors at the node at fault.
//
// Arbitrary bytes give a ParseError, never a crash: the parser recurses only
// into regions, at most 32 deep, checks every integer conversion, and
// allocates in proportion to the input (plus at most 65536 callback
// placeholders per function).

#include "ir/graph.h"

#include <string_view>

namespace kiln::ir {

// Parses one function. Throws kiln::ParseError (op "ir::parse") whose detail
// starts with "line:column: " (both from 1; columns count bytes) and says
// what was expected and what was found.
Graph parse(std::string_view text);

}  // namespace kiln::ir
