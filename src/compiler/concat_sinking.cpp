#include "compiler/concat_sinking.h"

#include "compiler/rewrite.h"

#include <algorithm>
#include <vector>

namespace kiln::compiler {
namespace {

class Sinker {
 public:
  explicit Sinker(const ir::Graph& graph) : graph_(graph), uses_(graph.use_counts()), result_(start_rebuild(graph)) {}

  bool run(ir::Graph& graph) {
    std::vector<ir::ValueId> new_id(static_cast<std::size_t>(graph_.size()));
    for (ir::ValueId id = 0; id < graph_.size(); ++id) {
      ir::Node node = graph_.node(id);
      for (ir::ValueId& operand : node.operands) operand = new_id[static_cast<std::size_t>(operand)];
      const ir::ValueId concat = sinkable_concat(node);
      const ir::ValueId added = concat >= 0 ? sink(node, concat) : add(std::move(node));
      uses_of_result_[static_cast<std::size_t>(added)] = uses_[static_cast<std::size_t>(id)];
      new_id[static_cast<std::size_t>(id)] = added;
    }
    if (!changed_) return false;
    finish_rebuild(graph_, new_id, result_);
    graph = std::move(result_);
    return true;
  }

 private:
  ir::ValueId add(ir::Node node) {
    uses_of_result_.push_back(0);
    return result_.add(std::move(node));
  }

  // The operand of `node` (in the result) to split it along: a concat of its own shape that only `node` reads.
  ir::ValueId sinkable_concat(const ir::Node& node) const {
    if (!ir::is_elementwise(node.op) || !node.type.shape.is_static() || node.type.shape.numel() < sinking_elements)
      return -1;
    for (ir::ValueId operand : node.operands) {
      const ir::Node& concat = result_.node(operand);
      if (concat.op != ir::Op::concat || !(concat.type.shape == node.type.shape) ||
          concat.operands.size() > sinking_operands)
        continue;
      const auto reads = std::count(node.operands.begin(), node.operands.end(), operand);
      if (uses_of_result_[static_cast<std::size_t>(operand)] == reads) return operand;
    }
    return -1;
  }

  // Whether `value` is a concat along `axis` whose operands have the sizes of `split`'s along it.
  bool splits_alike(ir::ValueId value, const ir::Node& split) const {
    const ir::Node& node = result_.node(value);
    if (node.op != ir::Op::concat || node.attributes.axis != split.attributes.axis ||
        node.operands.size() != split.operands.size() || !(node.type.shape == split.type.shape))
      return false;
    const auto axis = static_cast<int>(split.attributes.axis);
    for (std::size_t piece = 0; piece < split.operands.size(); ++piece)
      if (result_.type(node.operands[piece]).shape[axis] != result_.type(split.operands[piece]).shape[axis])
        return false;
    return true;
  }

  // `value` (an operand of an op of `shape`, broadcast NumPy-style) where the op's piece [offset, offset + length)
  // along `axis` reads it.
  ir::ValueId piece_of(ir::ValueId value, const Shape& shape, int axis, std::int64_t offset, std::int64_t length,
                       const std::string& location) {
    const ir::Type& type = result_.type(value);
    const int own_axis = axis - (shape.rank() - type.shape.rank());
    if (own_axis < 0 || type.shape[own_axis] == 1) return value;  // broadcast along the concat axis
    ir::Node slice;
    slice.op = ir::Op::slice;
    slice.type = type;
    slice.type.shape[own_axis] = length;
    slice.attributes.start.assign(static_cast<std::size_t>(type.shape.rank()), 0);
    slice.attributes.step.assign(static_cast<std::size_t>(type.shape.rank()), 1);
    slice.attributes.start[static_cast<std::size_t>(own_axis)] = offset;
    slice.operands = {value};
    slice.location = location;
    return add(std::move(slice));
  }

  ir::ValueId sink(const ir::Node& node, ir::ValueId concat_id) {
    const ir::Node concat = result_.node(concat_id);
    const auto axis = static_cast<int>(concat.attributes.axis);
    ir::Node assembled = concat;
    assembled.operands.clear();
    assembled.type.dtype = node.type.dtype;
    assembled.location = node.location;
    std::int64_t offset = 0;
    for (std::size_t piece = 0; piece < concat.operands.size(); ++piece) {
      const std::int64_t length = result_.type(concat.operands[piece]).shape[axis];
      ir::Node part = node;
      part.type.shape[axis] = length;
      for (ir::ValueId& operand : part.operands) {
        if (splits_alike(operand, concat))
          operand = result_.node(operand).operands[piece];
        else
          operand = piece_of(operand, node.type.shape, axis, offset, length, node.location);
      }
      assembled.operands.push_back(add(std::move(part)));
      offset += length;
    }
    changed_ = true;
    return add(std::move(assembled));
  }

  const ir::Graph& graph_;
  std::vector<int> uses_;  // of the input graph's values
  ir::Graph result_;
  std::vector<int> uses_of_result_;  // of the result's values: those of the input values they stand for
  bool changed_ = false;
};

}  // namespace

bool sink_elementwise_into_concats(ir::Graph& graph) { return Sinker(graph).run(graph); }

}  // namespace kiln::compiler
