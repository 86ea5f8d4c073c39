#include "hazards.h"

#include "random_source.h"
#include "reference/reference_evaluator.h"

#include <kiln/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <span>

namespace kiln::fuzz {
namespace {

using ir::Op;
using reference::Value;

// How far (relative to max(|x|, magnitude)) an inexact operand must stay from
// a jump: 10x the chain tolerance of compare.h (1e-5 for f32, 1e-12 for f64,
// 2^-6 for bf16, 2^-9 for f16).
double separation(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 10 * 0x1p-6;
    case DType::f16: return 10 * 0x1p-9;
    case DType::f32: return 1e-4;
    default: return 1e-10;
  }
}
// How far (relative to its magnitude) an inexact value must stay from a
// singularity at 0, so that first-order error propagation holds.
double singular_separation(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 0.3;
    case DType::f16: return 0.05;
    case DType::f32: return 1e-2;
    default: return 1e-8;
  }
}
// Magnitudes past which overflow, and below which subnormals, make rounding differences large; f16's range is
// 6e-5 (its smallest normal) to 65504, bf16's f32's.
double largest_safe(DType dtype) {
  return dtype == DType::f16 ? 3e4 : dtype == DType::f32 || dtype == DType::bf16 ? 1e30 : 1e290;
}
double largest_finite(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 65504.0;
    case DType::bf16:
      return 0x1.fep127;
    case DType::f32:
      return 0x1.fffffep127;
    default:
      return std::numeric_limits<double>::max();
  }
}
double smallest_safe(DType dtype) {
  return dtype == DType::f16 ? 1e-3 : dtype == DType::f32 || dtype == DType::bf16 ? 1e-30 : 1e-290;
}
// Significand bits: a value's rounding error is that of the coarsest float type on its way.
int precision_bits(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 8;
    case DType::f16: return 11;
    case DType::f32: return 24;
    default: return 53;
  }
}
DType coarser(DType a, DType b) { return precision_bits(a) <= precision_bits(b) ? a : b; }

class HazardFinder {
 public:
  HazardFinder(const ir::Graph& graph, const std::vector<Value>& values) : graph_(graph), values_(values) {
    // A value's rounding error is that of the coarsest float type on its way:
    // cast<f64>(tanh(f32 x)) carries f32 error in an f64 value (kiln-fuzz
    // seed 2, graph 384: ceil of it at -0.99999994 vs -1).
    precision_.resize(static_cast<std::size_t>(graph_.size()));
    for (ir::ValueId id = 0; id < graph_.size(); ++id) {
      const ir::Node& node = graph_.node(id);
      DType precision = is_floating(node.type.dtype) ? node.type.dtype : DType::f64;
      for (ir::ValueId operand : node.operands)
        precision = coarser(precision, precision_[static_cast<std::size_t>(operand)]);
      precision_[static_cast<std::size_t>(id)] = precision;
    }
  }

  std::vector<Hazard> run() {
    for (ir::ValueId id = 0; id < graph_.size(); ++id) {
      check_range(id);
      check_operands(id);
    }
    return std::move(hazards_);
  }

 private:
  const Value& value(ir::ValueId id) const { return values_[static_cast<std::size_t>(id)]; }
  DType precision(ir::ValueId id) const { return precision_[static_cast<std::size_t>(id)]; }
  void report(ir::ValueId id, const std::string& reason) {
    if (reported_.insert(id).second) hazards_.push_back({id, reason});
  }

  void check_range(ir::ValueId id) {
    const Value& v = value(id);
    if (!is_floating(v.dtype)) return;
    for (std::int64_t i = 0; i < v.numel(); ++i) {
      double x = v.values[static_cast<std::size_t>(i)], magnitude = v.magnitude(i);
      if (!std::isfinite(x)) continue;
      // An exact value past the type's largest is infinity in the executors and stays finite in the reference
      // (floor_divide(-9, 1e-40) in bf16: -inf, then fmod(-inf, -inf) NaN against the reference's -0).
      if (magnitude == 0 && std::fabs(x) > largest_finite(v.dtype))
        return report(id, "exact value beyond the range of " + std::string(to_string(v.dtype)));
      if (magnitude == 0) continue;
      if (std::fabs(x) > largest_safe(v.dtype) || (std::isfinite(magnitude) && magnitude > largest_safe(v.dtype)))
        return report(id, "inexact value beyond the safe range of " + std::string(to_string(v.dtype)));
      if (x != 0 && std::fabs(x) < smallest_safe(v.dtype))
        return report(id, "inexact value in the subnormal range of " + std::string(to_string(v.dtype)));
    }
  }

