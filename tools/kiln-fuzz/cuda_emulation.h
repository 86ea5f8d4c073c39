#pragma once
// The CUDA JIT's generated kernels, run without a GPU.
//
// A graph goes through the CUDA JIT's pipeline (optimize, fuse, generate the
// CUDA module). NVRTC compiles the module for sm_90, as the JIT would; then
// the host C++ compiler compiles it with CUDA's few keywords and built-ins
// emulated: each thread of a block is a fiber on the calling thread, run in a
// shuffled order; __syncthreads is a barrier of the block, __shfl_xor_sync an
// exchange through memory between two barriers of the warp; the blocks of a
// grid run one after another. The buffers are the CUDA executable's:
// intermediate values share one arena as the buffer assignment places them.
// Library kernels and cuBLAS products are computed by the CPU kernels where
// the executable has the standard CUDA kernels and cuBLAS compute them.
//
// This checks, without a GPU, the generated index math, the row and grid
// reductions, the gemm epilogues, the launch shapes and the op semantics of
// the NVRTC prelude (tests/cuda/jit_emulation_test.cpp on chosen graphs,
// kiln-fuzz --executors cuda-emulated on random ones). It cannot check what
// only a GPU shows: memory ordering between blocks that really run at once,
// speed. The standard CUDA kernels, cuBLAS and the executables themselves run
// on the CUDA simulator instead (tools/cuda-simulator; kiln-fuzz --executors
// cuda in a KILN_CUDA=SIMULATED build). The device built-ins are the
// simulator's (emulated_device.h).
//
// Built with CUDA support only (KILN_HAVE_CUDA); elsewhere
// cuda_emulation_available() is false and the rest throws.

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
  // 16-byte aligned (as the executable decides), else its scalar kernel.
  // Grids whose size does not change the result are cut to at most
  // `max_blocks` blocks, so that grid-stride loops wrap. A kernel with a
  // variant on the tensor cores (an attention kernel's flash-style one) runs
  // that instead where the executable would with config::allow_tf32 set to
  // `allow_tf32`: always for bf16 operands, for f32 ones only with TF32.
  // One call at a time per module (the emulation's state is the module's).
  std::vector<runtime::Array> run(const std::vector<runtime::Array>& inputs, bool vector, int max_blocks = 3,
                                  bool allow_tf32 = false) const;
  // Whether some kernel has a variant on the tensor cores.
  bool has_tensor_core_variants() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::fuzz
