// Calling a function exported by kiln::export_function (export.cpp writes the
// program's side): at the first call its graph is parsed and lowered again,
// checked against the kernels the program compiled in, and kept; every call
// then runs that executable as kiln::function runs the JIT's.

#include "api/tensor_impl.h"
#include "compiler/jit.h"
#include "ir/parser.h"
#include "runtime/buffer.h"

#include <kiln/error.h>
#include <kiln/export.h>

#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <span>

namespace kiln::detail {
namespace {

struct LoadedFunction {
  std::shared_ptr<const exec::Executable> executable;
  std::vector<ir::Type> inputs, outputs;
  std::vector<runtime::Array> constants;  // the captured tensors, after the inputs
};

std::shared_ptr<const LoadedFunction> load(const ExportedFunction& function) {
  static std::mutex mutex;
  static std::map<const ExportedFunction*, std::shared_ptr<const LoadedFunction>> loaded;
  const std::lock_guard lock(mutex);
  if (auto found = loaded.find(&function); found != loaded.end()) return found->second;

  const ir::Graph graph = ir::parse(function.graph);
  const std::size_t parameters = graph.parameters.size();
  if (function.constant_count > parameters)
    throw CompileError(function.name, "the exported graph has fewer parameters than constants", function.exported_at);
  auto result = std::make_shared<LoadedFunction>();
  for (std::size_t i = 0; i < parameters; ++i) {
    const ir::Type& type = graph.type(graph.parameters[i]);
    if (i < parameters - function.constant_count) {
      result->inputs.push_back(type);
      continue;
    }
    const ExportedConstant& constant = function.constants[i - (parameters - function.constant_count)];
    const ir::Type stored{constant.dtype, Shape(std::span<const std::int64_t>(
                                              constant.dimensions, static_cast<std::size_t>(constant.rank)))};
    if (!(stored == type))
      throw CompileError(function.name,
                         "constant " + std::to_string(result->constants.size()) + " is " + stored.to_string() +
                             " where the graph has " + type.to_string(),
                         function.exported_at);
    runtime::Array array{
        runtime::allocate(Device::cpu(), static_cast<std::size_t>(type.shape.numel()) * size_of(type.dtype)),
        type.dtype, type.shape};
    if (array.bytes() > 0) std::memcpy(array.mutable_raw(), constant.data, array.bytes());
    result->constants.push_back(std::move(array));
  }
  for (ir::ValueId output : graph.outputs) result->outputs.push_back(graph.type(output));
  result->executable = compiler::load_exported(
      graph, function.digest, std::span<const kiln_kernel_entry>(function.kernels, function.kernel_count),
      function.name);
  loaded.emplace(&function, result);
  return result;
}

std::vector<runtime::Array> run(const LoadedFunction& loaded, std::vector<runtime::Array> arrays) {
  for (const runtime::Array& constant : loaded.constants) arrays.push_back(constant);
  return loaded.executable->run(arrays);
}

thread_local std::string last_error;

}  // namespace

std::vector<Tensor> call_exported(const ExportedFunction& function, const std::vector<Tensor>& inputs,
                                  const Location& location) {
  const std::string line = kiln::to_string(location);
  const std::shared_ptr<const LoadedFunction> loaded = load(function);
  if (inputs.size() != loaded->inputs.size())
    throw ValueError(function.name,
                     "takes " + std::to_string(loaded->inputs.size()) + " inputs, not " + std::to_string(inputs.size()),
                     line);
  std::vector<runtime::Array> arrays;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    const std::string which = "input " + std::to_string(i);
    if (!input.defined()) throw ValueError(function.name, which + " is an undefined Tensor", line);
    if (input.is_traced())
      throw ValueError(function.name,
                       which + " is a traced tensor: an exported function runs on concrete tensors, not inside a trace",
                       line);
    if (!input.device().is_cpu())
      throw DeviceError(function.name, which + " is on " + input.device().to_string() + "; it runs on the CPU", line);
    const ir::Type type{input.dtype(), input.shape()};
    if (!(type == loaded->inputs[i]))
      throw ValueError(function.name,
                       which + " is " + type.to_string() + "; the function was exported for " +
                           loaded->inputs[i].to_string() + " (export it again for other inputs)",
                       line);
    arrays.push_back(input.impl().array);
  }
  std::vector<Tensor> outputs;
  for (runtime::Array& result : run(*loaded, std::move(arrays))) outputs.push_back(make_tensor(std::move(result)));
  return outputs;
}

int call_exported_raw(const ExportedFunction& function, const void* const* inputs, void* const* outputs) noexcept {
  try {
    const std::shared_ptr<const LoadedFunction> loaded = load(function);
    for (std::size_t i = 0; i < loaded->outputs.size(); ++i)
      if (outputs[i] == nullptr && loaded->outputs[i].shape.numel() > 0)
        throw ValueError(function.name, "output " + std::to_string(i) + " is a null pointer", function.exported_at);
    std::vector<runtime::Array> arrays;
    for (std::size_t i = 0; i < loaded->inputs.size(); ++i) {
      const ir::Type& type = loaded->inputs[i];
      runtime::Array array{nullptr, type.dtype, type.shape};
      const std::size_t bytes = array.bytes();
      if (bytes > 0 && inputs[i] == nullptr)
        throw ValueError(function.name, "input " + std::to_string(i) + " is a null pointer", function.exported_at);
      // Memory aligned as kiln's own is read in place (the kernels never write their inputs); other memory is
      // copied first.
      if (bytes > 0 && reinterpret_cast<std::uintptr_t>(inputs[i]) % 64 == 0) {
        array.buffer = runtime::Buffer::external(Device::cpu(), const_cast<void*>(inputs[i]), bytes, nullptr);
      } else {
        array.buffer = runtime::allocate(Device::cpu(), bytes);
        if (bytes > 0) std::memcpy(array.mutable_raw(), inputs[i], bytes);
      }
      arrays.push_back(std::move(array));
    }
    std::vector<runtime::Array> results = run(*loaded, std::move(arrays));
    // memmove: an output that is an input read in place may be the caller's own output array.
    for (std::size_t i = 0; i < results.size(); ++i)
      if (results[i].bytes() > 0) std::memmove(outputs[i], results[i].raw(), results[i].bytes());
    return 0;
  } catch (const std::exception& error) {
    last_error = error.what();
  } catch (...) {
    last_error = std::string(function.name) + ": an unknown exception";
  }
  return -1;
}

const char* exported_error() noexcept { return last_error.c_str(); }

}  // namespace kiln::detail
