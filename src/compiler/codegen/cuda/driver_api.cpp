#include "compiler/codegen/cuda/driver_api.h"

#include <kiln/error.h>

#include <cuda_runtime_api.h>

namespace kiln::compiler::cuda {
namespace {

// The driver API version whose function signatures DriverApi declares.
constexpr unsigned int api_version = 12000;

template <class Function> void find(Function& function, const char* symbol) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &address, api_version, cudaEnableDefault, &found);
#else  // before 12.5 the runtime returns the version it was built against, which is at least 12.0
  cudaError_t status = cudaGetDriverEntryPoint(symbol, &address, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || !address)
    throw CompileError("cuda", std::string("cannot load generated kernels: the CUDA driver has no ") + symbol + " (" +
                                   cudaGetErrorString(status) + ")",
                       std::string());
  function = reinterpret_cast<Function>(address);
}

DriverApi look_up() {
  DriverApi api;
  find(api.module_load_data, "cuModuleLoadData");
  find(api.module_get_function, "cuModuleGetFunction");
  find(api.launch_kernel, "cuLaunchKernel");
  find(api.get_error_string, "cuGetErrorString");
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  static const DriverApi api = look_up();
  return api;
}

std::string driver_error(CUresult status, const char* call) {
  const char* text = nullptr;
  if (driver_api().get_error_string) driver_api().get_error_string(status, &text);
  return std::string(call) + ": " + (text ? text : "CUDA driver error " + std::to_string(static_cast<int>(status)));
}

}  // namespace kiln::compiler::cuda
