#include "gradient_hazards.h"

#include "derivative_graph.h"
#include "random_source.h"
#include "reference/reference_evaluator.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>

namespace kiln::fuzz {
namespace {

using ir::Op;
using ir::ValueId;
using reference::Value;

// How many times its movement over the long step a quantity must stay from a kink (a jump or a corner: linear
// movement crosses it within 1 time, the rest is room for curvature) and from a pole (where f's higher derivatives
// grow like (movement / distance)^n, and the difference quotients with them).
constexpr double kink_reach = 4, pole_reach = 20;
// How closely the difference quotients at the two steps must agree (relative): for a smooth f they differ by
// about f''' t^2, some 1e-8 of the derivative at these steps.
constexpr double settled = 1e-3;
// Beyond this, products in the derivative (a cotangent times a value, a value squared) may overflow in float64.
constexpr double largest_value = 1e150;

enum class Singularity { kink, pole };

double zero_distance(double q) { return std::fabs(q); }
double integer_distance(double q) { return std::fabs(q - std::nearbyint(q)); }
double half_integer_distance(double q) { return std::fabs(q - std::floor(q) - 0.5); }
// sin and cos of an argument that moves a sizable part of their period within the step (exp of 20 moves by 1e5)
// oscillate there: the difference quotients may even agree and still mean nothing. As a kink at this distance,
// an argument moving 0.1 or more is a hazard.
double oscillation_room(double) { return kink_reach * 0.1; }

// The elements of `shape` grouped into lines: those whose coordinates agree on every axis but `axes`.
std::vector<std::vector<std::int64_t>> lines_of(const Shape& shape, const std::vector<std::int64_t>& axes) {
  std::vector<bool> along(static_cast<std::size_t>(shape.rank()), false);
  for (std::int64_t axis : axes) along[static_cast<std::size_t>(axis)] = true;
  std::int64_t count = 1;
  for (int axis = 0; axis < shape.rank(); ++axis)
    if (!along[static_cast<std::size_t>(axis)]) count *= shape[axis];
  std::vector<std::vector<std::int64_t>> lines(static_cast<std::size_t>(shape.numel() > 0 ? count : 0));
  for (std::int64_t flat = 0; flat < shape.numel(); ++flat) {
    std::int64_t rest = flat, line = 0, multiplier = 1;
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      const std::int64_t coordinate = rest % shape[axis];
      rest /= shape[axis];
      if (along[static_cast<std::size_t>(axis)]) continue;
      line += coordinate * multiplier;
      multiplier *= shape[axis];
    }
    lines[static_cast<std::size_t>(line)].push_back(flat);
  }
  return lines;
}

// The float64 function's values at x (point 0), x + long_step v (1) and x - long_step v (2).
using Points = std::array<std::vector<Value>, 3>;

// How an op orders its operand's lines: along `axes`, only the extreme (reduce_max, argmax) or every element
// (sorts, running extremes), the smallest first for the minima. None for other ops.
struct Ordering {
  std::vector<std::int64_t> axes;
  bool extreme_only = true;
  bool minimum = false;
};

std::optional<Ordering> ordering_of(const ir::Graph& graph, const ir::Node& node) {
  const bool minimum = node.op == Op::reduce_min || node.op == Op::argmin;
  switch (node.op) {
    case Op::reduce_max:
    case Op::reduce_min:
      return Ordering{node.attributes.axes, true, minimum};
    case Op::argmax:
    case Op::argmin:
      return Ordering{{node.attributes.axis}, true, minimum};
    case Op::cummax:
    case Op::cummin:
    case Op::sort:
    case Op::argsort:
      return Ordering{{node.attributes.axis}, false, false};
    case Op::top_k:
      return Ordering{{graph.type(node.operands[0]).shape.rank() - 1}, false, false};
    default:
      return std::nullopt;
  }
}

class GradientHazardFinder {
 public:
  GradientHazardFinder(const DerivativeCase& derivative, const ir::Graph& graph, const Points& points)
      : derivative_(derivative), graph_(graph), points_(points) {}

