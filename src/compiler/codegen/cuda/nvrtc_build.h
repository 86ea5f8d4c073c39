#pragma once
// Compiling generated CUDA C++ with NVRTC for one GPU architecture, through
// the disk cache (compiler/cache/module_cache.h, get_or_build_image). Needs no
// GPU: tests compile generated modules for sm_90 on machines without one.

#include <string>
#include <vector>

namespace kiln::compiler::cuda {

// A compiled module image, ready for cuModuleLoadData.
struct ModuleImage {
  std::string bytes;         // a cubin, or NUL-terminated PTX text
  bool is_ptx = false;       // PTX: the driver compiles it for the GPU at load time
  std::string target;        // "sm_90", or "compute_90" for PTX
  bool from_disk_cache = false;
};

// The NVRTC target for a GPU of compute capability `major`.`minor`: sm_XY when
// this NVRTC knows it (a cubin), else PTX for the newest compute_XY it knows
// that is not newer than the GPU (the driver JIT-compiles PTX forward).
// Throws kiln::CompileError when NVRTC supports nothing that old.
std::string nvrtc_target(int major, int minor);

// NVRTC's options for generated modules (besides the architecture): the
// standard CUDA kernels' semantics (--fmad=false, as kiln's nvcc flags).
std::vector<std::string> nvrtc_options();

// "13.0": the version of the loaded NVRTC library.
std::string nvrtc_version();

// Compiles `source` with NVRTC for `target` ("sm_90": a cubin; "compute_90":
// PTX), without the cache. Throws kiln::CompileError (op = `name`) with the
// first lines of NVRTC's log when the source does not compile.
std::string nvrtc_compile(const std::string& source, const std::string& target, const std::string& name);

// NVRTC's log for `source` compiled for `target`: its warnings, empty when it
// has none. Generated modules are meant to have none (a user reads them in
// KILN_DUMP_TO's files); kiln-fuzz's CUDA emulation checks this. Throws as
// nvrtc_compile does.
std::string nvrtc_warnings(const std::string& source, const std::string& target, const std::string& name);

// NVRTC's log for `source` compiled for `target` (an sm_XY) with ptxas's
// report on: per kernel, "Used N registers", its spill stores and loads, its
// stack frame and shared memory. Not cached; the image is dropped. Throws as
// nvrtc_compile does.
std::string nvrtc_resource_report(const std::string& source, const std::string& target, const std::string& name);

// Compiles `source` for `target` ("sm_90" or "compute_90"), or takes it from
// the disk cache (key: the source, the options, the NVRTC version and the
// target). Throws kiln::CompileError (op = `name`) with NVRTC's log when the
// source does not compile.
ModuleImage compile_module(const std::string& source, const std::string& target, const std::string& name);

}  // namespace kiln::compiler::cuda
