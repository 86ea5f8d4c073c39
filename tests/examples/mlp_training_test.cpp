// The digits example's training code (examples/digits) on generated data, never the real set: the compiled step
// agrees with the standard executor, the loss falls, and a classifier of separable classes gets them right while
// one trained on labels that carry no information does not (so the accuracy check can fail).

#include "digits/mlp_training.h"

#include <gtest/gtest.h>

#include <random>

namespace digits {
namespace {

constexpr std::int64_t features = 16, classes = 10;

// Examples of `classes` clusters around centers that `seed` places, noise of a third of their spread; with
// `random_labels`, labels drawn apart from the examples.
DataSet clusters(std::int64_t count, std::uint64_t seed, bool random_labels = false) {
  std::mt19937_64 centers_generator(7), generator(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> centers(static_cast<std::size_t>(classes * features));
  for (float& value : centers) value = normal(centers_generator);
  std::uniform_int_distribution<std::int32_t> label(0, classes - 1);
  DataSet data;
  data.features = features;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int32_t cluster = label(generator);
    for (std::int64_t f = 0; f < features; ++f)
      data.examples.push_back(centers[static_cast<std::size_t>(cluster * features + f)] + normal(generator) / 3);
    data.labels.push_back(random_labels ? label(generator) : cluster);
  }
  return data;
}

const TrainingOptions small = {.hidden = 32, .classes = classes, .batch = 32, .learning_rate = 3e-3, .seed = 3};

TEST(DigitsTraining, CompiledStepAgreesWithTheStandardExecutor) {
  const DataSet train = clusters(256, 1);
  MlpTrainer trainer(features, small);
  EXPECT_LE(trainer.jit_against_standard(train), 1e-3);
  trainer.train_epoch(train);  // and again from a state with moments of its own
  EXPECT_LE(trainer.jit_against_standard(train), 1e-3);
  EXPECT_EQ(trainer.compiled_step().statistics().fallbacks, 0);
}

TEST(DigitsTraining, LearnsSeparableClasses) {
  const DataSet train = clusters(640, 1), test = clusters(200, 2);
  MlpTrainer trainer(features, small);
  const double first_loss = trainer.train_epoch(train);
  double loss = first_loss;
  for (int epoch = 1; epoch < 6; ++epoch) loss = trainer.train_epoch(train);
  EXPECT_EQ(trainer.steps(), 6 * 20);
  EXPECT_LT(loss, first_loss / 4) << "first epoch's loss " << first_loss;
  EXPECT_GE(trainer.accuracy(test), 0.95);
}

TEST(DigitsTraining, LearnsNothingFromLabelsWithoutInformation) {
  const DataSet train = clusters(640, 1, true), test = clusters(200, 2, true);
  MlpTrainer trainer(features, small);
  for (int epoch = 0; epoch < 6; ++epoch) trainer.train_epoch(train);
  EXPECT_LE(trainer.accuracy(test), 0.3);  // chance is 0.1
}

}  // namespace
}  // namespace digits
