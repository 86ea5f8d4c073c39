#include "runtime/cuda/cuda_context.h"

#include "runtime/allocator.h"
#include "runtime/cuda/cuda_allocator.h"

#include <kiln/error.h>

#include <memory>
#include <vector>

namespace kiln::runtime::cuda {
namespace {

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery result = [] {
    Discovery found;
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      found.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
      if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice)
        found.reason += " (no NVIDIA GPU or driver is visible to this process)";
      return found;
    }
    if (count == 0) {
      found.reason = "cudaGetDeviceCount found 0 devices";
      return found;
    }
    found.count = count;
    return found;
  }();
  return result;
}

// Contexts, created on first use of each device and never destroyed.
struct Contexts {
  std::vector<std::unique_ptr<DeviceContext>> contexts;
  std::vector<std::unique_ptr<std::once_flag>> created;
};

Contexts& contexts() {
  static Contexts* all = [] {
    auto* result = new Contexts();
    for (int i = 0; i < device_count(); ++i) {
      result->contexts.push_back(std::make_unique<DeviceContext>());
      result->created.push_back(std::make_unique<std::once_flag>());
    }
    return result;
  }();
  return *all;
}

void create_context(DeviceContext& context, int index) {
  DeviceGuard guard(index);
  context.index = index;
  check(cudaGetDeviceProperties(&context.properties, index), "cudaGetDeviceProperties");
  // Non-blocking: kiln's stream never waits for the legacy default stream
  // (work other libraries queue there is not ordered with kiln's).
  check(cudaStreamCreateWithFlags(&context.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

// The allocator factory runtime::allocator_for calls for CUDA devices;
// registered when this file is linked in (kernels.cpp and tensor.cpp refer to
// it in CUDA builds).
Allocator* allocator_factory(int index) { return device_allocator(index); }

const bool registered = [] {
  register_cuda_allocator_factory(&allocator_factory);
  return true;
}();

}  // namespace

void check(cudaError_t status, const char* call, const std::string& op) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call does not report it
  throw DeviceError(op, std::string(call) + " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status),
                    std::string());
}

void check(cublasStatus_t status, const char* call, const std::string& op) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(op, std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
                            cublasGetStatusString(status),
                    std::string());
}

void check_launch(const char* kernel) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw DeviceError(kernel, std::string("kernel launch failed: ") + cudaGetErrorName(status) + ": " +
                                  cudaGetErrorString(status),
                      std::string());
}

int device_count() { return discovery().count; }
const std::string& unavailable_reason() { return discovery().reason; }

DeviceContext& context(Device device, const std::string& op, const std::string& location) {
  (void)registered;
  if (!device.is_cuda()) throw InternalError(op, device.to_string() + " is not a CUDA device", location);
  int count = device_count();
  if (count == 0)
    throw DeviceError(op, "kiln found no CUDA device for " + device.to_string() + ": " + unavailable_reason(), location);
  if (device.index < 0 || device.index >= count)
    throw DeviceError(op,
                      device.to_string() + " is out of range: kiln found " + std::to_string(count) + " CUDA device" +
                          (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")"),
                      location);
  Contexts& all = contexts();
  auto index = static_cast<std::size_t>(device.index);
  DeviceContext& result = *all.contexts[index];
  std::call_once(*all.created[index], [&] { create_context(result, device.index); });
  return result;
}

cublasHandle_t cublas_handle(DeviceContext& context) {
  if (!context.cublas) {
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle), "cublasCreate");
    check(cublasSetStream(handle, context.stream), "cublasSetStream");
    context.cublas = handle;
  }
  return context.cublas;
}

DeviceGuard::DeviceGuard(int index) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  // Called even when `index` is already the current device: cudaGetDevice
  // does not bind a context to a new thread, and cudaSetDevice does (CUDA
  // 12+), which the driver API calls of the JIT (cuModuleLoadData,
  // cuLaunchKernel) need on a thread that has made no runtime call yet.
  check(cudaSetDevice(index), "cudaSetDevice");
  if (previous_ == index) previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void synchronize(Device device, const std::string& op) {
  DeviceContext& device_context = context(device, op);
  DeviceGuard guard(device_context.index);
  check(cudaStreamSynchronize(device_context.stream), "cudaStreamSynchronize", op);
}

Array copy_to(const Array& source, Device device, const std::string& op, const std::string& location) {
  Device from = source.device();
  // Check both ends first, so that a missing GPU reads as such (not as a
  // failed allocation).
  if (from.is_cuda()) context(from, op, location);
  if (device.is_cuda()) context(device, op, location);
  Array result = allocate_array(source.dtype, source.shape, device);
  std::size_t bytes = source.bytes();
  if (bytes == 0) return result;
  try {
    if (from.is_cpu() && device.is_cuda()) {
      // From pageable memory the call returns once the data are staged, so
      // the source may be freed right after.
      DeviceContext& target = context(device, op);
      DeviceGuard guard(target.index);
      check(cudaMemcpyAsync(result.mutable_raw(), source.raw(), bytes, cudaMemcpyHostToDevice, target.stream),
            "cudaMemcpyAsync (host to device)", op);
    } else if (from.is_cuda() && device.is_cpu()) {
      DeviceContext& origin = context(from, op);
      DeviceGuard guard(origin.index);
      check(cudaMemcpyAsync(result.mutable_raw(), source.raw(), bytes, cudaMemcpyDeviceToHost, origin.stream),
            "cudaMemcpyAsync (device to host)", op);
      check(cudaStreamSynchronize(origin.stream), "cudaStreamSynchronize", op);
    } else if (from.is_cuda() && device.is_cuda()) {
      // Between two GPUs: the source's queued writes must finish before the
      // copy, and the copy before the source buffer can be reused on its own
      // stream; synchronizing both ends is the simple way (such copies are rare).
      DeviceContext& origin = context(from, op);
      DeviceContext& target = context(device, op);
      {
        DeviceGuard guard(origin.index);
        check(cudaStreamSynchronize(origin.stream), "cudaStreamSynchronize", op);
      }
      DeviceGuard guard(target.index);
      check(cudaMemcpyPeerAsync(result.mutable_raw(), target.index, source.raw(), origin.index, bytes, target.stream),
            "cudaMemcpyPeerAsync", op);
      check(cudaStreamSynchronize(target.stream), "cudaStreamSynchronize", op);
    } else {
      throw InternalError(op, "copy from " + from.to_string() + " to " + device.to_string(), location);
    }
  } catch (const DeviceError& error) {
    throw DeviceError(op, "copying " + std::to_string(bytes) + " bytes from " + from.to_string() + " to " +
                              device.to_string() + ": " + error.detail(),
                      location);
  }
  return result;
}

void copy_device_to_device(void* destination, const void* source, std::size_t bytes, Device device) {
  if (bytes == 0) return;
  DeviceContext& device_context = context(device);
  DeviceGuard guard(device_context.index);
  check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, device_context.stream),
        "cudaMemcpyAsync (device to device)");
}

}  // namespace kiln::runtime::cuda
