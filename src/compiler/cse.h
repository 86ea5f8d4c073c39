#pragma once
// Common subexpression elimination: nodes with the same op, type, operands
// and attributes compute the same value; later ones are replaced by the
// first. Host calls are never merged (each is a separate call of user
// code). Leaves the duplicates dead for dce to remove.

#include "ir/graph.h"

namespace kiln::compiler {

bool cse(ir::Graph& graph);

}  // namespace kiln::compiler
