#include "compiler/matrix_vector.h"

namespace kiln::compiler {
namespace {

// A product to rewrite: f32 or f64, the left operand not transposed, the right one a vector or a matrix of one column
// ([k, 1], or [1, k] transposed).
bool is_matrix_vector(const ir::Graph& graph, const ir::Node& node) {
  if (node.op != ir::Op::matmul || node.attributes.transpose_a) return false;
  if (node.type.dtype != DType::f32 && node.type.dtype != DType::f64) return false;
  // A convolution's windows (a concat of shifted slices, maybe reshaped): the GEMM gathers them as it packs
  // (fusion's gathered GEMM), where a reduction would read them written out.
  ir::ValueId producer = node.operands[0];
  while (graph.node(producer).op == ir::Op::reshape) producer = graph.node(producer).operands[0];
  if (graph.node(producer).op == ir::Op::concat) return false;
  const Shape& left = graph.type(node.operands[0]).shape;
  const Shape& right = graph.type(node.operands[1]).shape;
  if (left.rank() < 1) return false;
  if (right.rank() == 1) return true;
  return right.rank() == 2 && right[node.attributes.transpose_b ? 0 : 1] == 1;
}

class Rewrite {
 public:
  explicit Rewrite(const ir::Graph& graph) : old_(graph), new_id_(static_cast<std::size_t>(graph.size()), -1) {
    result_.name = graph.name;
    result_.host_functions = graph.host_functions;
  }

  ir::Graph run() {
    for (ir::ValueId id = 0; id < old_.size(); ++id) {
      ir::Node node = old_.node(id);
      for (ir::ValueId& operand : node.operands) operand = mapped(operand);
      new_id_[static_cast<std::size_t>(id)] =
          is_matrix_vector(old_, old_.node(id)) ? as_reduction(node) : result_.add(std::move(node));
    }
    for (ir::ValueId parameter : old_.parameters) result_.parameters.push_back(mapped(parameter));
    for (ir::ValueId output : old_.outputs) result_.outputs.push_back(mapped(output));
    return std::move(result_);
  }

 private:
  ir::ValueId mapped(ir::ValueId old) const { return new_id_[static_cast<std::size_t>(old)]; }

  ir::ValueId add(ir::Op op, ir::Type type, std::vector<ir::ValueId> operands, const std::string& location,
                  ir::Attributes attributes = {}) {
    ir::Node node;
    node.op = op;
    node.type = std::move(type);
    node.operands = std::move(operands);
    node.attributes = std::move(attributes);
    node.location = location;
    return result_.add(std::move(node));
  }

  // matmul(a [..., m, k], x) -> reshape(reduce_sum(a * x [k], last axis)) of the product's shape.
  ir::ValueId as_reduction(const ir::Node& product) {
    const ir::ValueId left = product.operands[0];
    ir::ValueId vector = product.operands[1];
    const ir::Type left_type = result_.type(left);  // a copy: adding nodes moves the graph's nodes
    const DType dtype = product.type.dtype;
    const std::int64_t depth = left_type.shape[left_type.shape.rank() - 1];
    if (result_.type(vector).shape.rank() != 1)
      vector = add(ir::Op::reshape, {dtype, Shape({depth})}, {vector}, product.location);
    const ir::ValueId terms = add(ir::Op::mul, {dtype, left_type.shape}, {left, vector}, product.location);
    ir::Attributes sum;
    sum.axes = {left_type.shape.rank() - 1};
    const Shape rows(left_type.shape.dims().first(static_cast<std::size_t>(left_type.shape.rank() - 1)));
    const ir::ValueId sums = add(ir::Op::reduce_sum, {dtype, rows}, {terms}, product.location, sum);
    if (rows == product.type.shape) return sums;
    return add(ir::Op::reshape, product.type, {sums}, product.location);
  }

  const ir::Graph& old_;
  ir::Graph result_;
  std::vector<ir::ValueId> new_id_;
};

}  // namespace

bool rewrite_matrix_vector_products(ir::Graph& graph) {
  bool any = false;
  for (const ir::Node& node : graph.nodes) any = any || is_matrix_vector(graph, node);
  if (!any) return false;
  graph = Rewrite(graph).run();
  return true;
}

}  // namespace kiln::compiler
