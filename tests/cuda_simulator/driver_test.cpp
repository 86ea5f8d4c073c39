// The CUDA simulator's NVRTC and driver API (tools/cuda-simulator/nvrtc.cpp,
// driver.cpp) and the emulated device (emulated_device.h): CUDA source in,
// kernels run, and what a GPU refuses refused.

#include "compiler/codegen/cuda/driver_api.h"

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using kiln::compiler::cuda::driver_api;
using kiln::compiler::cuda::DriverApi;

// The module image of `source` (NVRTC, for sm_90), or "" with `log` set.
std::string compile(const std::string& source, std::string* log = nullptr) {
  nvrtcProgram program = nullptr;
  EXPECT_EQ(nvrtcCreateProgram(&program, source.c_str(), "test.cu", 0, nullptr, nullptr), NVRTC_SUCCESS);
  const char* options[] = {"--std=c++20", "--gpu-architecture=sm_90"};
  nvrtcResult status = nvrtcCompileProgram(program, 2, options);
  std::size_t size = 0;
  nvrtcGetProgramLogSize(program, &size);
  std::string text(size, '\0');
  nvrtcGetProgramLog(program, text.data());
  if (log) *log = text;
  std::string image;
  if (status == NVRTC_SUCCESS) {
    EXPECT_EQ(nvrtcGetCUBINSize(program, &size), NVRTC_SUCCESS);
    image.resize(size);
    EXPECT_EQ(nvrtcGetCUBIN(program, image.data()), NVRTC_SUCCESS);
  }
  nvrtcDestroyProgram(&program);
  return image;
}

// Sums 256 values per block: a butterfly of shuffles per warp, then warp 0
// over the warps' sums through shared memory.
constexpr const char* block_sum_source = R"(
namespace test {
__device__ float warp_sum(float value) {
  for (int mask = 16; mask > 0; mask /= 2) value += __shfl_xor_sync(0xffffffffu, value, mask);
  return value;
}
extern "C" __global__ void __launch_bounds__(256) block_sum(const float* in, float* out, int count) {
  __shared__ float warps[8];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float value = warp_sum(i < count ? in[i] : 0.0f);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = value;
  __syncthreads();
  if (threadIdx.x < 32) {
    value = warp_sum(threadIdx.x < 8 ? warps[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) out[blockIdx.x] = value;
  }
}
}  // namespace test
)";

