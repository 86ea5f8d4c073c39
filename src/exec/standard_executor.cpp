#include "exec/standard_executor.h"

#include "exec/control_flow.h"

#include "ir/type_rules.h"
#include "kernels/kernels.h"

#include <kiln/error.h>

namespace kiln::exec {
namespace {

// The order of work, fixed once per graph: which nodes run, and after which
// step each value can be released.
struct Plan {
  std::vector<ir::ValueId> steps;                   // non-parameter nodes outputs depend on
  std::vector<std::vector<ir::ValueId>> release;    // per step: values whose last use it is
  std::vector<bool> is_output;
  int kernels = 0;
};

Plan make_plan(const ir::Graph& graph) {
  Plan plan;
  std::size_t size = graph.nodes.size();
  std::vector<bool> live(size, false);
  plan.is_output.assign(size, false);
  for (ir::ValueId output : graph.outputs) {
    live[static_cast<std::size_t>(output)] = true;
    plan.is_output[static_cast<std::size_t>(output)] = true;
  }
  for (std::size_t i = size; i-- > 0;)
    if (live[i])
      for (ir::ValueId operand : graph.nodes[i].operands) live[static_cast<std::size_t>(operand)] = true;

  std::vector<int> last_step(size, -1);
  for (std::size_t i = 0; i < size; ++i) {
    const ir::Node& node = graph.nodes[i];
    if (!live[i] || node.op == ir::Op::parameter) continue;
    int step = static_cast<int>(plan.steps.size());
    plan.steps.push_back(static_cast<ir::ValueId>(i));
    for (ir::ValueId operand : node.operands) last_step[static_cast<std::size_t>(operand)] = step;
    bool moves_data = node.op != ir::Op::reshape && node.op != ir::Op::expand_dims && node.op != ir::Op::squeeze &&
                      node.op != ir::Op::result;
    plan.kernels += moves_data ? 1 : 0;
  }
  plan.release.resize(plan.steps.size());
  for (std::size_t value = 0; value < size; ++value)
    if (last_step[value] >= 0 && !plan.is_output[value])
      plan.release[static_cast<std::size_t>(last_step[value])].push_back(static_cast<ir::ValueId>(value));
  return plan;
}

// For graphs with data-dependent shapes (nonzero), types are recomputed from
// the actual operand shapes as the graph runs.
ir::Node concrete_node(const ir::Node& node, std::span<const runtime::Array> operands) {
  if (node.type.shape.is_static()) return node;
  std::vector<ir::Type> types;
  for (const runtime::Array& operand : operands) types.push_back({operand.dtype, operand.shape});
  ir::Node concrete = node;
  ir::Type declared = node.type;
  if (node.op == ir::Op::cast) declared.shape = operands[0].shape;
  concrete.type = ir::infer_type(node.op, node.attributes, types, declared, node.location);
  return concrete;
}

runtime::Array run_host_call(const ir::Graph& graph, const ir::Node& node, std::span<const runtime::Array> operands) {
  const auto& function = graph.host_functions.at(static_cast<std::size_t>(node.attributes.index));
  if (!function) throw ValueError("host_call", "the graph has no callback for this host_call", node.location);
  return function->call(operands);
}

class StandardExecutable final : public Executable {
 public:
  explicit StandardExecutable(ir::Graph graph)
      : graph_(std::move(graph)), plan_(make_plan(graph_)), result_nodes_(ir::result_nodes(graph_)) {
    regions_.resize(graph_.nodes.size());
    for (ir::ValueId step : plan_.steps)
      for (const ir::Graph& region : graph_.node(step).regions)
        regions_[static_cast<std::size_t>(step)].push_back(std::make_unique<StandardExecutable>(region));
  }

  std::vector<runtime::Array> run(std::span<const runtime::Array> inputs) const override {
    if (inputs.size() != graph_.parameters.size())
      throw InternalError("standard executor",
                          "expected " + std::to_string(graph_.parameters.size()) + " inputs, got " +
                              std::to_string(inputs.size()),
                          std::string());
    Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
    std::vector<runtime::Array> values(graph_.nodes.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) values[static_cast<std::size_t>(graph_.parameters[i])] = inputs[i];

    std::vector<runtime::Array> operands;
    for (std::size_t step = 0; step < plan_.steps.size(); ++step) {
      ir::ValueId id = plan_.steps[step];
      const ir::Node& node = graph_.node(id);
      operands.clear();
      for (ir::ValueId operand : node.operands) operands.push_back(values[static_cast<std::size_t>(operand)]);
      if (node.op == ir::Op::result) {
        // Filled in when its control node ran.
      } else if (ir::has_regions(node.op)) {
        const auto& regions = regions_[static_cast<std::size_t>(id)];
        const RegionRunner run_region = [&](std::size_t region, std::span<const runtime::Array> inputs) {
          return regions.at(region)->run(inputs);
        };
        store_results(graph_, id, run_control(graph_, id, operands, device, run_region),
                      result_nodes_[static_cast<std::size_t>(id)], values);
      } else {
        values[static_cast<std::size_t>(id)] = node.op == ir::Op::host_call
                                                   ? run_host_call(graph_, node, operands)
                                                   : kernels::run(concrete_node(node, operands), operands, device);
      }
      for (ir::ValueId released : plan_.release[step]) values[static_cast<std::size_t>(released)] = {};
    }
    std::vector<runtime::Array> outputs;
    outputs.reserve(graph_.outputs.size());
    for (ir::ValueId output : graph_.outputs) outputs.push_back(values[static_cast<std::size_t>(output)]);
    return outputs;
  }

  int kernels_per_call() const override { return plan_.kernels; }

 private:
  ir::Graph graph_;
  Plan plan_;
  std::vector<std::vector<ir::ValueId>> result_nodes_;             // per control node, the result nodes reading it
  std::vector<std::vector<std::unique_ptr<Executable>>> regions_;  // per control node, its regions' executables
};

}  // namespace

std::unique_ptr<Executable> make_standard_executable(ir::Graph graph) {
  return std::make_unique<StandardExecutable>(std::move(graph));
}

std::vector<runtime::Array> run_standard(const ir::Graph& graph, std::span<const runtime::Array> inputs) {
  return StandardExecutable(graph).run(inputs);
}

}  // namespace kiln::exec
