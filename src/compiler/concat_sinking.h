#pragma once
// Concat sinking, a CPU pass after the optimization pipeline: an elementwise op of a concat (the concat read by it
// alone) becomes the concat of the op applied to each operand, the op's other operands sliced to match (or taken
// whole where they broadcast along the concat axis):
//
//   relu(concat(a, b))            -> concat(relu(a), relu(b))
//   concat(-x2, x1, axis 3) * sin -> concat(-x2 * sin[..., :64], x1 * sin[..., 64:], axis 3)
//
// Each new operand is then computed by a kernel that writes it into its slice of the concat's buffer (concat
// fusion, fusion_placement.cpp), so the concat's elements are written once instead of copied and read back by the op.
// The rotation of rotary position embeddings (q * cos + concat(-x2, x1) * sin) is this pattern. Applied again to
// the new concat, a chain of elementwise ops sinks as a whole.
//
// Only for results of at least sinking_elements elements and concats of at most sinking_operands operands: each
// operand becomes a kernel of its own.

#include "ir/graph.h"

#include <cstdint>

namespace kiln::compiler {

inline constexpr std::int64_t sinking_elements = 65536;
inline constexpr std::size_t sinking_operands = 8;

// True if the graph changed (the concats left without uses are for dce to remove).
bool sink_elementwise_into_concats(ir::Graph& graph);

}  // namespace kiln::compiler
