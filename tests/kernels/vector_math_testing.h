#pragma once
// What the float and double vector math tests (vector_math_test.cpp,
// vector_math_f64_test.cpp) share: deterministic inputs, the evaluation of a
// function through the vector path (vector_math::kLanes lanes), and the search
// for its worst error.
// T is float or double; vector_math.h and vector_math_f64.h give the
// matching load / store overloads.

#include "kernels/cpu/vector_math_f64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::testing::vector_math {

// Error of a float result `got` in units of the last place of the float nearest to
// `want`: ULP = 2^(e-23) for want in [2^e, 2^(e+1)), 2^-149 in the denormal range.
// Infinite when NaN-ness or infinity (after rounding `want` to float) does not match.
inline double float_ulp_error(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) {
    return std::isnan(want) && std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isinf(static_cast<float>(want)) || std::isinf(got)) {
    return static_cast<float>(want) == got ? 0.0 : std::numeric_limits<double>::infinity();
  }
  int exponent = 0;
  std::frexp(want, &exponent);
  const double ulp = std::ldexp(1.0, std::max(exponent - 1, -126) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// The function of `functions` called `name` (a test failure, and the first, if none).
template <class Function>
const Function& function_named(const std::vector<Function>& functions, const std::string& name) {
  for (const Function& function : functions) {
    if (function.name == name) return function;
  }
  ADD_FAILURE() << "no function " << name;
  return functions.front();
}

struct Rng {  // splitmix64: deterministic
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
};

// `count` values uniform in [low, high), rounded to T.
template <class T>
std::vector<T> uniform(double low, double high, int count, std::uint64_t seed) {
  Rng rng{seed};
  std::vector<T> values(static_cast<std::size_t>(count));
  for (T& value : values) value = static_cast<T>(low + (high - low) * rng.uniform());
  return values;
}

// Every finite bit pattern of T equally likely: log-uniform over the whole
// range, both signs, denormals included.
template <class T>
std::vector<T> all_finite(int count, std::uint64_t seed) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  Rng rng{seed};
  std::vector<T> values;
  while (values.size() < static_cast<std::size_t>(count)) {
    const auto bits = static_cast<Bits>(rng.next());
    T value;
    std::memcpy(&value, &bits, sizeof value);
    if (std::isfinite(value)) values.push_back(value);
  }
  return values;
}

// `center` and its `radius` neighbours of type T on each side.
template <class T>
void add_neighbours(std::vector<T>& values, std::type_identity_t<T> center, int radius) {
  T below = center, above = center;
  values.push_back(center);
  for (int step = 0; step < radius; ++step) {
    below = std::nextafter(below, -std::numeric_limits<T>::infinity());
    above = std::nextafter(above, std::numeric_limits<T>::infinity());
    values.push_back(below);
    values.push_back(above);
  }
}

// `function.vector` (kLanes values in, kLanes out) on all inputs, kLanes at a
// time, the tail through load_partial / store_partial.
template <class T, class Function>
std::vector<T> evaluate(const Function& function, const std::vector<T>& inputs) {
  namespace vm = kiln::vector_math;
  std::vector<T> outputs(inputs.size());
  std::size_t i = 0;
  constexpr std::size_t lanes = vm::kLanes;
  for (; i + lanes <= inputs.size(); i += lanes) function.vector(inputs.data() + i, outputs.data() + i);
  if (i < inputs.size()) {
    T in[lanes] = {}, out[lanes];
    const int rest = static_cast<int>(inputs.size() - i);
    vm::store(in, vm::load_partial(inputs.data() + i, rest));
    function.vector(in, out);
    vm::store_partial(outputs.data() + i, vm::load(out), rest);
  }
  return outputs;
}

struct Worst {
  double error = 0;  // in ULPs
  std::size_t index = 0;
};

// The largest `ulp_error(outputs[i], function.reference(inputs[i]))` (NaN
// errors count as the largest).
template <class T, class Function, class UlpError>
Worst worst_error(const Function& function, const std::vector<T>& inputs, const std::vector<T>& outputs,
                  UlpError ulp_error) {
  Worst worst;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const double error = ulp_error(outputs[i], function.reference(inputs[i]));
    if (!(error <= worst.error)) worst = {error, i};
  }
  return worst;
}

}  // namespace kiln::testing::vector_math