  // Operand `index` of node `id` near a jump of the node's op?
  void check_operands(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    if (node.operands.empty() || !is_floating(graph_.type(node.operands[0]).dtype)) return;
    switch (node.op) {
      case Op::floor:
      case Op::ceil:
        return check_unary(id, 0, "near an integer", integer_distance);
      case Op::round:
        return check_unary(id, 0, "near a half-integer", half_integer_distance);
      case Op::sign:
        return check_unary(id, 0, "near 0", zero_distance);
      case Op::copysign:  // the sign of operand 1
        check_made_nan(id, 1);
        check_chosen_zero(id, 1);
        return check_unary(id, 1, "near 0", zero_distance);
      case Op::cast:
        if (node.type.dtype == DType::boolean) return check_unary(id, 0, "near 0", zero_distance);
        if (!is_floating(node.type.dtype)) return check_unary(id, 0, "near an integer", integer_distance);
        return;
      case Op::sin:
      case Op::cos:
        return check_period(id);
      case Op::log:
      case Op::sqrt:
      case Op::rsqrt:
        return check_singular(id, 0);
      case Op::log1p:
        return check_singular(id, 0, -1);
      case Op::div:
        return check_singular(id, 1);
      case Op::floor_divide:
      case Op::remainder:
      case Op::fmod:
        return check_quotient(id);
      case Op::pow:
        return check_power(id);
      case Op::eq:
      case Op::ne:
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge:
        return check_comparison(id);
      case Op::argmax:
      case Op::argmin:
        return check_arg_reduction(id);
      case Op::sort:
      case Op::argsort:
      case Op::top_k:
        return check_ordering(id);
      case Op::reduce_prod:
      case Op::cumprod:
        return check_product(id);
      case Op::reduce_sum:
      case Op::reduce_mean:
      case Op::cumsum:
      case Op::matmul:
        return check_sum_overflow(id);
      default:
        return;
    }
  }

  // sin and cos of an inexact operand so large that its rounding reach (separation of its dtype, relative)
  // spans a period: its last bits decide the result (sin of pow(9.65, 14.69) = 2.8e14, kiln-fuzz --half-precision
  // seed 92 graph 299: 4.3e5 against 4.6e-6 after a pow of it).
  void check_period(ir::ValueId id) {
    const ir::ValueId operand = graph_.node(id).operands[0];
    const Value& v = value(operand);
    const double reach = separation(precision(operand));
    for (std::int64_t i = 0; i < v.numel(); ++i) {
      const double x = v.values[static_cast<std::size_t>(i)];
      if (v.magnitude(i) > 0 && std::isfinite(x) && std::fabs(x) * reach >= 2 * std::numbers::pi)
        return report(operand, "inexact operand of " + std::string(ir::name(graph_.node(id).op)) +
                                   " too large to place within its period");
    }
  }

  static double integer_distance(double x) { return std::fabs(x - std::nearbyint(x)); }
  static double zero_distance(double x) { return std::fabs(x); }
  static double half_integer_distance(double x) { return std::fabs(x - std::floor(x) - 0.5); }

  void check_unary(ir::ValueId id, std::size_t index, const std::string& what, double (*distance)(double)) {
    ir::ValueId operand = graph_.node(id).operands[index];
    const Value& v = value(operand);
    double relative = separation(precision(operand));
    for (std::int64_t i = 0; i < v.numel(); ++i) {
      double x = v.values[static_cast<std::size_t>(i)], magnitude = v.magnitude(i);
      if (magnitude == 0 || !std::isfinite(x)) continue;
      if (distance(x) <= relative * std::max(std::fabs(x), magnitude))
        return report(operand, "inexact operand of " + std::string(ir::name(graph_.node(id).op)) + " " + what);
    }
  }

  // A NaN that an op made, as operand `index` of node `id`: IEEE leaves the sign of an invalid operation's NaN to
  // the implementation (x86's default NaN is negative, vector_math's log(-1) positive), so an op reading its sign
  // bit (copysign) has no one right answer there (copysign(x, log(-1)), kiln-fuzz seed 2, graph 3862). A NaN given
  // as a parameter or constant keeps its sign everywhere.
  void check_made_nan(ir::ValueId id, std::size_t index) {
    ir::ValueId operand = graph_.node(id).operands[index];
    const ir::Op made_by = graph_.node(operand).op;
    if (made_by == Op::parameter || made_by == Op::constant) return;
    const Value& v = value(operand);
    for (std::int64_t i = 0; i < v.numel(); ++i)
      if (std::isnan(v.values[static_cast<std::size_t>(i)]))
        return report(operand, "NaN made by an op, whose sign " + std::string(ir::name(graph_.node(id).op)) + " reads");
  }

