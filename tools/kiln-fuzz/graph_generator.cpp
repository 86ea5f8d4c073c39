#include "graph_generator.h"

#include "hazards.h"
#include "ir/type_rules.h"
#include "ir/verifier.h"

#include <kiln/error.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string_view>

namespace kiln::fuzz {
namespace {

using ir::Op;
using ir::ValueId;

// A construction that did not work out (no suitable operand, a type rule
// said no, a value too large); the builder tries another op.
struct Rejected {};

std::vector<Op> generated_ops() {
  std::vector<Op> ops;
  for (int i = 0; i < ir::op_count; ++i) {
    auto op = static_cast<Op>(i);
    // Control nodes come from the control-flow motifs, at their own rate: each region is a JIT compile of its own.
    if (op == Op::parameter || ir::info(op).category == ir::OpCategory::host || ir::is_control(op)) continue;
    ops.push_back(op);
  }
  return ops;
}

class Builder {
 public:
  Builder(RandomSource& random, const GeneratorOptions& options, GeneratorStatistics* statistics)
      : random_(random), options_(options), statistics_(statistics) {
    top_.graph = &case_.graph;
  }

  FuzzCase build() {
    static const std::vector<Op> ops = generated_ops();
    // One graph in ten has large values (long rows, vector loops with
    // remainders, parallel chunks).
    large_ = random_.chance(0.1);
    max_elements_ = large_ ? options_.max_elements * 32 : options_.max_elements;
    int target = static_cast<int>(random_.between(1, std::max(1, options_.max_nodes)));
    int computed = 0;
    // Motifs that random ops almost never form, each in one graph in twenty.
    for (const auto& [name, motif] : {std::pair{"(attention motif)", &Builder::build_attention_motif},
                                      std::pair{"(epilogue motif)", &Builder::build_epilogue_motif},
                                      std::pair{"(dense motif)", &Builder::build_dense_motif},
                                      std::pair{"(column motif)", &Builder::build_column_motif},
                                      std::pair{"(layers motif)", &Builder::build_layers_motif},
                                      std::pair{"(convolution motif)", &Builder::build_convolution_motif}}) {
      if (!random_.chance(0.05)) continue;
      try {
        last_ = (this->*motif)();
        ++computed;
        if (statistics_) statistics_->ops[name] += 1;
      } catch (const Rejected&) {
        if (statistics_) statistics_->rejected += 1;
      }
    }
    // Control flow, each kind in one graph in 50 (each region is a JIT compile of its own: 6% of graphs with
    // control flow make kiln-fuzz about a fifth slower), built among the random ops (whose values its operands
    // may be).
    std::vector<std::pair<std::int64_t, Motif>> control;
    if (options_.control_flow)
      for (Motif motif : control_motifs())
        if (random_.chance(0.02) && (options_.while_loops || motif != &Builder::build_while_motif))
          control.emplace_back(random_.between(0, target - 1), motif);
    std::stable_sort(control.begin(), control.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::size_t next_control = 0;
    auto build_control = [&] {
      try {
        last_ = (this->*control[next_control].second)();
        ++computed;
      } catch (const Rejected&) {
        if (statistics_) statistics_->rejected += 1;
      }
      ++next_control;
    };
    for (int attempt = 0; computed < target && attempt < 20 * target; ++attempt) {
      if (next_control < control.size() && control[next_control].first <= computed) {
        build_control();
        continue;
      }
      Op op = random_.pick(ops);
      try {
        ValueId id = build_op(op);
        last_ = id;
        ++computed;
        if (statistics_) statistics_->ops[std::string(ir::name(op))] += 1;
      } catch (const Rejected&) {
        if (statistics_) statistics_->rejected += 1;
      }
    }
    while (next_control < control.size()) build_control();
    if (last_ < 0) last_ = any_value();
    // Outputs: every computed value nothing uses (so that no op built is
    // lost), the newest first; sometimes also an inner value, a source or a
    // repeat.
    ir::Graph& graph = case_.graph;
    std::vector<int> uses = graph.use_counts();
    graph.outputs.push_back(last_);
    for (ValueId id = graph.size() - 1; id >= 0; --id)
      if (id != last_ && uses[static_cast<std::size_t>(id)] == 0 &&
          ir::info(graph.node(id).op).category != ir::OpCategory::source)
        graph.outputs.push_back(id);
    if (random_.chance(0.2)) graph.outputs.push_back(random_.pick(top_.pool));
    if (random_.chance(0.05)) graph.outputs.push_back(last_);
    prune(case_);
    ir::verify(case_.graph);
    return std::move(case_);
  }

 private:
  // The outer values that a control node's regions capture, in order: every region of the node takes one
  // parameter per capture after its others (graph.h), so the regions, built one after another, share the list.
  struct Captures {
    std::vector<ValueId> values;  // in the graph around the control node
    std::vector<ir::Type> types;
  };

  // Where nodes go: the case's graph, or a region being built, whose new parameters capture values of the scope
  // around it.
  struct Scope {
    ir::Graph* graph = nullptr;
    std::vector<ValueId> pool;                // the values operands are drawn from
    Scope* outer = nullptr;                   // null for the case's graph
    Captures* captures = nullptr;             // regions: the control node's
    std::vector<ValueId> capture_parameters;  // regions: this region's parameter for each capture taken so far
    int depth = 0;                            // the control nodes around
    ValueId last = -1;                        // regions: the newest random op's value
  };

  // Builds in `scope` while it lives.
  class InScope {
   public:
    InScope(Builder& builder, Scope& scope) : builder_(builder), saved_(builder.scope_) { builder.scope_ = &scope; }
    ~InScope() { builder_.scope_ = saved_; }
    InScope(const InScope&) = delete;
    InScope& operator=(const InScope&) = delete;

   private:
    Builder& builder_;
    Scope* saved_;
  };

  ir::Graph& graph() { return *scope_->graph; }
  const ir::Type& type(ValueId value) { return scope_->graph->type(value); }
  std::vector<ValueId>& pool() { return scope_->pool; }
  void count_node(std::string_view name) {
    if (statistics_) statistics_->ops[std::string(name)] += 1;
  }

  // ---- Adding nodes ----

  ValueId add(Op op, std::vector<ValueId> operands, ir::Attributes attributes = {}, ir::Type declared = {}) {
    std::vector<ir::Type> operand_types;
    for (ValueId operand : operands) operand_types.push_back(type(operand));
    ir::Type result;
    try {
      result = ir::infer_type(op, attributes, operand_types, declared, std::string());
    } catch (const Error&) {
      throw Rejected{};
    }
    if (result.shape.numel() > max_elements_) throw Rejected{};
    if (op == Op::matmul) {
      const ir::Type& a = operand_types[0];
      std::int64_t depth = attributes.transpose_a ? a.shape[a.shape.rank() - 2] : a.shape[a.shape.rank() - 1];
      if (result.shape.numel() * depth > 200000) throw Rejected{};
    }
    ir::Node node;
    node.op = op;
    node.type = result;
    node.operands = std::move(operands);
    node.attributes = std::move(attributes);
    ValueId id = graph().add(std::move(node));
    pool().push_back(id);
    return id;
  }

  // A new parameter of the case; in a region, captured (through every region around).
  ValueId add_parameter(const ir::Type& type) {
    if (type.shape.numel() > max_elements_) throw Rejected{};
    if (scope_->outer) {
      ValueId outer;
      {
        InScope around(*this, *scope_->outer);
        outer = add_parameter(type);
      }
      return capture(outer);
    }
    ValueId id = graph().add_parameter(type);
    case_.inputs.push_back(random_input(type, random_));
    pool().push_back(id);
    return id;
  }

  ValueId add_constant(const ir::Type& type) { return add(Op::constant, {}, constant_value(type), type); }

  // A random value for a constant of `type`: mostly ordinary, sometimes zeros of either sign, infinities, NaN,
  // denormals and the integer extremes.
  ir::Attributes constant_value(const ir::Type& type) {
    ir::Attributes attributes;
    if (is_floating(type.dtype)) {
      bool f32 = type.dtype == DType::f32;
      const double infinity = std::numeric_limits<double>::infinity();
      switch (random_.weighted({5, 3, 1, 0.5, 0.3})) {
        case 0:
          attributes.float_value = std::round(random_.normal() * 1000) / 256;
          break;
        case 1:
          attributes.float_value = random_.pick(std::vector<double>{1, -1, 2, 0.5, -2.5, 3, 0.1, 100});
          break;
        case 2:
          attributes.float_value = random_.chance(0.5) ? 0.0 : -0.0;
          break;
        case 3:
          attributes.float_value = random_.pick(std::vector<double>{infinity, -infinity, std::nan("")});
          break;
        default:
          if (type.dtype == DType::f16)  // a subnormal, near the largest finite 65504
            attributes.float_value = random_.pick(std::vector<double>{3e-7, -3e-7, 6e4, 65504});
          else if (f32 || type.dtype == DType::bf16)  // bf16 has f32's range
            attributes.float_value = random_.pick(std::vector<double>{1e-40, -1e-40, 1e30, 3e38});
          else
            attributes.float_value = random_.pick(std::vector<double>{5e-324, -5e-324, 1e300, 1.7e308});
      }
    } else if (type.dtype == DType::boolean) {
      attributes.int_value = random_.chance(0.5) ? 1 : 0;
    } else {
      bool i32 = type.dtype == DType::i32;
      switch (random_.weighted({5, 1, 1, 0.5})) {
        case 0:
          attributes.int_value = random_.nonzero(9);
          break;
        case 1:
          attributes.int_value = 0;
          break;
        case 2:
          attributes.int_value = random_.chance(0.5) ? 1 : -1;
          break;
        default:
          attributes.int_value =
              random_.chance(0.5)
                  ? (i32 ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<std::int64_t>::max())
                  : (i32 ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<std::int64_t>::min());
      }
    }
    return attributes;
  }

  ValueId add_iota(ir::Type type) {
    if (type.dtype == DType::boolean) type.dtype = DType::i32;
    if (type.shape.rank() == 0) type.shape = Shape({random_.between(1, 7)});
    ir::Attributes attributes;
    attributes.axis = random_.below(type.shape.rank());
    return add(Op::iota, {}, attributes, type);
  }

  // A new parameter (mostly), constant or iota of `type`.
  ValueId fresh_source(const ir::Type& type) {
    std::size_t kind = random_.weighted({7, 2, type.dtype != DType::boolean && type.shape.rank() >= 1 ? 1.0 : 0.0});
    if (kind == 0) return add_parameter(type);
    if (kind == 1) return add_constant(type);
    return add_iota(type);
  }

  // ---- Random types ----

  std::int64_t random_dim() {
    switch (random_.weighted({2, 4, 3, 1.5, 0.3, large_ ? 1.5 : 0.0})) {
      case 0:
        return 1;
      case 1:
        return random_.between(2, 5);
      case 2:
        return random_.between(6, 9);
      case 3:
        return random_.pick(std::vector<std::int64_t>{13, 16, 17, 31, 33, 64});
      case 4:
        return 0;
      default:
        return random_.pick(std::vector<std::int64_t>{100, 127, 257, 1000, 4099});
    }
  }

  Shape random_shape(int max_rank = 4) {
    int rank = static_cast<int>(random_.weighted({1, 3, 4, 2, 1}));
    rank = std::min(rank, max_rank);
    std::vector<std::int64_t> dims;
    for (int axis = 0; axis < rank; ++axis) dims.push_back(random_dim());
    return limit(Shape(dims));
  }

  // `shape` with its largest dims halved until it fits a quarter of the
  // element budget (room for broadcasting it up).
  Shape limit(Shape shape) {
    while (shape.numel() > max_elements_ / 4) {
      int largest = 0;
      for (int axis = 1; axis < shape.rank(); ++axis)
        if (shape[axis] > shape[largest]) largest = axis;
      shape[largest] = (shape[largest] + 1) / 2;
    }
    return shape;
  }

  // bf16 and f16 (with half_precision) as often as f64.
  DType random_dtype() {
    static const std::vector<DType> dtypes = {DType::f32,     DType::f64,  DType::i32, DType::i64,
                                              DType::boolean, DType::bf16, DType::f16};
    const double half = options_.half_precision ? 1 : 0;
    return dtypes[random_.weighted({5, 2, 2, 1, 1.5, half, half})];
  }
  DType random_numeric_dtype() {
    static const std::vector<DType> dtypes = {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16, DType::f16};
    const double half = options_.half_precision ? 1 : 0;
    return dtypes[random_.weighted({5, 2, 2, 1, half, half})];
  }
  DType random_float_dtype() {
    if (options_.half_precision && random_.chance(0.3)) return random_.chance(0.5) ? DType::bf16 : DType::f16;
    return random_.chance(0.7) ? DType::f32 : DType::f64;
  }

  // ---- Choosing operands ----

  // A pool value satisfying `wanted`: often the newest (to grow chains), else
  // any.
  std::optional<ValueId> pick(const std::function<bool(const ir::Type&)>& wanted) {
    std::vector<ValueId> candidates;
    for (ValueId value : pool())
      if (wanted(type(value))) candidates.push_back(value);
    if (candidates.empty()) return std::nullopt;
    if (random_.chance(0.4)) return candidates.back();
    return random_.pick(candidates);
  }

  ValueId any_value() {
    if (auto value = pick([](const ir::Type&) { return true; }); value && random_.chance(0.85)) return *value;
    return fresh_source({random_dtype(), random_shape()});
  }

  ValueId convert(ValueId value, DType dtype) {
    if (type(value).dtype == dtype) return value;
    return add(Op::cast, {value}, {}, {dtype, type(value).shape});
  }

  ValueId numeric_value() {
    auto numeric = [](const ir::Type& t) { return t.dtype != DType::boolean; };
    if (auto value = pick(numeric); value && random_.chance(0.85)) return *value;
    if (random_.chance(0.5)) return convert(any_value(), random_numeric_dtype());
    return fresh_source({random_numeric_dtype(), random_shape()});
  }

  ValueId integer_value() {
    auto integer = [](const ir::Type& t) { return t.dtype == DType::i32 || t.dtype == DType::i64; };
    if (auto value = pick(integer); value && random_.chance(0.8)) return *value;
    const DType dtype = random_.chance(0.6) ? DType::i32 : DType::i64;
    if (random_.chance(0.5)) return convert(any_value(), dtype);
    return fresh_source({dtype, random_shape()});
  }

  ValueId float_value() {
    auto floating = [](const ir::Type& t) { return is_floating(t.dtype); };
    if (auto value = pick(floating); value && random_.chance(0.8)) return *value;
    if (random_.chance(0.6)) return convert(any_value(), random_float_dtype());
    return fresh_source({random_float_dtype(), random_shape()});
  }

  ValueId bool_value() {
    auto boolean = [](const ir::Type& t) { return t.dtype == DType::boolean; };
    if (auto value = pick(boolean); value && random_.chance(0.7)) return *value;
    switch (random_.weighted({2, 3, 1})) {
      case 0:
        return fresh_source({DType::boolean, random_shape()});
      case 1: {
        ValueId a = any_value();
        ValueId b = partner(a);
        static const std::vector<Op> comparisons = {Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge};
        return add(random_.pick(comparisons), {a, b});
      }
      default:
        return convert(any_value(), DType::boolean);
    }
  }

  // A shape that broadcasts with `shape`: the same, fewer leading axes, some
  // axes 1, more leading axes, or its size-1 axes grown.
  Shape broadcast_partner(const Shape& shape) {
    std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
    switch (random_.weighted({3, 2, 2, 1, 1})) {
      case 0:
        break;
      case 1:
        dims.erase(dims.begin(), dims.begin() + random_.between(0, static_cast<std::int64_t>(dims.size())));
        break;
      case 2:
        for (auto& dim : dims)
          if (random_.chance(0.5)) dim = 1;
        break;
      case 3:
        for (std::int64_t extra = random_.between(1, 2); extra > 0 && dims.size() < 5; --extra)
          dims.insert(dims.begin(), random_.between(1, 4));
        break;
      default:
        for (auto& dim : dims)
          if (dim == 1 && random_.chance(0.7)) dim = random_.between(2, 5);
    }
    return limit(Shape(dims));
  }

  // A second operand for a binary op on `a`: a itself, a pool value of its
  // dtype whose shape broadcasts with it, or a new source.
  ValueId partner(ValueId a) {
    ir::Type wanted = type(a);
    if (random_.chance(0.1)) return a;
    if (random_.chance(0.5)) {
      auto compatible = [&](const ir::Type& t) {
        Shape result;
        return t.dtype == wanted.dtype && ir::broadcast_shapes(t.shape, wanted.shape, &result);
      };
      if (auto value = pick(compatible)) return *value;
    }
    return fresh_source({wanted.dtype, broadcast_partner(wanted.shape)});
  }

  std::vector<ValueId> maybe_swapped(ValueId a, ValueId b) {
    if (random_.chance(0.5)) return {b, a};
    return {a, b};
  }

  // ---- Ops ----

  ValueId build_op(Op op) {
    switch (op) {
      case Op::constant:
        return add_constant({random_dtype(), random_shape()});
      case Op::iota:
        return add_iota({random_numeric_dtype(), random_shape()});
      case Op::neg:
      case Op::abs:
      case Op::sign:
      case Op::square:
      case Op::relu:
      case Op::floor:
      case Op::ceil:
      case Op::round:
        return add(op, {numeric_value()});
      case Op::log:
      case Op::log1p:
      case Op::sqrt:
      case Op::rsqrt: {
        ValueId x = float_value();
        if (random_.chance(0.5)) x = add(Op::abs, {x});
        return add(op, {x});
      }
      case Op::sin:
      case Op::cos:
      case Op::exp:
      case Op::tanh:
      case Op::sigmoid:
      case Op::erf:
      case Op::erfc:
      case Op::expm1:
      case Op::atan:
        return add(op, {float_value()});
      case Op::logical_not:
        return add(op, {bool_value()});
      case Op::bitwise_not:
        return add(op, {random_.chance(0.3) ? bool_value() : integer_value()});
      case Op::bitwise_and:
      case Op::bitwise_or:
      case Op::bitwise_xor: {
        ValueId a = random_.chance(0.3) ? bool_value() : integer_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::left_shift:
      case Op::right_shift: {  // counts outside [0, bits) included: they are defined
        ValueId a = integer_value();
        return add(op, {a, partner(a)});
      }
      case Op::random_bits: {  // any key and counters: every i64 pair has its bits
        ValueId key = convert(integer_value(), DType::i64);
        return add(op, maybe_swapped(key, partner(key)));
      }
      case Op::cast: {
        ValueId x = any_value();
        return add(op, {x}, {}, {random_dtype(), type(x).shape});
      }
      case Op::add:
      case Op::sub:
      case Op::mul: {
        ValueId a = numeric_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::pow: {
        ValueId base = numeric_value();
        ValueId exponent = partner(base);
        if (random_.chance(0.5)) base = add(Op::abs, {base});
        return add(op, {base, exponent});
      }
      case Op::div:
      case Op::copysign: {
        ValueId a = float_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::floor_divide:
      case Op::remainder:
      case Op::fmod: {  // integer divisors of 0 included: they give 0
        ValueId a = numeric_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::maximum:
      case Op::minimum:
      case Op::eq:
      case Op::ne:
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge: {
        ValueId a = any_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::logical_and:
      case Op::logical_or: {
        ValueId a = bool_value();
        return add(op, maybe_swapped(a, partner(a)));
      }
      case Op::where:
        return build_where();
      case Op::reduce_sum:
      case Op::reduce_prod:
        return build_reduction(op, numeric_value());
      case Op::reduce_mean:
        return build_reduction(op, float_value());
      case Op::reduce_max:
      case Op::reduce_min:
        return build_reduction(op, any_value());
      case Op::argmax:
      case Op::argmin:
        return build_arg_reduction(op);
      case Op::cumsum:
      case Op::cumprod:
        return build_scan(op, numeric_value());
      case Op::cummax:
      case Op::cummin:
        return build_scan(op, any_value());
      case Op::sort:
      case Op::argsort:
        return build_ordering(op);
      case Op::top_k:
        return build_top_k();
      case Op::matmul:
        return build_matmul();
      case Op::reshape:
        return build_reshape();
      case Op::transpose:
        return build_transpose();
      case Op::broadcast_to:
        return build_broadcast_to();
      case Op::slice:
        return build_slice();
      case Op::concat:
        return build_concat();
      case Op::gather:
        return build_gather();
      case Op::take_along_axis:
        return build_take_along_axis();
      case Op::scatter_add:
        return build_scatter_add();
      case Op::expand_dims: {
        ValueId x = any_value();
        if (type(x).shape.rank() > 5) throw Rejected{};
        ir::Attributes attributes;
        attributes.axis = random_.between(0, type(x).shape.rank());
        return add(op, {x}, attributes);
      }
      case Op::squeeze:
        return build_squeeze();
      case Op::parameter:
      case Op::host_call:
      case Op::nonzero:
      // Control flow needs regions: the control-flow motifs build it.
      case Op::cond:
      case Op::while_loop:
      case Op::scan_loop:
      case Op::result:
        break;
    }
    throw Rejected{};
  }

  ValueId build_where() {
    ValueId x = any_value();
    ValueId y = partner(x);
    Shape both;
    if (!ir::broadcast_shapes(type(x).shape, type(y).shape, &both)) throw Rejected{};
    ValueId condition;
    switch (random_.weighted({2, 2, 1})) {
      case 0:
        condition = fresh_source({DType::boolean, broadcast_partner(both)});
        break;
      case 1: {
        static const std::vector<Op> comparisons = {Op::lt, Op::le, Op::gt, Op::ge, Op::eq, Op::ne};
        condition = add(random_.pick(comparisons), {x, y});
        break;
      }
      default: {
        auto compatible = [&](const ir::Type& t) {
          Shape result;
          return t.dtype == DType::boolean && ir::broadcast_shapes(t.shape, both, &result);
        };
        auto found = pick(compatible);
        condition = found ? *found : fresh_source({DType::boolean, broadcast_partner(both)});
      }
    }
    return add(Op::where, {condition, x, y});
  }

  std::vector<std::int64_t> random_axes(int rank) {
    std::vector<std::int64_t> axes;
    std::size_t style = random_.weighted({4, 2, 0.5});
    for (int axis = 0; axis < rank; ++axis)
      if (style == 1 || (style == 0 && random_.chance(0.5))) axes.push_back(axis);
    return axes;
  }

  ValueId build_reduction(Op op, ValueId x) {
    ir::Attributes attributes;
    attributes.axes = random_axes(type(x).shape.rank());
    attributes.keepdims = random_.chance(0.4);
    return add(op, {x}, attributes);
  }

  ValueId build_arg_reduction(Op op) {
    ValueId x = any_value();
    const Shape& shape = type(x).shape;
    std::vector<std::int64_t> axes;
    for (int axis = 0; axis < shape.rank(); ++axis)
      if (shape[axis] > 0) axes.push_back(axis);
    if (axes.empty()) throw Rejected{};
    ir::Attributes attributes;
    attributes.axis = random_.pick(axes);
    attributes.keepdims = random_.chance(0.4);
    return add(op, {x}, attributes);
  }

  ValueId build_scan(Op op, ValueId x) {
    const int rank = type(x).shape.rank();
    if (rank == 0) throw Rejected{};
    ir::Attributes attributes;
    attributes.axis = random_.between(0, rank - 1);
    attributes.exclusive = random_.chance(0.3);
    attributes.reverse = random_.chance(0.3);
    return add(op, {x}, attributes);
  }

  // Any dtype and axis, ascending or descending. Ties (integers, bools, repeated values) are ordered by index on
  // every executor; near ties of inexact floats, which rounding could swap, are hazards (hazards.h).
  ValueId build_ordering(Op op) {
    ValueId x = any_value();
    const int rank = type(x).shape.rank();
    if (rank == 0) throw Rejected{};
    ir::Attributes attributes;
    attributes.axis = random_.below(rank);
    attributes.descending = random_.chance(0.5);
    return add(op, {x}, attributes);
  }

  // top_k's indices, k from 0 to the whole last axis (mostly small), and often its values as the api layer picks
  // them (take_along_axis).
  ValueId build_top_k() {
    ValueId x = any_value();
    const int rank = type(x).shape.rank();  // not a reference into the nodes: add() may move them
    if (rank == 0) throw Rejected{};
    const std::int64_t size = type(x).shape[rank - 1];
    ir::Attributes attributes;
    attributes.k = random_.chance(0.7) ? std::min<std::int64_t>(size, random_.between(0, 3)) : random_.between(0, size);
    ValueId indices = add(Op::top_k, {x}, attributes);
    if (random_.chance(0.5)) return indices;
    ir::Attributes along;
    along.axis = rank - 1;
    return add(Op::take_along_axis, {x, indices}, along);
  }

  // Indices from a fresh source (a parameter holds integers in [-9, 9], sometimes [-999, 999]) clamped to
  // [-n, n - 1]: in range whatever the source holds, negative ones included. An empty axis takes no index.
  ValueId build_gather() {
    const IndexedAxis picked = indexed_axis();
    const int index_rank = std::min(2, Shape::max_rank + 1 - type(picked.source).shape.rank());
    return add(Op::gather, {picked.source, indices_within({picked.index_dtype, random_shape(index_rank)}, picked.size)},
               picked.attributes);
  }

  // A value of rank >= 1 with a random nonempty axis to index, and a random index dtype.
  struct IndexedAxis {
    ValueId source;
    ir::Attributes attributes;  // axis
    std::int64_t size;
    DType index_dtype;
  };
  IndexedAxis indexed_axis() {
    IndexedAxis picked;
    picked.source = any_value();
    const Shape& shape = type(picked.source).shape;
    if (shape.rank() == 0) throw Rejected{};
    picked.attributes.axis = random_.below(shape.rank());
    picked.size = shape[static_cast<int>(picked.attributes.axis)];
    if (picked.size <= 0) throw Rejected{};
    picked.index_dtype = random_.chance(0.5) ? DType::i32 : DType::i64;
    return picked;
  }

  // Indices of the values' shape but on the axis (1 to 5 there), clamped to [-n, n - 1] as for gather.
  ValueId build_take_along_axis() {
    const IndexedAxis picked = indexed_axis();
    Shape index_shape = type(picked.source).shape;
    index_shape[static_cast<int>(picked.attributes.axis)] = random_.between(1, 5);
    return add(Op::take_along_axis, {picked.source, indices_within({picked.index_dtype, index_shape}, picked.size)},
               picked.attributes);
  }

  // Updates from a fresh source of gather's result shape added at indices as gather's: rows named twice (a short
  // axis, or many indices) are summed.
  ValueId build_scatter_add() {
    const IndexedAxis picked = indexed_axis();
    const ir::Type operand = type(picked.source);  // a copy: adding the indices may move the graph's types
    if (operand.dtype == DType::boolean) throw Rejected{};
    const int index_rank = std::min(2, Shape::max_rank + 1 - operand.shape.rank());
    const ValueId indices = indices_within({picked.index_dtype, random_shape(index_rank)}, picked.size);
    const auto axis = static_cast<std::size_t>(picked.attributes.axis);
    std::vector<std::int64_t> dims(operand.shape.dims().begin(), operand.shape.dims().begin() + axis);
    for (std::int64_t dim : type(indices).shape.dims()) dims.push_back(dim);
    dims.insert(dims.end(), operand.shape.dims().begin() + axis + 1, operand.shape.dims().end());
    const ValueId updates = fresh_source({operand.dtype, Shape(dims)});
    return add(Op::scatter_add, {picked.source, indices, updates}, picked.attributes);
  }

  // A fresh integer source of `type` clamped to [-size, size - 1]: in range whatever the source holds.
  ValueId indices_within(const ir::Type& type, std::int64_t size) {
    ValueId indices = fresh_source(type);
    indices = add(Op::maximum, {indices, integer_constant(type.dtype, -size)});
    return add(Op::minimum, {indices, integer_constant(type.dtype, size - 1)});
  }

  ValueId integer_constant(DType dtype, std::int64_t value) {
    ir::Attributes attributes;
    attributes.int_value = value;
    return add(Op::constant, {}, attributes, {dtype, Shape()});
  }

  std::int64_t matrix_dim() {
    switch (random_.weighted({6, 2, 0.5})) {
      case 0:
        return random_.between(1, 9);
      case 1:
        return random_.pick(std::vector<std::int64_t>{13, 16, 17, 31, 33});
      default:
        return 0;
    }
  }

  ValueId build_matmul() {
    auto matrix = [](const ir::Type& t) { return t.dtype != DType::boolean && t.shape.rank() >= 2; };
    std::optional<ValueId> found = pick(matrix);
    ValueId a;
    if (found && random_.chance(0.7)) {
      a = *found;
    } else {
      std::vector<std::int64_t> dims;
      for (std::int64_t batch = random_.weighted({6, 2, 1}); batch > 0; --batch) dims.push_back(random_.between(1, 3));
      dims.push_back(matrix_dim());
      dims.push_back(matrix_dim());
      a = fresh_source({random_numeric_dtype(), Shape(dims)});
    }
    const ir::Type a_type = type(a);  // a copy: adding nodes moves the graph's storage
    int rank = a_type.shape.rank();
    ir::Attributes attributes;
    attributes.transpose_a = random_.chance(0.3);
    attributes.transpose_b = random_.chance(0.3);
    std::int64_t depth = attributes.transpose_a ? a_type.shape[rank - 2] : a_type.shape[rank - 1];
    std::int64_t columns = matrix_dim();
    Shape batch = broadcast_partner(Shape(a_type.shape.dims().first(static_cast<std::size_t>(rank - 2))));
    std::vector<std::int64_t> dims(batch.dims().begin(), batch.dims().end());
    if (dims.size() > 2) dims.erase(dims.begin(), dims.end() - 2);
    dims.push_back(attributes.transpose_b ? columns : depth);
    dims.push_back(attributes.transpose_b ? depth : columns);
    ir::Type b_type{a_type.dtype, Shape(dims)};
    auto same = [&](const ir::Type& t) { return t == b_type; };
    std::optional<ValueId> existing = pick(same);
    ValueId b = existing ? *existing : fresh_source(b_type);
    if (random_.chance(0.2) && b_type.shape.rank() == rank && !attributes.transpose_a && !attributes.transpose_b &&
        type(b).shape[rank - 1] == type(a).shape[rank - 2])
      return add(Op::matmul, {b, a}, attributes);  // the pool value on the right
    return add(Op::matmul, {a, b}, attributes);
  }

  // matmul -> row-wise ops -> matmul, the pattern of the attention fusion (compiler/fusion_attention.cpp),
  // which random ops almost never form: softmax(Q K^T), with a scale and a mask or not, a layer norm, or
  // another row normalization, between the products; operands transposed or not, batched or shared. In f32, or
  // with half_precision half the time in bf16 (the row function in f32 between casts, as bf16 softmax traces).
  ValueId build_attention_motif() {
    const DType dtype = options_.half_precision && random_.chance(0.5) ? DType::bf16 : DType::f32;
    std::vector<std::int64_t> batch;
    for (std::int64_t axes = static_cast<std::int64_t>(random_.weighted({3, 2, 1})); axes > 0; --axes)
      batch.push_back(random_.between(1, 3));
    const std::int64_t m = matrix_dim(), n = matrix_dim(), k = matrix_dim(), d = matrix_dim();
    // op(X) is rows x columns; stored transposed when `transposed`; without batch axes sometimes.
    auto operand = [&](std::int64_t rows, std::int64_t columns, bool transposed, bool may_share) {
      std::vector<std::int64_t> dims;
      if (!may_share || random_.chance(0.8)) dims = batch;
      dims.push_back(transposed ? columns : rows);
      dims.push_back(transposed ? rows : columns);
      return add_parameter({dtype, Shape(dims)});
    };
    ir::Attributes first, second;
    first.transpose_a = random_.chance(0.2);
    first.transpose_b = random_.chance(0.7);
    second.transpose_b = random_.chance(0.2);
    const ValueId queries = operand(m, k, first.transpose_a, false);
    const ValueId keys = operand(k, n, first.transpose_b, true);
    const ValueId values = operand(n, d, second.transpose_b, true);
    const ValueId scores = add(Op::matmul, {queries, keys}, first);
    const ValueId probabilities = convert(row_normalization(convert(scores, DType::f32)), dtype);
    return add(Op::matmul, {probabilities, values}, second);
  }

  // An f32 matrix product and a chain of consumers of its shape: the GEMM
  // epilogue's fusion (compiler/fusion.cpp). Half the products are square, so
  // that a transpose or a slice reversing an axis keeps the product's shape:
  // such consumers move elements and must stay out of the epilogue, which
  // reads the element it computes (kiln-fuzz met this once in ~20,000 random
  // graphs, in seed 62 of the CUDA emulation). A second product added to the
  // first must not join its epilogue either.
  ValueId build_epilogue_motif() {
    const std::int64_t m = matrix_dim(), k = matrix_dim(), n = random_.chance(0.5) ? m : matrix_dim();
    ir::Attributes flags;
    flags.transpose_a = random_.chance(0.3);
    flags.transpose_b = random_.chance(0.3);
    const ValueId a = add_parameter({DType::f32, flags.transpose_a ? Shape({k, m}) : Shape({m, k})});
    const ValueId b = add_parameter({DType::f32, flags.transpose_b ? Shape({n, k}) : Shape({k, n})});
    ValueId value = add(Op::matmul, {a, b}, flags);
    for (std::int64_t step = random_.between(1, 4); step > 0; --step) {
      const Shape shape = type(value).shape;  // a copy: adding nodes moves the graph's storage
      switch (random_.weighted({3, 2, 2, 1, 1})) {
        case 0: {  // elementwise, with a bias along the rows, the columns or everywhere
          const Shape bias = random_.pick(std::vector<Shape>{Shape({shape[1]}), Shape({shape[0], 1}), shape});
          value = add(random_.pick(std::vector<Op>{Op::add, Op::mul, Op::maximum}),
                      {value, add_parameter({DType::f32, bias})});
          value = add(random_.pick(std::vector<Op>{Op::relu, Op::tanh, Op::neg, Op::exp}), {value});
          break;
        }
        case 1: {
          ir::Attributes swap;
          swap.axes = {1, 0};
          value = add(Op::transpose, {value}, swap);
          break;
        }
        case 2: {  // every element, one axis or both reversed
          ir::Attributes reversed;
          const bool rows = random_.chance(0.6), columns = !rows || random_.chance(0.3);
          reversed.start = {rows ? std::max<std::int64_t>(shape[0] - 1, 0) : 0,
                            columns ? std::max<std::int64_t>(shape[1] - 1, 0) : 0};
          reversed.step = {rows ? -1 : 1, columns ? -1 : 1};
          value = add(Op::slice, {value}, reversed, {DType::f32, shape});
          break;
        }
        case 3: {  // plus another product of the same shape (x w + h u): one product per epilogue
          const std::int64_t depth = matrix_dim();
          const ValueId left = add_parameter({DType::f32, Shape({shape[0], depth})});
          const ValueId right = add_parameter({DType::f32, Shape({depth, shape[1]})});
          value = add(Op::add, {value, add(Op::matmul, {left, right}, ir::Attributes{})});
          break;
        }
        default: {  // a reduction of the whole epilogue, or over its rows
          ir::Attributes reduced;
          reduced.axes = random_.chance(0.5) ? std::vector<std::int64_t>{0, 1} : std::vector<std::int64_t>{1};
          reduced.keepdims = random_.chance(0.5);
          return add(random_.pick(std::vector<Op>{Op::reduce_sum, Op::reduce_max}), {value}, reduced);
        }
      }
    }
    return value;
  }

  // A dense layer on a batch of rows: x [batch..., m, k] times w [k, n] (or its transpose), one gemm kernel whose
  // rows are all of x's leading axes (is_generated_gemm), then an epilogue reading operands broadcast along any
  // of them (a bias, a per-batch scale, a position table), a leading axis reversed (a slice, which moves rows),
  // and a reduction of the whole or of the last axis.
  ValueId build_dense_motif() {
    std::vector<std::int64_t> dims;
    for (std::int64_t axes = static_cast<std::int64_t>(random_.weighted({0, 3, 1})); axes > 0; --axes)
      dims.push_back(random_.chance(0.1) ? 1 : random_.between(1, 4));
    const std::int64_t m = matrix_dim(), k = matrix_dim(), n = matrix_dim();
    dims.push_back(m);
    dims.push_back(k);
    ir::Attributes flags;
    flags.transpose_b = random_.chance(0.3);
    const ValueId x = add_parameter({DType::f32, Shape(dims)});
    ValueId value =
        add(Op::matmul, {x, add_parameter({DType::f32, flags.transpose_b ? Shape({n, k}) : Shape({k, n})})}, flags);
    for (std::int64_t step = random_.between(1, 3); step > 0; --step) {
      const Shape shape = type(value).shape;  // a copy: adding nodes moves the graph's storage
      const int rank = shape.rank();
      switch (random_.weighted({4, 1, 1})) {
        case 0: {  // an operand broadcast along some of the axes, then an activation
          std::vector<std::int64_t> operand(shape.dims().begin(), shape.dims().end());
          for (std::int64_t& dim : operand)
            if (random_.chance(0.5)) dim = 1;
          if (random_.chance(0.3)) operand.erase(operand.begin(), operand.begin() + random_.between(1, rank - 1));
          value = add(random_.pick(std::vector<Op>{Op::add, Op::mul, Op::sub}),
                      {value, add_parameter({DType::f32, Shape(operand)})});
          value = add(random_.pick(std::vector<Op>{Op::relu, Op::tanh, Op::sigmoid, Op::exp}), {value});
          break;
        }
        case 1: {  // a leading axis reversed
          ir::Attributes reversed;
          const int axis = static_cast<int>(random_.below(rank - 1));
          reversed.start.assign(static_cast<std::size_t>(rank), 0);
          reversed.step.assign(static_cast<std::size_t>(rank), 1);
          reversed.start[static_cast<std::size_t>(axis)] = std::max<std::int64_t>(shape[axis] - 1, 0);
          reversed.step[static_cast<std::size_t>(axis)] = -1;
          value = add(Op::slice, {value}, reversed, {DType::f32, shape});
          break;
        }
        default: {  // a reduction of the whole, or of the last axis
          ir::Attributes reduced;
          if (random_.chance(0.5))
            for (int axis = 0; axis < rank; ++axis) reduced.axes.push_back(axis);
          else
            reduced.axes = {rank - 1};
          reduced.keepdims = random_.chance(0.5);
          return add(random_.pick(std::vector<Op>{Op::reduce_sum, Op::reduce_max}), {value}, reduced);
        }
      }
    }
    return value;
  }

  // A convolution as nn::conv2d writes it (api/convolution.cpp): an NHWC image padded with zeros along its height
  // and width (concats of constants), each tap of the window a strided slice of it, the taps side by side along
  // the channels, times a [taps x channels, outputs] matrix, then often a bias and relu; the image sometimes a
  // group's channels of a wider one. The CPU JIT gathers the taps while its GEMM packs them (compiler/fusion.h: a
  // GEMM's gathered operand; kernels/cpu/gemm.h: read in place from 32 channels, rows inside the image by a short
  // cut, products of at most a vector's columns by gemm_narrow.cpp). The shapes are drawn to
  // reach those paths; values may be as large as in a large graph (the operand is never written by the JIT).
  ValueId build_convolution_motif() {
    const std::int64_t saved_limit = max_elements_;
    max_elements_ = std::max(max_elements_, options_.max_elements * 32);
    struct Restore {
      std::int64_t& limit;
      std::int64_t saved;
      ~Restore() { limit = saved; }
    } restore{max_elements_, saved_limit};
    // Lines up to 40 wide: AVX-512's 14-row strips then fall inside a line, away from the padding or at it, and read
    // the input in place (kernels/cpu/gemm_strided.h).
    const std::int64_t batch = random_.between(1, 2), height = random_.between(1, 9), width = random_.between(1, 40);
    const std::int64_t channels = random_.pick(std::vector<std::int64_t>{1, 3, 5, 8, 16, 32, 33, 40});
    const std::int64_t outputs = random_.pick(std::vector<std::int64_t>{1, 2, 4, 5, 8, 16, 17});
    // Per spatial axis: window, stride, dilation and zero padding before and after.
    struct Axis {
      std::int64_t size, window, stride, dilation, before, after;
      std::int64_t extent() const { return (window - 1) * dilation + 1; }
      std::int64_t count() const { return (size + before + after - extent()) / stride + 1; }
    };
    auto axis = [&](std::int64_t size) {
      Axis drawn{size,
                 random_.pick(std::vector<std::int64_t>{1, 2, 3, 3, 3, 5}),
                 random_.pick(std::vector<std::int64_t>{1, 1, 1, 2, 3}),
                 random_.pick(std::vector<std::int64_t>{1, 1, 1, 2}),
                 0,
                 0};
      if (random_.chance(0.8)) {
        drawn.before = random_.between(0, drawn.extent() - 1);
        drawn.after = random_.between(0, drawn.extent() - 1);
      }
      if (drawn.size + drawn.before + drawn.after < drawn.extent()) throw Rejected{};
      return drawn;
    };
    const Axis rows = axis(height), columns = axis(width);
    ValueId image = -1;
    if (random_.chance(0.3)) {
      // A group's channels, sliced from a wider image before the padding (nn::conv2d's grouped form); sometimes its
      // rows cropped too, which the GEMM must not gather through the padding.
      const std::int64_t beside = random_.between(1, 9), first = random_.between(0, beside);
      const std::int64_t cropped = random_.chance(0.3) ? random_.between(1, 2) : 0;
      const ValueId wide = add_parameter({DType::f32, Shape({batch, height + cropped, width, channels + beside})});
      ir::Attributes group;
      group.start = {0, cropped, 0, first};
      group.step = {1, 1, 1, 1};
      image = add(Op::slice, {wide}, group, {DType::f32, Shape({batch, height, width, channels})});
    } else {
      image = add_parameter({DType::f32, Shape({batch, height, width, channels})});
    }
    ir::Attributes zero;
    zero.float_value = 0.0;
    for (const auto& [dimension, drawn] : {std::pair{1, rows}, std::pair{2, columns}}) {
      if (drawn.before == 0 && drawn.after == 0) continue;
      const Shape shape = type(image).shape;  // a copy: adding nodes moves the graph's storage
      auto padding = [&](std::int64_t count) {
        Shape padding_shape = shape;
        padding_shape[dimension] = count;
        return add(Op::constant, {}, zero, {DType::f32, padding_shape});
      };
      std::vector<ValueId> pieces;
      if (drawn.before > 0) pieces.push_back(padding(drawn.before));
      pieces.push_back(image);
      if (drawn.after > 0) pieces.push_back(padding(drawn.after));
      ir::Attributes along;
      along.axis = dimension;
      image = add(Op::concat, pieces, along);
    }
    std::vector<ValueId> taps;
    for (std::int64_t row = 0; row < rows.window; ++row)
      for (std::int64_t column = 0; column < columns.window; ++column) {
        ir::Attributes window;
        window.start = {0, row * rows.dilation, column * columns.dilation, 0};
        window.step = {1, rows.stride, columns.stride, 1};
        taps.push_back(
            add(Op::slice, {image}, window, {DType::f32, Shape({batch, rows.count(), columns.count(), channels})}));
      }
    ir::Attributes side_by_side;
    side_by_side.axis = 3;
    const ValueId windows = taps.size() == 1 ? taps.front() : add(Op::concat, taps, side_by_side);
    const std::int64_t depth = rows.window * columns.window * channels;
    ValueId value = add(Op::matmul, {windows, add_parameter({DType::f32, Shape({depth, outputs})})});
    if (random_.chance(0.7))
      value = add(Op::relu, {add(Op::add, {value, add_parameter({DType::f32, Shape({outputs})})})});
    return value;
  }

  // A reduction over a run of axes before the last of a computed value (compiler/fusion.h: one column
  // kernel with its producers on the CPU): a chain of elementwise ops with operands broadcast along some axes,
  // sometimes also returned, then a sum, mean, max, min or product over axes [first, rank - 2].
  ValueId build_column_motif() {
    const int rank = static_cast<int>(random_.between(2, 4));
    std::vector<std::int64_t> dims;
    for (int axis = 0; axis < rank; ++axis) dims.push_back(random_dim());
    const DType dtype = random_.chance(0.8) ? DType::f32 : random_.pick(std::vector<DType>{DType::f64, DType::i32});
    ValueId value = add_parameter({dtype, limit(Shape(dims))});
    const Shape shape = type(value).shape;  // a copy: adding nodes moves the graph's storage
    for (std::int64_t step = random_.between(1, 3); step > 0; --step) {
      std::vector<std::int64_t> operand(shape.dims().begin(), shape.dims().end());
      for (std::int64_t& dim : operand)
        if (random_.chance(0.5)) dim = 1;
      value = add(random_.pick(std::vector<Op>{Op::add, Op::mul, Op::sub, Op::maximum}),
                  {value, add_parameter({dtype, Shape(operand)})});
      if (dtype != DType::i32) value = add(random_.pick(std::vector<Op>{Op::exp, Op::tanh, Op::abs, Op::sin}), {value});
    }
    if (random_.chance(0.3)) graph().outputs.push_back(value);  // also read elsewhere: still written
    ir::Attributes reduced;
    for (int axis = static_cast<int>(random_.below(rank - 1)); axis < rank - 1; ++axis) reduced.axes.push_back(axis);
    reduced.keepdims = random_.chance(0.5);
    const std::vector<Op> reductions =
        dtype == DType::i32
            ? std::vector<Op>{Op::reduce_sum, Op::reduce_max, Op::reduce_min}
            : std::vector<Op>{Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_min, Op::reduce_prod};
    return add(random_.pick(reductions), {value}, reduced);
  }

  // One to three layers of a network on x [m, width], as models stack them (a transformer block found a
  // wrong result that random ops had not, 2026-12-01): a row normalization or not, a product with a bias and
  // an activation, the result's heads split and merged (a transpose between two reshapes: a copy, then a view
  // read by the next product) or flattened and restored (views), a second product back to the width, and a
  // residual; sometimes a second input's product added to the first (x W + h U).
  ValueId build_layers_motif() {
    const std::int64_t m = matrix_dim(), width = random_.pick(std::vector<std::int64_t>{2, 4, 6, 8, 12});
    ValueId x = add_parameter({DType::f32, Shape({m, width})});
    for (std::int64_t layer = random_.between(1, 3); layer > 0; --layer) {
      ValueId h = random_.chance(0.5) ? row_normalization(x) : x;
      const std::int64_t hidden = random_.pick(std::vector<std::int64_t>{2, 4, 8, 16});
      ValueId up = add(Op::matmul, {h, add_parameter({DType::f32, Shape({width, hidden})})}, ir::Attributes{});
      if (random_.chance(0.3)) {
        const ValueId other = add_parameter({DType::f32, Shape({m, 3})});
        up = add(Op::add,
                 {up, add(Op::matmul, {other, add_parameter({DType::f32, Shape({3, hidden})})}, ir::Attributes{})});
      }
      up = add(Op::add, {up, add_parameter({DType::f32, Shape({hidden})})});
      up = add(random_.pick(std::vector<Op>{Op::relu, Op::tanh, Op::sigmoid, Op::exp}), {up});
      switch (random_.weighted({2, 1, 1})) {
        case 0:
          break;
        case 1: {  // heads split and merged: [m, 2, hidden / 2] -> [2, m, hidden / 2] -> back
          ir::Attributes swap;
          swap.axes = {1, 0, 2};
          const ValueId split = add(Op::reshape, {up}, {}, {DType::f32, Shape({m, 2, hidden / 2})});
          const ValueId heads = add(Op::transpose, {add(Op::exp, {add(Op::transpose, {split}, swap)})}, swap);
          up = add(Op::reshape, {heads}, {}, {DType::f32, Shape({m, hidden})});
          break;
        }
        default:  // flattened and restored: two views
          up = add(Op::reshape, {add(Op::reshape, {up}, {}, {DType::f32, Shape({m * hidden})})}, {},
                   {DType::f32, Shape({m, hidden})});
      }
      const ValueId down = add(Op::matmul, {up, add_parameter({DType::f32, Shape({hidden, width})})}, ir::Attributes{});
      x = random_.chance(0.7) ? add(Op::add, {x, down}) : down;
    }
    return x;
  }

  ValueId f32_constant(double value) {
    ir::Attributes attributes;
    attributes.float_value = value;
    return add(Op::constant, {}, attributes, {DType::f32, Shape()});
  }

  // A row-wise function of x over its last axis (one of the shapes the attention fusion meets).
  ValueId row_normalization(ValueId x) {
    const int rank = type(x).shape.rank();
    ir::Attributes rows;
    rows.axes = {rank - 1};
    rows.keepdims = true;
    auto softmax = [&](ValueId y) {
      const ValueId shifted = add(Op::sub, {y, add(Op::reduce_max, {y}, rows)});
      const ValueId exponentials = add(Op::exp, {shifted});
      return add(Op::div, {exponentials, add(Op::reduce_sum, {exponentials}, rows)});
    };
    switch (random_.weighted({3, 2, 1, 1})) {
      case 0:
        return softmax(x);
      case 1: {
        const Shape& shape = type(x).shape;
        ValueId mask = add_parameter({DType::f32, Shape({shape[rank - 2], shape[rank - 1]})});
        if (random_.chance(0.5))  // 0 where the parameter is positive, -inf elsewhere: the masks attention adds
          mask = add(Op::where, {add(Op::gt, {mask, f32_constant(0)}), f32_constant(0),
                                 f32_constant(-std::numeric_limits<double>::infinity())});
        return softmax(add(Op::add, {add(Op::mul, {x, f32_constant(0.25)}), mask}));
      }
      case 2: {
        const ValueId centered = add(Op::sub, {x, add(Op::reduce_mean, {x}, rows)});
        const ValueId variance = add(Op::reduce_mean, {add(Op::mul, {centered, centered})}, rows);
        return add(Op::div, {centered, add(Op::sqrt, {add(Op::add, {variance, f32_constant(1e-5)})})});
      }
      default:
        return add(Op::div, {add(Op::tanh, {x}),
                             add(Op::add, {add(Op::reduce_sum, {add(Op::abs, {x})}, rows), f32_constant(1)})});
    }
  }

  // ---- Control flow ----
  //
  // cond, while_loop and scan_loop nodes whose regions hold random ops of their own (build_op in the region's
  // scope: its parameters are the pool, a new parameter of the case is captured), sometimes a control node of
  // their own (two deep at most), and a result node for every result after the first. Values in them stay small
  // (a loop runs its body several times, and each region is a JIT compile of its own). Hazards in regions are
  // found and replaced as in the case's graph (hazards.h). What keeps the control itself exact: a cond's index
  // is an integer, or a comparison or argmax whose near ties are hazards; a while_loop's trip count is an i32
  // counter's, against a bound of 0..5; a scan_loop's is its length.

  using Motif = ValueId (Builder::*)();
  static std::vector<Motif> control_motifs() {
    return {&Builder::build_cond_motif, &Builder::build_while_motif, &Builder::build_scan_motif};
  }
  static constexpr std::int64_t region_elements = 256;  // per value in a control motif

  // Small values while it lives: a control motif's operands and everything in its regions.
  class SmallValues {
   public:
    explicit SmallValues(Builder& builder)
        : builder_(builder), max_elements_(builder.max_elements_), large_(builder.large_) {
      builder.max_elements_ = std::min(builder.max_elements_, region_elements);
      builder.large_ = false;
    }
    ~SmallValues() {
      builder_.max_elements_ = max_elements_;
      builder_.large_ = large_;
    }
    SmallValues(const SmallValues&) = delete;
    SmallValues& operator=(const SmallValues&) = delete;

   private:
    Builder& builder_;
    std::int64_t max_elements_;
    bool large_;
  };

  // A region of a control node built in the current scope: parameters of `types`, then the captures so far.
  Scope region_scope(ir::Graph& region, Captures& captures, const std::vector<ir::Type>& types) {
    Scope scope;
    scope.graph = &region;
    scope.outer = scope_;
    scope.captures = &captures;
    scope.depth = scope_->depth + 1;
    for (const ir::Type& parameter : types) scope.pool.push_back(region.add_parameter(parameter));
    take_captures(scope);
    return scope;
  }

  // Gives `scope`'s region a parameter for each capture it has not yet (in capture order).
  static void take_captures(Scope& scope) {
    while (scope.capture_parameters.size() < scope.captures->values.size()) {
      const ValueId parameter = scope.graph->add_parameter(scope.captures->types[scope.capture_parameters.size()]);
      scope.capture_parameters.push_back(parameter);
      scope.pool.push_back(parameter);
    }
  }

  // Value `value` of the scope around the current region, as the region's parameter.
  ValueId capture(ValueId value) {
    Captures& captures = *scope_->captures;
    const auto found = std::find(captures.values.begin(), captures.values.end(), value);
    const auto index = static_cast<std::size_t>(found - captures.values.begin());
    if (found == captures.values.end()) {
      captures.values.push_back(value);
      captures.types.push_back(scope_->outer->graph->type(value));
    }
    take_captures(*scope_);
    return scope_->capture_parameters[index];
  }

  // Sometimes a value or two of the scope around captured up front, for the region's ops to use.
  void capture_some() {
    if (!random_.chance(0.5)) return;
    for (std::size_t count = random_.weighted({0, 2, 1}); count > 0; --count) {
      std::optional<ValueId> value;
      {
        InScope around(*this, *scope_->outer);
        value = pick([&](const ir::Type& t) { return t.shape.numel() <= max_elements_; });
      }
      if (value) capture(*value);
    }
  }

  // The region's parameters for the captures the other regions of its node took after it was built; its dead
  // nodes dropped, its parameters first. `arguments`: its parameters before the captures.
  static void finish_region(ir::Graph& region, std::size_t arguments, const Captures& captures) {
    for (std::size_t index = region.parameters.size() - arguments; index < captures.values.size(); ++index)
      region.add_parameter(captures.types[index]);
    ir::remove_dead_nodes(region);
    ir::canonicalize(region);
  }

  // `count` random ops in the current scope (a region), drawn as the case's graph draws its own.
  void build_random_ops(std::int64_t count) {
    static const std::vector<Op> ops = generated_ops();
    for (std::int64_t built = 0, attempt = 0; built < count && attempt < 20 * count; ++attempt) {
      const Op op = random_.pick(ops);
      try {
        scope_->last = build_op(op);
        ++built;
        count_node(ir::name(op));
      } catch (const Rejected&) {
        if (statistics_) statistics_->rejected += 1;
      }
    }
  }

  // Sometimes a control node in the current region, if that is no more than two deep.
  void maybe_nest() {
    if (scope_->depth >= 2 || !random_.chance(0.2)) return;
    const std::vector<Motif> motifs = control_motifs();
    const Motif motif = random_.pick(motifs);
    if (!options_.while_loops && motif == &Builder::build_while_motif) return;
    try {
      scope_->last = (this->*motif)();
      count_node("(nested control flow)");
    } catch (const Rejected&) {
      if (statistics_) statistics_->rejected += 1;
    }
  }

  // The current region's newest value (mostly), or any.
  ValueId newest() {
    if (scope_->last >= 0 && random_.chance(0.8)) return scope_->last;
    return any_value();
  }

  // A value of at most max_elements_ elements, of any type.
  ValueId small_value() {
    if (auto value = pick([&](const ir::Type& t) { return t.shape.numel() <= max_elements_; });
        value && random_.chance(0.8))
      return *value;
    return fresh_source({random_dtype(), random_shape()});
  }

  // A loop's initial carry: mostly a small value, sometimes a scalar or an empty value (a zero-size axis).
  ValueId carry_value() {
    switch (random_.weighted({6, 1, 1})) {
      case 0:
        return small_value();
      case 1:
        return fresh_source({random_dtype(), Shape()});
      default: {
        Shape shape = random_shape();
        if (shape.rank() == 0) shape = Shape({0});
        shape[static_cast<int>(random_.below(shape.rank()))] = 0;
        return fresh_source({random_dtype(), shape});
      }
    }
  }

  // A control node added to the current scope, with a result node for each result after the first; returns the
  // newest of them.
  ValueId add_control(Op op, std::vector<ValueId> operands, ir::Attributes attributes, std::vector<ir::Graph> regions) {
    ir::Node node;
    node.op = op;
    node.operands = std::move(operands);
    node.attributes = std::move(attributes);
    node.regions = std::move(regions);
    const ValueId control = graph().add(std::move(node));
    const std::vector<ir::Type> results = ir::result_types(graph(), control);
    graph().node(control).type = results.at(0);
    pool().push_back(control);
    count_node(ir::name(op));
    ValueId newest = control;
    for (std::size_t index = 1; index < results.size(); ++index) {
      ir::Node result;
      result.op = Op::result;
      result.type = results[index];
      result.operands = {control};
      result.attributes.index = static_cast<std::int64_t>(index);
      newest = graph().add(std::move(result));
      pool().push_back(newest);
      count_node(ir::name(Op::result));
    }
    return newest;
  }

  ValueId float_constant(DType dtype, double value) {
    ir::Attributes attributes;
    attributes.float_value = value;
    return add(Op::constant, {}, attributes, {dtype, Shape()});
  }

  // `x` summed over all its axes (a scalar as it is).
  ValueId sum_of(ValueId x) {
    if (type(x).shape.rank() == 0) return x;
    ir::Attributes all;
    for (int axis = 0; axis < type(x).shape.rank(); ++axis) all.axes.push_back(axis);
    return add(Op::reduce_sum, {x}, all);
  }

  // `value` of `target`'s dtype, and of a shape that broadcasts to target's without changing it: itself, or its sum.
  ValueId fitted(ValueId value, const ir::Type& target) {
    Shape both;
    if (!ir::broadcast_shapes(type(value).shape, target.shape, &both) || !(both == target.shape)) {
      if (type(value).dtype == DType::boolean) value = convert(value, DType::i32);
      value = sum_of(value);
    }
    return convert(value, target.dtype);
  }

  // A value of type `wanted` in the current scope: one there, one that broadcasts to it (cast and broadcast), or a
  // new source.
  ValueId value_of_type(const ir::Type& wanted) {
    if (auto same = pick([&](const ir::Type& t) { return t == wanted; }); same && random_.chance(0.9)) return *same;
    auto broadcasts = [&](const ir::Type& t) {
      Shape both;
      return ir::broadcast_shapes(t.shape, wanted.shape, &both) && both == wanted.shape;
    };
    if (auto value = pick(broadcasts); value && random_.chance(0.8)) {
      const ValueId converted = convert(*value, wanted.dtype);
      if (type(converted).shape == wanted.shape) return converted;
      return add(Op::broadcast_to, {converted}, {}, wanted);
    }
    return fresh_source(wanted);
  }

  // The next value of loop carry `carry` (a region parameter), of its type, from the region's newest value and
  // bounded over the steps whatever that holds: floats through tanh, sin or a clamp, or shrunk by a sigmoid;
  // integers and bools by ops that are exact (integers wrap).
  ValueId next_carry(ValueId carry) {
    const ir::Type carry_type = type(carry);  // a copy: adding nodes moves the graph's storage
    const ValueId update = fitted(newest(), carry_type);
    const DType dtype = carry_type.dtype;
    if (is_floating(dtype)) {
      const ValueId scale = float_constant(dtype, random_.pick(std::vector<double>{0.5, -0.75, 0.25, 0.875}));
      switch (random_.weighted({3, 2, 2, 1})) {
        case 0:
          return add(Op::tanh, {add(Op::add, {add(Op::mul, {carry, scale}), update})});
        case 1:
          return add(Op::add, {add(Op::mul, {carry, scale}), add(Op::sin, {update})});
        case 2: {
          const ValueId sum = add(Op::add, {carry, update});
          return add(Op::minimum, {add(Op::maximum, {sum, float_constant(dtype, -4)}), float_constant(dtype, 4)});
        }
        default:
          return add(Op::mul, {carry, add(Op::sigmoid, {update})});
      }
    }
    if (dtype == DType::boolean) {
      switch (random_.weighted({2, 1, 1})) {
        case 0:
          return add(Op::bitwise_xor, {carry, update});
        case 1:
          return add(Op::logical_or, {carry, update});
        default:
          return add(Op::logical_not, {carry});
      }
    }
    switch (random_.weighted({3, 2, 1})) {
      case 0:
        return add(Op::add, {carry, update});
      case 1:
        return add(Op::bitwise_xor, {carry, update});
      default:
        return add(Op::add, {add(Op::mul, {carry, integer_constant(dtype, 3)}), update});
    }
  }

  // A cond's index, i32[], that no rounding decides: a parameter (mostly outside the branches: clamped), a
  // constant, an integer sum modulo the branch count, or a comparison or argmax of floats (near ties there are
  // hazards, hazards.h, replaced).
  ValueId branch_index(std::int64_t branches) {
    switch (random_.weighted({2, 1, 2, 2, 1})) {
      case 0:
        return add_parameter({DType::i32, Shape()});
      case 1:
        return integer_constant(DType::i32, random_.between(-1, branches));
      case 2: {
        const ValueId sum = convert(sum_of(integer_value()), DType::i32);
        return add(Op::remainder, {sum, integer_constant(DType::i32, branches)});
      }
      case 3: {
        const ValueId sum = sum_of(float_value());
        const ValueId limit = float_constant(type(sum).dtype, std::round(random_.normal() * 8) / 4);
        return convert(add(random_.pick(std::vector<Op>{Op::gt, Op::lt, Op::ge}), {sum, limit}), DType::i32);
      }
      default: {
        const ValueId x = numeric_value();
        const std::int64_t count = type(x).shape.numel();
        if (count == 0) throw Rejected{};
        const ValueId row = add(Op::reshape, {x}, {}, {type(x).dtype, Shape({count})});
        return convert(add(Op::argmax, {row}, ir::Attributes{}), DType::i32);
      }
    }
  }

  // cond: 1 to 3 branches of 0 to 3 arguments and the captures, each a few random ops; branch 0's newest value
  // and sometimes others (a parameter passed through included) are the results, which the other branches return
  // too, made of their own values of those types (cast and broadcast where needed).
  ValueId build_cond_motif() {
    SmallValues small(*this);
    const auto branch_count = static_cast<std::int64_t>(1 + random_.weighted({1, 3, 2}));
    const ValueId index = branch_index(branch_count);
    std::vector<ValueId> arguments;
    std::vector<ir::Type> argument_types;
    for (std::size_t count = random_.weighted({1, 3, 2, 1}); count > 0; --count) {
      arguments.push_back(small_value());
      argument_types.push_back(type(arguments.back()));
    }
    Captures captures;
    std::vector<ir::Graph> branches(static_cast<std::size_t>(branch_count));
    std::vector<ir::Type> results;
    for (std::size_t number = 0; number < branches.size(); ++number) {
      ir::Graph& branch = branches[number];
      branch.name = "branch_" + std::to_string(number);
      Scope scope = region_scope(branch, captures, argument_types);
      InScope inside(*this, scope);
      capture_some();
      build_random_ops(random_.between(0, 3));
      maybe_nest();
      if (number == 0) {
        branch.outputs.push_back(newest());
        for (std::size_t more = random_.weighted({3, 2, 1}); more > 0; --more)
          branch.outputs.push_back(random_.pick(scope.pool));
        for (ValueId output : branch.outputs) results.push_back(branch.type(output));
      } else {
        for (const ir::Type& result : results) branch.outputs.push_back(value_of_type(result));
      }
    }
    for (ir::Graph& branch : branches) finish_region(branch, arguments.size(), captures);
    std::vector<ValueId> operands = {index};
    operands.insert(operands.end(), arguments.begin(), arguments.end());
    operands.insert(operands.end(), captures.values.begin(), captures.values.end());
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(arguments.size());
    return add_control(Op::cond, std::move(operands), std::move(attributes), std::move(branches));
  }

  // while_loop: an i32 counter and 0 to 3 other carries (any dtype, rank 0 and empty values included). The trip
  // count is the counter's alone: up from 0..2 while below a bound of 0..5 (a constant, or a parameter clamped
  // to [0, 5]), or down from such a bound while above 0; sometimes also while a bool parameter holds. The body:
  // a few random ops, the counter stepped, every other carry updated as next_carry says.
  ValueId build_while_motif() {
    SmallValues small(*this);
    const bool down = random_.chance(0.3);
    const bool constant_bound = random_.chance(0.5);
    const std::int64_t bound_value = random_.between(0, 5);
    ValueId bound;
    if (constant_bound) {
      bound = integer_constant(DType::i32, bound_value);
    } else {
      bound = add(Op::maximum, {add_parameter({DType::i32, Shape()}), integer_constant(DType::i32, 0)});
      bound = add(Op::minimum, {bound, integer_constant(DType::i32, 5)});
    }
    std::vector<ValueId> carries;
    for (std::size_t count = random_.weighted({1, 3, 2, 1}); count > 0; --count) carries.push_back(carry_value());
    const auto counter = static_cast<std::size_t>(random_.between(0, static_cast<std::int64_t>(carries.size())));
    carries.insert(carries.begin() + static_cast<std::ptrdiff_t>(counter),
                   down ? bound : integer_constant(DType::i32, random_.between(0, 2)));
    std::vector<ir::Type> types;
    for (ValueId carry : carries) types.push_back(type(carry));
    Captures captures;
    ir::Graph condition, body;
    condition.name = "condition";
    body.name = "body";
    {
      Scope scope = region_scope(condition, captures, types);
      InScope inside(*this, scope);
      const ValueId count = scope.pool[counter];
      ValueId going_on;
      if (down) {
        going_on = add(Op::gt, {count, integer_constant(DType::i32, 0)});
      } else {
        const ValueId limit =
            constant_bound && random_.chance(0.5) ? integer_constant(DType::i32, bound_value) : capture(bound);
        going_on = add(Op::lt, {count, limit});
      }
      if (random_.chance(0.2)) going_on = add(Op::logical_and, {going_on, add_parameter({DType::boolean, Shape()})});
      condition.outputs = {going_on};
    }
    {
      Scope scope = region_scope(body, captures, types);
      const std::vector<ValueId> parameters(scope.pool.begin(),
                                            scope.pool.begin() + static_cast<std::ptrdiff_t>(types.size()));
      InScope inside(*this, scope);
      capture_some();
      build_random_ops(random_.between(0, 3));
      maybe_nest();
      for (std::size_t carry = 0; carry < parameters.size(); ++carry)
        body.outputs.push_back(carry == counter
                                   ? add(down ? Op::sub : Op::add, {parameters[carry], integer_constant(DType::i32, 1)})
                                   : next_carry(parameters[carry]));
    }
    finish_region(condition, types.size(), captures);
    finish_region(body, types.size(), captures);
    std::vector<ValueId> operands = carries;
    operands.insert(operands.end(), captures.values.begin(), captures.values.end());
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(carries.size());
    std::vector<ir::Graph> regions;
    regions.push_back(std::move(condition));
    regions.push_back(std::move(body));
    return add_control(Op::while_loop, std::move(operands), std::move(attributes), std::move(regions));
  }

  // A sequence for a scan_loop of `length` steps: a value with that leading axis, or a new source.
  ValueId sequence_value(std::int64_t length) {
    auto fits = [&](const ir::Type& t) {
      return t.shape.rank() >= 1 && t.shape[0] == length && t.shape.numel() <= max_elements_;
    };
    if (auto value = pick(fits); value && random_.chance(0.5)) return *value;
    const Shape element = random_shape(3);  // named: a range-for over a temporary's dims() reads a freed span
    std::vector<std::int64_t> dims(element.dims().begin(), element.dims().end());
    while (Shape(dims).numel() * std::max<std::int64_t>(length, 1) > max_elements_) {  // (an element of rank >= 1)
      const auto largest = std::max_element(dims.begin(), dims.end());
      *largest = (*largest + 1) / 2;
    }
    dims.insert(dims.begin(), length);
    return fresh_source({random_dtype(), Shape(dims)});
  }

  // scan_loop: 0 to 6 steps (0 included), forwards or reversed, over 0 to 2 sequences, with 0 to 2 carries; the
  // body a few random ops, the carries updated as next_carry says, and 0 to 2 per-step outputs (at least one
  // result in all) from its values.
  ValueId build_scan_motif() {
    SmallValues small(*this);
    const auto length = static_cast<std::int64_t>(random_.weighted({1, 2, 2, 2, 1, 1, 1}));
    std::vector<ValueId> carries, sequences;
    std::vector<ir::Type> types;
    for (std::size_t count = random_.weighted({1, 3, 2}); count > 0; --count) {
      carries.push_back(carry_value());
      types.push_back(type(carries.back()));
    }
    for (std::size_t count = random_.weighted({1, 3, 2}); count > 0; --count) {
      sequences.push_back(sequence_value(length));
      const ir::Type& sequence = type(sequences.back());
      types.push_back({sequence.dtype, Shape(sequence.shape.dims().subspan(1))});
    }
    Captures captures;
    ir::Graph body;
    body.name = "step";
    {
      Scope scope = region_scope(body, captures, types);
      const std::vector<ValueId> parameters(scope.pool.begin(),
                                            scope.pool.begin() + static_cast<std::ptrdiff_t>(types.size()));
      InScope inside(*this, scope);
      capture_some();
      build_random_ops(random_.between(0, 3));
      maybe_nest();
      for (std::size_t carry = 0; carry < carries.size(); ++carry)
        body.outputs.push_back(next_carry(parameters[carry]));
      const std::size_t outputs = (carries.empty() ? 1 : 0) + random_.weighted({2, 2, 1});
      for (std::size_t output = 0; output < outputs; ++output)
        body.outputs.push_back(output == 0 ? newest() : random_.pick(scope.pool));
    }
    finish_region(body, types.size(), captures);
    std::vector<ValueId> operands = carries;
    operands.insert(operands.end(), sequences.begin(), sequences.end());
    operands.insert(operands.end(), captures.values.begin(), captures.values.end());
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(carries.size());
    attributes.sequence_count = static_cast<std::int64_t>(sequences.size());
    attributes.length = length;
    attributes.reverse = random_.chance(0.5);
    std::vector<ir::Graph> regions;
    regions.push_back(std::move(body));
    return add_control(Op::scan_loop, std::move(operands), std::move(attributes), std::move(regions));
  }

  // A random shape with `count` elements and rank 0..4.
  Shape factorized_shape(std::int64_t count) {
    int rank = static_cast<int>(random_.weighted({0.5, 2, 3, 2, 1}));
    if (count == 0) {
      std::vector<std::int64_t> dims;
      rank = std::max(rank, 1);
      for (int axis = 0; axis < rank; ++axis) dims.push_back(random_.between(1, 4));
      dims[static_cast<std::size_t>(random_.below(rank))] = 0;
      return Shape(dims);
    }
    if (count > 1) rank = std::max(rank, 1);
    std::vector<std::int64_t> dims(static_cast<std::size_t>(rank), 1);
    std::int64_t rest = count;
    for (std::int64_t factor = 2; rest > 1; ++factor) {
      while (rest % factor == 0) {
        dims[static_cast<std::size_t>(random_.below(rank))] *= factor;
        rest /= factor;
      }
      if (factor * factor > rest && rest > 1) {
        dims[static_cast<std::size_t>(random_.below(rank))] *= rest;
        rest = 1;
      }
    }
    return Shape(dims);
  }

  ValueId build_reshape() {
    ValueId x = any_value();
    return add(Op::reshape, {x}, {}, {type(x).dtype, factorized_shape(type(x).shape.numel())});
  }

  ValueId build_transpose() {
    ValueId x = any_value();
    ir::Attributes attributes;
    for (int axis = 0; axis < type(x).shape.rank(); ++axis) attributes.axes.push_back(axis);
    for (std::size_t i = attributes.axes.size(); i > 1; --i)
      std::swap(attributes.axes[i - 1],
                attributes.axes[static_cast<std::size_t>(random_.below(static_cast<std::int64_t>(i)))]);
    return add(Op::transpose, {x}, attributes);
  }

  ValueId build_broadcast_to() {
    ValueId x = any_value();
    std::vector<std::int64_t> dims(type(x).shape.dims().begin(), type(x).shape.dims().end());
    for (auto& dim : dims)
      if (dim == 1 && random_.chance(0.6)) dim = random_.between(1, 5);
    for (std::int64_t extra = random_.weighted({1, 2, 1}); extra > 0 && dims.size() < 5; --extra)
      dims.insert(dims.begin(), random_.chance(0.05) ? 0 : random_.between(1, 4));
    return add(Op::broadcast_to, {x}, {}, {type(x).dtype, Shape(dims)});
  }

  ValueId build_slice() {
    ValueId x = any_value();
    const Shape& shape = type(x).shape;
    ir::Attributes attributes;
    std::vector<std::int64_t> counts;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      std::int64_t size = shape[axis];
      std::int64_t step = random_.pick(std::vector<std::int64_t>{1, 1, 1, 2, 3, -1, -1, -2, -3});
      if (size == 0) {
        attributes.start.push_back(0);
        attributes.step.push_back(step);
        counts.push_back(0);
        continue;
      }
      std::int64_t start = random_.chance(0.3) ? (step > 0 ? 0 : size - 1) : random_.below(size);
      std::int64_t available = step > 0 ? (size - 1 - start) / step + 1 : start / -step + 1;
      std::int64_t count = random_.chance(0.5) ? available : random_.between(random_.chance(0.05) ? 0 : 1, available);
      attributes.start.push_back(start);
      attributes.step.push_back(step);
      counts.push_back(count);
    }
    return add(Op::slice, {x}, attributes, {type(x).dtype, Shape(counts)});
  }

  ValueId build_concat() {
    auto ranked = [](const ir::Type& t) { return t.shape.rank() >= 1; };
    std::optional<ValueId> found = pick(ranked);
    ValueId x = found && random_.chance(0.85) ? *found : fresh_source({random_dtype(), random_shape()});
    ir::Type x_type = type(x);
    if (x_type.shape.rank() == 0) throw Rejected{};
    if (random_.chance(0.3)) return build_pad(x);
    ir::Attributes attributes;
    attributes.axis = random_.below(x_type.shape.rank());
    auto axis = static_cast<int>(attributes.axis);
    std::vector<ValueId> operands = {x};
    for (std::int64_t more = random_.weighted({0.5, 3, 1.5}); more > 0; --more) {
      auto fits = [&](const ir::Type& t) {
        if (t.dtype != x_type.dtype || t.shape.rank() != x_type.shape.rank()) return false;
        for (int d = 0; d < t.shape.rank(); ++d)
          if (d != axis && t.shape[d] != x_type.shape[d]) return false;
        return true;
      };
      std::optional<ValueId> other = random_.chance(0.5) ? pick(fits) : std::nullopt;
      if (other) {
        operands.push_back(*other);
      } else if (random_.chance(0.15)) {
        operands.push_back(x);
      } else {
        Shape shape = x_type.shape;
        shape[axis] = random_.chance(0.1) ? 0 : random_.between(1, 5);
        operands.push_back(fresh_source({x_type.dtype, shape}));
      }
    }
    if (random_.chance(0.5)) std::reverse(operands.begin(), operands.end());
    return add(Op::concat, operands, attributes);
  }

  // pad()'s form: `x` between constants of one value along an axis, and with even chances along another axis
  // (the JIT reads such a value in place: compiler/fusion.h: padding read in place).
  ValueId build_pad(ValueId x) {
    const int rank = type(x).shape.rank();
    const ir::Attributes value_of_padding = constant_value(type(x));
    ValueId padded = x;
    for (int padding = 0; padding < (random_.chance(0.5) ? 2 : 1); ++padding) {
      const ir::Type padded_type = type(padded);
      ir::Attributes attributes;
      attributes.axis = random_.below(rank);
      auto constant = [&](std::int64_t count) {
        Shape shape = padded_type.shape;
        shape[static_cast<int>(attributes.axis)] = count;
        return add(Op::constant, {}, value_of_padding, {padded_type.dtype, shape});
      };
      std::vector<ValueId> operands;
      const std::size_t sides = random_.weighted({1, 1, 2});  // before, after, both
      if (sides != 1) operands.push_back(constant(random_.between(1, 3)));
      operands.push_back(padded);
      if (sides != 0) operands.push_back(constant(random_.between(1, 3)));
      padded = add(Op::concat, operands, attributes);
    }
    return padded;
  }

  ValueId build_squeeze() {
    auto has_unit = [](const ir::Type& t) {
      for (std::int64_t dim : t.shape.dims())
        if (dim == 1) return true;
      return false;
    };
    std::optional<ValueId> found = pick(has_unit);
    ValueId x = found ? *found : any_value();
    ir::Attributes attributes;
    for (int axis = 0; axis < type(x).shape.rank(); ++axis)
      if (type(x).shape[axis] == 1 && random_.chance(0.7)) attributes.axes.push_back(axis);
    return add(Op::squeeze, {x}, attributes);
  }

  RandomSource& random_;
  const GeneratorOptions& options_;
  GeneratorStatistics* statistics_;
  FuzzCase case_;
  Scope top_;             // the case's graph
  Scope* scope_ = &top_;  // where nodes go now
  ValueId last_ = -1;
  bool large_ = false;
  std::int64_t max_elements_ = 0;
};

}  // namespace

FuzzCase generate_graph(std::uint64_t seed, std::uint64_t index, const GeneratorOptions& options,
                        GeneratorStatistics* statistics) {
  RandomSource random(seed, index);
  FuzzCase fuzz_case = Builder(random, options, statistics).build();
  int replaced = remove_hazards(fuzz_case, random);
  if (statistics) statistics->hazards_replaced += replaced;
  ir::verify(fuzz_case.graph);
  fuzz_case.graph.name = "fuzz_" + std::to_string(seed) + "_" + std::to_string(index);
  return fuzz_case;
}

}  // namespace kiln::fuzz
