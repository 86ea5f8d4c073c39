// kiln-dump's resource table: ptxas's report parsed, and the occupancy
// arithmetic checked on cases worked out by hand.

#include "resource_report.h"

#include <gtest/gtest.h>

namespace kiln::dump {
namespace {

// NVRTC 13.0's log for the seed function's module (sm_90), with a warning of
// NVRTC's before ptxas's lines.
constexpr const char* seed_log =
    "seed_jit.cu(455): warning #177-D: variable \"j\" was declared but never referenced\n"
    "        const int64_t j = position;\n"
    "\n"
    "ptxas info    : 1108 bytes gmem\n"
    "ptxas info    : Compiling entry function 'kiln_kernel_0_vector' for 'sm_90'\n"
    "ptxas info    : Function properties for kiln_kernel_0_vector\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 1 barriers, 33 bytes smem\n"
    "ptxas info    : Compile time = 73.897 ms\n"
    "ptxas info    : Compiling entry function 'kiln_kernel_0' for 'sm_90'\n"
    "ptxas info    : Function properties for kiln_kernel_0\n"
    "ptxas         .     32 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 22 registers, used 1 barriers, 32 bytes cumulative stack size, 33 bytes smem\n"
    "ptxas info    : Compile time = 19.397 ms\n";

TEST(ResourceReport, ReadsEveryEntryFunctionOfPtxasReport) {
  const std::vector<KernelResources> kernels = parse_ptxas_report(seed_log);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].function, "kiln_kernel_0_vector");
  EXPECT_EQ(kernels[0].registers, 32);
  EXPECT_EQ(kernels[0].stack_bytes, 0);
  EXPECT_EQ(kernels[0].shared_bytes, 33);
  EXPECT_EQ(kernels[1].function, "kiln_kernel_0");
  EXPECT_EQ(kernels[1].registers, 22);
  EXPECT_EQ(kernels[1].stack_bytes, 32);
  EXPECT_EQ(kernels[1].spill_store_bytes, 8);
  EXPECT_EQ(kernels[1].spill_load_bytes, 12);
  EXPECT_EQ(kernels[1].shared_bytes, 33);
}

TEST(ResourceReport, ALogWithoutPtxasLinesHasNoKernels) {
  EXPECT_TRUE(parse_ptxas_report("").empty());
  EXPECT_TRUE(parse_ptxas_report("x.cu(3): warning: Used 40 registers\n").empty());
}

// A kernel of `registers` per thread and `shared_bytes` of static shared memory.
KernelResources kernel_using(int registers, std::int64_t shared_bytes = 0) {
  KernelResources kernel;
  kernel.registers = registers;
  kernel.shared_bytes = shared_bytes;
  return kernel;
}

TEST(ResourceReport, OccupancyOnAnH200) {
  const std::optional<MultiprocessorLimits> h200 = limits_for(90);
  ASSERT_TRUE(h200.has_value());
  // 40 registers: 1,280 per warp, 20,480 per block of 512 threads; 65,536 hold 3 blocks.
  Occupancy result = occupancy(kernel_using(40, 128), 512, *h200);
  EXPECT_EQ(result.blocks, 3);
  EXPECT_DOUBLE_EQ(result.fraction, 0.75);
  EXPECT_EQ(result.limited_by, "registers");
  // 33 registers round up to 40 per thread (1,280 per warp): 512 threads still hold 3.
  EXPECT_EQ(occupancy(kernel_using(33), 512, *h200).blocks, 3);
  // 22 registers: 2,048 threads fit before the registers run out.
  result = occupancy(kernel_using(22, 33), 256, *h200);
  EXPECT_EQ(result.blocks, 8);
  EXPECT_DOUBLE_EQ(result.fraction, 1.0);
  EXPECT_EQ(result.limited_by, "threads");
  // 100 KiB of shared memory plus the 1 KiB reserved: two blocks in 228 KiB.
  result = occupancy(kernel_using(32, 100 * 1024), 128, *h200);
  EXPECT_EQ(result.blocks, 2);
  EXPECT_EQ(result.limited_by, "shared memory");
  // Warps of 32 threads: 64 would fit by threads, 32 by the block limit.
  result = occupancy(kernel_using(16), 32, *h200);
  EXPECT_EQ(result.blocks, 32);
  EXPECT_DOUBLE_EQ(result.fraction, 0.5);
  EXPECT_EQ(result.limited_by, "blocks");
}

TEST(ResourceReport, ArchitecturesDifferInThreadsPerMultiprocessor) {
  // An RTX 4090 (sm_89) holds 1,536 threads: one block of 1,024.
  const std::optional<MultiprocessorLimits> ada = limits_for(89);
  ASSERT_TRUE(ada.has_value());
  const Occupancy result = occupancy(kernel_using(32), 1024, *ada);
  EXPECT_EQ(result.blocks, 1);
  EXPECT_NEAR(result.fraction, 2.0 / 3.0, 1e-12);
  EXPECT_FALSE(limits_for(52).has_value());
}

}  // namespace
}  // namespace kiln::dump
