#include "compiler/dce.h"

namespace kiln::compiler {

bool dce(ir::Graph& graph) { return ir::remove_dead_nodes(graph); }

}  // namespace kiln::compiler
