#pragma once
// A labelled data set of small images as the digits example trains on: scikit-learn's handwritten digits
// (scripts/export-digits writes them to digits.bin), or whatever a test generates.

#include <cstdint>
#include <string>
#include <vector>

namespace digits {

struct DataSet {
  std::int64_t features = 0;      // values per example (64 pixels for 8x8 digits)
  std::vector<float> examples;    // row-major [size(), features]
  std::vector<std::int32_t> labels;

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  // Appends example `index` of `other` (same features).
  void append(const DataSet& other, std::int64_t index);
};

// Reads a file in scripts/export-digits' format; pixels (0-16) are scaled to [0, 1], as a model wants inputs of
// order 1. Throws std::runtime_error naming the file on anything malformed.
DataSet read_digits(const std::string& path);

// A fixed split, the same on every run: every fifth example (the first, the sixth, ...) is a test example, the
// rest train. scikit-learn's digits have their classes mixed through the file (no stretch of one class), so the
// 360 test images of the real set hold 26 to 48 of each class.
struct Split {
  DataSet train, test;
};
Split split_every_fifth(const DataSet& data);

}  // namespace digits