  std::vector<Hazard> run() {
    on_path_.assign(static_cast<std::size_t>(graph_.size()), false);
    for (ValueId id = 0; id < derivative_.primal_end; ++id)
      if (derivative_.primal_value(id) >= 0 && check_finite(id)) check_op(id);
    return std::move(hazards_);
  }

 private:
  const Value& at(std::size_t point, ValueId id) const { return points_[point][static_cast<std::size_t>(id)]; }
  bool is_float(ValueId id) const { return is_floating(graph_.type(id).dtype); }
  std::string name(ValueId id) const { return std::string(ir::name(graph_.node(id).op)); }
  void report(ValueId id, const std::string& reason) {
    const ValueId primal = derivative_.primal_value(id);
    if (reported_.insert(primal).second) hazards_.push_back({primal, reason});
  }

  // Whether a value has an element that is NaN, finite beyond largest_value, or not finite at one point and not the
  // same at the others: difference quotients through it mean nothing.
  bool unsettled(ValueId id) const {
    if (!is_float(id)) return false;
    const std::vector<double>& here = at(0, id).values;
    for (std::size_t point = 0; point < points_.size(); ++point)
      for (std::size_t k = 0; k < here.size(); ++k) {
        const double x = at(point, id).values[k];
        if (std::isnan(x) || (std::isfinite(x) && std::fabs(x) > largest_value)) return true;
        if (!std::isfinite(x) || !std::isfinite(here[k]))
          if (x != here[k]) return true;
      }
    return false;
  }

  // Whether a settled value holds an infinity (the same at every point, a masked score's -inf).
  bool has_infinity(ValueId id) const {
    if (!is_float(id)) return false;
    for (double x : at(0, id).values)
      if (!std::isfinite(x)) return true;
    return false;
  }
  // Whether it holds +inf (sign > 0) or -inf (sign < 0).
  bool has_infinity_of_sign(ValueId id, double sign) const {
    for (double x : at(0, id).values)
      if (std::isinf(x) && (x > 0) == (sign > 0)) return true;
    return false;
  }

  // Whether an element of a value differs between the points: it depends on the differentiated inputs.
  bool moves(ValueId id) const {
    if (!is_float(id)) return false;
    for (std::size_t k = 0; k < at(0, id).values.size(); ++k)
      if (at(1, id).values[k] != at(0, id).values[k] || at(2, id).values[k] != at(0, id).values[k]) return true;
    return false;
  }

  // Whether op `node`'s partial derivatives stay finite at the infinities its operands hold, so that a tangent or
  // cotangent through it stays finite: selections (where, maximum, reduce_max, sorting, data movement), sums,
  // and functions flat at the infinity they meet (exp at -inf, tanh at either, log at +inf). Elsewhere a derivative
  // at an infinity is inf or 0 * inf, NaN even where finite differences see a function that does not move (exp of
  // -square(a masked -inf)): JAX and PyTorch give NaN there too, so it is a hazard, not a failure.
  bool derivative_finite_at_infinities(const ir::Node& node) const {
    const auto operand_has = [&](std::size_t index, double sign) {
      return index < node.operands.size() && has_infinity_of_sign(node.operands[index], sign);
    };
    // Booleans carry no derivative; data movement and orderings select.
    if (node.type.dtype == DType::boolean || ir::info(node.op).category == ir::OpCategory::shape ||
        ir::is_sort(node.op) || ir::is_arg_reduction(node.op))
      return true;
    switch (node.op) {
      case Op::add:
      case Op::sub:
      case Op::neg:
      case Op::maximum:
      case Op::minimum:
      case Op::where:
      case Op::cast:
      case Op::abs:
      case Op::relu:
      case Op::sign:
      case Op::floor:
      case Op::ceil:
      case Op::round:
      case Op::tanh:
      case Op::sigmoid:
      case Op::atan:
      case Op::erf:
      case Op::erfc:
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::reduce_max:
      case Op::reduce_min:
      case Op::cumsum:
      case Op::cummax:
      case Op::cummin:
        return true;
      case Op::exp:
      case Op::expm1:
        return !operand_has(0, 1);
      case Op::log:
      case Op::log1p:
      case Op::sqrt:
      case Op::rsqrt:
        return !operand_has(0, -1);
      case Op::div:  // x / +-inf: both partials 0
        return !operand_has(0, 1) && !operand_has(0, -1);
      default:
        return false;
    }
  }

