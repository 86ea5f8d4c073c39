#pragma once
// Dead code elimination: removes every node no graph output depends on.
// Parameters always stay (they are the function's signature).

#include "ir/graph.h"

namespace kiln::compiler {

bool dce(ir::Graph& graph);

}  // namespace kiln::compiler