  // A zero that a maximum or minimum chose, as operand `index` of node `id`: between +0 and -0, which compare
  // equal, either may be chosen (the standard executor keeps the first it meets, the JIT's vector maxima the
  // last; NumPy too keeps the first), so an op reading its sign bit (copysign) has no one right answer there
  // (copysign(c, reduce_max([0, -0])), kiln-fuzz seed 93301, graph 623).
  void check_chosen_zero(ir::ValueId id, std::size_t index) {
    const ir::ValueId operand = graph_.node(id).operands[index];
    switch (graph_.node(operand).op) {
      case Op::maximum:
      case Op::minimum:
      case Op::reduce_max:
      case Op::reduce_min:
      case Op::cummax:
      case Op::cummin:
        break;
      default:
        return;
    }
    const Value& v = value(operand);
    for (std::int64_t i = 0; i < v.numel(); ++i)
      if (v.values[static_cast<std::size_t>(i)] == 0)
        return report(operand, "a zero chosen by " + std::string(ir::name(graph_.node(operand).op)) + ", whose sign " +
                                   std::string(ir::name(graph_.node(id).op)) + " reads");
  }

  // An inexact operand within rounding distance of `pole`, where the op turns a number into inf or NaN (0 for
  // log, sqrt, rsqrt and a divisor; -1 for log1p: log1p(tanh(-10.3)) is log1p(-1) = -inf in f32, -21.6 in the
  // reference, kiln-fuzz seed 11, graph 495).
  void check_singular(ir::ValueId id, std::size_t index, int pole = 0) {
    ir::ValueId operand = graph_.node(id).operands[index];
    const Value& v = value(operand);
    const Value& result = value(id);
    std::vector<std::int64_t> sources = broadcast_sources(v.shape, result.shape);
    for (std::int64_t source : sources) {
      double x = v.values[static_cast<std::size_t>(source)], magnitude = v.magnitude(source);
      if (magnitude == 0 || !std::isfinite(x)) continue;
      if (std::fabs(x - pole) <= singular_separation(precision(operand)) * magnitude)
        return report(operand,
                      "inexact operand of " + std::string(ir::name(graph_.node(id).op)) + " near " + std::to_string(pole));
    }
  }

  // floor_divide, remainder and fmod jump where a / b is an integer: an inexact operand whose quotient is within
  // rounding of one, or an inexact divisor near 0.
  void check_quotient(ir::ValueId id) {
    check_singular(id, 1);
    check_inexact_pairs(id, "with a quotient near an integer",
                        [](double x, double y, double mx, double my, double separation) {
                          if (y == 0) return false;
                          const double quotient = x / y, error = (mx + std::fabs(quotient) * my) / std::fabs(y);
                          return integer_distance(quotient) <= separation * std::max(std::fabs(quotient), error);
                        });
  }

  void check_power(ir::ValueId id) {
    check_singular(id, 0);
    const ir::Node& node = graph_.node(id);
    const Value& base = value(node.operands[0]);
    const Value& exponent = value(node.operands[1]);
    const Value& result = value(id);
    std::vector<std::int64_t> base_sources = broadcast_sources(base.shape, result.shape);
    std::vector<std::int64_t> exponent_sources = broadcast_sources(exponent.shape, result.shape);
    for (std::size_t i = 0; i < base_sources.size(); ++i)
      if (base.values[static_cast<std::size_t>(base_sources[i])] < 0 && exponent.magnitude(exponent_sources[i]) > 0)
        return report(node.operands[1], "inexact exponent of a negative base");
  }

  void check_comparison(ir::ValueId id) {
    // x against its own maximum or minimum along some axes (the derivative of reduce_max marks where x is its max): the
    // extreme element equals it in every executor, however x rounds, so only the others are within reach of a tie.
    const ir::Node& node = graph_.node(id);
    const auto extreme_of = [&](ir::ValueId reduced, ir::ValueId operand) {
      const ir::Node& reduction = graph_.node(reduced);
      return (reduction.op == Op::reduce_max || reduction.op == Op::reduce_min) && reduction.operands[0] == operand;
    };
    const bool against_extreme =
        extreme_of(node.operands[1], node.operands[0]) || extreme_of(node.operands[0], node.operands[1]);
    check_inexact_pairs(id, "nearly equal",
                        [against_extreme](double x, double y, double mx, double my, double separation) {
                          if (against_extreme && x == y) return false;
                          return std::fabs(x - y) <= separation * std::max({std::fabs(x), std::fabs(y), mx, my});
                        });
  }

