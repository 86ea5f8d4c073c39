#pragma once
// What the scan kernels (kernels/cpu/scan.cpp, kernels/cuda/scan.cu) see of a scan: the input as [outer, length,
// inner] around the scanned axis, and the flags; with the checks both make of their arguments.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <cstdint>

namespace kiln::kernels {

struct ScanShape {
  std::int64_t outer = 1, length = 1, inner = 1;
  bool exclusive = false, reverse = false;
};

// Throws InternalError for a call no node could make (not a scan, an axis out of range, an output unlike the input)
// and DTypeError for a sum or product of bools (the api layer counts them in i32).
ScanShape scan_shape(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input,
                     const runtime::Array& output);

}  // namespace kiln::kernels
