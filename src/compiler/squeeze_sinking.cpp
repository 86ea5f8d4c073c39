#include "compiler/squeeze_sinking.h"

#include "compiler/fusion.h"
#include "compiler/rewrite.h"

#include <cstddef>
#include <vector>

namespace kiln::compiler {
namespace {

// Whether, in `shape`, each axis of `squeezed` is matched in order and every other axis has size 1 (`mask` true
// there). Matching greedily from the left is enough: where an axis of size 1 could be either, the values read
// through it do not depend on the choice.
bool unit_axes_inserted(const Shape& shape, const Shape& squeezed, std::vector<bool>& mask) {
  mask.assign(static_cast<std::size_t>(shape.rank()), false);
  int next = 0;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    if (next < squeezed.rank() && shape[axis] == squeezed[next]) {
      ++next;
    } else if (shape[axis] == 1) {
      mask[static_cast<std::size_t>(axis)] = true;
    } else {
      return false;
    }
  }
  return next == squeezed.rank();
}

class SqueezeSinker {
 public:
  explicit SqueezeSinker(const ir::Graph& graph)
      : graph_(graph), users_(static_cast<std::size_t>(graph.size())), result_(start_rebuild(graph)) {
    for (ir::ValueId id = 0; id < graph.size(); ++id)
      for (ir::ValueId operand : graph.node(id).operands) users_[static_cast<std::size_t>(operand)].push_back(id);
  }

  bool run(ir::Graph& graph) {
    std::vector<ir::ValueId> new_id(static_cast<std::size_t>(graph_.size()));
    for (ir::ValueId id = 0; id < graph_.size(); ++id) {
      ir::Node node = graph_.node(id);
      for (ir::ValueId& operand : node.operands) operand = new_id[static_cast<std::size_t>(operand)];
      ir::ValueId added;
      if (squeezable(id))
        added = keep_dimensions(std::move(node));
      else if (squeezes_a_row_value(node))
        added = add(node, node.operands[0]);
      else if (const ir::ValueId squeezed = squeezed_operand(node); squeezed >= 0)
        added = sink(node, squeezed);
      else
        added = add(std::move(node));
      new_id[static_cast<std::size_t>(id)] = added;
    }
    if (!changed_) return false;
    finish_rebuild(graph_, new_id, result_);
    graph = std::move(result_);
    return true;
  }

 private:
  ir::ValueId add(ir::Node node, ir::ValueId unsqueezed = -1) {
    unsqueezed_.push_back(unsqueezed);
    per_row_.push_back(is_per_row(node));
    return result_.add(std::move(node));
  }

  // A node (of the result) with one value per row of a row kernel, in the row shape: a reduction over trailing
  // axes with keepdims, or an elementwise op of the shape of such an operand.
  bool is_per_row(const ir::Node& node) const {
    if (ir::is_reduction(node.op) && !ir::is_arg_reduction(node.op) && node.attributes.keepdims) {
      const int reduced = trailing_reduced_axes(result_, node);
      return reduced > 0 && reduced < result_.type(node.operands[0]).shape.rank();
    }
    if (!ir::is_elementwise(node.op)) return false;
    for (ir::ValueId operand : node.operands)
      if (per_row_[static_cast<std::size_t>(operand)] && result_.type(operand).shape == node.type.shape) return true;
    return false;
  }

  // A reshape (operands in the result) that only drops unit axes of a per-row value: kiln's composites squeeze
  // their keepdims rows so (reduce_std, reduce_logsumexp), and elementwise ops after it can sink past it too.
  bool squeezes_a_row_value(const ir::Node& node) const {
    if (node.op != ir::Op::reshape || !per_row_[static_cast<std::size_t>(node.operands[0])]) return false;
    const Shape& row_shape = result_.type(node.operands[0]).shape;
    std::vector<bool> inserted;
    return !(row_shape == node.type.shape) && unit_axes_inserted(row_shape, node.type.shape, inserted);
  }

  ir::ValueId add_reshape(ir::ValueId value, const Shape& shape, const std::string& location,
                          ir::ValueId unsqueezed = -1) {
    ir::Node reshape;
    reshape.op = ir::Op::reshape;
    reshape.type = {result_.type(value).dtype, shape};
    reshape.operands = {value};
    reshape.location = location;
    return add(std::move(reshape), unsqueezed);
  }