  // Reports the op that makes an unsettled value from settled operands, and an op on the differentiated inputs' path
  // that makes an infinity of finite operands or whose derivative at the infinities its operands hold is not
  // finite; false if the value is unsettled (its op's kinks are then moot) or reported.
  bool check_finite(ValueId id) {
    const ir::Node& node = graph_.node(id);
    bool on_path = moves(id), infinity = false;
    for (ValueId operand : node.operands) {
      on_path = on_path || on_path_[static_cast<std::size_t>(operand)];
      infinity = infinity || has_infinity(operand);
    }
    on_path_[static_cast<std::size_t>(id)] = on_path;
    if (unsettled(id)) {
      for (ValueId operand : node.operands)
        if (unsettled(operand)) return false;
      report(id, name(id) + " makes a value that is NaN, beyond 1e150, or infinite at some points only");
      return false;
    }
    // An infinity of finite operands is an overflow or a pole (the derivative is infinite there), except from the
    // extremes, which select: theirs is the identity of an empty line or of an exclusive scan's first element, which
    // nothing moves.
    const bool selects =
        node.op == Op::reduce_max || node.op == Op::reduce_min || node.op == Op::cummax || node.op == Op::cummin;
    if (on_path && !infinity && has_infinity(id) && !selects) {
      report(id, name(id) + " makes an infinity of finite values on the differentiated inputs' path");
      return false;
    }
    if (on_path && infinity && !derivative_finite_at_infinities(node)) {
      report(id, name(id) + " of an infinity on the differentiated inputs' path (its derivative there is not finite)");
      return false;
    }
    return true;
  }

  void check_op(ValueId id) {
    const ir::Node& node = graph_.node(id);
    auto first = [](double a, double) { return a; };
    auto second = [](double, double b) { return b; };
    auto difference = [](double a, double b) { return a - b; };
    auto quotient = [](double a, double b) { return a / b; };
    auto past_minus_one = [](double a, double) { return a + 1; };
    switch (node.op) {
      case Op::abs:
      case Op::relu:
      case Op::sign:
        return check_elementwise(id, "near 0", Singularity::kink, first, zero_distance, {0});
      case Op::floor:
      case Op::ceil:
        return check_elementwise(id, "near an integer", Singularity::kink, first, integer_distance, {0});
      case Op::round:
        return check_elementwise(id, "near a half-integer", Singularity::kink, first, half_integer_distance, {0});
      case Op::cast:
        if (node.type.dtype == DType::boolean)
          return check_elementwise(id, "near 0", Singularity::kink, first, zero_distance, {0});
        if (!is_floating(node.type.dtype))
          return check_elementwise(id, "near an integer", Singularity::kink, first, integer_distance, {0});
        return;
      case Op::copysign:
        check_elementwise(id, "(its magnitude) near 0", Singularity::kink, first, zero_distance, {0});
        return check_elementwise(id, "(its sign) near 0", Singularity::kink, second, zero_distance, {1});
      case Op::maximum:
      case Op::minimum:
      case Op::eq:
      case Op::ne:
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge:
        return check_elementwise(id, "near a tie", Singularity::kink, difference, zero_distance, {0, 1});
      case Op::remainder:
      case Op::fmod:
      case Op::floor_divide:
        check_elementwise(id, "whose quotient is near an integer", Singularity::kink, quotient, integer_distance,
                          {0, 1});
        check_quotient_beyond_integers(id);
        return check_elementwise(id, "(its divisor) near 0", Singularity::pole, second, zero_distance, {1});
      case Op::div:
        return check_elementwise(id, "(its divisor) near 0", Singularity::pole, second, zero_distance, {1});
      case Op::log:
      case Op::sqrt:
      case Op::rsqrt:
        return check_elementwise(id, "near 0", Singularity::pole, first, zero_distance, {0});
      case Op::log1p:
        return check_elementwise(id, "near -1", Singularity::pole, past_minus_one, zero_distance, {0});
      case Op::sin:
      case Op::cos:
        return check_elementwise(id, "moving a sizable part of its period", Singularity::kink, first, oscillation_room,
                                 {0});
      case Op::pow:
        check_elementwise(id, "(its base) near 0", Singularity::pole, first, zero_distance, {0});
        return check_negative_base(id);
      case Op::cond:
      case Op::while_loop:
      case Op::scan_loop:
        return check_regions(id);
      default:
        if (const std::optional<Ordering> ordering = ordering_of(graph_, node))
          check_lines(name(id), node.operands[0], *ordering);
        return;
    }
  }

