// The CUDA simulator's runtime (tools/cuda-simulator/runtime.cpp): what it
// must show that a GPU would, through the CUDA runtime API alone.

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

// A device allocation of `count` floats, freed at the end of the test.
struct DeviceFloats {
  explicit DeviceFloats(std::size_t count) : count(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), count * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() { EXPECT_EQ(cudaFree(data), cudaSuccess); }
  std::size_t count;
  float* data = nullptr;
};

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  return stream;
}

TEST(CudaSimulatorRuntime, ReportsAnH200) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
  EXPECT_EQ(properties.major * 10 + properties.minor, 90);
  EXPECT_EQ(properties.multiProcessorCount, 132);
  EXPECT_EQ(properties.maxThreadsPerBlock, 1024);
  EXPECT_EQ(cudaGetDeviceProperties(&properties, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once
}

TEST(CudaSimulatorRuntime, WorkWaitsUntilTheHostWaitsForIt) {
  cudaStream_t stream = new_stream();
  DeviceFloats device(3);
  std::vector<float> source{1.5f, -2.0f, 3.25f}, result(3, 7.0f);
  ASSERT_EQ(cudaMemcpyAsync(device.data, source.data(), 12, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(result.data(), device.data, 12, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(result, std::vector<float>(3, 7.0f)) << "read before waiting: still the old values";
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(result, source);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaSimulatorRuntime, CopiesFromTheHostAreStagedAtTheCall) {
  cudaStream_t stream = new_stream();
  DeviceFloats device(2);
  std::vector<float> source{4.0f, 5.0f}, result(2);
  ASSERT_EQ(cudaMemcpyAsync(device.data, source.data(), 8, cudaMemcpyHostToDevice, stream), cudaSuccess);
  source = {-1.0f, -1.0f};  // pageable memory: the caller may reuse it right away
  ASSERT_EQ(cudaMemcpyAsync(result.data(), device.data, 8, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(result, (std::vector<float>{4.0f, 5.0f}));
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaSimulatorRuntime, FreshMemoryIsNotZero) {
  DeviceFloats device(4);
  std::vector<float> result(4, 0.0f);
  ASSERT_EQ(cudaMemcpy(result.data(), device.data, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float value : result) EXPECT_TRUE(std::isnan(value));
}

TEST(CudaSimulatorRuntime, CopiesCheckWhichSideIsTheDevice) {
  DeviceFloats device(4);
  std::vector<float> host(4, 1.0f), other(4);
  // A host pointer where the device's should be, and a range past the allocation.
  EXPECT_EQ(cudaMemcpy(other.data(), host.data(), 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), other.data(), 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device.data + 1, host.data(), 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(host.data(), 0, 16, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device.data, host.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidDevicePointer);
  (void)cudaGetLastError();
}

TEST(CudaSimulatorRuntime, MemoryIsFinite) {
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  void* pointer = nullptr;
  EXPECT_EQ(cudaMalloc(&pointer, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(pointer, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&pointer, 1000), cudaSuccess);
  std::size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free - free_after, 1024u);  // rounded to cudaMalloc's 256-byte alignment
  EXPECT_EQ(cudaFree(pointer), cudaSuccess);
}

TEST(CudaSimulatorRuntime, EventsCompleteInStreamOrder) {
  cudaStream_t stream = new_stream();
  DeviceFloats device(1);
  float before = 0.0f, after = 0.0f, one = 1.0f, two = 2.0f;
  cudaEvent_t first = nullptr, second = nullptr;
  ASSERT_EQ(cudaEventCreate(&first), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&second), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device.data, &one, 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&before, device.data, 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(first, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device.data, &two, 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&after, device.data, 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(second, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(first), cudaErrorNotReady);
  float milliseconds = -1;
  EXPECT_EQ(cudaEventElapsedTime(&milliseconds, first, second), cudaErrorNotReady);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaEventSynchronize(first), cudaSuccess);
  EXPECT_EQ(before, 1.0f);
  EXPECT_EQ(after, 0.0f) << "work after the event has not run";
  EXPECT_EQ(cudaEventQuery(second), cudaErrorNotReady);
  ASSERT_EQ(cudaEventSynchronize(second), cudaSuccess);
  EXPECT_EQ(after, 2.0f);
  ASSERT_EQ(cudaEventElapsedTime(&milliseconds, first, second), cudaSuccess);
  EXPECT_GE(milliseconds, 0.0f);
  EXPECT_EQ(cudaEventDestroy(first), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(second), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaSimulatorRuntime, FreeWaitsForQueuedWork) {
  cudaStream_t stream = new_stream();
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 4), cudaSuccess);
  float value = 3.0f, result = 0.0f;
  ASSERT_EQ(cudaMemcpyAsync(device, &value, 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&result, device, 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaFree(device), cudaSuccess);  // as on a GPU, after the queued copies
  EXPECT_EQ(result, 3.0f);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
