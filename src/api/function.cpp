// kiln::function's non-template part: signatures, tracing, choosing the
// executor (standard or JIT, with the fallback policy) and calling it.

#include "api/tensor_impl.h"
#include "api/tracing.h"
#include "compiler/jit.h"
#include "exec/standard_executor.h"
#include "ir/printer.h"
#include "runtime/log.h"
#include "trace/function_cache.h"

#include <kiln/error.h>
#include <kiln/function.h>

#include <cxxabi.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace kiln {

std::string_view to_string(Stage stage) {
  switch (stage) {
    case Stage::traced: return "traced";
    case Stage::optimized: return "optimized";
    case Stage::fused: return "fused";
    case Stage::source: return "source";
  }
  return "?";
}

namespace detail {

class FunctionCore {
 public:
  FunctionCore(FunctionOptions options, const std::string& name, const std::string& location)
      : options(std::move(options)), cache(name, location, this->options.retrace_warning_limit) {}

  FunctionOptions options;
  trace::FunctionCache cache;
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool strict_from_environment() {
  const char* value = std::getenv("KILN_JIT_STRICT");
  return value && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}

std::string default_name(const Location& location) {
  std::string stem = std::filesystem::path(location.file_name()).stem().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return (stem.empty() ? std::string("function") : stem) + "_" + std::to_string(location.line());
}

trace::Signature function_signature(const FunctionCore& core, const std::vector<Tensor>& inputs,
                                    const std::vector<StaticValue>& statics) {
  return signature_of("kiln::function '" + core.cache.name() + "'", core.cache.location(), inputs, statics);
}

// Runs the callable on traced tensors and returns the finished graph.
std::shared_ptr<trace::ConcreteFunction> trace_function(FunctionCore& core, const trace::Signature& signature,
                                                        const TraceBody& body) {
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<trace::ConcreteFunction> concrete = trace_concrete(
      core.cache.name(), "kiln::function '" + core.cache.name() + "'", core.cache.location(), signature, body);
  core.cache.record_trace(seconds_since(start));
  return concrete;
}

// Chooses and builds the executable, applying the compile-failure policy.
void build_executable(FunctionCore& core, trace::ConcreteFunction& concrete) {
  if (core.options.jit_compile) {
    auto start = std::chrono::steady_clock::now();
    try {
      Device device = concrete.signature.arguments.empty() ? Device::cpu() : concrete.signature.arguments[0].device;
      compiler::CompiledFunction compiled = compiler::compile(concrete.traced, device);
      core.cache.record_compile(seconds_since(start), compiled.from_disk_cache);
      concrete.executable = std::move(compiled.executable);
      concrete.stages = std::move(compiled.stages);
      concrete.compiled = true;
      return;
    } catch (const CompileError& error) {
      bool strict = core.options.on_compile_failure == Fallback::none || strict_from_environment();
      std::string where = error.location().empty() ? std::string() : " at " + error.location();
      std::string reason = error.detail() + " (op '" + error.op() + "'" + where + ")";
      if (strict)
        throw CompileError("kiln::function '" + core.cache.name() + "'",
                           "cannot compile for inputs " + concrete.signature.to_string() + ": " + reason,
                           core.cache.location());
      concrete.fallback_reason = reason;
      // The kernel plan that runs: the standard executor's, one kernel per op.
      concrete.stages = {{Stage::fused, "fell back to the standard executor (one kernel per op): " + reason + "\n"}};
      core.cache.record_fallback();
      runtime::warn("kiln::function '" + core.cache.name() + "' (defined at " + core.cache.location() +
                    ") could not be compiled for inputs " + concrete.signature.to_string() + ": " + reason +
                    ". Running it on the standard executor instead.");
    }
  }
  concrete.executable = exec::make_standard_executable(concrete.traced);
}

std::shared_ptr<const trace::ConcreteFunction> concrete_for(FunctionCore& core, const std::vector<Tensor>& inputs,
                                                            const std::vector<StaticValue>& statics,
                                                            const TraceBody& body) {
  return core.cache.lookup_or_build(function_signature(core, inputs, statics), [&](const trace::Signature& signature) {
    std::shared_ptr<trace::ConcreteFunction> concrete = trace_function(core, signature, body);
    build_executable(core, *concrete);
    return concrete;
  });
}

}  // namespace

std::string enum_type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(type.name());
}

trace::Signature signature_of(const std::string& op, const std::string& location, const std::vector<Tensor>& inputs,
                              const std::vector<StaticValue>& statics) {
  trace::Signature signature;
  signature.statics = statics;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined())
      throw ValueError(op, "argument " + std::to_string(i) + " is an undefined (default-constructed) Tensor", location);
    if (input.is_traced())
      throw ValueError(op, "argument " + std::to_string(i) + " is a traced tensor from another function's trace",
                       location);
    if (i > 0 && input.device() != inputs[0].device())
      throw DeviceError(op,
                        "arguments are on different devices (" + inputs[0].device().to_string() + " and " +
                            input.device().to_string() + ")",
                        location);
    signature.arguments.push_back({input.dtype(), input.shape(), input.device()});
  }
  return signature;
}

