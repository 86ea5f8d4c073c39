#include "kernels/cpu/gemm_strided.h"

#include <kiln/error.h>

#include <string>

namespace kiln::kernels::cpu::gemm_detail {

#if defined(__x86_64__) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))

namespace {

// Every variant needs a run.
void check_runs(int run_count) {
  if (run_count < 1) throw InternalError("matmul", "strided_microkernel called without runs", std::string());
}

// The tile's sums, saved by the assembly at `tile` row by row, into C as the microkernel stores its tile.
void store_saved_tile(const float* tile, float* c, std::int64_t ldc, int columns, bool accumulate) {
  TileSums<kMr> sums;
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < kVectorsPerRow; ++v) sums[r][v] = load_vector(tile + r * kNr + v * kLanes);
  store_tile<kMr>(sums, c, ldc, columns, accumulate);
}

}  // namespace

// The loop over runs around a variant's steps along K: label 1 takes the next run's pointer (row0) and depth (the
// variant may set up more pointers after KILN_RUN_START), label 2 is a step (the variant's code between
// KILN_STEPS_START and KILN_STEP_END), label 3 moves to the next run.
// clang-format off
#define KILN_RUN_START                   \
  "1:\n\t"                               \
  "mov (%[run]), %[row0]\n\t"            \
  "mov 8(%[run]), %[depth]\n\t"
#define KILN_STEPS_START                 \
  "test %[depth], %[depth]\n\t"          \
  "jz 3f\n\t"                            \
  "2:\n\t"
#define KILN_STEP_END                    \
  "dec %[depth]\n\t"                     \
  "jnz 2b\n\t"                           \
  "3:\n\t"                               \
  "add $16, %[run]\n\t"                  \
  "dec %[remaining_runs]\n\t"            \
  "jnz 1b\n\t"
// clang-format on

#endif

#if defined(__AVX512F__) && defined(__x86_64__)

// One row of a step: broadcast A's element at `address` and add its products with the two B vectors (zmm28,
// zmm29) to the row's two accumulators.
// clang-format off
#define KILN_STRIDED_ROW(address, low, high)                 \
  "vbroadcastss " address ", %%zmm30\n\t"                    \
  "vfmadd231ps %%zmm28, %%zmm30, %%zmm" #low "\n\t"          \
  "vfmadd231ps %%zmm29, %%zmm30, %%zmm" #high "\n\t"
#define KILN_CLEAR(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define KILN_SAVE(i) "vmovups %%zmm" #i ", " #i "*64(%[tile])\n\t"
// clang-format on

