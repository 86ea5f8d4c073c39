#include "compiler/codegen/cuda/cuda_executable.h"

#include "compiler/cache/sha256.h"
#include "compiler/codegen/cuda/driver_api.h"
#include "compiler/jit_executable.h"
#include "exec/control_flow.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_context.h"

#include <kiln/config.h>
#include <kiln/error.h>

#include <map>
#include <mutex>

namespace kiln::compiler::cuda {
namespace {

// Loaded modules by image and device, kept for the life of the process:
// unloading one whose kernels may still be queued on the stream would be
// unsafe, and a process compiles few distinct functions.
CUmodule load_module(const ModuleImage& image, int device_index, const std::string& name) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, CUmodule> modules;
  Sha256 hash;
  hash.update(image.bytes);
  std::pair<std::string, int> key{to_hex(hash.finish()), device_index};
  std::lock_guard lock(mutex);
  if (auto found = modules.find(key); found != modules.end()) return found->second;
  runtime::cuda::DeviceGuard guard(device_index);
  CUmodule module = nullptr;
  if (CUresult status = driver_api().module_load_data(&module, image.bytes.data()); status != CUDA_SUCCESS)
    throw CompileError(name, driver_error(status, "cuModuleLoadData") + " (" + image.target + ")", std::string());
  modules.emplace(key, module);
  return module;
}

CUfunction function_of(CUmodule module, const std::string& function, const std::string& name) {
  CUfunction result = nullptr;
  if (CUresult status = driver_api().module_get_function(&result, module, function.c_str()); status != CUDA_SUCCESS)
    throw CompileError(name, driver_error(status, ("cuModuleGetFunction(" + function + ")").c_str()), std::string());
  return result;
}

bool aligned_16(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0; }

class CudaExecutable final : public exec::Executable {
 public:
  CudaExecutable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment, const ModuleSource& source,
                 const ModuleImage& image, Device device, RegionExecutables regions)
      : graph_(std::move(graph)),
        plan_(std::move(plan)),
        assignment_(std::move(assignment)),
        device_(device),
        launches_(source.launches),
        regions_(std::move(regions)),
        result_nodes_(ir::result_nodes(graph_)) {
    regions_.resize(static_cast<std::size_t>(graph_.size()));
    CUmodule module = load_module(image, device.index, graph_.name);
    for (const KernelLaunch& launch : launches_) {
      functions_.push_back(launch.function.empty() ? nullptr : function_of(module, launch.function, graph_.name));
      vector_functions_.push_back(
          launch.vector_function.empty() ? nullptr : function_of(module, launch.vector_function, graph_.name));
      tensor_core_functions_.push_back(launch.tensor_core_function.empty()
                                           ? nullptr
                                           : function_of(module, launch.tensor_core_function, graph_.name));
    }
    for (std::int64_t offset : assignment_.arena_offset) uses_arena_ = uses_arena_ || offset >= 0;
    released_after_ = last_reads(graph_, plan_);
  }