TEST(CudaSimulatorDriver, RunsAKernelFromCudaSource) {
  const DriverApi& api = driver_api();
  std::string image = compile(block_sum_source);
  ASSERT_FALSE(image.empty());
  CUmodule module = nullptr;
  ASSERT_EQ(api.module_load_data(&module, image.data()), CUDA_SUCCESS);
  CUfunction function = nullptr;
  ASSERT_EQ(api.module_get_function(&function, module, "block_sum"), CUDA_SUCCESS);
  EXPECT_EQ(api.module_get_function(&function, module, "warp_sum"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(api.module_get_function(&function, module, "block_sum"), CUDA_SUCCESS);

  const int count = 700, blocks = 3;
  std::vector<float> values(count);
  for (int i = 0; i < count; ++i) values[i] = std::sin(0.37f * i) + 1.25f;
  float *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), count * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), blocks * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(in, values.data(), count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  int argument_count = count;
  void* arguments[] = {&in, &out, &argument_count};
  ASSERT_EQ(api.launch_kernel(function, blocks, 1, 1, 256, 1, 1, 0, nullptr, arguments, nullptr), CUDA_SUCCESS);
  argument_count = 0;  // a launch copies its arguments
  std::vector<float> sums(blocks);
  ASSERT_EQ(cudaMemcpy(sums.data(), out, blocks * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int block = 0; block < blocks; ++block) {
    double expected = 0;
    for (int i = block * 256; i < std::min(count, (block + 1) * 256); ++i) expected += values[i];
    EXPECT_NEAR(sums[block], expected, 1e-4 * std::abs(expected)) << "block " << block;
  }

  // What a GPU refuses: more threads than the launch bounds, an empty grid.
  EXPECT_EQ(api.launch_kernel(function, 1, 1, 1, 512, 1, 1, 0, nullptr, arguments, nullptr),
            CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  EXPECT_EQ(api.launch_kernel(function, 0, 1, 1, 256, 1, 1, 0, nullptr, arguments, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaFree(in), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaSimulatorDriver, NvrtcRefusalsComeFromTheRealNvrtc) {
  std::string log;
  // Host-only code in a kernel: a host compiler would accept it.
  std::string image = compile(R"(
#include <cstdio>
extern "C" __global__ void kernel() { std::FILE* file = std::fopen("x", "r"); (void)file; }
)",
                              &log);
  EXPECT_TRUE(image.empty());
  EXPECT_NE(log.find("error"), std::string::npos) << log;
}

TEST(CudaSimulatorDriver, LoadsOnlyItsOwnImages) {
  const DriverApi& api = driver_api();
  CUmodule module = nullptr;
  const char not_an_image[] =
      "\x7f"
      "ELF not a simulated module";
  EXPECT_EQ(api.module_load_data(&module, not_an_image), CUDA_ERROR_INVALID_IMAGE);
}

// A kernel that reads its neighbour's shared slot, with or without a barrier between.
constexpr const char* neighbour_source = R"(
extern "C" __global__ void __launch_bounds__(64) neighbour(int* out, int with_barrier) {
  __shared__ int slots[64];
  slots[threadIdx.x] = threadIdx.x + 1;
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 64];
}
extern "C" __global__ void __launch_bounds__(64) half_barrier() {
  if (threadIdx.x < 32) __syncthreads();
}
extern "C" __global__ void __launch_bounds__(64) partial_warp_shuffle() {
  (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
)";

// Runs `name` of neighbour_source over one block of `threads`; the first
// `threads` ints it writes.
std::vector<int> run_neighbour(const char* name, unsigned threads, int with_barrier) {
  const DriverApi& api = driver_api();
  std::string image = compile(neighbour_source);
  CUmodule module = nullptr;
  EXPECT_EQ(api.module_load_data(&module, image.data()), CUDA_SUCCESS);
  CUfunction function = nullptr;
  EXPECT_EQ(api.module_get_function(&function, module, name), CUDA_SUCCESS);
  int* out = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 64 * sizeof(int)), cudaSuccess);
  void* arguments[] = {&out, &with_barrier};
  EXPECT_EQ(api.launch_kernel(function, 1, 1, 1, threads, 1, 1, 0, nullptr, arguments, nullptr), CUDA_SUCCESS);
  std::vector<int> result(64);
  EXPECT_EQ(cudaMemcpy(result.data(), out, 64 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
  return result;
}

TEST(CudaSimulatorDevice, AReadWithoutABarrierCanSeeAStaleValue) {
  std::vector<int> with = run_neighbour("neighbour", 64, 1);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(with[i], (i + 1) % 64 + 1);
  std::vector<int> without = run_neighbour("neighbour", 64, 0);
  int stale = 0;
  for (int i = 0; i < 64; ++i) stale += without[i] != (i + 1) % 64 + 1;
  EXPECT_GT(stale, 0) << "the shuffled order should run some threads before their neighbours";
}

TEST(CudaSimulatorDeathTest, ABarrierNotAllThreadsReachDeadlocks) {
  EXPECT_DEATH(run_neighbour("half_barrier", 64, 0), "deadlock");
}

TEST(CudaSimulatorDeathTest, AFullMaskShuffleInAPartialWarpAborts) {
  EXPECT_DEATH(run_neighbour("partial_warp_shuffle", 48, 0), "partial warp");
}

#if defined(__SANITIZE_ADDRESS__)
// In an ASan build, a kernel that reads one element past its buffer is
// reported (a GPU would read whatever lies there, or fault later).
TEST(CudaSimulatorDeathTest, AddressSanitizerSeesAKernelReadPastItsBuffer) {
  constexpr const char* source = R"(
extern "C" __global__ void __launch_bounds__(32) copy_one_more(const float* in, float* out) {
  out[threadIdx.x] = in[threadIdx.x + 1];
}
)";
  auto run = [&] {
    const DriverApi& api = driver_api();
    std::string image = compile(source);
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    if (api.module_load_data(&module, image.data()) != CUDA_SUCCESS ||
        api.module_get_function(&function, module, "copy_one_more"))
      return;
    float *in = nullptr, *out = nullptr;
    (void)cudaMalloc(reinterpret_cast<void**>(&in), 32 * sizeof(float));
    (void)cudaMalloc(reinterpret_cast<void**>(&out), 32 * sizeof(float));
    void* arguments[] = {&in, &out};
    (void)api.launch_kernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, arguments, nullptr);
    (void)cudaDeviceSynchronize();
  };
  EXPECT_DEATH(run(), "AddressSanitizer");
}
#endif

}  // namespace
