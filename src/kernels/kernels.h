#pragma once
// The standard kernel library: one precompiled kernel per op kind and device.
// Eager ops and the standard executor both run ops through kernels::run.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <cstdint>
#include <span>

namespace kiln::kernels {

// What a gather kernel reports instead of reading outside its operand: the first index (in the indices' order)
// outside [-n, n), and where it is.
struct OutOfRangeIndex {
  std::int64_t position = 0;  // element of the indices, row-major
  std::int64_t value = 0;
};

// Runs `node` (its op, attributes and result type; its operand ids are not
// used) on concrete `inputs` living on `device`, and returns the result.
// Shape ops that do not move data (reshape, expand_dims, squeeze) return an
// array sharing the input's buffer. host_call is not handled here (the
// caller owns the callback table). The result type must be static, except
// for nonzero, whose kernel sizes its own result.
runtime::Array run(const ir::Node& node, std::span<const runtime::Array> inputs, Device device);

}  // namespace kiln::kernels
