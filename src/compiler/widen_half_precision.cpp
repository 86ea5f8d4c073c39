#include "compiler/widen_half_precision.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

// Ops whose result elements are elements of their first operand, bit for bit (gather and take_along_axis: of
// operand 0, picked by the integer operand 1).
bool moves_bits(ir::Op op) {
  switch (op) {
    case ir::Op::reshape:
    case ir::Op::transpose:
    case ir::Op::broadcast_to:
    case ir::Op::slice:
    case ir::Op::concat:
    case ir::Op::expand_dims:
    case ir::Op::squeeze:
    case ir::Op::gather:
    case ir::Op::take_along_axis:
      return true;
    default:
      return false;
  }
}

// An f32 iota counts exactly up to 2^24.
constexpr std::int64_t exact_f32_count = std::int64_t{1} << 24;

class Widening {
 public:
  Widening(const ir::Graph& graph, const BackendCapabilities& capabilities)
      : old_(graph), capabilities_(capabilities), new_id_(static_cast<std::size_t>(graph.size()), -1) {
    result_.name = graph.name;
    result_.host_functions = graph.host_functions;
  }

  ir::Graph run() {
    for (ir::ValueId id = 0; id < old_.size(); ++id) new_id_[static_cast<std::size_t>(id)] = rewrite(old_.node(id));
    for (ir::ValueId parameter : old_.parameters) result_.parameters.push_back(mapped(parameter));
    for (ir::ValueId output : old_.outputs) result_.outputs.push_back(mapped(output));
    return std::move(result_);
  }

 private:
  ir::ValueId mapped(ir::ValueId old) const { return new_id_[static_cast<std::size_t>(old)]; }

  ir::ValueId add(ir::Node node) {
    const ir::ValueId id = result_.add(std::move(node));
    widened_.push_back(-1);
    return id;
  }

  // `value` (of the new graph) cast to `dtype`, at the location of the node it serves.
  ir::ValueId cast(ir::ValueId value, DType dtype, const std::string& location) {
    ir::Node node;
    node.op = ir::Op::cast;
    node.type = {dtype, result_.type(value).shape};
    node.operands = {value};
    node.location = location;
    return add(std::move(node));
  }

  // A new value as an operand of an f32 computation: a bf16 or f16 one through one cast to f32, shared by its
  // readers.
  ir::ValueId f32_operand(ir::ValueId value, const std::string& location) {
    if (!is_half_precision(result_.type(value).dtype)) return value;
    const auto at = static_cast<std::size_t>(value);
    if (widened_[at] < 0) widened_[at] = cast(value, DType::f32, location);  // (cast grows widened_)
    return widened_[at];
  }

  ir::ValueId rewrite(ir::Node node) {
    for (ir::ValueId& operand : node.operands) operand = mapped(operand);
    const DType result = node.type.dtype;
    const bool any_half =
        is_half_precision(result) || std::any_of(node.operands.begin(), node.operands.end(), [&](ir::ValueId operand) {
          return is_half_precision(result_.type(operand).dtype);
        });
    // A control node passes its values to regions compiled on their own (widened there) as they are.
    if (!any_half || moves_bits(node.op) || node.op == ir::Op::parameter || node.op == ir::Op::constant ||
        ir::is_control(node.op) || multiplies_in_tiles(node))
      return add(std::move(node));
    if (node.op == ir::Op::cast) return rewrite_cast(node);
    if (node.op == ir::Op::iota) {
      node.type.dtype =
          node.type.shape[static_cast<int>(node.attributes.axis)] <= exact_f32_count ? DType::f32 : DType::f64;
      const std::string location = node.location;
      return cast(add(std::move(node)), result, location);
    }
    // Computed in f32 from widened operands, rounded once at the result.
    for (ir::ValueId& operand : node.operands) operand = f32_operand(operand, node.location);
    if (!is_half_precision(result)) return add(std::move(node));
    node.type.dtype = DType::f32;
    const std::string location = node.location;
    return cast(add(std::move(node)), result, location);
  }

  // A 16-bit matmul the backend multiplies as it is stays one (the GEMM kernel reads the 16-bit operands and
  // rounds the f32 sums once: AMX tiles, AVX512_BF16, tensor cores), where an f32 product of the widened operands would
  // run at f32's rate.
  bool multiplies_in_tiles(const ir::Node& node) const {
    const DType dtype = node.type.dtype;
    return node.op == ir::Op::matmul && is_half_precision(dtype) && capabilities_.multiplies(dtype) &&
           result_.type(node.operands[0]).dtype == dtype && result_.type(node.operands[1]).dtype == dtype;
  }

  // The primitives that stay: 16 bits -> f32, f32 or f64 -> 16 bits. Anything else goes through one of them.
  ir::ValueId rewrite_cast(ir::Node& node) {
    const ir::ValueId source = node.operands[0];
    const DType from = result_.type(source).dtype, to = node.type.dtype;
    if (is_half_precision(from)) {
      if (to == DType::f32) return add(std::move(node));
      return cast(f32_operand(source, node.location), to, node.location);
    }
    if (from == DType::f32 || from == DType::f64) return add(std::move(node));
    return cast(cast(source, DType::f64, node.location), to, node.location);  // integers and bool: exact in f64
  }

  const ir::Graph& old_;
  const BackendCapabilities& capabilities_;
  ir::Graph result_;
  std::vector<ir::ValueId> new_id_;   // old value -> new value
  std::vector<ir::ValueId> widened_;  // new value -> its cast to f32, where one was made
};

bool has_half_precision(const ir::Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const ir::Node& node) { return is_half_precision(node.type.dtype); });
}

}  // namespace

bool widen_half_precision(ir::Graph& graph, const BackendCapabilities& capabilities) {
  if (!has_half_precision(graph)) return false;
  graph = Widening(graph, capabilities).run();
  return true;
}

}  // namespace kiln::compiler
