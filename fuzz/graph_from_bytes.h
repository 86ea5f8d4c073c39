#pragma once
// Builds an ir::Graph from fuzzer bytes, structurally: node count, ops (also
// ones outside the op table), dtypes (also invalid ones), shapes (also
// negative, dynamic and huge dimensions), operands (also forward, negative
// and out-of-range references), every attribute field, the parameter list,
// the outputs and the host function table. The bytes choose, per node,
// whether its type is inferred from its operands (which makes valid graphs
// common enough to reach deep into the verifier and beyond) or taken from
// the bytes, and whether its attributes follow the op's attribute kind or are
// arbitrary. No input makes the builder itself fail.

#include "ir/graph.h"

#include <cstddef>
#include <cstdint>

namespace kiln::fuzz {

ir::Graph graph_from_bytes(const std::uint8_t* data, std::size_t size);

}  // namespace kiln::fuzz
