#include "trace/signature.h"

#include <functional>

namespace kiln::trace {

std::string ArgumentType::to_string() const {
  return std::string(kiln::to_string(dtype)) + shape.to_string() + " " + device.to_string();
}

std::string Signature::to_string() const {
  std::string text = "(";
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (i) text += ", ";
    text += arguments[i].to_string();
  }
  return text + ")";
}

std::size_t SignatureHash::operator()(const Signature& signature) const {
  std::size_t hash = signature.arguments.size();
  auto mix = [&hash](std::size_t value) { hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2); };
  for (const ArgumentType& argument : signature.arguments) {
    mix(static_cast<std::size_t>(argument.dtype));
    mix(static_cast<std::size_t>(argument.device.kind) * 131 + static_cast<std::size_t>(argument.device.index));
    for (std::int64_t dim : argument.shape.dims()) mix(std::hash<std::int64_t>{}(dim));
  }
  return hash;
}

std::string describe_change(const Signature& older, const Signature& newer) {
  if (older.arguments.size() != newer.arguments.size())
    return "the number of arguments changed from " + std::to_string(older.arguments.size()) + " to " +
           std::to_string(newer.arguments.size());
  for (std::size_t i = 0; i < newer.arguments.size(); ++i)
    if (!(older.arguments[i] == newer.arguments[i]))
      return "argument " + std::to_string(i) + " changed from " + older.arguments[i].to_string() + " to " +
             newer.arguments[i].to_string();
  return "no argument changed";
}

}  // namespace kiln::trace