  // Reports the inexact operands of binary node `id` at the first element where `near_jump(x, y, mx, my,
  // separation)` holds for its operands' values x, y (broadcast), their error magnitudes mx, my and the relative
  // separation of the coarser operand's dtype: the op's jump within rounding reach. Elements with two exact
  // operands or a non-finite one are skipped.
  template <class NearJump>
  void check_inexact_pairs(ir::ValueId id, const std::string& what, NearJump near_jump) {
    const ir::Node& node = graph_.node(id);
    const Value& a = value(node.operands[0]);
    const Value& b = value(node.operands[1]);
    const Value& result = value(id);
    std::vector<std::int64_t> a_sources = broadcast_sources(a.shape, result.shape);
    std::vector<std::int64_t> b_sources = broadcast_sources(b.shape, result.shape);
    const DType coarsest = coarser(precision(node.operands[0]), precision(node.operands[1]));
    for (std::size_t i = 0; i < a_sources.size(); ++i) {
      double x = a.values[static_cast<std::size_t>(a_sources[i])], y = b.values[static_cast<std::size_t>(b_sources[i])];
      double mx = a.magnitude(a_sources[i]), my = b.magnitude(b_sources[i]);
      if ((mx == 0 && my == 0) || !std::isfinite(x) || !std::isfinite(y)) continue;
      if (near_jump(x, y, mx, my, separation(coarsest))) {
        const std::string reason = "inexact operands of " + std::string(ir::name(node.op)) + " " + what;
        if (mx > 0) report(node.operands[0], reason);
        if (my > 0) report(node.operands[1], reason);
        return;
      }
    }
  }

  // A product with a zero factor whose other factors overflow: 0 in one
  // order, 0 * inf = NaN in another, and both are right (kiln-fuzz seed 2,
  // graph 7500: the product of iota(57), 0 * 1 * ... * 56, NaN with 16 lanes).
  // Also without a zero: large factors whose partial product overflows and
  // small ones whose partial product underflows to 0 give inf, 0 or NaN by the
  // order (seed 90, graph 1106: erf(x)^-3 and erf(x)^9 cast to f32, NaN from
  // the standard kernel's blocks, 0 from the reference's running product).
  // Judged over the whole operand, not per reduced row: a fuzzer may be
  // cautious. The product itself is replaced.
  void check_product(ir::ValueId id) {
    const Value& v = value(graph_.node(id).operands[0]);
    if (!is_floating(v.dtype)) return;
    bool zero = false;
    double log2_growth = 0, log2_shrinking = 0;  // sums of log2 |x| over factors above 1, below 1
    for (double x : v.values) {
      if (x == 0)
        zero = true;
      else if (std::isfinite(x))
        (std::fabs(x) >= 1 ? log2_growth : log2_shrinking) += std::log2(std::fabs(x));
    }
    const double log2_largest = std::log2(largest_safe(v.dtype)), log2_smallest = std::log2(smallest_safe(v.dtype));
    const bool may_overflow = log2_growth >= log2_largest;
    const bool may_vanish = zero || log2_shrinking <= log2_smallest;
    if ((zero && std::fabs(log2_growth + log2_shrinking) >= log2_largest) || (may_overflow && may_vanish))
      report(id, "product of factors that overflow and factors that vanish (the order decides 0, inf or NaN)");
  }

  // A sum whose terms may overflow: +inf and -inf terms give NaN in one order,
  // and in another the exact sum rounds to inf (kiln-fuzz seed 3, graph 2655:
  // an f64 matmul by 1.7e308, inf from OpenBLAS, NaN from the reference's
  // in-order sum). Bounded over the whole operands: the largest term times
  // the number of terms. The sum itself is replaced.
  void check_sum_overflow(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    if (!is_floating(node.type.dtype)) return;
    auto largest = [&](ir::ValueId operand) {
      double result = 0;
      for (double x : value(operand).values)
        if (std::isfinite(x)) result = std::max(result, std::fabs(x));  // infinities: the same in any order
      return result;
    };
    const Shape& input = graph_.type(node.operands[0]).shape;
    double term = largest(node.operands[0]), terms = 1;
    if (node.op == Op::matmul) {
      term *= largest(node.operands[1]);
      terms = static_cast<double>(node.attributes.transpose_a ? input[input.rank() - 2] : input[input.rank() - 1]);
    } else if (node.op == Op::cumsum) {
      terms = static_cast<double>(input[static_cast<int>(node.attributes.axis)]);
    } else {
      terms = static_cast<double>(input.numel()) / std::max<double>(1, static_cast<double>(node.type.shape.numel()));
    }
    if (term * terms > largest_safe(node.type.dtype))  // (an overflow of term itself is inf: a hazard too)
      report(id, "sum whose terms may overflow (the order decides inf or NaN)");
  }

