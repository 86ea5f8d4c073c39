#include "compiler/pipeline.h"

#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/hoist_invariants.h"
#include "compiler/matrix_vector.h"
#include "compiler/merge_loops.h"
#include "compiler/simplify.h"
#include "compiler/widen_half_precision.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#if KILN_HAVE_CUDA
#include "compiler/codegen/cuda/cuda_codegen.h"
#endif

#include <kiln/error.h>

#include <array>

namespace kiln::compiler {
namespace {

// Each lowering pass needs the one before it; run out of order, it is kiln's bug, not the user's.
template <class Value>
const Value& required(const std::optional<Value>& value, const char* pass, const char* needs) {
  if (!value) throw CompileError(pass, std::string("internal: runs after ") + needs, std::string());
  return *value;
}

// The code generators move bf16 and f16 bits and compute in f32 (widen_half_precision.h).
bool widen_half_precision_pass(Program& program) {
  if (!widen_half_precision(program.graph, program.backend)) return false;
#ifndef NDEBUG
  ir::verify(program.graph);
#endif
  return true;
}

// Products with one column as row reductions (matrix_vector.h).
bool matrix_vector_pass(Program& program) {
  if (!rewrite_matrix_vector_products(program.graph, program.backend)) return false;
#ifndef NDEBUG
  ir::verify(program.graph);
#endif
  return true;
}

bool fuse_pass(Program& program) {
  program.plan = fuse(program.graph, program.backend);
  program.plan->results_leave = program.results_leave;
  return true;
}

bool assign_buffers_pass(Program& program) {
  program.assignment = assign_buffers(program.graph, required(program.plan, "assign-buffers", "fuse"));
  return true;
}

bool generate_pass(Program& program) {
  const FusionPlan& plan = required(program.plan, "generate", "fuse");
#if KILN_HAVE_CUDA
  if (program.device.is_cuda()) {
    auto module = std::make_shared<cuda::ModuleSource>(cuda::generate_source(program.graph, plan));
    program.source = module->text;
    program.module = std::move(module);
    return true;
  }
#endif
  if (!program.device.is_cpu())
    throw CompileError("kiln::function", "no code generator for " + program.device.to_string(), std::string());
  program.source = cpu::generate_source(program.graph, plan);
  return true;
}

const std::array optimization = {
    Pass{"simplify", [](Program& program) { return simplify(program.graph); }},
    Pass{"cse", [](Program& program) { return cse(program.graph); }},
    Pass{"dce", [](Program& program) { return dce(program.graph); }},
    Pass{"merge-loops", [](Program& program) { return merge_loops(program.graph); }},
    Pass{"hoist-loop-invariants", [](Program& program) { return hoist_loop_invariants(program.graph); }},
};

const std::array lowering = {
    Pass{"widen-half-precision", widen_half_precision_pass},
    Pass{"matrix-vector", matrix_vector_pass},
    Pass{"fuse", fuse_pass},
    Pass{"assign-buffers", assign_buffers_pass},
    Pass{"generate", generate_pass},
};

// Each round shrinks the graph or stops; this bounds pathological cases.
constexpr int max_rounds = 8;

}  // namespace

std::span<const Pass> optimization_passes() { return optimization; }

std::span<const Pass> lowering_passes() { return lowering; }

Program program_for(ir::Graph graph, Device device) {
  Program program;
  program.graph = std::move(graph);
  program.device = device;
  program.backend = capabilities(device);
  return program;
}

std::string print(const Program& program) {
  // The CPU source as the `source` stage shows it: the prelude included by name.
  if (!program.source.empty())
    return program.device.is_cpu() ? cpu::source_for_reading(program.source) : program.source;
  if (program.plan) {
    std::string text = print_plan(program.graph, *program.plan);
    if (program.assignment) text += print_assignment(program.graph, *program.assignment);
    return text;
  }
  return ir::print(program.graph);
}

void optimize(Program& program, const PassObserver& observer) {
  for (int round = 0; round < max_rounds; ++round) {
    bool changed = false;
    for (const Pass& pass : optimization) {
      if (!pass.run(program)) continue;
      changed = true;
#ifndef NDEBUG
      ir::verify(program.graph);
#endif
      if (observer) observer(pass.name, program);
    }
    if (!changed) return;
  }
}

void optimize(ir::Graph& graph) {
  Program program;
  program.graph = std::move(graph);
  optimize(program);
  graph = std::move(program.graph);
}

void run_lowering(Program& program, const PassObserver& observer) {
  for (const Pass& pass : lowering)
    if (pass.run(program) && observer) observer(pass.name, program);
}

}  // namespace kiln::compiler
