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
//
// It may also take static arguments (static_arguments.h), in any order among
// the tensors: bool, integers, float, double, enums and std::string. Each is
// a C++ constant of the trace and part of the signature, as JAX's
// static_argnums: a new value traces again (and retraces count toward the
// retrace warning, which names the argument and both values), a value seen
// before reuses its trace.
//
//   auto scaled = kiln::function([](kiln::Tensor x, float scale) { return x * scale; });
//   scaled(x, 0.5f);  // traced with the constant 0.5
//   scaled(x, 0.25f); // traced again: x * 0.25

#include <kiln/function_options.h>
#include <kiln/ops.h>
#include <kiln/static_arguments.h>
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
// `inputs` are the call's tensor arguments, `statics` its static ones; `body` takes the tensors and holds the
// static values.
std::vector<Tensor> call_function(FunctionCore& core, const std::vector<Tensor>& inputs,
                                  const std::vector<StaticValue>& statics, const TraceBody& body);
std::string compiler_ir(FunctionCore& core, Stage stage, const Location& location, const std::vector<Tensor>& inputs,
                        const std::vector<StaticValue>& statics, const TraceBody& body);
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

// ---- Calls with static arguments ----

template <class Argument>
inline constexpr bool is_tensor_argument = std::is_convertible_v<const Argument&, const Tensor&>;
template <class Argument>
inline constexpr bool is_function_argument = is_tensor_argument<Argument> || is_static_argument_v<Argument>;

// The readable error for an argument of another type (the compiler names the type in the lines that follow);
// true when the argument is allowed.
template <class Argument>
constexpr bool check_argument() {
  static_assert(is_function_argument<Argument>,
                "kiln::function (and kiln::grad, kiln::value_and_grad): each argument must be a kiln::Tensor or a "
                "static argument: bool, an integer type, float, double, an enum, or std::string (or a string "
                "literal); see kiln/static_arguments.h");
  return is_function_argument<Argument>;
}

// What a trace body keeps of each argument: nothing of a tensor (it comes in the flat list), a static one's value.
struct TensorSlot {};
template <class Argument>
using ArgumentSlot = std::conditional_t<is_tensor_argument<Argument>, TensorSlot, StaticStorage<Argument>>;
// What the callable is called with for each argument.
template <class Argument>
using PassedArgument = std::conditional_t<is_tensor_argument<Argument>, Tensor, const StaticStorage<Argument>&>;

// The callable's result type for a call with these arguments.
template <class Callable, class... Arguments>
using ResultOfArguments = std::decay_t<std::invoke_result_t<const Callable&, PassedArgument<Arguments>...>>;

// A call's arguments split: the tensors (in order), the static values (with their positions) and the slots a
// trace body keeps.
template <class... Arguments>
struct SplitArguments {
  std::vector<Tensor> tensors;
  std::vector<StaticValue> statics;
  std::tuple<ArgumentSlot<Arguments>...> slots;

  explicit SplitArguments(const Arguments&... arguments) : slots(slot_of<Arguments>(arguments)...) {
    int position = 0;
    (add<Arguments>(arguments, position++), ...);
  }

 private:
  template <class Argument>
  static ArgumentSlot<Argument> slot_of(const Argument& argument) {
    if constexpr (is_tensor_argument<Argument>)
      return TensorSlot{};
    else
      return ArgumentSlot<Argument>(argument);
  }
  template <class Argument>
  void add(const Argument& argument, int position) {
    if constexpr (is_tensor_argument<Argument>)
      tensors.push_back(Tensor(argument));
    else
      statics.push_back(static_value(position, argument));
  }
};

// For each argument position, its index among the tensor arguments (tensors only).
template <class... Arguments>
constexpr std::array<std::size_t, sizeof...(Arguments)> tensor_indices() {
  std::array<std::size_t, sizeof...(Arguments)> indices{};
  std::size_t position = 0, tensor = 0;
  ((indices[position++] = is_tensor_argument<Arguments> ? tensor++ : 0), ...);
  return indices;
}

template <std::size_t index, class... Types>
using NthType = typename std::tuple_element_t<index, std::tuple<std::type_identity<Types>...>>::type;

// `callable`, called with these arguments' kinds and returning Result, as a function of the flat list of its
// tensors: the static values are `slots`' (what tracing runs).
template <class Result, class Callable, class... Arguments>
TraceBody trace_body_with_statics(std::shared_ptr<const Callable> callable,
                                  std::tuple<ArgumentSlot<Arguments>...> slots) {
  return [callable = std::move(callable), slots = std::move(slots)](const std::vector<Tensor>& inputs) {
    constexpr std::array<std::size_t, sizeof...(Arguments)> indices = tensor_indices<Arguments...>();
    auto argument = [&]<std::size_t position>(std::integral_constant<std::size_t, position>) -> decltype(auto) {
      if constexpr (is_tensor_argument<NthType<position, Arguments...>>)
        return (inputs.at(indices[position]));
      else
        return (std::get<position>(slots));
    };
    return [&]<std::size_t... position>(std::index_sequence<position...>) {
      return Outputs<Result>::flatten((*callable)(argument(std::integral_constant<std::size_t, position>{})...));
    }
    (std::index_sequence_for<Arguments...>{});
  };
}

}  // namespace detail

// The stage get_compiler_ir is asked for and the line that asked (converted from a Stage where it is called), so
// that its errors name the caller's line, not the line that made the function.
struct StageRequest {
  StageRequest(Stage stage, Location location = Location::current())  // NOLINT: implicit by design
      : stage(stage), location(location) {}
  Stage stage;
  Location location;
};

template <class Callable>
class Function {
 public:
  Function(Callable callable, FunctionOptions options, Location location)
      : callable_(std::make_shared<const Callable>(std::move(callable))),
        core_(detail::make_function_core(std::move(options), location)) {}

  // Each argument is a Tensor or a static value (static_arguments.h).
  template <class... Arguments>
  auto operator()(const Arguments&... arguments) const {
    if constexpr ((detail::check_argument<Arguments>() && ...)) {
      using Result = detail::ResultOfArguments<Callable, Arguments...>;
      detail::SplitArguments<Arguments...> split(arguments...);
      std::vector<Tensor> outputs = detail::call_function(
          *core_, split.tensors, split.statics,
          detail::trace_body_with_statics<Result, Callable, Arguments...>(callable_, std::move(split.slots)));
      return detail::Outputs<Result>::unflatten(outputs);
    }
  }

  // The IR of `stage` for these arguments (tracing and compiling first if
  // this signature is new), like TensorFlow's experimental_get_compiler_ir.
  // Errors name the line of this call.
  template <class... Arguments>
  std::string get_compiler_ir(StageRequest stage, const Arguments&... arguments) const {
    if constexpr ((detail::check_argument<Arguments>() && ...)) {
      using Result = detail::ResultOfArguments<Callable, Arguments...>;
      detail::SplitArguments<Arguments...> split(arguments...);
      return detail::compiler_ir(
          *core_, stage.stage, stage.location, split.tensors, split.statics,
          detail::trace_body_with_statics<Result, Callable, Arguments...>(callable_, std::move(split.slots)));
    } else {
      return {};
    }
  }

  // Counts traces (one per signature: tensor dtypes, shapes and devices, and static values), calls, compiles.
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