  // A near tie between the two largest (argmin: smallest) elements of a row.
  void check_arg_reduction(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    const double sign = node.op == Op::argmin ? -1 : 1;  // argmin's order is argmax's of the negation
    ir::ValueId operand = node.operands[0];
    const Value& v = value(operand);
    auto axis = static_cast<int>(node.attributes.axis);
    std::int64_t outer = 1, inner = 1, length = v.shape[axis];
    for (int d = 0; d < axis; ++d) outer *= v.shape[d];
    for (int d = axis + 1; d < v.shape.rank(); ++d) inner *= v.shape[d];
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t in = 0; in < inner; ++in) {
        double top = -INFINITY, second = -INFINITY, scale = 0;
        bool inexact = false, nan = false;
        for (std::int64_t k = 0; k < length; ++k) {
          std::int64_t flat = (o * length + k) * inner + in;
          double x = sign * v.values[static_cast<std::size_t>(flat)];
          nan = nan || std::isnan(x);
          inexact = inexact || v.magnitude(flat) > 0;
          scale = std::max({scale, std::fabs(x), v.magnitude(flat)});
          if (x > top) {
            second = top;
            top = x;
          } else if (x > second) {
            second = x;
          }
        }
        if (!inexact || nan || length < 2 || !std::isfinite(scale)) continue;
        if (top - second <= separation(precision(operand)) * scale)
          return report(operand, "inexact operand of " + std::string(ir::name(node.op)) + " with a near tie");
      }
    }
  }

  // A near tie between any two numbers of a line that sort, argsort or top_k orders, one of them inexact: rounding
  // may swap them (exact ties are ordered by index everywhere). The whole line is judged, top_k's too: cautious.
  void check_ordering(ir::ValueId id) {
    const ir::Node& node = graph_.node(id);
    ir::ValueId operand = node.operands[0];
    const Value& v = value(operand);
    if (v.magnitudes.empty()) return;  // computed exactly
    const int rank = v.shape.rank();
    const auto axis = node.op == Op::top_k ? rank - 1 : static_cast<int>(node.attributes.axis);
    std::int64_t outer = 1, inner = 1, length = v.shape[axis];
    for (int d = 0; d < axis; ++d) outer *= v.shape[d];
    for (int d = axis + 1; d < rank; ++d) inner *= v.shape[d];
    std::vector<std::pair<double, double>> line;  // (value, magnitude) of the line's finite elements, in order
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t in = 0; in < inner; ++in) {
        line.clear();
        for (std::int64_t k = 0; k < length; ++k) {
          const std::int64_t flat = (o * length + k) * inner + in;
          const double x = v.values[static_cast<std::size_t>(flat)];
          if (std::isfinite(x)) line.emplace_back(x, v.magnitude(flat));
        }
        std::sort(line.begin(), line.end());
        for (std::size_t k = 1; k < line.size(); ++k) {
          const auto [x, mx] = line[k - 1];
          const auto [y, my] = line[k];
          if (mx == 0 && my == 0) continue;
          const double scale = std::max({std::fabs(x), std::fabs(y), mx, my});
          if (y - x <= separation(precision(operand)) * scale)
            return report(operand, "inexact operand of " + std::string(ir::name(node.op)) + " with a near tie");
        }
      }
  }

  const ir::Graph& graph_;
  const std::vector<Value>& values_;
  std::vector<DType> precision_;  // per value: f32 when f32 rounding reached it
  std::vector<Hazard> hazards_;
  std::set<ir::ValueId> reported_;
};

// ---- Regions inlined (find_hazards) ----

// Where a value of the inlined graph comes from: value `value` of the graph at `region_path` (as
// Replacement::region_path), the one to replace for a hazard there; or nothing to replace (value -1: the stacking
// of a scan_loop's outputs, whose elements are values of their own).
struct Origin {
  std::vector<std::int64_t> region_path;
  ir::ValueId value = -1;
};

// The case's graph with its regions run inlined, and each value's origin. Its parameters are the case's.
struct Inlined {
  ir::Graph graph;
  std::vector<Origin> origins;
};

// Gives up on cases whose loops run long (a replayed graph, or one the shrinker edited inside a loop, whose loop may
// never end): inlining is for the generator's few steps.
struct TooManySteps {};

class Inliner {
 public:
  explicit Inliner(std::span<const runtime::Array> inputs) : inputs_(inputs) {}

  Inlined run(const ir::Graph& graph) {
    std::vector<ir::ValueId> arguments;
    for (ir::ValueId parameter : graph.parameters) {
      arguments.push_back(inlined_.graph.add_parameter(graph.type(parameter)));
      inlined_.origins.push_back({{}, parameter});
    }
    inline_graph(graph, arguments, {}, false);
    return std::move(inlined_);
  }