  std::vector<runtime::Array> run(std::span<const runtime::Array> inputs) const override {
    std::vector<runtime::Array> values(static_cast<std::size_t>(graph_.size()));
    for (std::size_t i = 0; i < inputs.size(); ++i) values[static_cast<std::size_t>(graph_.parameters[i])] = inputs[i];
    std::shared_ptr<runtime::Buffer> arena;
    if (uses_arena_) arena = runtime::allocate(device_, static_cast<std::size_t>(assignment_.arena_bytes));
    std::size_t generated = 0;
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      const ir::ValueId member = kernel.members.front();
      if (has_generated_code(kernel.kind))
        run_generated(kernel, generated++, arena, values);
      else if (ir::has_regions(graph_.node(member).op))
        exec::run_compiled_control(graph_, member, regions_[static_cast<std::size_t>(member)],
                                   result_nodes_[static_cast<std::size_t>(member)], values, arena.get(), device_);
      else if (graph_.node(member).op != ir::Op::result)  // a result node's value came with its control node's
        run_standard_node(graph_, member, values, device_);
      // Values read for the last time go back to the caching allocator now, not at the end of the call: all work
      // is on one stream, so a later kernel reusing the block runs after this one.
      for (ir::ValueId value : released_after_[k]) values[static_cast<std::size_t>(value)] = {};
    }
    std::vector<runtime::Array> outputs;
    for (ir::ValueId output : graph_.outputs) outputs.push_back(values[static_cast<std::size_t>(output)]);
    return outputs;
  }

  int kernels_per_call() const override { return kernel_count(plan_); }

 private:
  // The buffer of a kernel output, recorded in `values`.
  runtime::Array& output_slot(ir::ValueId output, const std::shared_ptr<runtime::Buffer>& arena,
                              std::vector<runtime::Array>& values) const {
    runtime::Array& slot = values[static_cast<std::size_t>(output)];
    slot = output_array(graph_, assignment_, output, arena, device_);
    return slot;
  }

  void run_generated(const FusedKernel& kernel, std::size_t position, const std::shared_ptr<runtime::Buffer>& arena,
                     std::vector<runtime::Array>& values) const {
    const KernelLaunch& launch = launches_[position];
    if (launch.epilogue != kernels::cuda::GemmEpilogue::none) {
      run_library_epilogue(kernel, launch, output_slot(kernel.outputs.front(), arena, values), values);
      return;
    }
    std::vector<void*> pointers;
    for (ir::ValueId input : kernel.inputs) pointers.push_back(values[static_cast<std::size_t>(input)].mutable_raw());
    for (ir::ValueId output : kernel.outputs) pointers.push_back(output_slot(output, arena, values).mutable_raw());
    runtime::Array product;
    if (kernel.kind == KernelKind::gemm) {
      product = run_matmul(kernel, values);
      pointers.push_back(product.mutable_raw());
    }
    if (!functions_[position]) return;
    bool vector = vector_functions_[position] != nullptr;
    for (void* pointer : pointers) vector = vector && aligned_16(pointer);
    // TF32 as cuBLAS takes it: read at each call, so the setting applies to compiled functions too.
    const bool tensor_cores =
        tensor_core_functions_[position] != nullptr && (!launch.tensor_core_needs_tf32 || config::allow_tf32);
    std::vector<void*> parameters;
    for (void*& pointer : pointers) parameters.push_back(&pointer);
    runtime::cuda::DeviceContext& context = runtime::cuda::context(device_, graph_.name);
    std::int64_t blocks = tensor_cores ? launch.tensor_core_blocks : vector ? launch.vector_blocks : launch.blocks;
    const int threads = tensor_cores ? launch.tensor_core_threads : launch.threads;
    if (!launch.fixed_grid) {
      // A few waves of resident blocks; the kernels stride over the rest.
      std::int64_t resident = static_cast<std::int64_t>(context.properties.multiProcessorCount) *
                              (context.properties.maxThreadsPerMultiProcessor / threads);
      blocks = std::min(blocks, std::max<std::int64_t>(1, 4 * resident));
    }
    runtime::cuda::DeviceGuard guard(device_.index);
    CUresult status =
        driver_api().launch_kernel(tensor_cores ? tensor_core_functions_[position]
                                   : vector     ? vector_functions_[position]
                                                : functions_[position],
                                   static_cast<unsigned>(blocks), 1, 1, static_cast<unsigned>(threads), 1, 1, 0,
                                   reinterpret_cast<CUstream>(context.stream), parameters.data(), nullptr);
    if (status != CUDA_SUCCESS)
      throw DeviceError(graph_.name, driver_error(status, "cuLaunchKernel") + " (" + launch.function + ")",
                        std::string());
  }

  // One cuBLASLt call for the product and its epilogue, into `output`. When
  // cuBLASLt declines (no algorithm for these sizes), the kernel's members
  // run one by one as standard kernels instead: slower, never wrong.
  void run_library_epilogue(const FusedKernel& kernel, const KernelLaunch& launch, const runtime::Array& output,
                            std::vector<runtime::Array>& values) const {
    const ir::Node& product = graph_.node(kernel.members.front());
    runtime::Array bias;
    if (launch.bias_input >= 0)
      bias = values[static_cast<std::size_t>(kernel.inputs[static_cast<std::size_t>(launch.bias_input)])];
    // Leading axes of the left operand are more rows of one product (fit_library_epilogue): both it and the
    // output are read as matrices, over the same buffers.
    auto as_rows = [](const runtime::Array& array) {
      const Shape& shape = array.shape;
      std::int64_t rows = 1;
      for (int axis = 0; axis + 1 < shape.rank(); ++axis) rows *= shape[axis];
      return shape.rank() == 2 ? array
                               : runtime::Array{array.buffer, array.dtype, Shape({rows, shape[shape.rank() - 1]})};
    };
    if (kernels::cuda::matmul_with_epilogue(product.attributes.transpose_a, product.attributes.transpose_b,
                                            as_rows(values[static_cast<std::size_t>(product.operands[0])]),
                                            values[static_cast<std::size_t>(product.operands[1])], launch.epilogue,
                                            bias, as_rows(output)))
      return;
    for (ir::ValueId member : kernel.members) run_standard_node(graph_, member, values, device_);
  }

  // cuBLAS (through the standard matmul, which honours config::allow_tf32)
  // writes the product: into its output buffer when the product is an
  // output, else into a temporary the epilogue reads. A 16-bit product
  // (bf16 or f16 operands on the tensor cores) is f32 sums in a temporary,
  // which the kernel rounds as it reads them (loop_kernel.cpp), writing the
  // product where it is an output.
  runtime::Array run_matmul(const FusedKernel& kernel, std::vector<runtime::Array>& values) const {
    ir::ValueId matmul = -1;
    for (ir::ValueId member : kernel.members)
      if (graph_.node(member).op == ir::Op::matmul) matmul = member;
    const ir::Node& node = graph_.node(matmul);
    const bool sums_only = is_half_precision(node.type.dtype);
    runtime::Array product;
    bool is_output = false;
    for (ir::ValueId output : kernel.outputs) is_output = is_output || output == matmul;
    product = is_output && !sums_only
                  ? values[static_cast<std::size_t>(matmul)]
                  : runtime::allocate_array(sums_only ? DType::f32 : node.type.dtype, node.type.shape, device_);
    kernels::cuda::matmul(node.attributes.transpose_a, node.attributes.transpose_b,
                          values[static_cast<std::size_t>(node.operands[0])],
                          values[static_cast<std::size_t>(node.operands[1])], product);
    return product;
  }

  ir::Graph graph_;
  FusionPlan plan_;
  BufferAssignment assignment_;
  Device device_;
  std::vector<KernelLaunch> launches_;
  std::vector<CUfunction> functions_;
  std::vector<CUfunction> vector_functions_;
  std::vector<CUfunction> tensor_core_functions_;
  bool uses_arena_ = false;
  std::vector<std::vector<ir::ValueId>> released_after_;  // per kernel: the values it reads last (last_reads)
  RegionExecutables regions_;                             // per control node, its regions' executables
  std::vector<std::vector<ir::ValueId>> result_nodes_;    // per control node, the result nodes reading it
};

}  // namespace

std::unique_ptr<exec::Executable> make_cuda_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                       const ModuleSource& source, const ModuleImage& image,
                                                       Device device, RegionExecutables regions) {
  return std::make_unique<CudaExecutable>(std::move(graph), std::move(plan), std::move(assignment), source, image,
                                          device, std::move(regions));
}

}  // namespace kiln::compiler::cuda
