// digits-mlp: trains an MLP classifier on scikit-learn's handwritten digits (1797 images of 8x8 pixels, kept in
// examples/digits/digits.bin) with one compiled training step, and reports the loss per epoch, the test accuracy
// and the time.
//
//   build/examples/digits-mlp [--epochs N] [--seed S] [--data PATH]

#include "digits/mlp_training.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = KILN_DIGITS_DATA;
  int epochs = 20;
  digits::TrainingOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--epochs" && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (argument == "--seed" && i + 1 < argc) options.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (argument == "--data" && i + 1 < argc) path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--epochs N] [--seed S] [--data PATH]\n", argv[0]);
      return 2;
    }
  }
  try {
    const digits::Split data = digits::split_every_fifth(digits::read_digits(path));
    std::printf("digits: %lld training and %lld test images of %lld pixels; MLP %lld-%lld-%lld-%lld, batch %lld, "
                "Adam (rate %g)\n",
                static_cast<long long>(data.train.size()), static_cast<long long>(data.test.size()),
                static_cast<long long>(data.train.features), static_cast<long long>(data.train.features),
                static_cast<long long>(options.hidden), static_cast<long long>(options.hidden),
                static_cast<long long>(options.classes), static_cast<long long>(options.batch),
                options.learning_rate);
    const auto start = std::chrono::steady_clock::now();
    digits::MlpTrainer trainer(data.train.features, options);
    // A fast wrong gradient is no result: the compiled step must compute what the standard executor does.
    const double difference = trainer.jit_against_standard(data.train);
    const kiln::FunctionStatistics compiled = trainer.compiled_step().statistics();
    std::printf("training step: %lld kernels compiled (built in %.2f s); JIT vs standard executor: largest "
                "relative difference %.2g\n",
                static_cast<long long>(compiled.kernels_per_call), compiled.compile_seconds, difference);
    if (!(difference <= 1e-3)) {
      std::fprintf(stderr, "digits: the compiled training step disagrees with the standard executor\n");
      return 1;
    }
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      const double loss = trainer.train_epoch(data.train);
      std::printf("epoch %3d  loss %.4f  (%.2f s)\n", epoch, loss, seconds_since(start));
    }
    const double accuracy = trainer.accuracy(data.test);
    std::printf("test accuracy %.2f%% (%lld steps, %.2f s in all, compilation included)\n", 100 * accuracy,
                static_cast<long long>(trainer.steps()), seconds_since(start));
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "digits: %s\n", error.what());
    return 1;
  }
}
