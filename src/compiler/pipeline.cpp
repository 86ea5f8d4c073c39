#include "compiler/pipeline.h"

#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/simplify.h"
#include "ir/verifier.h"

#include <array>

namespace kiln::compiler {
namespace {

const std::array passes = {
    Pass{"simplify", simplify},
    Pass{"cse", cse},
    Pass{"dce", dce},
};

// Each round shrinks the graph or stops; this bounds pathological cases.
constexpr int max_rounds = 8;

}  // namespace

std::span<const Pass> optimization_passes() { return passes; }

void optimize(ir::Graph& graph, const PassObserver& observer) {
  for (int round = 0; round < max_rounds; ++round) {
    bool changed = false;
    for (const Pass& pass : passes) {
      if (!pass.run(graph)) continue;
      changed = true;
#ifndef NDEBUG
      ir::verify(graph);
#endif
      if (observer) observer(pass.name, graph);
    }
    if (!changed) return;
  }
}

}  // namespace kiln::compiler
