#pragma once
// The CUDA code generator: one CUDA C++ module per concrete function, with one
// `extern "C" __global__` kernel kiln_kernel_<k> per generated kernel of the
// fusion plan (library kernels have none; the executable runs their standard
// CUDA kernel), and for loop-like kernels a second variant
// kiln_kernel_<k>_vector that moves 16 bytes per access, launched when every
// buffer is 16-byte aligned. The text starts with the prelude (prelude.cuh,
// kernels/cuda/elementwise_ops.cuh, device_traits.cuh) and is meant to be
// read: KILN_DUMP_TO and get_compiler_ir(Stage::source) show it.
//
// Kernel parameters, in order: the kernel's inputs (const pointers), its
// outputs, then for gemm kernels the matmul product (an f32 [m, n] buffer
// that cuBLAS wrote before the launch).
//
// Kernels by kind:
//   loop       a grid-stride loop over the elements (or over packs of 16
//              bytes in the vector variant); any grid size gives the same
//              result.
//   reduction  one warp per row (rows of up to 1024 elements) or one block
//              of 512 threads per row, a pass over the row per reduction
//              (warp shuffles, then shared memory across warps), a last pass
//              for the element outputs: softmax and layer_norm are one kernel.
//   gemm       cuBLAS computes the product; the kernel applies the epilogue
//              to it and reduces: each block's partial result goes to a
//              module-global array, and the last block to finish combines
//              the partials in block order (deterministic: the grid size is
//              fixed here, never by the device). An epilogue that cuBLASLt
//              applies itself -- a bias along the rows, relu, or both, on an
//              f32 matrix -- has no generated kernel: one cuBLASLt call
//              computes the kernel whole (KernelLaunch::epilogue).
//   attention  a reduction kernel's rows (a warp's or a block's) around
//              which each row computes its scores (Q K^T) into shared
//              memory, runs the row kernel's code on them there, and
//              multiplies the result by V into the output: both products
//              in the kernel, plain f32 (attention_kernel.cpp). Where the row
//              code is a softmax, a second variant runs instead, flash-style,
//              both products on the tensor cores (flash_attention_kernel.cpp):
//              kiln_kernel_<k>_tf32 of f32 operands while config::allow_tf32
//              holds, kiln_kernel_<k>_bf16 of bf16 operands always.

#include "compiler/fusion.h"
#include "ir/graph.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler::cuda {

// How the executable launches one generated kernel.
struct KernelLaunch {
  int kernel = -1;               // the index in the fusion plan
  std::string function;          // kiln_kernel_<k>
  std::string vector_function;   // kiln_kernel_<k>_vector, or empty
  int threads = 256;             // per block
  std::int64_t blocks = 1;       // enough to give every thread (or warp, or row block) one work item
  std::int64_t vector_blocks = 1;
  // An attention kernel's variant on the tensor cores (flash_attention_kernel.cpp), launched instead of `function`:
  // where its operands are bf16 always (bf16 products are exact in its f32 sums, as in the standard executor's),
  // where they are f32 only while config::allow_tf32 holds (TF32 keeps 11 of their 24 bits); empty where there is
  // none.
  std::string tensor_core_function;
  bool tensor_core_needs_tf32 = false;
  int tensor_core_threads = 256;
  std::int64_t tensor_core_blocks = 1;
  bool fixed_grid = false;       // launch exactly `blocks` (gemm reductions); else at most a few waves
  int parameter_count = 0;       // pointers the kernel takes
  // A gemm kernel that cuBLASLt computes whole (no function): its epilogue,
  // and the bias vector's position in the kernel's inputs (-1 for none).
  kernels::cuda::GemmEpilogue epilogue = kernels::cuda::GemmEpilogue::none;
  int bias_input = -1;
};

struct ModuleSource {
  std::string text;
  std::vector<KernelLaunch> launches;  // one per generated kernel, in plan order
};

// Throws kiln::CompileError naming the op for what the generator cannot emit
// (the function then falls back to the standard executor).
ModuleSource generate_source(const ir::Graph& graph, const FusionPlan& plan);

// The embedded prelude text.
const char* prelude();

}  // namespace kiln::compiler::cuda
