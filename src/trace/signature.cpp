#include "trace/signature.h"

#include <functional>
#include <string_view>

namespace kiln::trace {
namespace {

// One argument of a signature, whichever kind it is.
struct ArgumentView {
  const ArgumentType* tensor = nullptr;
  const detail::StaticValue* value = nullptr;
};

// The arguments in call order: statics at their positions, tensors in the positions left.
std::vector<ArgumentView> in_call_order(const Signature& signature) {
  std::vector<ArgumentView> views(signature.arguments.size() + signature.statics.size());
  std::vector<bool> taken(views.size(), false);
  for (const detail::StaticValue& value : signature.statics) {
    const auto position = static_cast<std::size_t>(value.position);
    if (position < views.size()) {
      views[position].value = &value;
      taken[position] = true;
    }
  }
  std::size_t tensor = 0;
  for (std::size_t position = 0; position < views.size() && tensor < signature.arguments.size(); ++position)
    if (!taken[position]) views[position].tensor = &signature.arguments[tensor++];
  return views;
}

std::string describe(const ArgumentView& view) {
  if (view.tensor) return view.tensor->to_string();
  if (view.value) return view.value->type + " " + view.value->text;
  return "?";
}

}  // namespace

std::string ArgumentType::to_string() const {
  return std::string(kiln::to_string(dtype)) + shape.to_string() + " " + device.to_string();
}

std::string Signature::to_string() const {
  std::string text = "(";
  const std::vector<ArgumentView> views = in_call_order(*this);
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (i) text += ", ";
    text += describe(views[i]);
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
  for (const detail::StaticValue& value : signature.statics) {
    mix(static_cast<std::size_t>(value.position));
    mix(std::hash<std::string>{}(value.type));
    mix(std::hash<std::string>{}(value.bytes));
  }
  return hash;
}

SignatureChange describe_change(const Signature& older, const Signature& newer) {
  const std::vector<ArgumentView> before = in_call_order(older), after = in_call_order(newer);
  if (before.size() != after.size())
    return {"the number of arguments changed from " + std::to_string(before.size()) + " to " +
            std::to_string(after.size())};
  for (std::size_t i = 0; i < after.size(); ++i) {
    const std::string argument = "argument " + std::to_string(i);
    const ArgumentView &old_view = before[i], &new_view = after[i];
    if (old_view.tensor && new_view.tensor) {
      if (!(*old_view.tensor == *new_view.tensor))
        return {argument + " changed from " + describe(old_view) + " to " + describe(new_view)};
    } else if (old_view.value && new_view.value && old_view.value->type == new_view.value->type) {
      if (!(old_view.value->bytes == new_view.value->bytes))
        return {argument + " (" + new_view.value->type + ") changed from " + old_view.value->text + " to " +
                    new_view.value->text,
                true};
    } else {
      return {argument + " changed from " + describe(old_view) + " to " + describe(new_view),
              old_view.value != nullptr || new_view.value != nullptr};
    }
  }
  return {"no argument changed"};
}

}  // namespace kiln::trace
