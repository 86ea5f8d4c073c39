#include "shrinker.h"

#include "hazards.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "reference/reference_evaluator.h"

#include <kiln/error.h>

#include <chrono>
#include <iostream>

namespace kiln::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

class Shrinker {
 public:
  Shrinker(FuzzCase fuzz_case, const StillFails& still_fails, const ShrinkOptions& options)
      : current_(std::move(fuzz_case)), still_fails_(still_fails), options_(options), start_(Clock::now()) {}

  FuzzCase run(ShrinkStatistics* statistics) {
    bool progress = true;
    while (progress && budget_left()) {
      progress = false;
      progress = shrink_outputs() || progress;
      progress = shrink_nodes() || progress;
      progress = shrink_parameters() || progress;
      progress = shrink_shapes() || progress;
      progress = shrink_regions() || progress;
    }
    if (statistics) {
      statistics->attempts = attempts_;
      statistics->accepted = accepted_;
      statistics->seconds = seconds();
    }
    return std::move(current_);
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  bool budget_left() const { return attempts_ < options_.max_attempts && seconds() < options_.max_seconds; }
  const ir::Graph& graph() const { return current_.graph; }

  bool attempt(FuzzCase candidate, const std::string& what) {
    if (!budget_left() || ir::find_verifier_failure(candidate.graph) || !loops_end(candidate)) return false;
    ++attempts_;
    if (!still_fails_(candidate)) return false;
    current_ = std::move(candidate);
    ++accepted_;
    if (options_.verbose)
      std::cerr << "  shrink: " << what << " -> " << graph().size() << " nodes, " << graph().outputs.size()
                << " outputs\n";
    return true;
  }

  bool shrink_outputs() {
    bool changed = false;
    for (std::size_t i = 0; graph().outputs.size() > 1 && i < graph().outputs.size(); ++i)
      if (attempt(keep_outputs(current_, {i}), "keep output " + std::to_string(i))) return true;
    for (std::size_t i = 0; graph().outputs.size() > 1 && i < graph().outputs.size();) {
      std::vector<std::size_t> positions;
      for (std::size_t j = 0; j < graph().outputs.size(); ++j)
        if (j != i) positions.push_back(j);
      if (attempt(keep_outputs(current_, positions), "drop output " + std::to_string(i)))
        changed = true;
      else
        ++i;
    }
    return changed;
  }

  // The reference's value of every node, or nothing if it throws.
  std::vector<reference::Value> all_values() const {
    ir::Graph everything = graph();
    everything.outputs.clear();
    for (ir::ValueId id = 0; id < everything.size(); ++id) everything.outputs.push_back(id);
    try {
      return reference::evaluate(everything, current_.inputs);
    } catch (const Error&) {
      return {};
    }
  }

  bool shrink_nodes() {
    bool changed = false;
    std::vector<reference::Value> values = all_values();
    for (ir::ValueId id = graph().size() - 1; id >= 0; --id) {
      if (id >= graph().size()) continue;
      const ir::Node& node = graph().node(id);
      if (node.op == ir::Op::parameter || node.op == ir::Op::constant) continue;
      bool accepted = false;
      for (ir::ValueId operand : node.operands) {
        if (!(graph().type(operand) == node.type)) continue;
        FuzzCase candidate = current_;
        replace_uses(candidate.graph, id, operand);
        prune(candidate);
        std::string what = "bypass %" + std::to_string(id) + " (" + std::string(ir::name(node.op)) + ")";
        if ((accepted = attempt(std::move(candidate), what))) break;
      }
      if (!accepted && node.op != ir::Op::iota && !values.empty()) {
        std::string what = "%" + std::to_string(id) + " (" + std::string(ir::name(node.op)) + ") -> parameter";
        accepted = attempt(replace_with_parameters(current_, {{id, reference::to_array(values[static_cast<std::size_t>(id)])}}),
                           what);
      }
      if (accepted) {
        changed = true;
        values = all_values();
      }
    }
    return changed;
  }

  bool shrink_parameters() {
    bool changed = false;
    for (std::size_t position = graph().parameters.size(); position-- > 0;) {
      if (position >= graph().parameters.size()) continue;
      const runtime::Array& input = current_.inputs[position];
      double value = input.shape.numel() > 0 ? element(input, 0) : 1.0;
      ir::ValueId parameter = graph().parameters[position];
      changed = attempt(replace_parameter_with_constant(current_, parameter, value),
                        "parameter %" + std::to_string(parameter) + " -> constant") ||
                changed;
    }
    return changed;
  }

  bool shrink_shapes() {
    bool changed = false;
    for (ir::ValueId id = 0; id < graph().size(); ++id) {
      ir::Op op = graph().node(id).op;
      if (op != ir::Op::parameter && op != ir::Op::constant && op != ir::Op::iota) continue;
      for (int axis = 0; axis < graph().type(id).shape.rank(); ++axis) {
        std::int64_t dim = graph().type(id).shape[axis];
        for (std::int64_t smaller : {std::int64_t{1}, dim / 2, dim - 1}) {
          if (smaller < 1 || smaller >= dim) continue;
          Shape shape = graph().type(id).shape;
          shape[axis] = smaller;
          std::optional<FuzzCase> candidate = reshape_source(current_, id, shape);
          if (!candidate) continue;
          std::string what = "%" + std::to_string(id) + " axis " + std::to_string(axis) + ": " +
                             std::to_string(dim) + " -> " + std::to_string(smaller);
          if (attempt(std::move(*candidate), what)) {
            changed = true;
            break;
          }
        }
        if (id >= graph().size()) break;
      }
    }
    return changed;
  }

  // Every region of `graph` (as Replacement::region_path), each before those inside it.
  static void find_regions(const ir::Graph& graph, const std::vector<std::int64_t>& prefix,
                           std::vector<std::vector<std::int64_t>>& paths) {
    for (ir::ValueId id = 0; id < graph.size(); ++id)
      for (std::size_t region = 0; region < graph.node(id).regions.size(); ++region) {
        std::vector<std::int64_t> path = prefix;
        path.push_back(id);
        path.push_back(static_cast<std::int64_t>(region));
        paths.push_back(path);
        find_regions(graph.node(id).regions[region], path, paths);
      }
  }

  // The control node owning the region at `path` (its last two steps name the node and the region) in `graph`.
  static ir::Node& control_node(ir::Graph& graph, const std::vector<std::int64_t>& path) {
    ir::Graph* holder = &graph;
    for (std::size_t step = 0; step + 2 < path.size(); step += 2)
      holder = &holder->node(static_cast<ir::ValueId>(path[step])).regions[static_cast<std::size_t>(path[step + 1])];
    return holder->node(static_cast<ir::ValueId>(path[path.size() - 2]));
  }

  // Inside regions (the other steps leave them whole): a cond's branches but one dropped (its index then clamped
  // to that one), and a node bypassed as shrink_nodes does. A candidate renumbers the regions: the first one
  // accepted ends the pass.
  bool shrink_regions() {
    std::vector<std::vector<std::int64_t>> paths;
    find_regions(graph(), {}, paths);
    for (const std::vector<std::int64_t>& path : paths) {
      const std::string where =
          "region " + std::to_string(path.back()) + " of %" + std::to_string(path[path.size() - 2]);
      const ir::Node& control = control_node(current_.graph, path);
      if (control.op == ir::Op::cond && control.regions.size() > 1 && path.back() == 0)
        for (std::size_t branch = 0; branch < control.regions.size(); ++branch) {
          FuzzCase candidate = current_;
          ir::Node& node = control_node(candidate.graph, path);
          std::vector<ir::Graph> kept = {node.regions[branch]};
          node.regions = std::move(kept);
          if (attempt(std::move(candidate),
                      "keep branch " + std::to_string(branch) + " of %" + std::to_string(path[path.size() - 2])))
            return true;
        }
      const ir::Graph& region = control.regions[static_cast<std::size_t>(path.back())];
      for (ir::ValueId id = region.size() - 1; id >= 0; --id) {
        const ir::Node& node = region.node(id);
        if (node.op == ir::Op::parameter || node.op == ir::Op::constant) continue;
        for (ir::ValueId operand : node.operands) {
          if (!(region.type(operand) == node.type)) continue;
          FuzzCase candidate = current_;
          replace_uses(control_node(candidate.graph, path).regions[static_cast<std::size_t>(path.back())], id, operand);
          tidy_regions(candidate.graph);
          prune(candidate);
          if (attempt(std::move(candidate),
                      "bypass %" + std::to_string(id) + " (" + std::string(ir::name(node.op)) + ") in " + where))
            return true;
        }
      }
    }
    return false;
  }

  FuzzCase current_;
  const StillFails& still_fails_;
  ShrinkOptions options_;
  Clock::time_point start_;
  int attempts_ = 0;
  int accepted_ = 0;
};

}  // namespace

FuzzCase shrink(FuzzCase fuzz_case, const StillFails& still_fails, const ShrinkOptions& options,
                ShrinkStatistics* statistics) {
  return Shrinker(std::move(fuzz_case), still_fails, options).run(statistics);
}

}  // namespace kiln::fuzz
