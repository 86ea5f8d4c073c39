#pragma once
// Input signatures: a function is traced once per distinct list of argument
// (dtype, shape, device) and of static argument values (static_arguments.h).

#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/shape.h>
#include <kiln/static_arguments.h>

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
  std::vector<ArgumentType> arguments;  // the tensor arguments, in order
  // The static arguments, in order; the positions they leave free are the tensors'.
  std::vector<detail::StaticValue> statics;
  // "(f32[2,3] cpu, float 0.5, i64[] cpu)"
  std::string to_string() const;
  friend bool operator==(const Signature&, const Signature&) = default;
};

struct SignatureHash {
  std::size_t operator()(const Signature& signature) const;
};

struct SignatureChange {
  std::string text;
  bool of_static_argument = false;  // the first change is a static argument's value (or type)
};
// How `newer` differs from `older`, naming the first argument that changed by
// its position among all arguments: "argument 1 changed from f32[5] cpu to
// f32[6] cpu", "argument 1 (float) changed from 0.5 to 0.25".
SignatureChange describe_change(const Signature& older, const Signature& newer);

}  // namespace kiln::trace