  // The orderings inside a control node's regions of the values it passes in unchanged: a cond's arguments and
  // captures, a loop's captures (the same at every step) and a scan's sequences (each step's element a slice of
  // the whole, so its lines are the whole's along the axes one further). A near tie there (reduce_max of a
  // captured value in a scan's step, kiln-fuzz --gradients seed 93305, graph 331: three tied maxima, whose central
  // difference is (max + min) / 2 of their directions where reverse mode shares the cotangent) is the outer
  // value's hazard. Carries change from step to step: not judged.
  void check_regions(ValueId id) {
    const ir::Node& node = graph_.node(id);
    const auto n = static_cast<std::size_t>(node.attributes.carry_count);
    const auto p = static_cast<std::size_t>(node.attributes.sequence_count);
    for (const ir::Graph& region : node.regions) {
      // Per region parameter: the outer value it is, and how many leading axes the outer value has beyond it.
      std::vector<std::pair<ValueId, std::int64_t>> bound(region.parameters.size(), {-1, 0});
      for (std::size_t i = 0; i < bound.size(); ++i) {
        if (node.op == Op::cond && i + 1 < node.operands.size())
          bound[i] = {node.operands[i + 1], 0};
        else if (node.op == Op::while_loop && i >= n && i < node.operands.size())
          bound[i] = {node.operands[i], 0};
        else if (node.op == Op::scan_loop && i >= n && i < node.operands.size())
          bound[i] = {node.operands[i], i < n + p ? 1 : 0};
      }
      for (ValueId inner = 0; inner < region.size(); ++inner) {
        const ir::Node& ordering = region.node(inner);
        if (ordering.operands.empty()) continue;
        const auto parameter = std::find(region.parameters.begin(), region.parameters.end(), ordering.operands[0]);
        if (parameter == region.parameters.end()) continue;
        const auto [outer, shift] = bound[static_cast<std::size_t>(parameter - region.parameters.begin())];
        if (outer < 0) continue;
        std::optional<Ordering> lines = ordering_of(region, ordering);
        if (!lines) continue;
        for (std::int64_t& axis : lines->axes) axis += shift;
        check_lines(std::string(ir::name(ordering.op)) + " in a region", outer, *lines);
      }
    }
  }

  // Per element of node `id`: the quantity `of` its operands (the first twice for a unary op) at each point, and
  // a hazard at the operands `culprits` if it is within reach of a kink or pole (`distance` from it at x).
  template <class Quantity>
  void check_elementwise(ValueId id, const std::string& what, Singularity singularity, Quantity of,
                         double (*distance)(double), const std::vector<std::size_t>& culprits) {
    const ir::Node& node = graph_.node(id);
    const ValueId a = node.operands[0], b = node.operands.size() > 1 ? node.operands[1] : a;
    if (!is_float(a) || !is_float(b)) return;
    const Shape& shape = node.type.shape;
    const std::vector<std::int64_t> a_sources = broadcast_sources(at(0, a).shape, shape);
    const std::vector<std::int64_t> b_sources = broadcast_sources(at(0, b).shape, shape);
    for (std::size_t i = 0; i < a_sources.size(); ++i) {
      std::array<double, 3> q{};
      bool finite = true;
      for (std::size_t point = 0; point < q.size(); ++point) {
        q[point] = of(at(point, a).values[static_cast<std::size_t>(a_sources[i])],
                      at(point, b).values[static_cast<std::size_t>(b_sources[i])]);
        finite = finite && std::isfinite(q[point]);
      }
      if (!finite) continue;
      const double moved = std::max(std::fabs(q[1] - q[0]), std::fabs(q[2] - q[0]));
      const double gap = distance(q[0]);
      // A kink that does not move stays on one side (or, at it, on it: a tie of equal values, floor of a constant
      // integer); a pole at distance 0 is 0 * inf in the derivative.
      const bool hazard =
          singularity == Singularity::kink ? moved > 0 && gap <= kink_reach * moved : gap <= pole_reach * moved;
      if (!hazard) continue;
      for (std::size_t culprit : culprits)
        report(node.operands[culprit], "operand of " + name(id) + " " + what + " within the step");
      return;
    }
  }

