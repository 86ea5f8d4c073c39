#pragma once
// The compiler's passes, from the traced graph to generated source, all over one Program and with one signature: a
// name and a function that reports whether it changed the program. An observer sees the program after each pass
// that changed it (KILN_DUMP_TO writes what print() makes of it: "1-4-after-fuse.txt"). pipeline.h lists them.

#include "compiler/buffer_assignment.h"
#include "compiler/fusion.h"
#include "ir/graph.h"

#include <kiln/device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::compiler {

namespace cuda {
struct ModuleSource;
}

// What the passes build: the graph (which the optimization passes rewrite), then the kernel plan, the arena and
// the source, each by its pass.
struct Program {
  ir::Graph graph;
  Device device = Device::cpu();
  BackendCapabilities backend;                       // what the device's generators run: fuse plans for it
  // The graph is a function's, its results returned to the user's code, not a region's or a loop step's (whose
  // results the enclosing graph or the next iteration reads at once): large results may bypass the caches.
  bool results_leave = true;
  std::optional<FusionPlan> plan;                    // fuse
  std::optional<BufferAssignment> assignment;        // assign-buffers
  std::string source;                                // generate: C++ for the CPU, CUDA C++ for a GPU
  std::shared_ptr<const cuda::ModuleSource> module;  // generate, on CUDA: the source with its launches
};

// The program for `graph` lowered for `device`: nothing planned yet.
Program program_for(ir::Graph graph, Device device);

struct Pass {
  std::string_view name;
  bool (*run)(Program& program);  // true if the program changed
};

using PassObserver = std::function<void(std::string_view pass, const Program& program)>;

// The program as far as the passes took it: the source once generated; else, once fused, the plan (and the arena
// once assigned); else the graph.
std::string print(const Program& program);

}  // namespace kiln::compiler