std::shared_ptr<trace::ConcreteFunction> trace_concrete(const std::string& name, const std::string& op,
                                                        const std::string& location, const trace::Signature& signature,
                                                        const TraceBody& body) {
  Device device = signature.arguments.empty() ? Device::cpu() : signature.arguments[0].device;
  auto context = std::make_shared<trace::TraceContext>(name, device);
  struct FinishOnExit {
    trace::TraceContext& context;
    ~FinishOnExit() { context.finish(); }
  } finish_on_exit{*context};

  std::vector<Tensor> arguments;
  for (const trace::ArgumentType& argument : signature.arguments)
    arguments.push_back(make_traced_tensor(context, context->add_argument({argument.dtype, argument.shape}), device));
  std::vector<Tensor> outputs;
  {
    ContextActivation activation(context);
    outputs = body(arguments);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& output = outputs[i];
    if (!output.defined())
      throw ValueError(op, "output " + std::to_string(i) + " is an undefined (default-constructed) Tensor", location);
    if (output.is_traced() && output.impl().context != context)
      throw ValueError(op, "output " + std::to_string(i) + " is a traced tensor of another function's trace", location);
    if (!output.is_traced() && output.device() != device)
      throw DeviceError(op, "output " + std::to_string(i) + " is on " + output.device().to_string(), location);
    context->graph().outputs.push_back(output.is_traced() ? output.impl().value : capture(*context, output));
  }
  auto concrete = std::make_shared<trace::ConcreteFunction>();
  concrete->signature = signature;
  concrete->traced = std::move(context->graph());
  concrete->captures = context->captures();
  concrete->capture_guards = context->capture_guards();
  ir::canonicalize(concrete->traced);
  return concrete;
}

std::vector<Tensor> run_in_trace(const std::vector<Tensor>& arguments, const char* api, const Location& location,
                                 const TraceBody& traced_body) {
  if (trace::TraceContext::current()) return traced_body(arguments);
  const std::string line = to_string(location);
  const trace::Signature signature = signature_of(api, line, arguments);
  const std::shared_ptr<trace::ConcreteFunction> concrete = trace_concrete(api, api, line, signature, traced_body);
  std::vector<runtime::Array> arrays;
  for (const Tensor& argument : arguments) arrays.push_back(argument.impl().array);
  for (const runtime::Array& captured : concrete->captures) arrays.push_back(captured);
  std::vector<Tensor> results;
  for (runtime::Array& array : exec::run_standard(concrete->traced, arrays))
    results.push_back(make_tensor(std::move(array)));
  return results;
}

std::shared_ptr<FunctionCore> make_function_core(FunctionOptions options, Location location) {
  std::string name = options.name.empty() ? default_name(location) : options.name;
  return std::make_shared<FunctionCore>(std::move(options), name, kiln::to_string(location));
}

std::vector<Tensor> call_function(FunctionCore& core, const std::vector<Tensor>& inputs,
                                  const std::vector<StaticValue>& statics, const TraceBody& body) {
  // Called while another function traces: become part of that graph.
  if (trace::TraceContext::current()) return body(inputs);
  std::shared_ptr<const trace::ConcreteFunction> concrete = concrete_for(core, inputs, statics, body);
  std::vector<runtime::Array> arrays;
  arrays.reserve(inputs.size() + concrete->captures.size());
  for (const Tensor& input : inputs) arrays.push_back(input.impl().array);
  for (const runtime::Array& capture : concrete->captures) arrays.push_back(capture);
  std::vector<runtime::Array> results = concrete->executable->run(arrays);
  core.cache.record_call(concrete->executable->kernels_per_call());
  std::vector<Tensor> outputs;
  outputs.reserve(results.size());
  for (runtime::Array& result : results) outputs.push_back(make_tensor(std::move(result)));
  return outputs;
}

std::string compiler_ir(FunctionCore& core, Stage stage, const Location& location, const std::vector<Tensor>& inputs,
                        const std::vector<StaticValue>& statics, const TraceBody& body) {
  const std::string op = "get_compiler_ir";
  const std::string line = kiln::to_string(location);
  if (trace::TraceContext::current()) throw ValueError(op, "cannot be called while a function is being traced", line);
  std::shared_ptr<const trace::ConcreteFunction> concrete = concrete_for(core, inputs, statics, body);
  if (stage == Stage::traced) return ir::print(concrete->traced);
  for (const auto& [available, text] : concrete->stages)
    if (available == stage) return text;
  const std::string function =
      " of kiln::function '" + core.cache.name() + "' (defined at " + core.cache.location() + ")";
  if (!core.options.jit_compile)
    throw ValueError(op,
                     "stage '" + std::string(to_string(stage)) + "'" + function +
                         ": this stage exists only for functions compiled by the JIT "
                         "(kiln::function(f, {.jit_compile = true}))",
                     line);
  throw ValueError(op,
                   "stage '" + std::string(to_string(stage)) + "'" + function +
                       " does not exist: the function was not compiled (" + concrete->fallback_reason + ")",
                   line);
}

FunctionStatistics function_statistics(const FunctionCore& core) { return core.cache.statistics(); }

}  // namespace detail
}  // namespace kiln
