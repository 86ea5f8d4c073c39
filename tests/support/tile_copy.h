#pragma once
// An epilogue for kiln's GEMM (kernels/cpu/gemm.h) that copies every tile it sees into a matrix: C as the epilogue
// saw it, for comparing a product computed without C with the C written when it is given.

#include "kernels/cpu/gemm.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln::testing {

struct TileCopy {
  std::vector<float> c;
  std::int64_t ldc;  // floats a row of c

  kernels::cpu::GemmEpilogue epilogue() { return {&TileCopy::copy, this}; }
  static void copy(void* context, const float* tile, std::int64_t ld, std::int64_t row_begin, std::int64_t row_end,
                   std::int64_t column_begin, std::int64_t column_end, std::int64_t) {
    auto& self = *static_cast<TileCopy*>(context);
    for (std::int64_t i = row_begin; i < row_end; ++i)
      std::memcpy(&self.c[static_cast<std::size_t>(i * self.ldc + column_begin)], tile + (i - row_begin) * ld,
                  sizeof(float) * static_cast<std::size_t>(column_end - column_begin));
  }
};

}  // namespace kiln::testing
