#pragma once
// Tracing a flat function of tensors into a graph, shared by kiln::function (function.cpp) and by the
// transformations that trace a function of their own when called on concrete tensors (autodiff.cpp).

#include "trace/function_cache.h"
#include "trace/signature.h"

#include <kiln/function.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::detail {

// The signature of concrete `inputs`: each defined, concrete, all on one device; errors name `op` and `location`.
// `statics` are the call's static arguments (kept as they are).
trace::Signature signature_of(const std::string& op, const std::string& location, const std::vector<Tensor>& inputs,
                              const std::vector<StaticValue>& statics = {});

// Traces `body` on parameters of `signature` in a new trace context named `name` (on the first argument's device),
// and returns its graph in canonical layout with the captured tensors. A bad output is an error naming `op`.
std::shared_ptr<trace::ConcreteFunction> trace_concrete(const std::string& name, const std::string& op,
                                                        const std::string& location, const trace::Signature& signature,
                                                        const TraceBody& body);

// Runs `traced_body` (which adds to whatever trace is current) in the trace of the kiln::function being traced, or --
// on concrete tensors -- in a trace of its own named `api`, whose graph then runs on the standard executor: how the
// transformations (autodiff, control flow) work both inside kiln::function and outside it.
std::vector<Tensor> run_in_trace(const std::vector<Tensor>& arguments, const char* api, const Location& location,
                                 const TraceBody& traced_body);

}  // namespace kiln::detail
