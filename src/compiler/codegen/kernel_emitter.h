#pragma once
// What the code generators share (the CPU's, codegen/cpu, and CUDA's,
// codegen/cuda): which value each fused node reads at which element (index
// maps), the instances to compute, how the iteration space collapses into
// rows and an inner loop, loads of padded values read in place
// (padding_bounds.cpp), and the C-family text of each op, which the CPU's
// prelude and CUDA's define alike. What each backend wraps around it is its
// own: the CPU's work-item state (cpu/kernel_state.h), CUDA's parameters and
// literals of NaN and infinity (cuda/kernel_writer.h).

#include "compiler/fusion.h"
#include "compiler/loop_nest.h"
#include "ir/graph.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace kiln::compiler::codegen {

using compiler::AxisMap;
using compiler::IndexMap;

// offset + sum over space axes of coefficient * coordinate.
struct Linear {
  std::int64_t offset = 0;
  std::vector<std::int64_t> coefficients;
};

// A coordinate of a padded load's source that can fall on the padding (fusion.h: padding read in place): the element is
// the source's where `coordinate` (of the space, as an axis map) lies in [0, size) and the padding's constant
// elsewhere.
struct Bound {
  AxisMap coordinate;
  std::int64_t size = 0;
};

// A value computed at one index map. Data movement (broadcast, transpose,
// slice, size-1 reshapes) produces no instance of its own: it changes the map
// its operand is read at.
struct Instance {
  // gather: take_along_axis, a load whose coordinate along one axis is its index operand's value.
  enum class Kind { load, compute, reduction, tile, gather };
  Kind kind = Kind::compute;
  ir::ValueId value = -1;
  IndexMap map;
  std::string name;           // the C++ variable
  bool varying = false;       // changes along the inner loop
  std::vector<int> operands;  // instance indices (compute)
  // compute: a cast of a 16-bit value back to f32 whose operand is the rounding of an f32 value in the kernel; its
  // operand is that f32 value, rounded in f32 lanes (round_through_bf16), not narrowed and widened again.
  bool round_through = false;
  int buffer = -1;            // load, gather: the kernel input's position
  Linear address;             // load, gather: element offset in that input (a gather's along the other axes)
  // gather: how far apart the gathered axis's elements lie in the input, its size (an index in [-extent, extent)
  // picks), and where the index read lies among the indices (row-major), for the error an index out of range raises
  std::int64_t gather_stride = 0;
  std::int64_t gather_extent = 0;
  Linear index_position;
  // load of a padded value read in place: where its source's coordinates must lie, and the padding's constant
  std::vector<Bound> bounds;
  ir::ValueId padding = -1;
};

// The iteration space as rows (the outer axes, collapsed where the memory
// layout allows) times an inner loop.
struct Layout {
  std::vector<std::int64_t> outer_sizes;  // collapsed outer axes, outermost first
  std::int64_t inner_size = 1;
  // For each collapsed outer axis and the inner axis, the space axis whose
  // coefficient it takes (the innermost of those it merges).
  std::vector<int> outer_axes;
  int inner_axis = -1;  // -1: the space is a scalar
  // Reduced axes that do not collapse into the inner loop (a reduction of
  // x + bias[column] over all axes): walked by loops `d0, d1, ...` around
  // the inner loop, within each row.
  std::vector<std::int64_t> middle_sizes;
  std::vector<int> middle_axes;
  std::int64_t rows() const;
  std::int64_t middle_count() const;  // product of middle_sizes
};

class KernelEmitter {
 public:
  // `piece`: which box of a kernel that reads concats piecewise `kernel` is (FusedKernel::piece), or -1.
  // `results_leave`: FusionPlan::results_leave of the kernel's plan.
  KernelEmitter(const ir::Graph& graph, const FusedKernel& kernel, int index, int piece = -1,
                bool results_leave = false);

  const ir::Graph& graph() const { return graph_; }
  const FusedKernel& kernel() const { return kernel_; }
  int index() const { return index_; }
  std::string prefix() const {
    return "kernel_" + std::to_string(index_) + (piece_ < 0 ? "" : "_piece_" + std::to_string(piece_));
  }
  int piece() const { return piece_; }
  bool results_leave() const { return results_leave_; }

