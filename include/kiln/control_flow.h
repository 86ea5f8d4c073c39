#pragma once
// Control flow on tensor values, traced once and kept as loops and branches in the graph (JAX's lax.cond,
// lax.switch, lax.while_loop, lax.fori_loop and lax.scan; TensorFlow's tf.cond and tf.while_loop). C++ `if` and
// `for` inside a kiln::function run while tracing: a loop of 10,000 steps becomes 10,000 copies of its body, and a
// branch cannot depend on a tensor's value. These constructs trace each branch or body once, as a region of the
// graph, and run only what the values choose.
//
//   auto f = kiln::function([](kiln::Tensor x) {
//     // Doubles x until its sum passes 100: the loop runs as often as the data says.
//     return kiln::while_loop([](const kiln::Tensor& v) { return kiln::reduce_sum(v) < 100.0; },
//                             [](const kiln::Tensor& v) { return v * 2.0; }, x);
//   }, {.jit_compile = true});
//
// A carry (the state of a loop, a scan's per-step outputs, a branch's results) is a Tensor, or several as a
// std::tuple, std::pair, std::array or std::vector of Tensors; each step must keep every carry's dtype and shape.
// The functions may use any tensor in scope (a captured weight, a traced value of the enclosing function): it
// becomes an input of the region. They work in a kiln::function (standard or JIT-compiled) and outside one, on
// concrete tensors (traced and run at once).

#include <kiln/function.h>

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

struct ScanLoopOptions {
  // Step from the last element of the sequences to the first (the stacked outputs stay in the sequences' order).
  bool reverse = false;
  // How many steps: needed when there are no sequences (an empty std::vector), else it must equal their leading
  // size (-1: take it from them).
  std::int64_t length = -1;
};

namespace detail {

std::vector<Tensor> switch_case(const Tensor& index, bool is_predicate, const std::vector<TraceBody>& branches,
                                const std::vector<Tensor>& operands, const Location& location);
std::vector<Tensor> while_loop(const TraceBody& condition, const TraceBody& body, const std::vector<Tensor>& init,
                               const Location& location);
// The body takes the carries, then one element of each sequence, and returns the carries, then its outputs.
std::vector<Tensor> scan(const TraceBody& body, const std::vector<Tensor>& carries,
                         const std::vector<Tensor>& sequences, const ScanLoopOptions& options,
                         const Location& location);
// The body takes the index, then the carries, and returns the carries.
std::vector<Tensor> fori_loop(std::int64_t lower, std::int64_t upper, const TraceBody& body,
                              const std::vector<Tensor>& init, const Location& location);
std::vector<Tensor> fori_loop(const Tensor& lower, const Tensor& upper, const TraceBody& body,
                              const std::vector<Tensor>& init, const Location& location);
// fori_loop's bound given as a C++ integer: a tensor of it (where the other bound is a tensor).
Tensor index_bound(std::int64_t bound, const Location& location);

template <class Structure>
Structure rebuild(std::vector<Tensor> tensors) {
  return Outputs<Structure>::unflatten(tensors);
}

inline std::vector<Tensor> between(const std::vector<Tensor>& tensors, std::size_t begin, std::size_t end) {
  return std::vector<Tensor>(tensors.begin() + static_cast<std::ptrdiff_t>(begin),
                             tensors.begin() + static_cast<std::ptrdiff_t>(end));
}

// One branch of cond or switch_case, of the operands' count of Tensors, as a function of flat lists.
template <class Result, class Branch, std::size_t count>
TraceBody branch_body(const Branch& branch) {
  return [&branch](const std::vector<Tensor>& inputs) {
    return [&]<std::size_t... index>(std::index_sequence<index...>) {
      return Outputs<Result>::flatten(branch(inputs.at(index)...));
    }
    (std::make_index_sequence<count>{});
  };
}

// cond's predicate and switch_case's index are Operands (a tensor and the caller's line): a pack of operands comes
// after them, where a defaulted Location cannot follow.
template <class Result, class Operands, class... Branches>
Result switch_of(const Operand& index, bool is_predicate, const Operands& operands, const Branches&... branches) {
  constexpr std::size_t count = std::tuple_size_v<Operands>;
  std::vector<TraceBody> bodies{branch_body<Result, Branches, count>(branches)...};
  std::vector<Tensor> flat =
      std::apply([](const auto&... tensors) { return std::vector<Tensor>{tensors...}; }, operands);
  return rebuild<Result>(switch_case(index.tensor, is_predicate, bodies, flat, index.location));
}

}  // namespace detail

// Runs true_branch(operands...) if `predicate` (a bool or integer scalar, nonzero counting as true) holds, else
// false_branch(operands...). Both are traced; only the chosen one runs. They return the same structure of tensors
// with the same dtypes and shapes.
template <class TrueBranch, class FalseBranch, class... Operands>
auto cond(Operand predicate, const TrueBranch& true_branch, const FalseBranch& false_branch,
          const Operands&... operands) {
  using Result = std::decay_t<std::invoke_result_t<const TrueBranch&, detail::AsTensor<Operands>...>>;
  static_assert(
      std::is_same_v<Result, std::decay_t<std::invoke_result_t<const FalseBranch&, detail::AsTensor<Operands>...>>>,
      "kiln::cond: both branches must return the same C++ type");
  return detail::switch_of<Result>(predicate, true, std::tuple<detail::AsTensor<Operands>...>(operands...),
                                   false_branch, true_branch);
}

