#include "compiler/codegen/cpu/cpu_codegen.h"

#include "compiler/codegen/cpu/kernel_state.h"
#include "compiler/fusion.h"

#include <algorithm>
#include <utility>

extern const char* const kiln_cpu_prelude;

namespace kiln::compiler::cpu {

const char* prelude() { return kiln_cpu_prelude; }

std::string entry_point(int index) { return "kiln_kernel_" + std::to_string(index); }

// -O2 -fpeel-loops, not -O3: the steady times are the same (the loops are written with
// explicit vectors and unroll pragmas) and the heaviest modules (softmax, attention)
// compile in half the time. Plain -O2 lacks the complete peeling of loops with few
// constant iterations (the reductions' arrays of partial sums are walked by such loops):
// without it a strided slice ran 2.8x and softmax 1.6x slower (docs/design-notes.md).
// -w and -Wno-psabi: a module compiles silently (GCC's note on functions taking the
// prelude's 128-byte f64v is not a warning, and -w leaves it).
// -nostdlib: a module calls nothing from the C++ runtime and, of the C library, only
// what kiln's own process has loaded; linking it against libstdc++, libc and the start
// files took the linker 30 ms of a 150-300 ms first call, 10 ms without them. Any
// symbol left unresolved stops dlopen (RTLD_NOW) with a CompileError naming it, and
// the function falls back to the standard executor.
std::vector<std::string> compile_flags() {
  return {"-std=c++20",
          "-O2",
          "-fpeel-loops",
          "-march=native",
          "-mprefer-vector-width=512",
          "-fno-math-errno",
          "-ffp-contract=off",
          "-fvisibility=hidden",
          "-fPIC",
          "-shared",
          "-nostdlib",
          "-w",
          "-Wno-psabi"};
}

// libm for the scalar sin and cos of the f32 sin's far-argument path (a DT_NEEDED entry,
// so a module loads even where kiln's process holds libm only locally).
std::vector<std::string> link_libraries() { return {"-lm"}; }

BuildOptions build_options(const std::string& name) { return {compile_flags(), name, link_libraries()}; }

namespace {

// The generated kernels of `plan` (library kernels and views have no code), by index.
std::vector<int> generated_kernels(const FusionPlan& plan) {
  std::vector<int> kernels;
  for (std::size_t index = 0; index < plan.kernels.size(); ++index)
    if (has_generated_code(plan.kernels[index].kind)) kernels.push_back(static_cast<int>(index));
  return kernels;
}

// Whether a kernel computes a transcendental of `dtype` (for f64, a pow of any float dtype too: f32 pow is
// computed in double): what needs vector_math.h's (f32) or vector_math_f64.h's (f64) math in the prelude.
bool needs_math(const ir::Graph& graph, const FusedKernel& kernel, DType dtype) {
  for (ir::ValueId member : kernel.members) {
    const ir::Node& node = graph.node(member);
    if (dtype == DType::f64 && node.op == ir::Op::pow) return true;
    if (node.op != ir::Op::pow && ir::is_transcendental_op(node.op) && node.type.dtype == dtype) return true;
  }
  return false;
}

// "#define KILN_JIT_<name>_MATH 0|1": whether the prelude keeps one dtype's transcendental functions.
std::string math_switch(const std::string& name, bool needed, const std::string& what) {
  return "#define KILN_JIT_" + name + "_MATH " +
         (needed ? "1\n" : "0  // " + what + ": the prelude leaves that math out\n");
}

// "[0, 2) x [64, 128)": the coordinates a box covers, axis by axis.
std::string box_text(const SpaceBox& box) {
  std::string text;
  for (int axis = 0; axis < box.shape.rank(); ++axis) {
    const std::int64_t begin = box.origin[static_cast<std::size_t>(axis)];
    text += (axis ? " x [" : "[") + std::to_string(begin) + ", " + std::to_string(begin + box.shape[axis]) + ")";
  }
  return text;
}

// The code of each generated kernel, by plan index (empty for the others).
std::vector<std::string> kernel_code(const ir::Graph& graph, const FusionPlan& plan) {
  std::vector<std::string> code(plan.kernels.size());
  for (int index : generated_kernels(plan)) {
    const FusedKernel& kernel = plan.kernels[static_cast<std::size_t>(index)];
    KernelEmitter whole(graph, kernel, index, -1, plan.results_leave);
    std::string& text = code[static_cast<std::size_t>(index)];
    const bool writes_nothing = std::all_of(kernel.outputs.begin(), kernel.outputs.end(),
                                            [&](ir::ValueId output) { return graph.type(output).shape.numel() == 0; });
    if (writes_nothing) {
      // Every output is empty: there is no element to compute (and a space without elements has no strides to
      // walk it by).
      text = whole.heading() + "\nextern \"C\" __attribute__((visibility(\"default\"))) void " + entry_point(index) +
             "(const kiln_runtime*, void* const*) {}  // every output is empty\n";
      continue;
    }
    if (kernel.pieces.empty()) {
      text = whole.heading() + "namespace {\n\n" + emit_row_kernel(whole);
      continue;
    }
    // A kernel reading concats piecewise: each box a loop nest of its own, then the entry point running them.
    text = whole.heading();
    std::vector<PieceCode> boxes;
    for (std::size_t box = 0; box < kernel.pieces.size(); ++box) {
      const FusedKernel piece = kernel.piece(box);
      KernelEmitter emitter(graph, piece, index, static_cast<int>(box), plan.results_leave);
      boxes.push_back(emit_piece(emitter));
      text += "\n// box " + std::to_string(box) + " of " + std::to_string(kernel.pieces.size()) + ": coordinates " +
              box_text(kernel.pieces[box]) + "\nnamespace {\n\n" + boxes.back().text;
    }
    text += piece_entry(index, kernel.space, boxes);
  }
  return code;
}

// A translation unit: `heading`, the prelude with the math `kernels` need, and their code.
std::string unit_source(const ir::Graph& graph, const FusionPlan& plan, const std::vector<std::string>& code,
                        const std::vector<int>& kernels, const std::string& heading) {
  auto needs = [&](DType dtype) {
    for (int index : kernels)
      if (needs_math(graph, plan.kernels[static_cast<std::size_t>(index)], dtype)) return true;
    return false;
  };
  std::string text = heading;
  text += math_switch("FLOAT", needs(DType::f32), "no f32 transcendental");
  text += math_switch("DOUBLE", needs(DType::f64), "no f64 transcendental, no pow");
  text += prelude();
  text += "\nusing namespace kiln::jit;\n";
  for (int index : kernels) text += code[static_cast<std::size_t>(index)];
  return text;
}

// About what GCC takes to compile a kernel, in milliseconds (measured on a Zen 3 core, 2026-12-01: kernels of
// a transformer block took 7-183 ms each, beside ~55 ms for the process and the prelude): 1 per 50 characters
// of its code, plus 50 per transcendental it computes, whose inlined polynomials and range reductions dwarf
// the line that calls them.
double compile_cost(const ir::Graph& graph, const FusedKernel& kernel, const std::string& code) {
  double cost = static_cast<double>(code.size()) / 50;
  for (ir::ValueId member : kernel.members)
    if (ir::is_transcendental_op(graph.node(member).op)) cost += 50;
  return cost;
}

// Kernels into at most `limit` groups by longest-processing-time-first: each kernel, costliest first, joins
// the cheapest group so far. Returns the groups (kernels in index order) and the costliest group's cost.
std::pair<std::vector<std::vector<int>>, double> balance(const std::vector<int>& kernels,
                                                         const std::vector<double>& costs, int limit) {
  std::vector<std::size_t> order(kernels.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(limit));
  std::vector<double> loads(groups.size(), 0);
  for (std::size_t i : order) {
    std::size_t cheapest = static_cast<std::size_t>(std::min_element(loads.begin(), loads.end()) - loads.begin());
    groups[cheapest].push_back(kernels[i]);
    loads[cheapest] += costs[i];
  }
  std::erase_if(groups, [](const std::vector<int>& group) { return group.empty(); });
  for (std::vector<int>& group : groups) std::sort(group.begin(), group.end());
  return {groups, *std::max_element(loads.begin(), loads.end())};
}

}  // namespace

std::string generate_source(const ir::Graph& graph, const FusionPlan& plan) {
  return unit_source(graph, plan, kernel_code(graph, plan), generated_kernels(plan),
                     "// Generated by kiln's CPU JIT for @" + graph.name + ": " + std::to_string(plan.kernels.size()) +
                         " kernel(s). The fusion plan is in the `fused` stage.\n");
}

std::string source_for_reading(const std::string& source) {
  const std::string_view text = prelude();
  const std::size_t at = source.find(text);
  if (at == std::string::npos) return source;
  const auto lines = std::count(text.begin(), text.end(), '\n');
  return source.substr(0, at) + "#include \"" + prelude_file_name + "\"  // kiln's prelude (" + std::to_string(lines) +
         " lines, the same in every module: SIMD vectors, vector math, the runtime ABI); KILN_DUMP_TO writes it "
         "beside this file\n" +
         source.substr(at + text.size());
}

std::vector<std::string> translation_units(const ir::Graph& graph, const FusionPlan& plan, int limit) {
  const std::vector<int> kernels = generated_kernels(plan);
  const std::vector<std::string> code = kernel_code(graph, plan);
  std::vector<double> costs;
  double total = 0;
  for (int index : kernels) {
    const std::size_t at = static_cast<std::size_t>(index);
    costs.push_back(compile_cost(graph, plan.kernels[at], code[at]));
    total += costs.back();
  }
  // Each unit more costs a compiler process and a parse of the prelude, in parallel with the others (~55 ms
  // of a core), and the link one more process (~10 ms). Split only where the longest unit gets shorter than
  // the whole by more than that link and a margin: for the estimate's error, and because compilers running
  // side by side slow each other (the block's two units took 0.33 and 0.37 s of ~0.45 s whole).
  constexpr double link_cost = 10, margin = 40;
  // And at most 8 units: past that each compiler's ~55 ms of start-up and prelude is most of its time, and each
  // holds ~150 MB.
  limit = std::min(limit, 8);
  std::vector<std::vector<int>> groups = {kernels};
  double best = total;
  for (int count = 2; count <= std::min<int>(limit, static_cast<int>(kernels.size())); ++count) {
    auto [candidate, longest] = balance(kernels, costs, count);
    if (longest + link_cost + margin < best) {
      groups = std::move(candidate);
      best = longest + link_cost;
    }
  }
  std::vector<std::string> units;
  for (std::size_t unit = 0; unit < groups.size(); ++unit) {
    std::string listed;
    for (int index : groups[unit]) listed += (listed.empty() ? "" : ", ") + std::to_string(index);
    units.push_back(unit_source(graph, plan, code, groups[unit],
                                "// Generated by kiln's CPU JIT for @" + graph.name + ": translation unit " +
                                    std::to_string(unit + 1) + " of " + std::to_string(groups.size()) + ", kernel(s) " +
                                    listed + " of " + std::to_string(plan.kernels.size()) +
                                    ", compiled in parallel with the others.\n"));
  }
  return units;
}

}  // namespace kiln::compiler::cpu
