// Calls four functions exported by kiln::export_function (tests/export/export_writer.cpp) on the inputs the
// exporter saved, through their C++ and C entry points, and checks that each output equals the JIT's, bit for
// bit; then that bad calls are clear errors. Prints "exported functions match the JIT" when all is well.

#include "empty.h"
#include "layer.h"
#include "loops.h"
#include "seed.h"

#include <kiln/kiln.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

extern "C" int call_seed_from_c(const float* x, const float* y, float* result);
extern "C" int call_layer_from_c(const float* x, float* probabilities, float* sorted, std::int64_t* labels,
                                 double* largest);
extern "C" const char* call_layer_with_a_null_output(const float* x);

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAILED: " << what << "\n";
    ++failures;
  }
}

// Bit-for-bit equality of two concrete tensors.
bool identical(const kiln::Tensor& computed, const kiln::Tensor& expected) {
  if (computed.dtype() != expected.dtype() || computed.shape() != expected.shape()) return false;
  const auto bytes = static_cast<std::size_t>(expected.numel()) * kiln::size_of(expected.dtype());
  return bytes == 0 || std::memcmp(computed.data(), expected.data(), bytes) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: exported-program DIRECTORY (where kiln-export-writer saved the inputs and outputs)\n";
    return 2;
  }
  const std::filesystem::path directory = argv[1];
  auto load = [&](const std::string& name) { return kiln::load_npy(directory / (name + ".npy")); };

  const kiln::Tensor a = load("seed_input0"), b = load("seed_input1");
  const kiln::Tensor seed_expected = load("seed_output0");
  check(identical(seed(a, b), seed_expected), "seed (C++) equals the JIT's result");
  float from_c = -1;
  // kiln's own buffers are 64-byte aligned: seed_c reads them in place (layer_c below copies a std::vector's).
  check(call_seed_from_c(static_cast<const float*>(a.data()), static_cast<const float*>(b.data()), &from_c) == 0,
        "seed_c runs");
  check(std::memcmp(&from_c, seed_expected.data(), sizeof from_c) == 0, "seed_c equals the JIT's result");

  const kiln::Tensor x = load("layer_input0");
  const auto [probabilities, sorted, labels, largest] = layer(x);
  check(identical(probabilities, load("layer_output0")), "layer's probabilities equal the JIT's");
  check(identical(sorted, load("layer_output1")), "layer's sorted logits equal the JIT's");
  check(identical(labels, load("layer_output2")), "layer's labels equal the JIT's");
  check(identical(largest, load("layer_output3")), "layer's largest logit equals the JIT's");
  // A std::vector's memory need not be aligned as kiln's: layer_c copies its input first.
  const std::vector<float> x_values = x.to_vector<float>();
  std::vector<float> c_probabilities(23 * 31), c_sorted(23 * 31);
  std::vector<std::int64_t> c_labels(23);
  double c_largest = 0;
  check(call_layer_from_c(x_values.data(), c_probabilities.data(), c_sorted.data(), c_labels.data(), &c_largest) == 0,
        "layer_c runs");
  check(std::memcmp(c_probabilities.data(), probabilities.data(), c_probabilities.size() * sizeof(float)) == 0 &&
            std::memcmp(c_sorted.data(), sorted.data(), c_sorted.size() * sizeof(float)) == 0 &&
            std::memcmp(c_labels.data(), labels.data(), c_labels.size() * sizeof(std::int64_t)) == 0 &&
            std::memcmp(&c_largest, largest.data(), sizeof c_largest) == 0,
        "layer_c's outputs equal the C++ entry point's");

  const kiln::Tensor rows = load("empty_input0"), scale = load("empty_input1");
  const auto [scaled, sums] = empty(rows, scale);
  check(identical(scaled, load("empty_output0")), "empty's zero-element output is the JIT's");
  check(identical(sums, load("empty_output1")), "empty's sums over zero rows equal the JIT's");
  std::vector<float> c_sums(7, -1);
  check(empty_c(nullptr, static_cast<const float*>(scale.data()), nullptr, c_sums.data()) == 0,
        "empty_c takes null pointers for arrays of zero elements");
  check(std::memcmp(c_sums.data(), sums.data(), 7 * sizeof(float)) == 0, "empty_c's sums equal the JIT's");

  // Control flow: the regions' kernels compiled in from their own files, the loops run by kiln.
  const auto [last, states, count, halved] = loops(load("loops_input0"), load("loops_input1"), load("loops_input2"));
  check(identical(last, load("loops_output0")), "loops' last state equals the JIT's");
  check(identical(states, load("loops_output1")), "loops' stacked outputs equal the JIT's");
  check(identical(count, load("loops_output2")), "loops' while_loop count equals the JIT's");
  check(identical(halved, load("loops_output3")), "loops' while_loop result equals the JIT's");

  // Bad calls: clear errors, and the function stays usable.
  try {
    (void)seed(b, a);
    check(false, "seed with swapped inputs throws");
  } catch (const kiln::ValueError& error) {
    const std::string message = error.what();
    check(message.find("input 0 is f32[129,45]") != std::string::npos && message.find("main.cpp") != std::string::npos,
          "the error names the input, its shape and this line: " + message);
  }
  const std::string null_output = call_layer_with_a_null_output(x_values.data());
  check(null_output.find("output 2 is a null pointer") != std::string::npos,
        "layer_c with a null output fails, saying why: '" + null_output + "'");
  check(identical(seed(a, b), seed_expected), "seed still works after the errors");

  if (failures) return 1;
  std::cout << "exported functions match the JIT\n";
  return 0;
}
