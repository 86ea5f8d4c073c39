// Every op of the op table has an entry in the derivative rules, and every rule agrees with central finite
// differences in float64, in forward and reverse mode and to second order (gradient_check.h).

#include "autodiff/rules.h"
#include "autodiff/gradient_check.h"
#include "ir/op.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kiln::testing {
namespace {

namespace ir = kiln::ir;
using kiln::autodiff::Derivative;

// A new op needs a line in the derivative rules (src/autodiff/*_rules.cpp): a JVP rule, or "none" for an op no
// derivative flows through, or "refused".
TEST(DerivativeRules, EveryOpOfTheOpTableHasAnEntry) {
  for (int index = 0; index < ir::op_count; ++index) {
    const auto op = static_cast<ir::Op>(index);
    const autodiff::OpRule* rule = autodiff::rule_for(op);
    if (!rule) {
      ADD_FAILURE() << "op '" << ir::name(op)
                    << "' has no derivative rule: add one to src/autodiff/ (a JVP rule, and a "
                    << "transpose rule if tangents are built from it), or mark it Derivative::none";
      continue;
    }
    EXPECT_EQ(rule->op, op);
    if (rule->derivative == Derivative::rule) {
      EXPECT_NE(rule->jvp, nullptr) << ir::name(op);
    } else {
      EXPECT_EQ(rule->jvp, nullptr) << ir::name(op);
    }
  }
}

// Ops without a derivative are those whose results are piecewise constant, integers or bools, or sources.
TEST(DerivativeRules, NoDerivativeOnlyWhereNothingFlows) {
  for (int index = 0; index < ir::op_count; ++index) {
    const auto op = static_cast<ir::Op>(index);
    const autodiff::OpRule* rule = autodiff::rule_for(op);
    if (!rule || rule->derivative != Derivative::none) continue;
    const std::string name(ir::name(op));
    static const std::set<std::string> allowed = {
        "parameter",   "constant",    "iota",         "sign",        "floor",      "ceil",        "round",
        "logical_not", "bitwise_not", "floor_divide", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
        "right_shift", "eq",          "ne",           "lt",          "le",         "gt",          "ge",
        "logical_and", "logical_or",  "argmax",       "argmin",      "argsort",    "top_k",       "nonzero",
        "random_bits"};
    EXPECT_TRUE(allowed.contains(name)) << name << " is marked as having no derivative";
  }
}

// Every rule is exercised by a case below: the table of cases names the ops it covers.
TEST(DerivativeRules, EveryRuleHasAFiniteDifferenceCase) {
  std::set<std::string> covered;
  for (const GradientCase& gradient_case : gradient_cases())
    for (const std::string& op : gradient_case.ops) covered.insert(op);
  for (int index = 0; index < ir::op_count; ++index) {
    const auto op = static_cast<ir::Op>(index);
    const autodiff::OpRule* rule = autodiff::rule_for(op);
    if (rule && rule->derivative == Derivative::rule) {
      EXPECT_TRUE(covered.contains(std::string(ir::name(op))))
          << "no case in tests/autodiff/gradient_cases.cpp checks the derivative of " << ir::name(op);
    }
  }
}

class FiniteDifferences : public ::testing::TestWithParam<std::size_t> {};

TEST_P(FiniteDifferences, ForwardReverseAndSecondOrder) {
  static const std::vector<GradientCase> cases = gradient_cases();
  const GradientCase& gradient_case = cases.at(GetParam());
  check_gradients(gradient_case.name, gradient_case.function, gradient_case.inputs, 2, gradient_case.tolerance,
                  gradient_case.step);
}

INSTANTIATE_TEST_SUITE_P(EveryCase, FiniteDifferences, ::testing::Range<std::size_t>(0, gradient_cases().size()),
                         gradient_case_test_name);

}  // namespace
}  // namespace kiln::testing
