#pragma once
// A fuzz case: a graph and the inputs it runs on, and the edits the
// generator, the hazard filter and the shrinker make to it. Every edit keeps
// the graph verified (ir::verify) and in canonical layout, with one input per
// parameter in parameter order. Graphs may hold control nodes (cond,
// while_loop, scan_loop) with regions; the edits here change the case's graph,
// and reach into regions only where they say so.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::fuzz {

class RandomSource;

struct FuzzCase {
  ir::Graph graph;
  std::vector<runtime::Array> inputs;  // inputs[i] feeds graph.parameters[i]
};

// A random input of `type` that is never all zeros: floats are normal values
// pushed away from 0 (sometimes scaled) or small nonzero integers (so that
// ties, exact comparisons and floor of exact integers occur); integers are
// nonzero and small (sometimes up to +-1000); bools take both values.
runtime::Array random_input(const ir::Type& type, RandomSource& random);

// Element `index` of an array as a double (exact for everything but i64
// beyond 2^53).
double element(const runtime::Array& array, std::int64_t index);

// Drops every node no output depends on, and parameters nothing uses (with
// their inputs), then puts the parameters first (ir::canonicalize).
void prune(FuzzCase& fuzz_case);

// Redirects every use of `from` (operands and outputs) to `to`, which must
// have the same type and come before every user. A `result` node keeps
// reading its control node: `from` being a control node, only uses of its
// result 0 move, and the node stays for its other results.
void replace_uses(ir::Graph& graph, ir::ValueId from, ir::ValueId to);

// Replaces each value by a new parameter fed with the paired input (of the
// value's type); the nodes only they needed are dropped. Returns the pruned
// case.
FuzzCase replace_with_parameters(const FuzzCase& fuzz_case,
                                 const std::vector<std::pair<ir::ValueId, runtime::Array>>& replacements);

// A value to replace by a new parameter of the case: a value of the case's
// graph (region_path empty), or of a region, named by the path to it from the
// case's graph: pairs of a control node and one of its regions, {7, 1} for
// region 1 of %7, {7, 1, 4, 0} for region 0 of node %4 in there.
struct Replacement {
  std::vector<std::int64_t> region_path;
  ir::ValueId value = -1;
  runtime::Array input;  // the new parameter's, of the value's type
};

// replace_with_parameters for values anywhere: a value in a region is
// replaced by a region parameter receiving the new parameter of the case, as
// a new capture (last operand) of each control node on its path, which every
// region of that node then takes as its last parameter. Regions are left
// canonical and without dead nodes; the case is pruned.
FuzzCase replace_with_parameters(const FuzzCase& fuzz_case, const std::vector<Replacement>& replacements);

// Canonicalizes every region of `graph`, innermost first, and drops their
// dead nodes (regions keep all their parameters: their signature is the
// control node's).
void tidy_regions(ir::Graph& graph);

// Whether any node of `graph` has regions.
bool has_control_flow(const ir::Graph& graph);

// Replaces parameter `parameter` by a constant holding `value`.
FuzzCase replace_parameter_with_constant(const FuzzCase& fuzz_case, ir::ValueId parameter, double value);

// Keeps only the outputs at `positions` (in that order).
FuzzCase keep_outputs(const FuzzCase& fuzz_case, const std::vector<std::size_t>& positions);

// The case with source node `source` (parameter, constant or iota) given
// shape `shape`, and every node downstream retyped to follow: casts and
// elementwise ops follow their operands, broadcast_to and slice adapt their
// declared shapes. nullopt if the graph no longer verifies (a reshape whose
// element count changed, a matmul whose contracting sizes now differ, ...).
// A retyped parameter's input is the leading block of the old one.
std::optional<FuzzCase> reshape_source(const FuzzCase& fuzz_case, ir::ValueId source, const Shape& shape);

// Several cases as one graph: the parameters of all, then the nodes of each
// in turn, then the outputs of each in turn. `output_owner` (optional)
// receives, per output of the result, the index of the case it came from.
FuzzCase merge(const std::vector<FuzzCase>& cases, const std::string& name, std::vector<std::size_t>* output_owner);

// The case as IR text, with small inputs listed in comments after it.
std::string describe(const FuzzCase& fuzz_case);

}  // namespace kiln::fuzz