 private:
  using Path = std::vector<std::int64_t>;
  // (A generated loop takes at most 6 evaluations, 36 for one inside another, a graph a few such loops.)
  static constexpr int max_nodes = 50000, max_evaluations = 256;

  ir::ValueId add(ir::Node node, Origin origin) {
    if (inlined_.graph.size() >= max_nodes) throw TooManySteps{};
    node.regions.clear();
    inlined_.origins.push_back(std::move(origin));
    return inlined_.graph.add(std::move(node));
  }

  // `graph`'s nodes on `arguments` (one per parameter); returns its outputs. In a region only the nodes an
  // output needs: a dead node's hazard has nothing to replace. (The case's graph keeps all: it has been pruned,
  // or it is a replayed graph whose every value is to be judged.)
  std::vector<ir::ValueId> inline_graph(const ir::Graph& graph, const std::vector<ir::ValueId>& arguments,
                                        const Path& path, bool live_only) {
    std::vector<ir::ValueId> inlined(graph.nodes.size(), -1);
    for (std::size_t position = 0; position < graph.parameters.size(); ++position)
      inlined[static_cast<std::size_t>(graph.parameters[position])] = arguments.at(position);
    std::vector<bool> live(graph.nodes.size(), !live_only);
    for (ir::ValueId output : graph.outputs) live[static_cast<std::size_t>(output)] = true;
    for (std::size_t i = graph.nodes.size(); i-- > 0;)
      if (live[i])
        for (ir::ValueId operand : graph.nodes[i].operands) live[static_cast<std::size_t>(operand)] = true;
    // A value used other than by result nodes: replacing it changes something.
    std::vector<bool> used(graph.nodes.size(), false);
    for (ir::ValueId output : graph.outputs) used[static_cast<std::size_t>(output)] = true;
    for (const ir::Node& node : graph.nodes)
      if (node.op != ir::Op::result)
        for (ir::ValueId operand : node.operands) used[static_cast<std::size_t>(operand)] = true;
    std::map<ir::ValueId, std::vector<ir::ValueId>> results;
    for (ir::ValueId id = 0; id < graph.size(); ++id) {
      const ir::Node& node = graph.node(id);
      const auto index = static_cast<std::size_t>(id);
      if (node.op == ir::Op::parameter || !live[index]) continue;
      if (node.op == ir::Op::result) {
        inlined[index] = results.at(node.operands.at(0)).at(static_cast<std::size_t>(node.attributes.index));
      } else if (ir::has_regions(node.op)) {
        std::vector<ir::ValueId> operands;
        for (ir::ValueId operand : node.operands) operands.push_back(inlined[static_cast<std::size_t>(operand)]);
        Path inner = path;
        inner.push_back(id);
        results[id] = inline_control(node, operands, inner);
        inlined[index] = results[id].at(0);
      } else {
        ir::Node copy = node;
        for (ir::ValueId& operand : copy.operands) operand = inlined[static_cast<std::size_t>(operand)];
        inlined[index] = add(std::move(copy), {path, id});
        continue;
      }
      // A control node's or result node's value is a region's: a hazard at it is replaced here, in the graph
      // that uses it, rather than inside the region (which other results may need).
      Origin& origin = inlined_.origins[static_cast<std::size_t>(inlined[index])];
      if (used[index] && (origin.value < 0 || origin.region_path.size() > path.size())) origin = {path, id};
    }
    std::vector<ir::ValueId> outputs;
    for (ir::ValueId output : graph.outputs) outputs.push_back(inlined[static_cast<std::size_t>(output)]);
    return outputs;
  }

