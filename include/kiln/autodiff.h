#pragma once
// Automatic differentiation, as JAX has it: transformations that take a C++ function of tensors and give another.
//
//   auto loss = [](kiln::Tensor w, kiln::Tensor x) { return kiln::reduce_mean(kiln::square(kiln::matmul(x, w))); };
//   kiln::Tensor dw = kiln::grad(loss)(w, x);                          // d loss / d w
//   auto [value, grads] = kiln::value_and_grad(loss, {.argnums = {0, 1}})(w, x);   // grads[0], grads[1]
//   auto step = kiln::function(kiln::value_and_grad(loss), {.jit_compile = true});  // forward + backward, compiled
//
// Each is a transformation of the traced graph (DESIGN.md, "Transformations and regions"): the function is traced,
// and the adjoint (or tangent) computations are added to the same graph as ordinary nodes, one rule per op
// (src/autodiff). Inside kiln::function they become part of the function's graph, which the JIT compiles and fuses
// like any other (a whole training step: loss, gradients and the optimizer update in one graph); on concrete
// tensors the transformation traces the function, adds the derivative and runs the graph on the standard executor
// at once. The results are ordinary callables of tensors, so they compose: grad(grad(f)), jvp of grad
// (Hessian-vector products), kiln::function of any of them.
//
// Rules follow JAX's choices where a derivative is not defined: abs, sign, relu and floor have derivative 0 at
// their kinks and steps; maximum and minimum give half to each operand at a tie, reduce_max and reduce_min share
// among the tied elements; comparisons, argmax, rounding, integer and bitwise ops give no gradient. Differentiating
// with respect to an integer or bool argument is a DTypeError; a host_call in the way is a ValueError (give it a
// derivative with custom_vjp, or stop_gradient its inputs).

#include <kiln/function.h>
#include <kiln/tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

struct GradOptions {
  // The positions of the arguments to differentiate with respect to, each a float tensor; the gradients come in
  // this order.
  std::vector<int> argnums = {0};
};

// The gradients of a grad or value_and_grad call, one per argnum, each of its argument's dtype and shape. With one
// argnum it is that gradient itself (a Tensor); with several, index it: grads[0], grads[1].
class Gradients : public Tensor {
 public:
  Gradients() = default;
  explicit Gradients(std::vector<Tensor> tensors)
      : Tensor(tensors.size() == 1 ? tensors[0] : Tensor()), tensors_(std::move(tensors)) {}

  std::size_t size() const { return tensors_.size(); }
  const Tensor& operator[](std::size_t index) const { return tensors_.at(index); }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  auto begin() const { return tensors_.begin(); }
  auto end() const { return tensors_.end(); }

 private:
  std::vector<Tensor> tensors_;
};

// A value with no derivative: x itself, through which no gradient flows back (jax.lax.stop_gradient,
// tf.stop_gradient, torch's detach).
Tensor stop_gradient(const Tensor& x, Location location = Location::current());

namespace detail {

// The non-template parts (src/api/autodiff.cpp). Function bodies are flat: tensors in, tensors out.

// f's value, then its gradients with respect to `argnums` (f must return one float scalar). `argnums` count all
// the call's arguments, `arguments` (the tensors) and `statics` (the static values, which `body` holds).
std::vector<Tensor> value_and_gradients(const TraceBody& body, const std::vector<Tensor>& arguments,
                                        const std::vector<StaticValue>& statics, const std::vector<int>& argnums,
                                        const char* api, const Location& location);
// f's outputs, then their tangents, for `tangents` of the `primals`.
std::vector<Tensor> jvp_call(const TraceBody& body, const std::vector<Tensor>& primals,
                             const std::vector<Tensor>& tangents, const Location& location);

class PullbackCore;
struct VjpResult {
  std::vector<Tensor> outputs;
  std::shared_ptr<const PullbackCore> pullback;
};
VjpResult vjp_call(const TraceBody& body, const std::vector<Tensor>& primals, const Location& location);
std::vector<Tensor> pull_back(const PullbackCore& pullback, const std::vector<Tensor>& cotangents,
                              const Location& location);

// custom_vjp's two functions, flat: the forward gives the outputs and the residuals; the backward takes the
// residuals and the outputs' cotangents and gives one cotangent per argument.
using CustomForward = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(const std::vector<Tensor>&)>;
using CustomBackwardBody =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& residuals, std::vector<Tensor>& cotangents)>;
std::vector<Tensor> call_custom_vjp(const CustomForward& forward, const CustomBackwardBody& backward,
                                    const std::vector<Tensor>& arguments, const Location& location);

