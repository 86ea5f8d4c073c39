#pragma once
// Input signatures: a function is traced once per distinct list of argument
// (dtype, shape, device).

#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/shape.h>

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::trace {

struct ArgumentType {
  DType dtype = DType::f32;
  Shape shape;
  Device device;
  std::string to_string() const;
  friend bool operator==(const ArgumentType&, const ArgumentType&) = default;
};

struct Signature {
  std::vector<ArgumentType> arguments;
  // "(f32[2,3] cpu, i64[] cpu)"
  std::string to_string() const;
  friend bool operator==(const Signature&, const Signature&) = default;
};

struct SignatureHash {
  std::size_t operator()(const Signature& signature) const;
};

// How `newer` differs from `older`, naming the first argument that changed:
// "argument 1 changed from f32[5] cpu to f32[6] cpu".
std::string describe_change(const Signature& older, const Signature& newer);

}  // namespace kiln::trace
