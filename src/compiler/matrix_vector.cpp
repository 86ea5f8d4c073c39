#include "compiler/matrix_vector.h"

namespace kiln::compiler {
namespace {

// The left operand of a product, unless it is a convolution's windows (a concat of shifted slices, maybe reshaped):
// the gathered GEMM reads those where they lie, where a reduction would need them written out.
bool left_is_windows(const ir::Graph& graph, const ir::Node& node) {
  ir::ValueId producer = node.operands[0];
  while (graph.node(producer).op == ir::Op::reshape) producer = graph.node(producer).operands[0];
  return graph.node(producer).op == ir::Op::concat;
}

bool is_rewritten_dtype(const ir::Node& node) { return node.type.dtype == DType::f32 || node.type.dtype == DType::f64; }

// A product with one column: f32 or f64, the left operand not transposed, the right one a vector or a matrix of one
// column ([k, 1], or [1, k] transposed).
bool is_matrix_vector(const ir::Graph& graph, const ir::Node& node) {
  if (node.op != ir::Op::matmul || node.attributes.transpose_a || !is_rewritten_dtype(node)) return false;
  if (left_is_windows(graph, node)) return false;
  const Shape& left = graph.type(node.operands[0]).shape;
  const Shape& right = graph.type(node.operands[1]).shape;
  if (left.rank() < 1) return false;
  if (right.rank() == 1) return true;
  return right.rank() == 2 && right[node.attributes.transpose_b ? 0 : 1] == 1;
}

// A product with one row: f32 or f64, the left operand a vector or of shape [1, ..., 1, k] (not transposed), the
// right one a matrix ([k, n], or [n, k] transposed) -- a layer applied to one example. Untransposed, only where the
// backend has column kernels.
bool is_vector_matrix(const ir::Graph& graph, const ir::Node& node, const BackendCapabilities& capabilities) {
  if (node.op != ir::Op::matmul || node.attributes.transpose_a || !is_rewritten_dtype(node)) return false;
  if (!node.attributes.transpose_b && !capabilities.column_kernels) return false;
  if (left_is_windows(graph, node)) return false;
  const Shape& left = graph.type(node.operands[0]).shape;
  if (left.rank() < 1 || graph.type(node.operands[1]).shape.rank() != 2) return false;
  for (int axis = 0; axis + 1 < left.rank(); ++axis)
    if (left[axis] != 1) return false;
  return true;
}

class Rewrite {
 public:
  Rewrite(const ir::Graph& graph, const BackendCapabilities& capabilities)
      : old_(graph), capabilities_(capabilities), new_id_(static_cast<std::size_t>(graph.size()), -1) {
    result_.name = graph.name;
    result_.host_functions = graph.host_functions;
  }

  ir::Graph run() {
    for (ir::ValueId id = 0; id < old_.size(); ++id) {
      ir::Node node = old_.node(id);
      for (ir::ValueId& operand : node.operands) operand = mapped(operand);
      const ir::Node& old = old_.node(id);
      new_id_[static_cast<std::size_t>(id)] = is_matrix_vector(old_, old) ? as_reduction(node)
                                              : is_vector_matrix(old_, old, capabilities_)
                                                  ? as_column_sums(node)
                                                  : result_.add(std::move(node));
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

  // matmul(x [1, ..., 1, k], w [k, n]) -> reshape(reduce_sum(x [k, 1] * w, first axis)): each column of w summed
  // down its k rows, which the JIT's column kernel does reading w once, row after row. With w transposed ([n, k]),
  // the product is w's rows times the vector, a row reduction as above.
  ir::ValueId as_column_sums(const ir::Node& product) {
    const ir::ValueId matrix = product.operands[1];
    const ir::Type matrix_type = result_.type(matrix);
    const DType dtype = product.type.dtype;
    const bool transposed = product.attributes.transpose_b;
    const std::int64_t depth = matrix_type.shape[transposed ? 1 : 0];
    const std::int64_t columns = matrix_type.shape[transposed ? 0 : 1];
    const Shape vector_shape = transposed ? Shape({depth}) : Shape({depth, 1});
    ir::ValueId vector = product.operands[0];
    if (result_.type(vector).shape != vector_shape)
      vector = add(ir::Op::reshape, {dtype, vector_shape}, {vector}, product.location);
    const ir::ValueId terms = add(ir::Op::mul, {dtype, matrix_type.shape}, {matrix, vector}, product.location);
    ir::Attributes sum;
    sum.axes = {transposed ? 1 : 0};
    const ir::ValueId sums = add(ir::Op::reduce_sum, {dtype, Shape({columns})}, {terms}, product.location, sum);
    if (product.type.shape == Shape({columns})) return sums;
    return add(ir::Op::reshape, product.type, {sums}, product.location);
  }

  const ir::Graph& old_;
  const BackendCapabilities& capabilities_;
  ir::Graph result_;
  std::vector<ir::ValueId> new_id_;
};

}  // namespace

bool rewrite_matrix_vector_products(ir::Graph& graph, const BackendCapabilities& capabilities) {
  bool any = false;
  for (const ir::Node& node : graph.nodes)
    any = any || is_matrix_vector(graph, node) || is_vector_matrix(graph, node, capabilities);
  if (!any) return false;
  graph = Rewrite(graph, capabilities).run();
  return true;
}

}  // namespace kiln::compiler