template <>
struct Outputs<Gradients> {
  static std::vector<Tensor> flatten(const Gradients& gradients) { return gradients.tensors(); }
  static Gradients unflatten(std::vector<Tensor>& tensors) { return Gradients(std::move(tensors)); }
};

// value_and_grad's result: the value, then the gradients.
template <>
struct Outputs<std::pair<Tensor, Gradients>> {
  static std::vector<Tensor> flatten(const std::pair<Tensor, Gradients>& result) {
    std::vector<Tensor> tensors{result.first};
    tensors.insert(tensors.end(), result.second.begin(), result.second.end());
    return tensors;
  }
  static std::pair<Tensor, Gradients> unflatten(std::vector<Tensor>& tensors) {
    Tensor value = std::move(tensors.at(0));
    return {std::move(value), Gradients(std::vector<Tensor>(tensors.begin() + 1, tensors.end()))};
  }
};

// The callable value_and_grad returns (grad's keeps the gradients only).
template <class Callable>
class ValueAndGrad {
 public:
  ValueAndGrad(Callable callable, GradOptions options, const char* api, Location location)
      : callable_(std::make_shared<const Callable>(std::move(callable))),
        options_(std::move(options)),
        api_(api),
        location_(location) {}

  // Each argument is a Tensor or a static value (static_arguments.h); argnums count both.
  template <class... Arguments>
  std::pair<Tensor, Gradients> operator()(const Arguments&... arguments) const {
    if constexpr ((check_argument<Arguments>() && ...)) {
      using Result = ResultOfArguments<Callable, Arguments...>;
      static_assert(std::is_same_v<Result, Tensor>, "kiln::grad: the function must return one (scalar) Tensor");
      SplitArguments<Arguments...> split(arguments...);
      std::vector<Tensor> flat = value_and_gradients(
          trace_body_with_statics<Result, Callable, Arguments...>(callable_, std::move(split.slots)), split.tensors,
          split.statics, options_.argnums, api_, location_);
      Tensor value = std::move(flat.at(0));
      return {std::move(value), Gradients(std::vector<Tensor>(flat.begin() + 1, flat.end()))};
    } else {
      return {};
    }
  }

 private:
  std::shared_ptr<const Callable> callable_;
  GradOptions options_;
  const char* api_;
  Location location_;
};

template <class Callable>
class Grad {
 public:
  Grad(Callable callable, GradOptions options, Location location)
      : value_and_grad_(std::move(callable), std::move(options), "grad", location) {}

  template <class... Arguments>
  Gradients operator()(const Arguments&... arguments) const {
    return value_and_grad_(arguments...).second;
  }

 private:
  ValueAndGrad<Callable> value_and_grad_;
};

}  // namespace detail

// The gradient of `callable` -- a function of tensors returning one float scalar -- with respect to the arguments
// `options.argnums` names: a callable of the same arguments returning Gradients (jax.grad). The callable may take
// static arguments too (static_arguments.h): argnums count them, and naming one is a ValueError.
template <class Callable>
detail::Grad<std::decay_t<Callable>> grad(Callable&& callable, GradOptions options = {},
                                          Location location = Location::current()) {
  return {std::forward<Callable>(callable), std::move(options), location};
}

// The value and the gradient from one evaluation: a callable returning std::pair<Tensor, Gradients>
// (jax.value_and_grad).
template <class Callable>
detail::ValueAndGrad<std::decay_t<Callable>> value_and_grad(Callable&& callable, GradOptions options = {},
                                                            Location location = Location::current()) {
  return {std::forward<Callable>(callable), std::move(options), "value_and_grad", location};
}

// A vjp's pullback: the cotangents of the function's outputs (one per output, each of that output's dtype and
// shape) -> the cotangents of its arguments, as Gradients (one per argument). Call it inside the trace that made it
// (the kiln::function being traced) or, for a vjp of concrete tensors, anywhere: it then computes the function
// again along with the derivative.
class Pullback {
 public:
  explicit Pullback(std::shared_ptr<const detail::PullbackCore> core) : core_(std::move(core)) {}

  template <class... Rest>
  requires(std::is_convertible_v<const Rest&, const Tensor&>&&...) Gradients operator()(const Operand& first,
                                                                                        const Rest&... rest) const {
    return Gradients(detail::pull_back(*core_, {first.tensor, Tensor(rest)...}, first.location));
  }

 private:
  std::shared_ptr<const detail::PullbackCore> core_;
};