  // The results of control node `node` (at `path`) on inlined `operands`, as the reference runs it.
  std::vector<ir::ValueId> inline_control(const ir::Node& node, std::vector<ir::ValueId> operands, const Path& path) {
    auto region = [&](std::size_t index, const std::vector<ir::ValueId>& arguments) {
      Path inner = path;
      inner.push_back(static_cast<std::int64_t>(index));
      return inline_graph(node.regions.at(index), arguments, inner, true);
    };
    const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
    if (node.op == ir::Op::cond) {
      const auto last = static_cast<std::int64_t>(node.regions.size()) - 1;
      const std::int64_t branch = std::clamp<std::int64_t>(scalar(operands.at(0)), 0, last);
      operands.erase(operands.begin());
      return region(static_cast<std::size_t>(branch), operands);
    }
    if (node.op == ir::Op::while_loop) {
      while (scalar(region(0, operands).at(0)) != 0) {
        const std::vector<ir::ValueId> carries = region(1, operands);
        std::copy(carries.begin(), carries.end(), operands.begin());
      }
      operands.resize(carried);
      return operands;
    }
    // scan_loop: each step's elements sliced out of the sequences, the outputs stacked at the end.
    const auto sequences = static_cast<std::size_t>(node.attributes.sequence_count);
    const std::int64_t length = node.attributes.length;
    const ir::Graph& body = node.regions.at(0);
    const std::vector<ir::ValueId> whole(operands.begin() + static_cast<std::ptrdiff_t>(carried),
                                         operands.begin() + static_cast<std::ptrdiff_t>(carried + sequences));
    std::vector<std::vector<ir::ValueId>> outputs(body.outputs.size() - carried,
                                                  std::vector<ir::ValueId>(static_cast<std::size_t>(length), -1));
    for (std::int64_t count = 0; count < length; ++count) {
      const std::int64_t step = node.attributes.reverse ? length - 1 - count : count;
      for (std::size_t sequence = 0; sequence < sequences; ++sequence)
        operands[carried + sequence] = row(whole[sequence], step);
      const std::vector<ir::ValueId> returned = region(0, operands);
      for (std::size_t output = 0; output < outputs.size(); ++output)
        outputs[output][static_cast<std::size_t>(step)] = returned[carried + output];
      std::copy(returned.begin(), returned.begin() + static_cast<std::ptrdiff_t>(carried), operands.begin());
    }
    std::vector<ir::ValueId> results(operands.begin(), operands.begin() + static_cast<std::ptrdiff_t>(carried));
    for (std::size_t output = 0; output < outputs.size(); ++output)
      results.push_back(stack(outputs[output], body.type(body.outputs[carried + output]), length));
    return results;
  }

  // Row `step` of `sequence`'s leading axis: the sequence's data, so a hazard there is the sequence's.
  ir::ValueId row(ir::ValueId sequence, std::int64_t step) {
    const ir::Type whole = inlined_.graph.type(sequence);
    const Origin origin = inlined_.origins[static_cast<std::size_t>(sequence)];
    ir::Node slice;
    slice.op = ir::Op::slice;
    slice.operands = {sequence};
    slice.attributes.start.assign(static_cast<std::size_t>(whole.shape.rank()), 0);
    slice.attributes.step.assign(static_cast<std::size_t>(whole.shape.rank()), 1);
    slice.attributes.start[0] = step;
    slice.type = whole;
    slice.type.shape[0] = 1;
    ir::Node reshape;
    reshape.op = ir::Op::reshape;
    reshape.operands = {add(std::move(slice), origin)};
    reshape.type = {whole.dtype, Shape(whole.shape.dims().subspan(1))};
    return add(std::move(reshape), origin);
  }

  // The elements (each of type `element`) stacked along a new leading axis.
  ir::ValueId stack(const std::vector<ir::ValueId>& elements, const ir::Type& element, std::int64_t length) {
    std::vector<std::int64_t> dims{length};
    for (std::int64_t dim : element.shape.dims()) dims.push_back(dim);
    ir::Node node;
    node.type = {element.dtype, Shape(dims)};
    if (length == 0) {
      node.op = ir::Op::constant;
      return add(std::move(node), {});
    }
    node.op = ir::Op::concat;
    for (ir::ValueId value : elements) {
      ir::Node expanded;
      expanded.op = ir::Op::expand_dims;
      expanded.operands = {value};
      expanded.type = node.type;
      expanded.type.shape[0] = 1;
      node.operands.push_back(add(std::move(expanded), {}));
    }
    return add(std::move(node), {});
  }

  // An integer or bool scalar's value (a cond's index, a while_loop's condition): the reference on the values
  // it needs (found from it, not by a pass over everything inlined so far: a loop asks once per step).
  std::int64_t scalar(ir::ValueId value) {
    if (++evaluations_ > max_evaluations) throw TooManySteps{};
    const ir::Graph& graph = inlined_.graph;
    std::vector<ir::ValueId> cone, pending = {value};
    std::set<ir::ValueId> seen = {value};
    while (!pending.empty()) {
      const ir::ValueId id = pending.back();
      pending.pop_back();
      cone.push_back(id);
      for (ir::ValueId operand : graph.node(id).operands)
        if (seen.insert(operand).second) pending.push_back(operand);
    }
    std::sort(cone.begin(), cone.end());
    ir::Graph needed;
    std::map<ir::ValueId, ir::ValueId> renumbered;
    for (ir::ValueId parameter : graph.parameters) renumbered[parameter] = needed.add_parameter(graph.type(parameter));
    for (ir::ValueId id : cone) {
      if (graph.node(id).op == ir::Op::parameter) continue;
      ir::Node node = graph.node(id);
      for (ir::ValueId& operand : node.operands) operand = renumbered.at(operand);
      renumbered[id] = needed.add(std::move(node));
    }
    needed.outputs = {renumbered.at(value)};
    const std::vector<Value> values = reference::evaluate(needed, inputs_);
    if (values.at(0).integers.size() != 1)
      throw InternalError("kiln-fuzz", "a cond's index or a while_loop's condition is not a scalar", std::string());
    return values[0].integers[0];
  }

