#include "digits/digits_data.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace digits {

void DataSet::append(const DataSet& other, std::int64_t index) {
  const auto begin = other.examples.begin() + index * other.features;
  examples.insert(examples.end(), begin, begin + other.features);
  labels.push_back(other.labels.at(static_cast<std::size_t>(index)));
}

DataSet read_digits(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (scripts/export-digits writes it)");
  std::string header;
  std::getline(in, header);
  std::istringstream fields(header);
  std::string magic;
  std::int64_t count = 0, pixels = 0;
  fields >> magic >> count >> pixels;
  if (magic != "kiln-digits" || count <= 0 || pixels <= 0)
    throw std::runtime_error(path + ": not a kiln-digits file (header '" + header + "')");
  DataSet data;
  data.features = pixels;
  data.examples.reserve(static_cast<std::size_t>(count * pixels));
  std::vector<unsigned char> record(static_cast<std::size_t>(1 + pixels));
  for (std::int64_t i = 0; i < count; ++i) {
    if (!in.read(reinterpret_cast<char*>(record.data()), static_cast<std::streamsize>(record.size())))
      throw std::runtime_error(path + ": ends after " + std::to_string(i) + " of " + std::to_string(count) +
                               " images");
    if (record[0] > 9) throw std::runtime_error(path + ": image " + std::to_string(i) + " has label " +
                                                std::to_string(record[0]));
    data.labels.push_back(record[0]);
    for (std::int64_t p = 1; p <= pixels; ++p) data.examples.push_back(static_cast<float>(record[p]) / 16.0f);
  }
  if (in.peek() != std::ifstream::traits_type::eof()) throw std::runtime_error(path + ": has bytes after the images");
  return data;
}

Split split_every_fifth(const DataSet& data) {
  Split split;
  split.train.features = split.test.features = data.features;
  for (std::int64_t i = 0; i < data.size(); ++i) (i % 5 == 0 ? split.test : split.train).append(data, i);
  return split;
}

}  // namespace digits