  // The instance of `value` read at `map` (created on first use).
  int instance(ir::ValueId value, const IndexMap& map);
  const Instance& at(int instance) const { return instances_[static_cast<std::size_t>(instance)]; }
  int instance_count() const { return static_cast<int>(instances_.size()); }
  // The map under which a value of `shape` is broadcast over the space
  // (NumPy alignment at the right).
  IndexMap broadcast_map(const Shape& shape) const { return kernel_.from_origin(kernel_.nest().broadcast_map(shape)); }
  // Where the kernel computes output `value` (plan.h's output_map: per row at the nest's kept axes).
  IndexMap output_map(ir::ValueId value) const { return compiler::output_map(graph_, kernel_, value); }
  bool is_member(ir::ValueId value) const;

  // Collapses the space: axes [0, split) become rows, [split, rank) the inner
  // loop (and middle loops where they do not collapse). split < 0: every axis
  // but the last collapsed group is a row axis.
  Layout layout(int split, const std::vector<Linear>& extra) const;
  // A gemm kernel's layout: rows of the product's last axis, one outer axis per leading axis of the space (more
  // than one when the left operand has leading axes, is_generated_gemm), so that every row knows its coordinates.
  Layout product_rows() const;
  // `linear` in terms of the layout's row coordinates `c0, c1, ...` and the
  // inner coordinate `inner`: "12 + 4096 * c0" (without the inner term).
  std::string row_offset(const Linear& linear, const Layout& layout) const;
  // The middle-loop part of `linear`: " + 5 * d0" (empty if none).
  std::string middle_offset(const Linear& linear, const Layout& layout) const;
  bool varies_in_middle(const Linear& linear, const Layout& layout) const;
  std::int64_t inner_coefficient(const Linear& linear, const Layout& layout) const;
  // Where element coordinates of a value of `shape` at `map` lie in a dense
  // row-major array of that shape.
  Linear linear_address(const Shape& shape, const IndexMap& map) const;

  // ---- padding read in place (fusion.h; padding_bounds.cpp) ----
  // For each space axis that a load's bound depends on, a Linear that keeps layout() from merging the axis with
  // the one before it: every bounded axis starts a row axis or the inner loop.
  std::vector<Linear> padding_axes() const;
  // Where bounded space axis `axis` lies in `layout`: it starts row axis `row_axis`, or middle loop `middle_axis`,
  // or (both -1) the inner loop, and its coordinate is that one's divided by `divisor`, the product of the sizes of
  // the axes merged after it.
  struct BoundedAxis {
    int row_axis = -1;
    int middle_axis = -1;
    std::int64_t divisor = 1;
  };
  BoundedAxis bounded_axis(const Layout& layout, int axis) const;
  // The condition that load `item` reads its source, not the padding: "inside(2 * c1 + 1, 112) && ..." over its
  // bounds along row axes (c0, c1, ...: the row coordinates) and constant ones, and along the inner loop in terms of
  // the variable `inner` unless it is empty; empty when no bound is left. A bound along a middle loop is
  // middle_condition's: it throws CompileError unless `middle_apart` says the caller checks those.
  std::string inside_condition(const Instance& item, const Layout& layout, const std::string& inner,
                               bool middle_apart = false) const;
  // The condition over load `item`'s bounds along middle loops, in their variables d0, d1, ...; empty without.
  std::string middle_condition(const Instance& item, const Layout& layout) const;

  std::string input_name(int position) const { return "input" + std::to_string(position); }
  std::string output_name(ir::ValueId value) const;

  // The C++ expression computing instance `id` from its operands' variables.
  std::string expression(int id) const;
  std::string storage_type(ir::ValueId value) const;
  // A comment line describing a node: "// %4 = f32[4,4] add(%2, %3)".
  std::string describe(ir::ValueId value) const;
  // The comment that opens the kernel in a module: its index, kind and
  // space, then each member described.
  std::string heading() const;

 private:
  // Concat `value` read piecewise at `map`: within this box, the one operand the map falls on.
  int piece_instance(ir::ValueId value, const IndexMap& map);
  // Adds `created` as a load of kernel input `source` at `map` of `shape`.
  int add_load(Instance created, ir::ValueId source, const Shape& shape, const IndexMap& map);

  const ir::Graph& graph_;
  const FusedKernel& kernel_;
  int index_;
  int piece_;
  bool results_leave_;
  std::vector<Instance> instances_;
  std::vector<bool> member_;
};

// The C++ element type of a dtype in memory (bf16 and f16: their bits, uint16_t).
std::string storage_type(DType dtype);
// A constant's value as C++ source of its storage type (bf16 and f16: their bits, 0x3FC0).
std::string literal(const ir::Node& constant);

}  // namespace kiln::compiler::codegen
