// The CUDA runtime: device discovery, copies, the caching allocator and its
// statistics, synchronization and events, and the errors for missing GPUs,
// bad indices and mixed devices.

#include "cuda/cuda_test_support.h"

#include <kiln/config.h>

#include <cmath>
#include <string>

namespace {

using namespace kiln;
using kiln::testing::gpu;
using kiln::testing::random_tensor;

template <class Error, class Body> std::string expect_error(Body&& body, std::initializer_list<const char*> fragments) {
  try {
    body();
  } catch (const Error& error) {
    std::string message = error.what();
    for (const char* fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "no exception";
  return {};
}

// ---- without a GPU (this runs where the others skip) --------------------------------

TEST(CudaWithoutGpu, ErrorsSayThatNoGpuWasFound) {
  if (kiln::testing::has_gpu()) GTEST_SKIP() << "a GPU is present; this checks the errors without one";
  EXPECT_FALSE(cuda_unavailable_reason().empty());
  ASSERT_EQ(devices().size(), 1u);
  EXPECT_TRUE(devices()[0].device.is_cpu());
  expect_error<DeviceError>([] { zeros({2}, DType::f32, gpu); }, {"kiln found no CUDA device", "cuda:0"});
  Tensor a = random_tensor(DType::f32, {2}, 1);
  expect_error<DeviceError>([&] { a.to(gpu); }, {"Tensor::to", "kiln found no CUDA device", "cuda:0"});
  expect_error<DeviceError>([] { random::normal({3}, gpu); }, {"random::normal", "cuda:0"});
  expect_error<DeviceError>([] { memory_statistics(gpu); }, {"kiln found no CUDA device"});
  expect_error<DeviceError>([] { synchronize(gpu); }, {"kiln::synchronize", "kiln found no CUDA device"});
  expect_error<DeviceError>([] { Event event(gpu); }, {"kiln::Event"});
  synchronize(Device::cpu());  // nothing to wait for
}

// ---- with a GPU ----------------------------------------------------------------------------

TEST(CudaRuntime, DevicesListTheGpus) {
  KILN_REQUIRE_GPU();
  std::vector<DeviceInfo> found = devices();
  ASSERT_GE(found.size(), 2u);
  EXPECT_TRUE(found[0].device.is_cpu());
  for (std::size_t i = 1; i < found.size(); ++i) {
    EXPECT_EQ(found[i].device, Device::cuda(static_cast<int>(i - 1)));
    EXPECT_FALSE(found[i].name.empty());
    EXPECT_GT(found[i].memory_bytes, 0);
    EXPECT_GT(found[i].compute_capability, 0);
    EXPECT_GT(found[i].multiprocessors, 0);
  }
  EXPECT_TRUE(cuda_unavailable_reason().empty());
}

TEST(CudaRuntime, CopiesBothWaysKeepEveryDtype) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{33, 65}, Shape{1000003}}) {
      Tensor host = random_tensor(dtype, shape, 11);
      Tensor device = host.to(gpu);
      EXPECT_EQ(device.device(), gpu);
      EXPECT_EQ(device.dtype(), dtype);
      EXPECT_EQ(device.shape(), shape);
      EXPECT_EQ(device.to(gpu).impl_pointer(), device.impl_pointer());  // already there: the same tensor
      kiln::testing::expect_same(host, device.to(Device::cpu()), 0, "round trip");
    }
  }
  // Reading values off the GPU copies them back.
  Tensor values = from_vector<float>({1.5f, -2.0f, 3.25f}, Shape{3}, gpu);
  EXPECT_EQ(values.device(), gpu);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(full({}, 7, DType::i64, gpu).item<std::int64_t>(), 7);
  EXPECT_NE(values.to_string().find("cuda:0"), std::string::npos) << values.to_string();
  EXPECT_THROW((void)values.data(), DeviceError);
}

TEST(CudaRuntime, CopiesBetweenGpus) {
  KILN_REQUIRE_GPU();
  if (devices().size() < 3) GTEST_SKIP() << "needs two GPUs; this machine has one";
  Tensor host = random_tensor(DType::f32, {1000, 37}, 12);
  Tensor second = host.to(gpu).to(Device::cuda(1));
  EXPECT_EQ(second.device(), Device::cuda(1));
  kiln::testing::expect_same(host, second, 0, "cuda:0 -> cuda:1");
}

TEST(CudaRuntime, CreationOnTheGpu) {
  KILN_REQUIRE_GPU();
  kiln::testing::expect_same(zeros({3, 4}, DType::f64), zeros({3, 4}, DType::f64, gpu));
  kiln::testing::expect_same(ones({5}, DType::boolean), ones({5}, DType::boolean, gpu));
  kiln::testing::expect_same(full({2, 3}, -2.5, DType::f32), full({2, 3}, -2.5, DType::f32, gpu));
  kiln::testing::expect_same(arange(0, 10, 0.5, DType::f32), arange(0, 10, 0.5, DType::f32, gpu));
  kiln::testing::expect_same(from_vector<bool>({true, false, true}, {3}), from_vector<bool>({true, false, true}, {3}, gpu));
  std::vector<std::int32_t> values = {1, -2, 3, -4, 5, -6};
  kiln::testing::expect_same(from_pointer(values.data(), {2, 3}), from_pointer(values.data(), {2, 3}, gpu));
}

