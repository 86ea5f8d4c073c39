#pragma once
// Running control nodes (cond, while_loop, scan_loop; ir/graph.h) on concrete arrays, for every executor: the
// caller says how a region runs (the standard executor interprets it, the JIT runs its compiled kernels), this
// file does the rest -- choosing the branch, looping while the condition holds, stepping through the sequences and
// stacking the per-step outputs.

#include "ir/graph.h"
#include "runtime/buffer.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::exec {

class Executable;

// Runs region `region` of the node on `inputs` (its parameters in order) and returns its outputs.
using RegionRunner =
    std::function<std::vector<runtime::Array>(std::size_t region, std::span<const runtime::Array> inputs)>;

// Runs control node `value` of `graph` on `operands` (concrete, on `device`) and returns its results in order.
std::vector<runtime::Array> run_control(const ir::Graph& graph, ir::ValueId value,
                                        std::span<const runtime::Array> operands, Device device,
                                        const RegionRunner& run_region);

// Stores the results of control node `value` in `values`: the node's own slot takes result 0, and each of its
// `result` nodes (`readers`, from ir::result_nodes) the result it names.
void store_results(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array> results,
                   const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values);

// The one element of an integer or bool scalar (a while_loop's flag, a cond's index), read on the host (a GPU's copied
// back first); `op` and `location` name the node in errors.
std::int64_t read_scalar(const runtime::Array& scalar, const std::string& op, const std::string& location);

// The memory `captures` (a loop's captured operands) occupy: what nothing writes while the loop runs, for the scope
// of kernels::cpu::InvariantOperands.
std::vector<std::span<const std::byte>> captured_ranges(std::span<const runtime::Array> captures);

// Stores `results` of control node `value` as run_compiled_control does, copying out of `arena` first.
void store_compiled_results(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array> results,
                            const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values,
                            const runtime::Buffer* arena, Device device);

// What a compiled executable (the CPU and CUDA JITs') does for control node `value` of `graph`: runs it with
// `regions`' executables on its operands from `values`, and stores its results there (store_results). A result that is
// a window into `arena`, the executable's memory for this call (a carry returned as it came in, say), is copied out
// first: the arena's bytes are reused once the values there have been read for the last time, and a result outlives
// them.
void run_compiled_control(const ir::Graph& graph, ir::ValueId value,
                          const std::vector<std::shared_ptr<const Executable>>& regions,
                          const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values,
                          const runtime::Buffer* arena, Device device);

}  // namespace kiln::exec