  // remainder, fmod and floor_divide of operands whose quotient is beyond 2^52 (or overflows: a divisor of 5e-324)
  // jump at every multiple of the divisor, closer together than any step: check_elementwise's distance to the
  // nearest integer cannot see them (the quotient has no fraction left, or is not finite at all). kiln-fuzz
  // --gradients seed 90802, graph 408: remainder(0.368, -5e-324), whose finite differences are 0.
  void check_quotient_beyond_integers(ValueId id) {
    const ir::Node& node = graph_.node(id);
    const ValueId a = node.operands[0], b = node.operands[1];
    if (!is_float(a) || !is_float(b)) return;
    const std::vector<std::int64_t> a_sources = broadcast_sources(at(0, a).shape, node.type.shape);
    const std::vector<std::int64_t> b_sources = broadcast_sources(at(0, b).shape, node.type.shape);
    for (std::size_t i = 0; i < a_sources.size(); ++i) {
      bool moves = false, beyond = false;
      for (std::size_t point = 0; point < 3; ++point) {
        const double x = at(point, a).values[static_cast<std::size_t>(a_sources[i])];
        const double y = at(point, b).values[static_cast<std::size_t>(b_sources[i])];
        moves = moves || x != at(0, a).values[static_cast<std::size_t>(a_sources[i])] ||
                y != at(0, b).values[static_cast<std::size_t>(b_sources[i])];
        beyond = beyond || (std::isfinite(x) && std::isfinite(y) && y != 0 && !(std::fabs(x / y) < 0x1p52));
      }
      if (moves && beyond) {
        report(a, "operand of " + name(id) + " whose quotient is beyond 2^52 within the step");
        return report(b, "operand of " + name(id) + " whose quotient is beyond 2^52 within the step");
      }
    }
  }

  // pow(x, y) for x < 0 is defined for an integer y only: a y that moves makes NaN, and its derivative is log(x).
  void check_negative_base(ValueId id) {
    const ir::Node& node = graph_.node(id);
    const ValueId base = node.operands[0], exponent = node.operands[1];
    if (!is_float(exponent)) return;
    const std::vector<std::int64_t> base_sources = broadcast_sources(at(0, base).shape, node.type.shape);
    const std::vector<std::int64_t> exponent_sources = broadcast_sources(at(0, exponent).shape, node.type.shape);
    for (std::size_t i = 0; i < base_sources.size(); ++i) {
      const auto e = static_cast<std::size_t>(exponent_sources[i]);
      const bool moves = at(1, exponent).values[e] != at(0, exponent).values[e] ||
                         at(2, exponent).values[e] != at(0, exponent).values[e];
      if (moves && at(0, base).values[static_cast<std::size_t>(base_sources[i])] < 0) {
        report(exponent, "exponent of pow that moves, of a negative base");
        return report(base, "exponent of pow that moves, of a negative base");
      }
    }
  }