TEST(CudaRuntime, AllocatorStatisticsAndCache) {
  KILN_REQUIRE_GPU();
  synchronize(gpu);
  release_cached_memory(gpu);
  MemoryStatistics before = memory_statistics(gpu);
  EXPECT_EQ(before.bytes_cached, 0);
  {
    Tensor a = zeros({1000, 1000}, DType::f32, gpu);  // 4,000,000 bytes
    MemoryStatistics during = memory_statistics(gpu);
    EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 4'000'000);
    EXPECT_EQ(during.buffers_in_use, before.buffers_in_use + 1);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
    EXPECT_EQ(during.total_allocations, before.total_allocations + 1);
  }
  MemoryStatistics after = memory_statistics(gpu);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.buffers_in_use, before.buffers_in_use);
  EXPECT_GE(after.bytes_cached, 4'000'000);  // the block stays for reuse
  {
    Tensor b = zeros({1000, 1000}, DType::f32, gpu);  // the same size: from the cache
    EXPECT_LT(memory_statistics(gpu).bytes_cached, after.bytes_cached);
  }
  reset_peak_memory(gpu);
  EXPECT_EQ(memory_statistics(gpu).peak_bytes_in_use, memory_statistics(gpu).bytes_in_use);
  release_cached_memory(gpu);
  EXPECT_EQ(memory_statistics(gpu).bytes_cached, 0);
  // A loop of ops leaves nothing behind.
  Tensor x = random_tensor(DType::f32, {512, 512}, 13).to(gpu);
  MemoryStatistics steady = memory_statistics(gpu);
  for (int i = 0; i < 100; ++i) (void)reduce_sum(sin(x) * 2.0f + x, {1});
  synchronize(gpu);
  EXPECT_EQ(memory_statistics(gpu).bytes_in_use, steady.bytes_in_use);
  EXPECT_EQ(memory_statistics(gpu).buffers_in_use, steady.buffers_in_use);
}

TEST(CudaRuntime, SynchronizeAndEvents) {
  KILN_REQUIRE_GPU();
  Tensor x = random::normal({512, 512}, {.seed = 3, .device = gpu});
  Event start(gpu), stop(gpu);
  start.record();
  Tensor y = matmul(x, x);
  stop.record();
  // No bound on the time itself (machines differ; the CUDA simulator takes seconds).
  double milliseconds = elapsed_milliseconds(start, stop);
  EXPECT_GE(milliseconds, 0.0);
  EXPECT_TRUE(std::isfinite(milliseconds));
  synchronize(gpu);
  Event cpu_start, cpu_stop;
  cpu_start.record();
  cpu_stop.record();
  EXPECT_GE(elapsed_milliseconds(cpu_start, cpu_stop), 0.0);
  EXPECT_THROW(elapsed_milliseconds(start, cpu_stop), DeviceError);
  Event never(gpu);
  EXPECT_THROW(never.wait(), ValueError);
}

TEST(CudaRuntime, ErrorsNameTheProblem) {
  KILN_REQUIRE_GPU();
  int count = static_cast<int>(devices().size()) - 1;
  Device missing = Device::cuda(count);
  expect_error<DeviceError>([&] { zeros({2}, DType::f32, missing); }, {"out of range", "cuda:0"});
  Tensor a = random_tensor(DType::f32, {4}, 14);
  expect_error<DeviceError>([&] { a.to(missing); }, {"Tensor::to", "out of range"});
  expect_error<DeviceError>([&] { random::uniform({3}, {.device = missing}); }, {"random::uniform", "out of range"});
  expect_error<DeviceError>([&] { memory_statistics(missing); }, {"out of range"});
  Tensor b = a.to(gpu);
  expect_error<DeviceError>([&] { (void)(a + b); }, {"add", "different devices", "cpu", "cuda:0"});
  expect_error<DeviceError>([&] { matmul(reshape(a, {2, 2}), reshape(b, {2, 2})); }, {"matmul", "different devices"});
  expect_error<DeviceError>([&] { concat({a, b}, 0); }, {"concat", "different devices"});
  auto add = function([](Tensor x, Tensor y) { return x + y; });
  expect_error<DeviceError>([&] { add(a, b); }, {"different devices"});
}

TEST(CudaRuntime, FunctionsRunOnTheGpu) {
  KILN_REQUIRE_GPU();
  bool previous = config::allow_tf32;
  config::allow_tf32 = false;
  auto seed = [](Tensor x, Tensor y) {
    Tensor z = matmul(x, y);
    z = z + sin(z);
    z = nn::relu(z);
    return reduce_sum(z);
  };
  auto standard = function(seed);
  Tensor x = random::normal({256, 256}, {.seed = 5});
  Tensor on_cpu = standard(x, x);
  Tensor on_gpu = standard(x.to(gpu), x.to(gpu));
  EXPECT_EQ(on_gpu.device(), gpu);
  double want = on_cpu.item<double>(), got = on_gpu.item<double>();
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want)) << "standard executor, cpu vs cuda:0";
  config::allow_tf32 = previous;
}

// A JIT function on the GPU runs generated CUDA (never CPU code on device
// pointers), with no fallback, and agrees with the standard executor.
TEST(CudaRuntime, JitFunctionsOnTheGpuRunGeneratedCudaKernels) {
  KILN_REQUIRE_GPU();
  auto body = [](Tensor x) { return reduce_sum(sin(x) * x); };
  Tensor x = random::normal({1000}, {.seed = 6});
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor on_gpu = jit(x.to(gpu));
  EXPECT_EQ(on_gpu.device(), gpu);
  // A sum of about 620 in f32, added in another order on the GPU: a few ULP
  // of it, not an absolute 1e-4 (under two ULP).
  double want = function(body)(x).item<double>();
  EXPECT_NEAR(on_gpu.item<double>(), want, 1e-5 * std::abs(want) + 1e-4);
  EXPECT_EQ(jit.statistics().fallbacks, 0);
  EXPECT_EQ(jit.statistics().compiles + jit.statistics().cache_hits, 1);
  EXPECT_NE(jit.get_compiler_ir(Stage::source, x.to(gpu)).find("__global__"), std::string::npos);
}

}  // namespace