// Runs branches[index](operands...) for an integer scalar `index`, clamped to the branches (as lax.switch: below
// 0 runs the first, past the end the last). `branches` is a std::tuple of callables (each may be another lambda)
// or a std::vector of one callable type (std::function, say).
template <class... Branches, class... Operands>
auto switch_case(Operand index, const std::tuple<Branches...>& branches, const Operands&... operands) {
  static_assert(sizeof...(Branches) > 0, "kiln::switch_case needs at least one branch");
  using First = std::tuple_element_t<0, std::tuple<Branches...>>;
  using Result = std::decay_t<std::invoke_result_t<const First&, detail::AsTensor<Operands>...>>;
  static_assert(
      (std::is_same_v<Result, std::decay_t<std::invoke_result_t<const Branches&, detail::AsTensor<Operands>...>>> &&
       ...),
      "kiln::switch_case: every branch must return the same C++ type");
  return std::apply(
      [&](const auto&... each) {
        return detail::switch_of<Result>(index, false, std::tuple<detail::AsTensor<Operands>...>(operands...), each...);
      },
      branches);
}

template <class Branch, class... Operands>
auto switch_case(Operand index, const std::vector<Branch>& branches, const Operands&... operands) {
  using Result = std::decay_t<std::invoke_result_t<const Branch&, detail::AsTensor<Operands>...>>;
  std::vector<detail::TraceBody> bodies;
  for (const Branch& branch : branches)
    bodies.push_back(detail::branch_body<Result, Branch, sizeof...(Operands)>(branch));
  std::vector<Tensor> tensors{Tensor(operands)...};
  return detail::rebuild<Result>(detail::switch_case(index.tensor, false, bodies, tensors, index.location));
}

// Repeats `state = body(state)` while condition(state) (a bool scalar) holds, starting from `init`, and returns
// the last state. The body keeps every carry's dtype and shape. In reverse mode it has no derivative (as in JAX);
// use fori_loop or scan where a gradient is needed.
template <class Condition, class Body, class Carry>
Carry while_loop(const Condition& condition, const Body& body, const Carry& init,
                 Location location = Location::current()) {
  const detail::TraceBody traced_condition = [&](const std::vector<Tensor>& state) {
    return std::vector<Tensor>{Tensor(condition(detail::rebuild<Carry>(state)))};
  };
  const detail::TraceBody traced_body = [&](const std::vector<Tensor>& state) {
    using Result = std::decay_t<std::invoke_result_t<const Body&, const Carry&>>;
    return detail::Outputs<Result>::flatten(body(detail::rebuild<Carry>(state)));
  };
  return detail::rebuild<Carry>(
      detail::while_loop(traced_condition, traced_body, detail::Outputs<Carry>::flatten(init), location));
}

// `state = body(i, state)` for i from `lower` up to `upper` (excluded), an i32 scalar tensor (i64 where a bound
// needs it). Bounds given as C++ integers make a loop of known length (a scan, differentiable); tensor bounds a
// while_loop.
template <class Lower, class Upper, class Body, class Carry>
Carry fori_loop(const Lower& lower, const Upper& upper, const Body& body, const Carry& init,
                Location location = Location::current()) {
  const detail::TraceBody traced_body = [&](const std::vector<Tensor>& inputs) {
    using Result = std::decay_t<std::invoke_result_t<const Body&, const Tensor&, const Carry&>>;
    return detail::Outputs<Result>::flatten(
        body(inputs.at(0), detail::rebuild<Carry>(detail::between(inputs, 1, inputs.size()))));
  };
  const std::vector<Tensor> flat = detail::Outputs<Carry>::flatten(init);
  if constexpr (std::is_integral_v<Lower> && std::is_integral_v<Upper>) {
    return detail::rebuild<Carry>(detail::fori_loop(static_cast<std::int64_t>(lower), static_cast<std::int64_t>(upper),
                                                    traced_body, flat, location));
  } else {
    const auto bound = [&](const auto& value) {
      if constexpr (std::is_integral_v<std::decay_t<decltype(value)>>)
        return detail::index_bound(static_cast<std::int64_t>(value), location);
      else
        return Tensor(value);
    };
    return detail::rebuild<Carry>(detail::fori_loop(bound(lower), bound(upper), traced_body, flat, location));
  }
}

// JAX's lax.scan: for each element x of `sequences` (along their leading axis), (carry, y) = step(carry, x);
// returns the last carry and every step's y stacked along a new leading axis. `step` returns a std::pair of the
// carry's structure and the outputs' (a Tensor, a tuple, ...). `sequences` is a Tensor or a structure of them,
// all of one leading size; the step sees each without that axis.
template <class Step, class Carry, class Sequences>
auto scan(const Step& step, const Carry& init, const Sequences& sequences, ScanLoopOptions options = {},
          Location location = Location::current()) {
  using StepResult = std::decay_t<std::invoke_result_t<const Step&, const Carry&, const Sequences&>>;
  using Outputs = typename StepResult::second_type;
  const std::vector<Tensor> carries = detail::Outputs<Carry>::flatten(init);
  const std::size_t carried = carries.size();
  const detail::TraceBody traced_body = [&](const std::vector<Tensor>& inputs) {
    StepResult result = step(detail::rebuild<Carry>(detail::between(inputs, 0, carried)),
                             detail::rebuild<Sequences>(detail::between(inputs, carried, inputs.size())));
    std::vector<Tensor> flat = detail::Outputs<typename StepResult::first_type>::flatten(result.first);
    for (Tensor& output : detail::Outputs<Outputs>::flatten(result.second)) flat.push_back(std::move(output));
    return flat;
  };
  std::vector<Tensor> results =
      detail::scan(traced_body, carries, detail::Outputs<Sequences>::flatten(sequences), options, location);
  return std::pair<Carry, Outputs>(detail::rebuild<Carry>(detail::between(results, 0, carried)),
                                   detail::rebuild<Outputs>(detail::between(results, carried, results.size())));
}

}  // namespace kiln