void strided_microkernel(const StridedRun* runs, int run_count, std::int64_t row_stride, const float* b, float* c,
                         std::int64_t ldc, int columns, bool accumulate) {
  static_assert(kStridedMicrokernel);
  check_runs(run_count);
  alignas(64) float tile[kMr * kNr];
  const std::int64_t stride = row_stride * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t stride3 = 3 * stride, stride5 = 5 * stride, stride7 = 7 * stride;
  long remaining_runs = run_count;
  const StridedRun* run = runs;
  const float* b_row = b;
  const float *row0 = nullptr, *row9 = nullptr;
  long depth = 0;
  // Registers: zmm0-27 the tile's sums (row r in zmm 2r and 2r + 1), zmm28-29 B's row, zmm30 the broadcast; rows
  // 0-8 addressed from row0, rows 9-13 from row9 = row0 + 9 strides.
  asm volatile(
      KILN_CLEAR(0) KILN_CLEAR(1) KILN_CLEAR(2) KILN_CLEAR(3) KILN_CLEAR(4) KILN_CLEAR(5) KILN_CLEAR(6)
      KILN_CLEAR(7) KILN_CLEAR(8) KILN_CLEAR(9) KILN_CLEAR(10) KILN_CLEAR(11) KILN_CLEAR(12) KILN_CLEAR(13)
      KILN_CLEAR(14) KILN_CLEAR(15) KILN_CLEAR(16) KILN_CLEAR(17) KILN_CLEAR(18) KILN_CLEAR(19) KILN_CLEAR(20)
      KILN_CLEAR(21) KILN_CLEAR(22) KILN_CLEAR(23) KILN_CLEAR(24) KILN_CLEAR(25) KILN_CLEAR(26) KILN_CLEAR(27)
      KILN_RUN_START
      "lea (%[row0],%[stride],8), %[row9]\n\t"
      "add %[stride], %[row9]\n\t"
      KILN_STEPS_START
      "vmovups (%[b_row]), %%zmm28\n\t"
      "vmovups 64(%[b_row]), %%zmm29\n\t"
      // B streams from L2: its row 8 steps ahead, as the microkernel asks.
      "prefetcht0 1024(%[b_row])\n\t"
      "prefetcht0 1088(%[b_row])\n\t"
      KILN_STRIDED_ROW("(%[row0])", 0, 1)
      KILN_STRIDED_ROW("(%[row0],%[stride],1)", 2, 3)
      KILN_STRIDED_ROW("(%[row0],%[stride],2)", 4, 5)
      KILN_STRIDED_ROW("(%[row0],%[stride3],1)", 6, 7)
      KILN_STRIDED_ROW("(%[row0],%[stride],4)", 8, 9)
      KILN_STRIDED_ROW("(%[row0],%[stride5],1)", 10, 11)
      KILN_STRIDED_ROW("(%[row0],%[stride3],2)", 12, 13)
      KILN_STRIDED_ROW("(%[row0],%[stride7],1)", 14, 15)
      KILN_STRIDED_ROW("(%[row0],%[stride],8)", 16, 17)
      KILN_STRIDED_ROW("(%[row9])", 18, 19)
      KILN_STRIDED_ROW("(%[row9],%[stride],1)", 20, 21)
      KILN_STRIDED_ROW("(%[row9],%[stride],2)", 22, 23)
      KILN_STRIDED_ROW("(%[row9],%[stride3],1)", 24, 25)
      KILN_STRIDED_ROW("(%[row9],%[stride],4)", 26, 27)
      "add $4, %[row0]\n\t"
      "add $4, %[row9]\n\t"
      "add $128, %[b_row]\n\t"
      KILN_STEP_END
      KILN_SAVE(0) KILN_SAVE(1) KILN_SAVE(2) KILN_SAVE(3) KILN_SAVE(4) KILN_SAVE(5) KILN_SAVE(6) KILN_SAVE(7)
      KILN_SAVE(8) KILN_SAVE(9) KILN_SAVE(10) KILN_SAVE(11) KILN_SAVE(12) KILN_SAVE(13) KILN_SAVE(14) KILN_SAVE(15)
      KILN_SAVE(16) KILN_SAVE(17) KILN_SAVE(18) KILN_SAVE(19) KILN_SAVE(20) KILN_SAVE(21) KILN_SAVE(22)
      KILN_SAVE(23) KILN_SAVE(24) KILN_SAVE(25) KILN_SAVE(26) KILN_SAVE(27)
      : [run] "+r"(run), [remaining_runs] "+r"(remaining_runs), [b_row] "+r"(b_row), [row0] "=&r"(row0),
        [row9] "=&r"(row9), [depth] "=&r"(depth)
      : [stride] "r"(stride), [stride3] "r"(stride3), [stride5] "r"(stride5), [stride7] "r"(stride7),
        [tile] "r"(tile)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
        "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "cc", "memory");
  store_saved_tile(tile, c, ldc, columns, accumulate);
}

#undef KILN_STRIDED_ROW
#undef KILN_CLEAR
#undef KILN_SAVE

#elif defined(__AVX2__) && defined(__FMA__) && defined(__x86_64__)

// One row of a step: broadcast A's element at `address` and add its products with the two B vectors (ymm12,
// ymm13) to the row's two accumulators.
// clang-format off
#define KILN_STRIDED_ROW(address, low, high)                 \
  "vbroadcastss " address ", %%ymm14\n\t"                    \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm" #low "\n\t"          \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm" #high "\n\t"
#define KILN_CLEAR(i) "vxorps %%ymm" #i ", %%ymm" #i ", %%ymm" #i "\n\t"
#define KILN_SAVE(i) "vmovups %%ymm" #i ", " #i "*32(%[tile])\n\t"
// clang-format on

void strided_microkernel(const StridedRun* runs, int run_count, std::int64_t row_stride, const float* b, float* c,
                         std::int64_t ldc, int columns, bool accumulate) {
  static_assert(kStridedMicrokernel);
  check_runs(run_count);
  alignas(32) float tile[kMr * kNr];
  const std::int64_t stride = row_stride * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t stride3 = 3 * stride, stride5 = 5 * stride;
  long remaining_runs = run_count;
  const StridedRun* run = runs;
  const float* b_row = b;
  const float* row0 = nullptr;
  long depth = 0;
  // Registers: ymm0-11 the tile's sums (row r in ymm 2r and 2r + 1), ymm12-13 B's row, ymm14 the broadcast.
  asm volatile(
      KILN_CLEAR(0) KILN_CLEAR(1) KILN_CLEAR(2) KILN_CLEAR(3) KILN_CLEAR(4) KILN_CLEAR(5) KILN_CLEAR(6)
      KILN_CLEAR(7) KILN_CLEAR(8) KILN_CLEAR(9) KILN_CLEAR(10) KILN_CLEAR(11)
      KILN_RUN_START
      KILN_STEPS_START
      "vmovups (%[b_row]), %%ymm12\n\t"
      "vmovups 32(%[b_row]), %%ymm13\n\t"
      // B streams from L2: its row 8 steps ahead (one cache line), as the microkernel asks.
      "prefetcht0 512(%[b_row])\n\t"
      KILN_STRIDED_ROW("(%[row0])", 0, 1)
      KILN_STRIDED_ROW("(%[row0],%[stride],1)", 2, 3)
      KILN_STRIDED_ROW("(%[row0],%[stride],2)", 4, 5)
      KILN_STRIDED_ROW("(%[row0],%[stride3],1)", 6, 7)
      KILN_STRIDED_ROW("(%[row0],%[stride],4)", 8, 9)
      KILN_STRIDED_ROW("(%[row0],%[stride5],1)", 10, 11)
      "add $4, %[row0]\n\t"
      "add $64, %[b_row]\n\t"
      KILN_STEP_END
      KILN_SAVE(0) KILN_SAVE(1) KILN_SAVE(2) KILN_SAVE(3) KILN_SAVE(4) KILN_SAVE(5) KILN_SAVE(6) KILN_SAVE(7)
      KILN_SAVE(8) KILN_SAVE(9) KILN_SAVE(10) KILN_SAVE(11)
      : [run] "+r"(run), [remaining_runs] "+r"(remaining_runs), [b_row] "+r"(b_row), [row0] "=&r"(row0),
        [depth] "=&r"(depth)
      : [stride] "r"(stride), [stride3] "r"(stride3), [stride5] "r"(stride5), [tile] "r"(tile)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "cc", "memory");
  store_saved_tile(tile, c, ldc, columns, accumulate);
}

#undef KILN_STRIDED_ROW
#undef KILN_CLEAR
#undef KILN_SAVE

#else

void strided_microkernel(const StridedRun*, int, std::int64_t, const float*, float*, std::int64_t, int, bool) {
  throw InternalError("matmul", "strided_microkernel needs AVX-512, or AVX2 with FMA", std::string());
}

#endif

#undef KILN_RUN_START
#undef KILN_STEPS_START
#undef KILN_STEP_END

}  // namespace kiln::kernels::cpu::gemm_detail
