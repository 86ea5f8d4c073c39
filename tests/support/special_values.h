#pragma once
// Every float op on every pair of special values -- signed zeros,
// infinities, NaN, subnormals, the largest float, +-1, +-0.5 and 2 -- with
// each result also divided into 1, so that the sign of a zero result is
// compared too (the comparison alone counts -0 equal to +0). Shared by the
// CPU differential tests and the CUDA tests.

#include <kiln/kiln.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

// a and b of `dtype` (f32 or f64), [13, 13]: a[i, j] and b[i, j] are special values i and j.
inline std::pair<Tensor, Tensor> special_value_pairs(DType dtype) {
  const float infinity = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {-0.0f,  0.0f,    -infinity, infinity, std::numeric_limits<float>::quiet_NaN(),
                                       1e-40f, -1e-40f, 3.4e38f,   -1.0f,    1.0f,
                                       -0.5f,  0.5f,    2.0f};
  std::vector<double> left, right;
  for (float a : specials)
    for (float b : specials) {
      left.push_back(a);
      right.push_back(b);
    }
  const auto size = static_cast<std::int64_t>(specials.size());
  return {cast(from_vector(left, {size, size}), dtype), cast(from_vector(right, {size, size}), dtype)};
}

// What special_value_ops returns, in order.
inline std::vector<std::string> special_value_names() {
  std::vector<std::string> names = {"neg",   "abs",   "sign",  "square",  "relu", "floor",   "ceil",    "sin",
                                    "cos",   "exp",   "tanh",  "sigmoid", "erf",  "erfc",    "log",     "sqrt",
                                    "rsqrt", "a+b",   "a-b",   "a*b",     "a/b",  "maximum", "minimum", "pow",
                                    "log1p", "expm1", "round", "atan",    "a//b", "a%b",     "fmod",    "copysign"};
  const std::size_t results = names.size();
  for (std::size_t i = 0; i < results; ++i) names.push_back("1 / " + names[i]);
  return names;
}

inline std::vector<Tensor> special_value_ops(Tensor a, Tensor b) {
  std::vector<Tensor> outputs = {neg(a),        abs(a),        sign(a),   square(a), relu(a),    floor(a), ceil(a),
                                 sin(a),        cos(a),        exp(a),    tanh(a),   sigmoid(a), erf(a),   erfc(a),
                                 log(a),        sqrt(a),       rsqrt(a),  a + b,     a - b,      a * b,    a / b,
                                 maximum(a, b), minimum(a, b), pow(a, b), log1p(a),  expm1(a),   round(a), atan(a)};
  for (const Tensor& quotient : {floor_divide(a, b), a % b, fmod(a, b)}) outputs.push_back(quotient);
  outputs.push_back(copysign(a, b));
  const std::size_t results = outputs.size();
  for (std::size_t i = 0; i < results; ++i) outputs.push_back(1.0 / outputs[i]);
  return outputs;
}

}  // namespace kiln::testing
