#pragma once
// What differentiating a traced graph needs to know beyond its nodes (src/autodiff): the values whose derivative
// kiln::stop_gradient stopped, and the calls of functions that bring a derivative of their own (kiln::custom_vjp).
// Marks name values of the graph being traced and live as long as its trace: the finished graph carries none of
// them, it is an ordinary graph.

#include "ir/graph.h"

#include <functional>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace kiln::trace {

// A custom_vjp call's backward function: the cotangents of its outputs (values of the graph, in output order) ->
// the cotangents of its inputs (in input order), as values it adds to the graph.
using CustomBackward = std::function<std::vector<ir::ValueId>(std::span<const ir::ValueId> output_cotangents)>;

struct CustomDerivative {
  std::vector<ir::ValueId> inputs;   // the values the call was given
  std::vector<ir::ValueId> outputs;  // values standing for its results, made for the call (no other node makes them)
  CustomBackward backward;
};

struct DifferentiationMarks {
  std::set<ir::ValueId> stopped;  // values made by stop_gradient: their derivative is zero
  std::vector<CustomDerivative> custom;
  std::map<ir::ValueId, std::pair<int, int>> custom_outputs;  // an output value -> (its call in `custom`, position)
  // Control nodes whose regions were traced with marks of their own: a region is a graph apart, which keeps none.
  std::set<ir::ValueId> marked_controls;

  bool empty() const { return stopped.empty() && custom.empty() && marked_controls.empty(); }

  void add_custom(CustomDerivative derivative) {
    const int call = static_cast<int>(custom.size());
    for (std::size_t position = 0; position < derivative.outputs.size(); ++position)
      custom_outputs[derivative.outputs[position]] = {call, static_cast<int>(position)};
    custom.push_back(std::move(derivative));
  }
};

}  // namespace kiln::trace
