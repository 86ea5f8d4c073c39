#pragma once
// The few CUDA driver API functions the JIT needs to load and launch modules,
// found at run time through the CUDA runtime (cudaGetDriverEntryPointByVersion)
// rather than linked: kiln then links no libcuda.so, so its programs and tests
// start on machines without the NVIDIA driver, as the runtime's own do.

#include <cuda.h>

#include <string>

namespace kiln::compiler::cuda {

struct DriverApi {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
};

// The entry points, looked up once (the first JIT compile for a GPU). Throws
// kiln::CompileError naming the missing function when the driver does not
// provide one: the function then runs on the standard executor, which needs
// only the runtime API.
const DriverApi& driver_api();

// "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)".
std::string driver_error(CUresult status, const char* call);

}  // namespace kiln::compiler::cuda