  std::span<const runtime::Array> inputs_;
  Inlined inlined_;
  int evaluations_ = 0;
};

// The inlined case, or nullopt past the limits.
std::optional<Inlined> inline_regions(const FuzzCase& fuzz_case) {
  try {
    return Inliner(fuzz_case.inputs).run(fuzz_case.graph);
  } catch (const TooManySteps&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<std::int64_t> broadcast_sources(const Shape& operand, const Shape& result) {
  std::vector<std::int64_t> sources;
  int offset = result.rank() - operand.rank();
  auto operand_strides = operand.strides();
  for (std::int64_t flat = 0; flat < result.numel(); ++flat) {
    std::int64_t rest = flat, source = 0;
    for (int axis = result.rank() - 1; axis >= 0; --axis) {
      std::int64_t index = rest % result[axis];
      rest /= result[axis];
      int operand_axis = axis - offset;
      if (operand_axis >= 0 && operand[operand_axis] != 1)
        source += index * operand_strides[static_cast<std::size_t>(operand_axis)];
    }
    sources.push_back(source);
  }
  return sources;
}

namespace {

// Every value of `graph` as an output, evaluated by the reference, and its hazards.
std::vector<Hazard> hazards_of_every_value(ir::Graph graph, std::span<const runtime::Array> inputs) {
  graph.outputs.clear();
  for (ir::ValueId id = 0; id < graph.size(); ++id) graph.outputs.push_back(id);
  const std::vector<Value> values = reference::evaluate(graph, inputs);
  return HazardFinder(graph, values).run();
}

}  // namespace

std::vector<Hazard> find_hazards(const FuzzCase& fuzz_case) {
  try {
    if (!has_control_flow(fuzz_case.graph)) return hazards_of_every_value(fuzz_case.graph, fuzz_case.inputs);
    std::optional<Inlined> inlined = inline_regions(fuzz_case);
    // (Not the reference on the case either: a loop that never ends would keep it.)
    if (!inlined) return {{-1, "loops that run too many steps to be judged (or never end)"}};
    std::vector<Hazard> hazards;
    std::set<std::pair<std::vector<std::int64_t>, ir::ValueId>> seen;  // a loop body's value at many steps
    for (Hazard& hazard : hazards_of_every_value(inlined->graph, fuzz_case.inputs)) {
      const Origin& origin = inlined->origins[static_cast<std::size_t>(hazard.value)];
      if (origin.value < 0 || !seen.emplace(origin.region_path, origin.value).second) continue;
      hazards.push_back({origin.value, std::move(hazard.reason), origin.region_path});
    }
    return hazards;
  } catch (const Error&) {
    return {};
  }
}

bool loops_end(const FuzzCase& fuzz_case) {
  try {
    return !has_control_flow(fuzz_case.graph) || inline_regions(fuzz_case).has_value();
  } catch (const Error&) {
    return true;  // (not for want of steps)
  }
}

std::string describe_place(const Hazard& hazard) {
  if (hazard.value < 0) return "(no value)";
  std::string text = "%" + std::to_string(hazard.value);
  for (std::size_t step = hazard.region_path.size(); step >= 2; step -= 2)
    text += " in region " + std::to_string(hazard.region_path[step - 1]) + " of %" +
            std::to_string(hazard.region_path[step - 2]);
  return text;
}

int remove_hazards(FuzzCase& fuzz_case, RandomSource& random) {
  int replaced = 0;
  for (int round = 0; round < 32; ++round) {
    std::vector<Hazard> hazards = find_hazards(fuzz_case);
    std::vector<Replacement> replacements;
    for (const Hazard& hazard : hazards) {
      if (hazard.value < 0) continue;  // nothing to replace
      const ir::Graph* holder = &fuzz_case.graph;
      for (std::size_t step = 0; step + 1 < hazard.region_path.size(); step += 2)
        holder = &holder->node(static_cast<ir::ValueId>(hazard.region_path[step]))
                      .regions[static_cast<std::size_t>(hazard.region_path[step + 1])];
      replacements.push_back({hazard.region_path, hazard.value, random_input(holder->type(hazard.value), random)});
    }
    if (replacements.empty()) break;
    fuzz_case = replace_with_parameters(fuzz_case, replacements);
    replaced += static_cast<int>(replacements.size());
  }
  return replaced;
}

}  // namespace kiln::fuzz
