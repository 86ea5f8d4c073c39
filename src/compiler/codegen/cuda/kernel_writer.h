#pragma once
// Private to the CUDA code generator: what its kernel kinds share on top of
// the machinery of codegen/kernel_emitter.h (instances,
// index maps, layouts, the text of each op): parameters, CUDA literals, and
// the text of one instance at one element.

#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/kernel_emitter.h"
#include "compiler/codegen/reduction.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::compiler::cuda {

using codegen::Instance;
using codegen::KernelEmitter;
using codegen::Layout;
using codegen::Linear;

// A generated reduction (codegen/reduction.h) in the CUDA prelude's names: an
// elementwise_ops.cuh function object, and the accumulator's start value.
struct ReductionInfo {
  std::string combine;   // "scalar::add{}"
  std::string identity;  // "splat<float>(0)"
};
ReductionInfo reduction_info(const ir::Node& reduction);

// A constant's value as CUDA text of its storage type.
std::string literal(const ir::Node& constant);

// An index variable of generated code: `const <type> <name> = <value>;`.
struct IndexVariable {
  std::string name;
  std::string value;  // may read variables declared before it in its list
  std::string type = "int64_t";
};

// The declarations, at `indent`, of those `variables` that `code` reads,
// directly or through the value of another one kept. Generated code declares
// no index it does not use: NVRTC warns about each one (#177-D), and a user
// reading the dump should not have to wonder what it is for. `code` is what
// follows the declarations in their scope; its comments do not count.
std::string declarations_used_by(const std::vector<IndexVariable>& variables, const std::string& code,
                                 const std::string& indent);

class KernelWriter {
 public:
  explicit KernelWriter(KernelEmitter& emitter);

  KernelEmitter& emitter() { return emitter_; }
  const KernelEmitter& emitter() const { return emitter_; }
  const FusedKernel& kernel() const { return emitter_.kernel(); }
  const Instance& at(int id) const { return emitter_.at(id); }
  std::string type(int id) const { return emitter_.storage_type(at(id).value); }

  // The kernel's outputs and the instance computing each (element outputs
  // have the space's shape; row outputs one value per row: the plan's row_outputs).
  // An attention kernel's are its row kernel's one result (the probabilities),
  // which stays in shared memory (scores_row); the second product, the
  // kernel's output in memory, is attention_kernel.cpp's to write.
  const std::vector<std::pair<ir::ValueId, int>>& outputs() const { return outputs_; }
  bool is_row_output(ir::ValueId value) const;
  Linear output_address(ir::ValueId value) const;
  // Where a gemm kernel's product element of each space index is: cuBLAS writes it densely in the space's shape.
  Linear product_address() const;

  // An attention kernel's matmuls: the first (the scores), then the second.
  std::pair<ir::ValueId, ir::ValueId> attention_products() const;
  // Where an attention kernel's row code reads the scores and leaves its result, key by key: an array in shared
  // memory ("scores[warp]"); attention_kernel.cpp sets it.
  const std::string& scores_row() const { return scores_row_; }
  void set_scores_row(std::string array) { scores_row_ = std::move(array); }
  // Where non-empty, the expression the scores' declarations read instead (flash_attention_kernel.cpp: a variable
  // holding one score).
  void set_score_value(std::string expression) { score_value_ = std::move(expression); }

  // "const float* __restrict__ input0, float* __restrict__ output5"
  // (plus ", const float* __restrict__ product" for gemm kernels).
  std::string parameters() const;
  int parameter_count() const;

  // Marks which instances change along the layout's inner and middle loops.
  void mark_varying(const Layout& layout);
  bool varying(int id) const { return varying_[static_cast<std::size_t>(id)]; }
  // The varying instances `root` needs (stopping at per-row values), added to `needed`.
  void collect_elements(int root, std::set<int>& needed) const;

  // c0, c1, ... of the layout's outer axes, from `row` ("c1 = row / 5 % 4").
  // Each is computed from `row` alone, so a kernel declares only those it
  // reads (declarations_used_by). The sizes are nonzero wherever a row
  // exists; callers emit no row loop for a space without rows.
  std::vector<IndexVariable> row_coordinates(const Layout& layout) const;
  // d0, d1, ... of the middle axes, from `middle`.
  std::vector<IndexVariable> middle_coordinates(const Layout& layout) const;
  // The element offset of `linear` at row coordinates c*, middle d* and inner `inner`.
  std::string offset(const Linear& linear, const Layout& layout, const std::string& inner) const;

  // The C++ declaration of instance `id` at the element with inner
  // coordinate `inner` ("const float v3 = add(x1, x2);"), preceded by a
  // comment describing computed nodes. Loads read `input<b>[offset]`; a value
  // that does not vary along the row reads or computes the row's one value.
  std::string declaration(int id, const Layout& layout, const std::string& inner, const std::string& indent) const;

 private:
  KernelEmitter& emitter_;
  std::vector<std::pair<ir::ValueId, int>> outputs_;
  std::vector<bool> varying_;
  std::string scores_row_;
  std::string score_value_;
};

// True for a reduction kernel that reduces its whole space into scalars
// (reduce_sum(x) over every axis) with no reduction feeding another: it is
// emitted as a loop kernel with a grid reduction, so a large array is spread
// over the whole GPU instead of one block.
bool is_grid_reduction(const KernelWriter& writer);

// For a gemm kernel whose whole epilogue cuBLASLt can apply -- the f32
// matrix product, then optionally + a bias vector along the rows, then
// optionally relu, and nothing else -- fills launch.epilogue and
// launch.bias_input and returns true (no kernel is generated).
bool fit_library_epilogue(const ir::Graph& graph, const FusedKernel& kernel, KernelLaunch& launch);

// What an attention kernel puts around the code of its row kernel (attention_kernel.cpp): declarations at the
// kernel's start, and in the loop over rows, code before the row code (the row's scores) and after it (the
// row's output), with the index variables those read (declared in each row only where read).
struct RowFrame {
  std::string shared, before, after;
  std::vector<IndexVariable> variables;
};

// A matmul operand of an attention kernel as op(X), a matrix per batch item: its kernel input and where its elements
// lie. Throws InternalError where `value` is not one of the kernel's inputs (the scheduler admits only those).
struct AttentionOperand {
  std::string input;                   // input<b>
  std::int64_t item_stride = 0;        // elements from one batch item's matrix to the next; 0: one shared by all
  std::int64_t rows = 0, columns = 0;  // of op(X)
  bool transposed = false;             // stored as columns x rows
  bool bf16 = false;                   // bf16 elements (read widened to f32)
};
AttentionOperand attention_operand(const KernelWriter& writer, ir::ValueId value, bool transposed, std::int64_t batch);

// The generators of each kind: the kernel's text, and its launch filled in.
std::string emit_loop_kernel(KernelWriter& writer, KernelLaunch& launch);  // loop, gemm, grid reductions
// reduction; and an attention kernel's rows, inside `frame`
std::string emit_reduction_kernel(KernelWriter& writer, KernelLaunch& launch, const RowFrame& frame = {});
std::string emit_attention_kernel(KernelWriter& writer, KernelLaunch& launch);  // attention
// The TF32 flash-style variant of an attention kernel whose row code is a softmax, with its launch
// (KernelLaunch::tensor_core_function); empty, and the launch untouched, where it does not apply.
std::string emit_flash_attention_kernel(KernelWriter& writer, KernelLaunch& launch);

}  // namespace kiln::compiler::cuda
