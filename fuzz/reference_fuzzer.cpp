// libFuzzer target: type inference and the float64 reference evaluator on
// graphs built structurally from bytes (graph_from_bytes.h) that pass the
// verifier.
//
// Contract (src/reference/reference_evaluator.h, compare.h): evaluate never
// crashes on a verified graph -- it returns values or throws a kiln::Error
// (a host callback missing from the table, a data-dependent shape it cannot
// size) -- and every value it returns compares exactly equal to itself
// converted to an array (compare(to_array(v), v) with an exact tolerance);
// graph_tolerance accepts every output.

#include "graph_from_bytes.h"
#include "ir/graph.h"
#include "ir/verifier.h"
#include "reference/compare.h"
#include "reference/reference_evaluator.h"

#include <kiln/error.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

// Values larger than this are not evaluated: the reference is a naive loop
// and the fuzzer wants many small cases per second.
constexpr std::int64_t max_elements = 1 << 14;
constexpr std::int64_t max_total_elements = 1 << 16;
constexpr std::int64_t max_matmul_products = 1 << 18;

std::int64_t static_elements(const kiln::Shape& shape) {
  std::int64_t count = 1;
  for (std::int64_t dim : shape.dims()) {
    if (dim == kiln::Shape::dynamic) dim = 1;  // sized at run time, bounded by its producer
    if (dim > max_elements || (dim > 0 && count > max_elements / dim)) return max_elements + 1;
    count *= dim;
  }
  return count;
}

bool small_enough(const kiln::ir::Graph& graph) {
  std::int64_t total = 0;
  for (const kiln::ir::Node& node : graph.nodes) {
    std::int64_t count = static_elements(node.type.shape);
    if (count > max_elements) return false;
    total += count;
    if (node.op == kiln::ir::Op::matmul) {
      const kiln::Shape& a = graph.type(node.operands[0]).shape;
      std::int64_t depth = node.attributes.transpose_a ? a[a.rank() - 2] : a[a.rank() - 1];
      if (depth > 0 && count > max_matmul_products / depth) return false;
    }
  }
  return total <= max_total_elements;
}

kiln::runtime::Array input_for(const kiln::ir::Type& type, std::size_t seed) {
  kiln::Shape shape = type.shape;
  for (int axis = 0; axis < shape.rank(); ++axis)
    if (shape[axis] == kiln::Shape::dynamic) shape[axis] = 1;
  kiln::runtime::Array array = kiln::runtime::allocate_array(type.dtype, shape);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    auto position = static_cast<std::size_t>(i);
    std::int64_t value = static_cast<std::int64_t>((position * 7 + seed * 3) % 11) - 5;
    switch (type.dtype) {
      case kiln::DType::boolean: array.mutable_data<std::uint8_t>()[position] = value > 0; break;
      case kiln::DType::i32: array.mutable_data<std::int32_t>()[position] = static_cast<std::int32_t>(value); break;
      case kiln::DType::i64: array.mutable_data<std::int64_t>()[position] = value; break;
      case kiln::DType::f32: array.mutable_data<float>()[position] = static_cast<float>(value) * 0.75f; break;
      case kiln::DType::f64: array.mutable_data<double>()[position] = static_cast<double>(value) * 0.75; break;
    }
  }
  return array;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kiln::ir::Graph graph = kiln::fuzz::graph_from_bytes(data, size);
  if (kiln::ir::find_verifier_failure(graph) || !small_enough(graph)) return 0;
  std::vector<kiln::runtime::Array> inputs;
  for (std::size_t i = 0; i < graph.parameters.size(); ++i)
    inputs.push_back(input_for(graph.type(graph.parameters[i]), i));
  std::vector<kiln::reference::Value> values;
  try {
    values = kiln::reference::evaluate(graph, inputs);
  } catch (const kiln::Error&) {
    return 0;
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    kiln::reference::graph_tolerance(graph, graph.outputs[i]);
    kiln::reference::Comparison comparison =
        kiln::reference::compare(kiln::reference::to_array(values[i]), values[i], kiln::reference::Tolerance{});
    if (!comparison.ok) {
      std::fprintf(stderr, "a reference value differs from itself as an array: %s\n", comparison.message.c_str());
      std::abort();
    }
  }
  return 0;
}
