#pragma once
// A compiler pass: a named rewrite of a graph that reports whether it changed
// anything. The pipeline (pipeline.h) is a flat list of them.

#include "ir/graph.h"

#include <string_view>

namespace kiln::compiler {

struct Pass {
  std::string_view name;
  bool (*run)(ir::Graph& graph);  // true if the graph changed
};

}  // namespace kiln::compiler
