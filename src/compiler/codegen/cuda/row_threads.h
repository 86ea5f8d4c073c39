#pragma once
// How the CUDA row kernels spread rows over threads (reduction_kernel.cpp), and so how much shared memory an
// attention kernel (attention_kernel.cpp) keeps its scores in. Header-only and free of CUDA: the fusion
// scheduler's capabilities (fusion.cpp) read attention_shared_bytes to keep apart the attention kernels whose
// scores would not fit.

#include <cstdint>

namespace kiln::compiler::cuda {

inline constexpr std::int64_t warp_row_limit = 1024;  // longest row one warp reduces
inline constexpr int warp_block_threads = 256;        // 8 warps: 8 rows per block
inline constexpr int row_block_threads = 512;         // one block per longer row

struct RowThreads {
  bool by_warp = true;             // a warp per row, else a block per row
  int threads_per_row = 32;
  int block_threads = warp_block_threads;
  std::int64_t rows_per_block = warp_block_threads / 32;
};

// A row of up to warp_row_limit elements is one warp's; a longer one is one block's.
constexpr RowThreads row_threads(std::int64_t row_length) {
  if (row_length <= warp_row_limit) return {};
  return {.by_warp = false, .threads_per_row = row_block_threads, .block_threads = row_block_threads,
          .rows_per_block = 1};
}

// The shared memory of an attention kernel with `keys` keys: a row of f32 scores for each row of its block (at
// least one float: C++ has no empty arrays).
constexpr std::int64_t attention_shared_bytes(std::int64_t keys) {
  return row_threads(keys).rows_per_block * (keys > 0 ? keys : 1) * std::int64_t{4};
}

// The most shared memory an attention kernel's scores may take: 32 KiB, a block of 8 warp rows of 1024 keys or
// one block row of 8192 keys. It stays well under the 48 KiB a kernel may declare statically (without opting in
// to more per launch), which leaves room for the row reductions' exchange arrays.
inline constexpr std::int64_t attention_shared_limit_bytes = std::int64_t{32} << 10;

}  // namespace kiln::compiler::cuda