// The outputs of `callable` at `primals` and their pullback (jax.vjp): auto [y, pullback] = kiln::vjp(f, x);
// kiln::Tensor dx = pullback(dy). Every primal must be a float tensor.
template <class Callable, class... Rest>
requires(std::is_convertible_v<const Rest&, const Tensor&>&&...) auto vjp(const Callable& callable,
                                                                          const Operand& first, const Rest&... rest) {
  using Result = detail::ResultOf<Callable, 1 + sizeof...(Rest)>;
  detail::VjpResult result =
      detail::vjp_call(detail::trace_body<Result, 1 + sizeof...(Rest)>(std::make_shared<const Callable>(callable)),
                       {first.tensor, Tensor(rest)...}, first.location);
  return std::pair<Result, Pullback>(detail::Outputs<Result>::unflatten(result.outputs),
                                     Pullback(std::move(result.pullback)));
}

// Forward mode (jax.jvp): the outputs of `callable` at `primals` and their tangents for `tangents` (one per primal,
// of its dtype and shape): auto [y, dy] = kiln::jvp(f, {x}, {dx}).
template <class Callable, std::size_t count>
auto jvp(const Callable& callable, const Tensor (&primals)[count], const Tensor (&tangents)[count],
         Location location = Location::current()) {
  using Result = detail::ResultOf<Callable, count>;
  std::vector<Tensor> flat = detail::jvp_call(
      detail::trace_body<Result, count>(std::make_shared<const Callable>(callable)),
      std::vector<Tensor>(primals, primals + count), std::vector<Tensor>(tangents, tangents + count), location);
  const std::size_t half = flat.size() / 2;
  std::vector<Tensor> outputs(flat.begin(), flat.begin() + static_cast<std::ptrdiff_t>(half));
  std::vector<Tensor> output_tangents(flat.begin() + static_cast<std::ptrdiff_t>(half), flat.end());
  return std::pair<Result, Result>(detail::Outputs<Result>::unflatten(outputs),
                                   detail::Outputs<Result>::unflatten(output_tangents));
}

namespace detail {

template <class Forward, class Backward>
class CustomVjp {
 public:
  CustomVjp(Forward forward, Backward backward, Location location)
      : forward_(std::make_shared<const Forward>(std::move(forward))),
        backward_(std::make_shared<const Backward>(std::move(backward))),
        location_(location) {}

  template <class... Arguments>
  requires(std::is_convertible_v<const Arguments&, const Tensor&>&&...) auto operator()(
      const Arguments&... arguments) const {
    using Pair = ResultOf<Forward, sizeof...(Arguments)>;
    using Result = typename Pair::first_type;
    CustomForward forward = [user_forward = forward_](const std::vector<Tensor>& inputs) {
      Pair pair = [&]<std::size_t... index>(std::index_sequence<index...>) {
        return (*user_forward)(inputs.at(index)...);
      }
      (std::index_sequence_for<Arguments...>{});
      return std::pair<std::vector<Tensor>, std::vector<Tensor>>(Outputs<Result>::flatten(pair.first),
                                                                 std::vector<Tensor>(pair.second));
    };
    CustomBackwardBody backward = [user_backward = backward_](const std::vector<Tensor>& residuals,
                                                              std::vector<Tensor>& cotangents) {
      using BackwardResult =
          std::decay_t<std::invoke_result_t<const Backward&, const std::vector<Tensor>&, const Result&>>;
      return Outputs<BackwardResult>::flatten((*user_backward)(residuals, Outputs<Result>::unflatten(cotangents)));
    };
    std::vector<Tensor> outputs = call_custom_vjp(forward, backward, {Tensor(arguments)...}, location_);
    return Outputs<Result>::unflatten(outputs);
  }

 private:
  std::shared_ptr<const Forward> forward_;
  std::shared_ptr<const Backward> backward_;
  Location location_;
};

}  // namespace detail

// A function with a derivative of its own, for numerics the chain rule gets wrong (jax.custom_vjp):
//   forward(arguments...) -> std::pair{outputs, residuals}: the function's outputs (a Tensor, or a tuple of them),
//                            and whatever tensors the backward needs (a std::vector<Tensor>);
//   backward(residuals, cotangents) -> the cotangents of the arguments, one per argument (a Tensor, a tuple or a
//                            std::vector of them), `cotangents` being of the outputs' type.
// Called, it computes forward's outputs; differentiated (grad, vjp), its derivative is backward's, whatever forward
// computes inside. Forward mode (jvp) through it is an error, as in JAX. Tensors forward closes over are constants
// of the derivative: pass what needs a gradient as an argument.
template <class Forward, class Backward>
detail::CustomVjp<std::decay_t<Forward>, std::decay_t<Backward>> custom_vjp(Forward&& forward, Backward&& backward,
                                                                            Location location = Location::current()) {
  return {std::forward<Forward>(forward), std::forward<Backward>(backward), location};
}

}  // namespace kiln
