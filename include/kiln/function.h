#pragma once
// kiln::function: trace a C++ callable of tensors into a graph, once per
// input signature, and run it on the standard executor or -- with
// {.jit_compile = true} -- compile it into a few fused kernels.
//
//   auto f = kiln::function([](kiln::Tensor x, kiln::Tensor y) { return kiln::matmul(x, y); },
//                           {.jit_compile = true});
//   kiln::Tensor z = f(a, b);
//
// The callable takes Tensors and returns a Tensor, or several as a
// std::tuple, std::pair, std::array or std::vector of Tensors. It runs only
// while tracing; C++ control flow inside it is unrolled at trace time, and
// reading a traced tensor's value (item(), to_vector()) throws. Tensors it
// captures from the enclosing scope become inputs of the graph (referenced,
// not copied). A Function may be called from many threads at once; copies
// share one cache.

#include <kiln/function_options.h>
#include <kiln/ops.h>
#include <kiln/tensor.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

namespace detail {

class FunctionCore;
using TraceBody = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::shared_ptr<FunctionCore> make_function_core(FunctionOptions options, Location location);
std::vector<Tensor> call_function(FunctionCore& core, const std::vector<Tensor>& inputs, const TraceBody& body);
std::string compiler_ir(FunctionCore& core, Stage stage, const std::vector<Tensor>& inputs, const TraceBody& body);
FunctionStatistics function_statistics(const FunctionCore& core);

// Converting a callable's result to and from a flat list of tensors.
template <class Result> struct Outputs;

template <> struct Outputs<Tensor> {
  static std::vector<Tensor> flatten(const Tensor& tensor) { return {tensor}; }
  static Tensor unflatten(std::vector<Tensor>& tensors) { return std::move(tensors.at(0)); }
};

template <> struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(const std::vector<Tensor>& tensors) { return tensors; }
  static std::vector<Tensor> unflatten(std::vector<Tensor>& tensors) { return std::move(tensors); }
};

template <std::size_t count> struct Outputs<std::array<Tensor, count>> {
  static std::vector<Tensor> flatten(const std::array<Tensor, count>& tensors) { return {tensors.begin(), tensors.end()}; }
  static std::array<Tensor, count> unflatten(std::vector<Tensor>& tensors) {
    std::array<Tensor, count> result;
    for (std::size_t i = 0; i < count; ++i) result[i] = std::move(tensors.at(i));
    return result;
  }
};

template <class... Elements> struct Outputs<std::tuple<Elements...>> {
  static_assert((std::is_same_v<Elements, Tensor> && ...), "a kiln::function must return Tensors");
  static std::vector<Tensor> flatten(const std::tuple<Elements...>& tuple) {
    return std::apply([](const auto&... tensors) { return std::vector<Tensor>{tensors...}; }, tuple);
  }
  static std::tuple<Elements...> unflatten(std::vector<Tensor>& tensors) {
    return [&]<std::size_t... index>(std::index_sequence<index...>) {
      return std::tuple<Elements...>{std::move(tensors.at(index))...};
    }(std::index_sequence_for<Elements...>{});
  }
};

template <> struct Outputs<std::pair<Tensor, Tensor>> {
  static std::vector<Tensor> flatten(const std::pair<Tensor, Tensor>& pair) { return {pair.first, pair.second}; }
  static std::pair<Tensor, Tensor> unflatten(std::vector<Tensor>& tensors) {
    return {std::move(tensors.at(0)), std::move(tensors.at(1))};
  }
};

// top_k's two results: values first, then indices.
template <>
struct Outputs<TopK> {
  static std::vector<Tensor> flatten(const TopK& top) { return {top.values, top.indices}; }
  static TopK unflatten(std::vector<Tensor>& tensors) { return {std::move(tensors.at(0)), std::move(tensors.at(1))}; }
};

template <class Argument> using AsTensor = Tensor;

// A callable's result type when called with `count` Tensors.
template <class Callable, class Indices>
struct ResultOfCall;
template <class Callable, std::size_t... index>
struct ResultOfCall<Callable, std::index_sequence<index...>> {
  template <std::size_t>
  using Argument = Tensor;
  using type = std::decay_t<std::invoke_result_t<const Callable&, Argument<index>...>>;
};
template <class Callable, std::size_t count>
using ResultOf = typename ResultOfCall<Callable, std::make_index_sequence<count>>::type;

// `callable` of `count` Tensors returning Result, as a function of flat lists of tensors (what tracing runs).
template <class Result, std::size_t count, class Callable>
TraceBody trace_body(std::shared_ptr<const Callable> callable) {
  return [callable = std::move(callable)](const std::vector<Tensor>& inputs) {
    return [&]<std::size_t... index>(std::index_sequence<index...>) {
      return Outputs<Result>::flatten((*callable)(inputs.at(index)...));
    }
    (std::make_index_sequence<count>{});
  };
}

}  // namespace detail

template <class Callable>
class Function {
 public:
  Function(Callable callable, FunctionOptions options, Location location)
      : callable_(std::make_shared<const Callable>(std::move(callable))),
        core_(detail::make_function_core(std::move(options), location)) {}

  template <class... Arguments>
    requires(std::is_convertible_v<const Arguments&, const Tensor&> && ...)
  auto operator()(const Arguments&... arguments) const {
    using Result = std::decay_t<std::invoke_result_t<const Callable&, detail::AsTensor<Arguments>...>>;
    std::vector<Tensor> outputs = detail::call_function(*core_, {Tensor(arguments)...},
                                                        detail::trace_body<Result, sizeof...(Arguments)>(callable_));
    return detail::Outputs<Result>::unflatten(outputs);
  }

  // The IR of `stage` for these arguments (tracing and compiling first if
  // this signature is new), like TensorFlow's experimental_get_compiler_ir.
  template <class... Arguments>
    requires(std::is_convertible_v<const Arguments&, const Tensor&> && ...)
  std::string get_compiler_ir(Stage stage, const Arguments&... arguments) const {
    using Result = std::decay_t<std::invoke_result_t<const Callable&, detail::AsTensor<Arguments>...>>;
    return detail::compiler_ir(*core_, stage, {Tensor(arguments)...},
                               detail::trace_body<Result, sizeof...(Arguments)>(callable_));
  }

  FunctionStatistics statistics() const { return detail::function_statistics(*core_); }

 private:
  std::shared_ptr<const Callable> callable_;
  std::shared_ptr<detail::FunctionCore> core_;
};

template <class Callable>
Function<std::decay_t<Callable>> function(Callable&& callable, FunctionOptions options = {},
                                          Location location = Location::current()) {
  return Function<std::decay_t<Callable>>(std::forward<Callable>(callable), std::move(options), location);
}

}  // namespace kiln