  // Whether an elementwise op of `shape` reading a value of `squeezed` shape (an operand of `node`) reads it
  // without broadcasting it to a larger shape.
  static bool reads_whole(const ir::Node& node, const Shape& squeezed) {
    return ir::is_elementwise(node.op) && node.type.shape == squeezed;
  }

  // A reduction (of the input graph) over trailing axes, without keepdims, keeping at least one axis, that an
  // elementwise op of its shape reads.
  bool squeezable(ir::ValueId id) const {
    const ir::Node& node = graph_.node(id);
    if (!ir::is_reduction(node.op) || ir::is_arg_reduction(node.op) || node.attributes.keepdims) return false;
    const int reduced = trailing_reduced_axes(graph_, node);
    if (reduced <= 0 || reduced >= graph_.type(node.operands[0]).shape.rank()) return false;
    for (ir::ValueId user : users_[static_cast<std::size_t>(id)])
      if (reads_whole(graph_.node(user), node.type.shape)) return true;
    return false;
  }

  // The reduction with keepdims, squeezed by a reshape.
  ir::ValueId keep_dimensions(ir::Node reduction) {
    const Shape squeezed = reduction.type.shape;
    const std::string location = reduction.location;
    Shape kept = result_.type(reduction.operands[0]).shape;
    for (std::int64_t axis : reduction.attributes.axes) kept[static_cast<int>(axis)] = 1;
    reduction.type.shape = kept;
    reduction.attributes.keepdims = true;
    const ir::ValueId unsqueezed = add(std::move(reduction));
    changed_ = true;
    return add_reshape(unsqueezed, squeezed, location, unsqueezed);
  }

  // An operand of `node` (in the result) that is a squeeze the node reads whole.
  ir::ValueId squeezed_operand(const ir::Node& node) const {
    for (ir::ValueId operand : node.operands)
      if (unsqueezed_[static_cast<std::size_t>(operand)] >= 0 && reads_whole(node, result_.type(operand).shape))
        return operand;
    return -1;
  }

  // `node` computed in the unsqueezed shape of its operand `squeezed`, then squeezed.
  ir::ValueId sink(ir::Node node, ir::ValueId squeezed) {
    const Shape shape = node.type.shape;
    // Copies: adding nodes to the result moves its nodes.
    const Shape unsqueezed_shape = result_.type(unsqueezed_[static_cast<std::size_t>(squeezed)]).shape;
    std::vector<bool> inserted;
    unit_axes_inserted(unsqueezed_shape, shape, inserted);
    for (ir::ValueId& operand : node.operands) {
      const ir::ValueId unsqueezed = unsqueezed_[static_cast<std::size_t>(operand)];
      const Shape own = result_.type(operand).shape;
      if (unsqueezed >= 0 && result_.type(unsqueezed).shape == unsqueezed_shape) {
        operand = unsqueezed;
      } else if (own.rank() > 0) {
        // Right-aligned against `shape` (NumPy broadcasting), with the unit axes where the squeeze removed them.
        std::vector<std::int64_t> dims;
        int next = own.rank() - shape.rank();
        for (bool unit : inserted) {
          dims.push_back(unit || next < 0 ? 1 : own[next]);
          if (!unit) ++next;
        }
        operand = add_reshape(operand, Shape(dims), node.location);
      }
    }
    node.type.shape = unsqueezed_shape;
    changed_ = true;
    const std::string location = node.location;
    const ir::ValueId computed = add(std::move(node));
    return add_reshape(computed, shape, location, computed);
  }

  const ir::Graph& graph_;
  std::vector<std::vector<ir::ValueId>> users_;  // of the input graph's values
  ir::Graph result_;
  std::vector<ir::ValueId> unsqueezed_;  // of the result's values: the value a squeeze reshapes, or -1
  std::vector<bool> per_row_;            // of the result's values: is_per_row
  bool changed_ = false;
};

}  // namespace

bool sink_squeezes_of_reductions(ir::Graph& graph) { return SqueezeSinker(graph).run(graph); }

}  // namespace kiln::compiler
