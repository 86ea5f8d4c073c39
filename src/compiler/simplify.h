#pragma once
// Simplification: constant folding and algebraic identities. Each rewrite is
// a short rule for one op (simplify_arithmetic.cpp, simplify_shape.cpp,
// simplify_constants.cpp); every rule is exact -- it never changes a result,
// not even the sign of a zero or a NaN.

#include "ir/graph.h"

namespace kiln::compiler {

bool simplify(ir::Graph& graph);

}  // namespace kiln::compiler
