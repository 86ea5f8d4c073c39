#include "support/differential.h"

#include "api/tensor_impl.h"
#include "compiler/jit.h"
#include "exec/standard_executor.h"
#include "ir/parser.h"
#include "reference/compare.h"
#include "reference/reference_evaluator.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace kiln::testing {

void check_outputs(const std::string& label, const std::string& traced_ir, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& standard, const std::vector<Tensor>& jit,
                   const std::vector<std::string>& output_names) {
  ir::Graph graph = ir::parse(traced_ir);
  std::vector<runtime::Array> arrays;
  for (const Tensor& input : inputs) arrays.push_back(input.impl().array);
  std::vector<reference::Value> expected = reference::evaluate(graph, arrays);
  ASSERT_EQ(standard.size(), expected.size()) << label;
  ASSERT_EQ(jit.size(), expected.size()) << label;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::string output = i < output_names.size() ? output_names[i] : "output " + std::to_string(i);
    reference::Tolerance tolerance = reference::graph_tolerance(graph, graph.outputs[i]);
    reference::Comparison standard_check = reference::compare(standard[i].impl().array, expected[i], tolerance);
    reference::Comparison jit_check = reference::compare(jit[i].impl().array, expected[i], tolerance);
    EXPECT_TRUE(standard_check.ok) << label << ": standard executor, " << output << ": " << standard_check.message;
    EXPECT_TRUE(jit_check.ok) << label << ": JIT, " << output << ": " << jit_check.message;
    if (!standard_check.ok || !jit_check.ok) ADD_FAILURE() << "graph:\n" << traced_ir;
  }
}

void expect_graph_agreement(const std::string& label, const std::string& ir_text, const std::vector<Tensor>& inputs) {
  try {
    ir::Graph graph = ir::parse(ir_text);
    std::vector<runtime::Array> arrays;
    for (const Tensor& input : inputs) arrays.push_back(input.impl().array);
    std::vector<runtime::Array> standard = exec::run_standard(graph, arrays);
    compiler::CompiledFunction compiled = compiler::compile(graph);
    std::vector<runtime::Array> jit = compiled.executable->run(arrays);
    std::vector<Tensor> standard_tensors, jit_tensors;
    for (auto& array : standard) standard_tensors.push_back(detail::make_tensor(array));
    for (auto& array : jit) jit_tensors.push_back(detail::make_tensor(array));
    check_outputs(label, ir_text, inputs, standard_tensors, jit_tensors);
  } catch (const std::exception& error) {
    ADD_FAILURE() << label << ": " << error.what();
  }
}

bool same_bits(const Tensor& a, const Tensor& b, bool any_nan) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  if (std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * size_of(a.dtype())) == 0) return true;
  if (!any_nan || !is_floating(a.dtype())) return false;
  const std::vector<double> x = cast(a, DType::f64).to_vector<double>(), y = cast(b, DType::f64).to_vector<double>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::bit_cast<std::uint64_t>(x[i]) != std::bit_cast<std::uint64_t>(y[i])) return false;
  }
  return true;
}

void expect_within_bf16_rounding(const std::vector<Tensor>& expected, const std::vector<Tensor>& got) {
  ASSERT_EQ(expected.size(), got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::vector<float> a = cast(got[i], DType::f32).to_vector<float>();
    const std::vector<float> b = cast(expected[i], DType::f32).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t j = 0; j < a.size(); ++j)
      ASSERT_NEAR(a[j], b[j], 0x1p-7 * (std::fabs(b[j]) + 1e-2)) << "output " << i << " at " << j;
  }
}

}  // namespace kiln::testing
