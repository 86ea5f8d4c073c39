#pragma once
// The CUDA side of the runtime: which GPUs exist, and per GPU one stream on
// which every kernel and copy of kiln runs, a cuBLAS handle bound to it, and
// the device's properties.
//
// One stream per device keeps ordering trivial: work is executed in the
// order it is queued, so a buffer freed on the host (returned to the caching
// allocator) can be handed to the next op at once -- any later use is queued
// after every earlier one (PyTorch's caching allocator rests on the same
// argument). Host reads synchronize the stream.
//
// Thread safety: every function here may be called from any thread. Contexts
// are created on first use and live until the process exits (buffers may
// outlive static destructors, like the CPU allocator's).

#include "runtime/buffer.h"

#include <kiln/device.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

namespace kiln::runtime::cuda {

// Throws DeviceError naming `call` ("cudaMalloc") and cudaGetErrorString when
// `status` is not cudaSuccess. `op` names the kiln operation, when known.
void check(cudaError_t status, const char* call, const std::string& op = "cuda");
void check(cublasStatus_t status, const char* call, const std::string& op = "cuda");
// Checks for a failed kernel launch (bad configuration, missing kernel image
// for this GPU); errors of the running kernel surface at the next synchronize.
void check_launch(const char* kernel);

// Number of GPUs visible to CUDA; 0 when none or the driver is missing (never
// throws). The first call initializes the CUDA runtime.
int device_count();
// Why device_count() is 0, e.g. "cudaGetDeviceCount: no CUDA-capable device
// is detected"; empty when it is not.
const std::string& unavailable_reason();

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cudaDeviceProp properties{};
  // cuBLAS calls share one handle, bound to `stream` and created on first use
  // by cublas_handle(); hold the mutex around both.
  cublasHandle_t cublas = nullptr;
  std::mutex cublas_mutex;
};

// The cuBLAS handle of `context` (created on first use). Call it, and cuBLAS,
// with context.cublas_mutex held and the device current (DeviceGuard).
cublasHandle_t cublas_handle(DeviceContext& context);

// The context of `device`, created on first use. Throws DeviceError naming
// `op` (and `location`, the user's call) when kiln has no CUDA device, the
// index is out of range, or `device` is not a CUDA device.
DeviceContext& context(Device device, const std::string& op = "cuda", const std::string& location = std::string());

// Makes `index` the calling thread's current CUDA device (with its primary
// context bound to the thread, as the driver API needs) while alive, and
// restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Waits for all work queued on `device`'s stream.
void synchronize(Device device, const std::string& op = "synchronize");

// A dense copy of `source` on `device` (any direction: host to device,
// device to host, device to device). Reading to the host waits for the copy;
// copies to a GPU are queued on its stream. Throws DeviceError naming `op`.
Array copy_to(const Array& source, Device device, const std::string& op = "Tensor::to",
              const std::string& location = std::string());

// Copies `bytes` between two arrays' buffers on one GPU, queued on its stream.
void copy_device_to_device(void* destination, const void* source, std::size_t bytes, Device device);

}  // namespace kiln::runtime::cuda
