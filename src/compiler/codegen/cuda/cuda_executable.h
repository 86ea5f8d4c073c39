#pragma once
// What a function compiled for a GPU runs: the kernels of its fusion plan in
// order on the device's stream -- generated kernels from the module NVRTC
// built (loaded with the driver API), gemm kernels as cuBLAS followed by
// their generated epilogue, library kernels through the standard CUDA
// kernels -- with intermediate values in one device arena per call.

#include "compiler/buffer_assignment.h"
#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/cuda/nvrtc_build.h"
#include "compiler/fusion.h"
#include "compiler/jit_executable.h"
#include "exec/executable.h"

#include <kiln/device.h>

#include <memory>

namespace kiln::compiler::cuda {

// Loads `image` on `device` (once per image and device per process) and
// returns an executable running `plan`. Throws kiln::CompileError when the
// driver rejects the image or a kernel is missing from it, DeviceError when
// the GPU cannot be used.
std::unique_ptr<exec::Executable> make_cuda_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                       const ModuleSource& source, const ModuleImage& image,
                                                       Device device, RegionExecutables regions = {});

}  // namespace kiln::compiler::cuda
