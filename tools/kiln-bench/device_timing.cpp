#include "device_timing.h"

#include "api/tensor_impl.h"
#include "suite.h"

#include <kiln/config.h>
#include <kiln/cuda.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

namespace kiln::bench {
Timing time_device_calls(Device device, const std::function<void()>& call, int runs, int batch, int warmup) {
  for (int i = 0; i < warmup; ++i) call();
  synchronize(device);
  const auto settle_start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - settle_start).count() <
         settle_ms) {
    for (int i = 0; i < batch; ++i) call();
    synchronize(device);
  }
  std::vector<double> times;
  for (int run = 0; run < std::max(runs, 1); ++run) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) call();
    synchronize(device);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / batch);
  }
  return summarize(std::move(times));
}

int batch_for(double single_call_ms) {
  constexpr double run_ms = 5;
  if (!(single_call_ms > 0)) return 1;
  return static_cast<int>(std::clamp(std::round(run_ms / single_call_ms), 1.0, 200.0));
}

double single_call_ms(Device device, const std::function<void()>& call) {
  call();
  synchronize(device);
  auto start = std::chrono::steady_clock::now();
  call();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Timing time_device_calls(Device device, const std::function<void()>& call, int runs) {
  return time_device_calls(device, call, runs, batch_for(single_call_ms(device, call)));
}

#if KILN_HAVE_CUDA

double device_copy_bandwidth(Device device, double footprint_bytes, int runs) {
  const std::int64_t count = std::max<std::int64_t>(1, static_cast<std::int64_t>(footprint_bytes / 8));
  Tensor source = random::normal({count}, {.seed = 99, .device = device});
  Tensor destination = zeros({count}, DType::f32, device);
  const void* from = detail::concrete_array(source, "copy", {}).raw();
  void* to = detail::concrete_array(destination, "copy", {}).mutable_raw();
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
  runtime::cuda::DeviceContext& context = runtime::cuda::context(device, "copy bandwidth");
  auto copy = [&] {
    runtime::cuda::DeviceGuard guard(context.index);
    runtime::cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, context.stream),
                         "cudaMemcpyAsync");
  };
  int batch = batch_for(single_call_ms(device, copy));
  Timing timing = time_device_calls(device, copy, std::max(runs, 10), batch);
  return 2.0 * static_cast<double>(bytes) / (timing.median_ms * 1e-3);
}

Timing time_cublas_gemm(const Tensor& a, const Tensor& b, int runs, int batch) {
  const Device device = a.device();
  const int m = static_cast<int>(a.shape()[0]), k = static_cast<int>(a.shape()[1]), n = static_cast<int>(b.shape()[1]);
  const DType dtype = a.dtype();
  const cudaDataType type = dtype == DType::bf16 ? CUDA_R_16BF : dtype == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
  Tensor c = zeros({m, n}, dtype, device);
  const void* a_data = detail::concrete_array(a, "cublas", {}).raw();
  const void* b_data = detail::concrete_array(b, "cublas", {}).raw();
  void* c_data = detail::concrete_array(c, "cublas", {}).mutable_raw();
  runtime::cuda::DeviceContext& context = runtime::cuda::context(device, "cublas");
  const cublasComputeType_t compute =
      dtype == DType::f32 && config::allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  auto gemm = [&] {
    std::lock_guard lock(context.cublas_mutex);
    runtime::cuda::DeviceGuard guard(context.index);
    const float alpha = 1, beta = 0;
    // Row-major C = A B is column-major C^T = B^T A^T: the operands swap.
    runtime::cuda::check(
        cublasGemmEx(runtime::cuda::cublas_handle(context), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b_data, type, n,
                     a_data, type, k, &beta, c_data, type, n, compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  };
  return time_device_calls(device, gemm, runs, batch);
}

#else

namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(what, "kiln-bench was built without CUDA support (configure with -DKILN_CUDA=ON)", std::string());
}

}  // namespace

double device_copy_bandwidth(Device, double, int) { no_cuda("copy bandwidth"); }
Timing time_cublas_gemm(const Tensor&, const Tensor&, int, int) { no_cuda("cublas"); }

#endif

std::string device_description(Device device) {
  if (device.is_cpu()) return cpu_model();
  for (const DeviceInfo& info : devices()) {
    if (!(info.device == device)) continue;
    char text[160];
    std::snprintf(text, sizeof text, "%s (sm_%d, %d SMs, %.0f GB)", info.name.c_str(), info.compute_capability,
                  info.multiprocessors, static_cast<double>(info.memory_bytes) * 1e-9);
    return text;
  }
  return device.to_string() + " (not found)";
}

}  // namespace kiln::bench
