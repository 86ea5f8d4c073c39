#pragma once
// The CUDA JIT's generated kernels, run without a GPU.
//
// A graph goes through the CUDA JIT's pipeline (optimize, fuse, generate the
// CUDA module); the module's text, prelude included, is then compiled by the
// host C++ compiler with CUDA's few keywords and built-ins emulated -- each
// block's threads are host threads, __syncthreads a barrier, __shfl_xor_sync
// an exchange through memory between a warp's 32 threads, atomicAdd an
// atomic -- and the blocks of a grid run one after another. The buffers are
// the CUDA executable's: intermediate values share one arena as the buffer
// assignment places them. Library kernels and cuBLAS products are computed
// by the CPU kernels where the executable has the standard CUDA kernels and
// cuBLAS compute them.
//
// This checks, without a GPU, the generated index math, the row and grid
// reductions, the gemm epilogues and the op semantics of the NVRTC prelude
// (tests/cuda/jit_emulation_test.cpp on chosen graphs, kiln-fuzz
// --cuda-emulation on random ones). It cannot check what only a GPU shows:
// memory ordering between blocks and warps that really run at once, launch
// limits, the standard CUDA kernels and cuBLAS, speed.
//
// Built with CUDA support only (KILN_HAVE_CUDA); elsewhere
// cuda_emulation_available() is false and EmulatedCudaModule throws.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::fuzz {

bool cuda_emulation_available();

// The CUDA module the JIT generates for `graph` (optimized and fused as the
// JIT does), for reading. Throws kiln::CompileError as the generator does.
std::string generated_cuda_source(const ir::Graph& graph);

class EmulatedCudaModule {
 public:
  // Generates `graph`'s CUDA module, compiles it with NVRTC for sm_90 (as
  // the JIT would for an H100/H200; the cubin is not used), then with the
  // host compiler for the emulation. Throws kiln::CompileError when the CUDA
  // generator cannot emit the graph (the JIT would fall back to the standard
  // executor) or either compiler rejects the module, and
  // kiln::InternalError for a launch a GPU would refuse (more threads than
  // the kernel's __launch_bounds__, partial warps).
  explicit EmulatedCudaModule(const ir::Graph& graph);
  ~EmulatedCudaModule();
  EmulatedCudaModule(EmulatedCudaModule&&) noexcept;
  EmulatedCudaModule& operator=(EmulatedCudaModule&&) noexcept;

  // Whether some kernel has a `_vector` variant (16-byte accesses).
  bool has_vector_variants() const;

  // Runs the graph on `inputs` (one per parameter): each generated kernel as
  // its `_vector` variant where `vector`, it has one and all its buffers are
  // 16-byte aligned (as the executable decides), else its scalar kernel. Grids whose size does not change the result
  // are cut to at most `max_blocks` blocks, so that grid-stride loops wrap.
  std::vector<runtime::Array> run(const std::vector<runtime::Array>& inputs, bool vector, int max_blocks = 3) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::fuzz
