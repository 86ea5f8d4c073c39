#pragma once
// The model the fusion scheduler and the code generators share: every kernel is a loop nest over an iteration
// space, and every value a kernel reads or computes is reached through an index map from the nest's coordinates
// into the value's own coordinates.
//
//   space [4, 8, 16], reducing axis 2:    x[i, j, k]       identity
//                                          mean[i, j, 0]    the kept axes (a reduction's result, keepdims)
//                                          bias[k]          broadcast (NumPy alignment at the right)
//                                          x[i, j, 15 - k]  a reversing slice: scale -1, offset 15
//
// The scheduler decides fusion by comparing maps (a reduction's result exists only at the kept coordinates the
// nest is computing, so every read of it must be at its home map); the generators turn the same maps into
// addresses.

#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

// One axis of a value as a function of the nest's coordinates: coordinate = offset + scale * space[source]
// (source -1: just offset).
struct AxisMap {
  int source = -1;
  std::int64_t scale = 0;
  std::int64_t offset = 0;
  friend bool operator==(const AxisMap&, const AxisMap&) = default;
};

// A value's coordinates, axis by axis, as functions of the nest's.
using IndexMap = std::vector<AxisMap>;

// The loop nest of a kernel: its iteration space and the run of axes it reduces, [reduced_begin, reduced_end)
// (empty for a loop kernel). A row kernel reduces trailing axes; a column kernel a run that ends before the last
// axis, which it keeps innermost.
struct LoopNest {
  Shape space;
  int reduced_begin = 0;
  int reduced_end = 0;

  static LoopNest over(const Shape& space) { return {space, space.rank(), space.rank()}; }

  bool reduces() const { return reduced_end > reduced_begin; }
  int reduced_count() const { return reduced_end - reduced_begin; }
  // Whether the reduced run ends at the last axis (a row kernel's rows are then contiguous).
  bool reduces_trailing() const { return reduces() && reduced_end == space.rank(); }
  bool is_reduced(int axis) const { return axis >= reduced_begin && axis < reduced_end; }
  // The number of kept coordinates: rows of a row kernel, columns (times outer indices) of a column kernel.
  std::int64_t kept_count() const;

  // Whether a value of `shape` has one element per kept coordinate: its axes of more than one element are the
  // kept axes' of more than one element, in order (a reduction's result, with or without its reduced axes kept as
  // size 1).
  bool is_kept_shape(const Shape& shape) const;
  // The map of such a value (its home: where the nest has it).
  IndexMap kept_map(const Shape& shape) const;
  // The map of a value of `shape` broadcast over the space, NumPy-aligned at the right (the identity for a value
  // of the space's shape).
  IndexMap broadcast_map(const Shape& shape) const;

  friend bool operator==(const LoopNest&, const LoopNest&) = default;
};

// The map at which `user`, read at `user_map`, reads its operand `operand`: data movement (broadcast_to,
// transpose, slice, reshapes that add or remove size-1 axes) changes the map; elementwise ops broadcast it.
IndexMap operand_map(const ir::Graph& graph, const ir::Node& user, std::size_t operand, const IndexMap& user_map);

// `map` (over some space) read through `outer`, a map from a larger nest's coordinates into that space's: the
// same value's map in the larger nest. Rebases a kernel's maps when its nest grows (per-row consumers of a
// reduction computed inside the reduction's nest).
IndexMap compose(const IndexMap& outer, const IndexMap& map);

// Whether `map` reads the same element wherever the nest's coordinates differ only along axes not marked in
// `axes` (a value read at such a map is computed once per kept coordinate, not once per element).
bool depends_only_on(const IndexMap& map, const std::vector<bool>& axes);

// "[k, 15 - j]": a map in terms of the nest's coordinates, for fusion notes.
std::string to_string(const IndexMap& map);

}  // namespace kiln::compiler
