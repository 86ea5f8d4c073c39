#pragma once
// A small, strict JSON reader (RFC 8259) for the header of safetensors files:
// a file's header is untrusted input, so anything that is not exactly JSON is
// refused rather than guessed at. kiln needs no JSON writer beyond escaping
// strings, which json_quote does.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::detail::json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  // A string's value (UTF-8, escapes resolved), or a number as written.
  std::string text;
  std::vector<Value> elements;
  // An object's members in the order of the text; keys are unique.
  std::vector<std::pair<std::string, Value>> members;

  // The value of a number written as a non-negative integer ("12", not "12.0"
  // or "1e1") that fits 64 bits; false for anything else.
  bool to_unsigned(std::uint64_t* value) const;
};

// "a string", "an object", ... for messages.
const char* describe(Value::Kind kind);

// Parses `text`, one value between optional whitespace, into `value`. On
// malformed JSON (a trailing comma, a lone surrogate, invalid UTF-8, a
// repeated key, nesting deeper than 64, ...) returns false and sets `error`
// to what is wrong and at which byte.
bool parse(std::string_view text, Value* value, std::string* error);

// `text` (UTF-8) as a JSON string literal, quotes included.
std::string quote(std::string_view text);

}  // namespace kiln::detail::json
