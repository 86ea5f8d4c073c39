// Writes what the test export_program builds into a program of its own (scripts/check-export.cmake): three
// functions exported with kiln::export_function, and for each its inputs and the JIT's outputs as .npy files,
// which the program (tests/export/program) compares with what the exported functions compute.
//
//   kiln-export-writer DIRECTORY

#include <kiln/kiln.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

namespace {

void save_all(const std::filesystem::path& directory, const std::string& prefix,
              const std::vector<kiln::Tensor>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    kiln::save_npy(directory / (prefix + std::to_string(i) + ".npy"), tensors[i]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kiln-export-writer DIRECTORY\n";
    return 2;
  }
  const std::filesystem::path directory = argv[1];

  // The README's seed function, at odd sizes: one GEMM with its epilogue, and a reduction.
  auto seed = [](kiln::Tensor x, kiln::Tensor y) {
    kiln::Tensor z = kiln::matmul(x, y);
    z = z + kiln::sin(z);
    z = kiln::nn::relu(z);
    return kiln::reduce_sum(z);
  };
  const kiln::Tensor a = kiln::random::normal({67, 129}, {.seed = 1});
  const kiln::Tensor b = kiln::random::normal({129, 45}, {.seed = 2});
  const kiln::ExportedFiles seed_files =
      kiln::export_function(seed, std::tuple{a, b}, {.directory = directory.string(), .name = "seed"});
  const kiln::Tensor seed_result = kiln::function(seed, {.jit_compile = true})(a, b);
  save_all(directory, "seed_input", {a, b});
  save_all(directory, "seed_output", {seed_result});

  // A layer with captured weights (exported as constants), a static argument, several outputs of several dtypes
  // and ranks, a library kernel (sort) and a row kernel (softmax).
  const kiln::Tensor weights = kiln::random::normal({45, 31}, {.seed = 3});
  const kiln::Tensor bias = kiln::random::normal({31}, {.seed = 4});
  auto layer = [&](kiln::Tensor x, double temperature) {
    kiln::Tensor logits = (kiln::matmul(x, weights) + bias) / temperature;
    kiln::Tensor probabilities = kiln::nn::softmax(logits);
    return std::tuple{probabilities, kiln::sort(logits, -1, true), kiln::argmax(logits, 1),
                      kiln::reduce_max(kiln::cast(logits, kiln::DType::f64))};
  };
  const kiln::Tensor x = kiln::random::normal({23, 45}, {.seed = 5});
  const kiln::ExportedFiles layer_files =
      kiln::export_function(layer, std::tuple{x, 0.5}, {.directory = directory.string(), .name = "layer"});
  const auto [probabilities, sorted, labels, largest] = kiln::function(layer, {.jit_compile = true})(x, 0.5);
  save_all(directory, "layer_input", {x});
  save_all(directory, "layer_output", {probabilities, sorted, labels, largest});

  // Empty arrays and a scalar input: an output of zero elements, and a sum over zero rows.
  auto empty = [](kiln::Tensor rows, kiln::Tensor scale) {
    return std::tuple{rows * scale, kiln::reduce_sum(rows, {0}) + scale};
  };
  const kiln::Tensor rows = kiln::random::normal({0, 7}, {.seed = 6});
  const kiln::Tensor scale = kiln::random::normal({}, {.seed = 7});
  kiln::export_function(empty, std::tuple{rows, scale}, {.directory = directory.string(), .name = "empty"});
  const auto [scaled, sums] = kiln::function(empty, {.jit_compile = true})(rows, scale);
  save_all(directory, "empty_input", {rows, scale});
  save_all(directory, "empty_output", {scaled, sums});

  // Control flow: a scan whose step branches on the data, and a while_loop; each region a module of its own.
  auto loops = [](kiln::Tensor h0, kiln::Tensor xs, kiln::Tensor w) {
    const auto [last, states] = kiln::scan(
        [&](const kiln::Tensor& h, const kiln::Tensor& x) {
          const kiln::Tensor next = kiln::cond(
              kiln::reduce_sum(x) > 0.0, [&]() { return kiln::tanh(kiln::matmul(h, w) + x); },
              [&]() { return h * 0.5 - x; });
          return std::pair{next, kiln::reduce_max(next)};
        },
        h0, xs);
    const auto [count, halved] = kiln::while_loop(
        [](const std::pair<kiln::Tensor, kiln::Tensor>& state) {
          return kiln::reduce_max(kiln::abs(state.second)) > 0.1;
        },
        [](const std::pair<kiln::Tensor, kiln::Tensor>& state) {
          return std::pair{state.first + 1, state.second * 0.5};
        },
        std::pair{kiln::zeros({}, kiln::DType::i32), last});
    return std::tuple{last, states, count, halved};
  };
  const kiln::Tensor h0 = kiln::random::normal({5, 8}, {.seed = 8});
  const kiln::Tensor xs = kiln::random::normal({6, 5, 8}, {.seed = 9});
  const kiln::Tensor w = kiln::random::normal({8, 8}, {.seed = 10, .stddev = 0.3});
  const kiln::ExportedFiles loops_files =
      kiln::export_function(loops, std::tuple{h0, xs, w}, {.directory = directory.string(), .name = "loops"});
  const auto [last, states, count, halved] = kiln::function(loops, {.jit_compile = true})(h0, xs, w);
  save_all(directory, "loops_input", {h0, xs, w});
  save_all(directory, "loops_output", {last, states, count, halved});
  if (loops_files.region_kernels.empty()) {
    std::cerr << "loops: no region kernels were written\n";
    return 1;
  }

  std::cout << "exported seed (" << seed_files.kernel_count << " kernels) and layer (" << layer_files.kernel_count
            << " kernels) to " << directory.string() << "\n";
  return 0;
}