  // Near ties in the lines of `operand` that op `what` orders: between their two largest (or two smallest)
  // elements if the ordering looks at the extreme only, else between any two.
  void check_lines(const std::string& what, ValueId operand, const Ordering& ordering) {
    if (!is_float(operand)) return;
    const std::vector<std::int64_t>& axes = ordering.axes;
    const bool extreme_only = ordering.extreme_only;
    const double sign = ordering.minimum ? -1 : 1;
    std::vector<double> line_values;
    for (const std::vector<std::int64_t>& line : lines_of(at(0, operand).shape, axes)) {
      line_values.clear();
      double moved = 0;
      for (std::int64_t flat : line) {
        const auto k = static_cast<std::size_t>(flat);
        const double x = at(0, operand).values[k], up = at(1, operand).values[k], down = at(2, operand).values[k];
        if (!std::isfinite(x) || !std::isfinite(up) || !std::isfinite(down)) continue;
        line_values.push_back(sign * x);
        moved = std::max({moved, std::fabs(up - x), std::fabs(down - x)});
      }
      if (line_values.size() < 2 || moved == 0) continue;
      std::sort(line_values.begin(), line_values.end(), std::greater<>());
      double gap = line_values[0] - line_values[1];
      if (!extreme_only)
        for (std::size_t k = 1; k < line_values.size(); ++k) gap = std::min(gap, line_values[k - 1] - line_values[k]);
      // Two elements moving towards each other close the gap twice as fast.
      if (gap <= kink_reach * 2 * moved) return report(operand, "operand of " + what + " with a near tie");
    }
  }

  const DerivativeCase& derivative_;
  const ir::Graph& graph_;
  const Points& points_;
  std::vector<Hazard> hazards_;
  std::set<ValueId> reported_;
  std::vector<bool> on_path_;  // whether a value depends on the differentiated inputs (check_finite)
};

}  // namespace

std::vector<Hazard> find_gradient_hazards(const FuzzCase& primal) {
  if (!has_float_path(primal)) return {};
  std::vector<Hazard> hazards;
  try {
    const DerivativeCase wide = build_derivative_case(promote_to_f64(primal));
    const FuzzCase function = function_case(wide);
    Points points;
    const std::array<double, 3> steps = {0, long_step, -long_step};
    for (std::size_t point = 0; point < steps.size(); ++point)
      points[point] = reference::evaluate(function.graph, inputs_at(wide, steps[point]));
    hazards = GradientHazardFinder(wide, function.graph, points).run();
    // Where f curves within the step (kinks of ops not listed above, a period or a saturation shorter than it),
    // the difference quotients disagree at the two steps, and Richardson's error estimate no longer holds.
    const DifferenceQuotients quotients = difference_quotients(wide);
    const double disagreement = std::fabs(quotients.long_quotient - quotients.short_quotient);
    const double size = std::max(std::fabs(quotients.long_quotient), std::fabs(quotients.short_quotient));
    if (hazards.empty() && !(disagreement <= settled * size + 4 * quotients.rounding))
      hazards.push_back({-1, "finite differences that do not settle (f curves within the step)"});
    const DerivativeCase own = build_derivative_case(primal);
    for (const Hazard& hazard : find_hazards(own.fuzz_case))
      hazards.push_back({own.primal_value(hazard.value), "derivative graph: " + hazard.reason});
  } catch (const Error&) {
    return {};
  }
  return hazards;
}

bool remove_gradient_hazards(FuzzCase& primal, RandomSource& random, std::map<std::string, std::int64_t>& counts) {
  constexpr int rounds = 8;
  for (int round = 0; round < rounds; ++round) {
    // The forward hazards first: values replaced for them change everything downstream.
    std::vector<Hazard> hazards = find_hazards(primal);
    if (hazards.empty()) hazards = find_gradient_hazards(primal);
    if (hazards.empty()) return true;
    std::set<ValueId> replaced;
    std::vector<std::pair<ValueId, runtime::Array>> replacements;
    for (const Hazard& hazard : hazards) {
      if (hazard.value < 0 || !hazard.region_path.empty()) {
        ++counts["skipped: " + hazard.reason];
        return false;
      }
      if (!replaced.insert(hazard.value).second) continue;
      replacements.emplace_back(hazard.value, random_input(primal.graph.type(hazard.value), random));
      ++counts[hazard.reason];
    }
    primal = replace_with_parameters(primal, replacements);
  }
  ++counts["skipped: hazards left after " + std::to_string(rounds) + " rounds"];
  return false;
}

}  // namespace kiln::fuzz
