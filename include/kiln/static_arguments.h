#pragma once
// Static arguments: the arguments of a kiln::function (or kiln::grad, kiln::value_and_grad) that are not tensors.
//
//   auto scaled = kiln::function([](kiln::Tensor x, float scale) { return x * scale; });
//   scaled(x, 0.5f);    // traces with scale = 0.5: a constant of the graph
//   scaled(x, 0.5f);    // runs that graph
//   scaled(x, 0.25f);   // a new value: traces again, cached beside the first (as a new shape is)
//
// A static argument is part of the signature, as JAX's static_argnums are: the callable sees the value as an
// ordinary C++ value (if, loops and arithmetic on it are decided at trace time), and each distinct value has a
// trace (and with jit_compile a compiled module) of its own. Allowed: bool, integer types, float, double, enums,
// and std::string (a string literal is passed to the callable as a std::string). Values compare by their bits:
// floats by bit pattern, so a NaN argument equals itself (NaN != NaN does not retrace every call), and -0.0 is not
// 0.0 (1 / x differs). long double is not allowed: its padding bytes make a bit pattern meaningless. Any other
// argument type stops the compilation with a static_assert naming what is allowed.

#include <charconv>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

namespace kiln {

namespace detail {

template <class T>
struct is_string_literal : std::false_type {};
template <std::size_t size>
struct is_string_literal<char[size]> : std::true_type {};
template <std::size_t size>
struct is_string_literal<const char[size]> : std::true_type {};

// Whether T (references and const removed) is a string a static argument holds as a std::string.
template <class T>
inline constexpr bool is_static_string =
    std::is_same_v<std::remove_cvref_t<T>, std::string> || is_string_literal<std::remove_reference_t<T>>::value;

}  // namespace detail

// Whether a value of type T (as passed: references and const aside) can be a static argument.
template <class T>
inline constexpr bool is_static_argument_v =
    std::is_integral_v<std::remove_cvref_t<T>> || std::is_same_v<std::remove_cvref_t<T>, float> ||
    std::is_same_v<std::remove_cvref_t<T>, double> || std::is_enum_v<std::remove_cvref_t<T>> ||
    detail::is_static_string<T>;

namespace detail {

// What the callable receives for a static argument of type T: the value itself (a std::string for a literal).
template <class T>
using StaticStorage = std::conditional_t<is_static_string<T>, std::string, std::remove_cvref_t<T>>;

// A static argument as a signature holds it. Two are the same when their position, type and bytes are.
struct StaticValue {
  int position = 0;   // among all the call's arguments, tensors included
  std::string type;   // "float", "int", "std::string", an enum's name
  std::string bytes;  // the value's object representation (a string's characters): compared and hashed
  std::string text;   // the value as warnings print it: 0.5, true, "relu"
  friend bool operator==(const StaticValue& a, const StaticValue& b) {
    return a.position == b.position && a.type == b.type && a.bytes == b.bytes;
  }
};

// The name of an arithmetic type, as warnings print it.
template <class T>
constexpr const char* arithmetic_type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_same_v<T, char>)
    return "char";
  else if constexpr (std::is_same_v<T, signed char>)
    return "signed char";
  else if constexpr (std::is_same_v<T, unsigned char>)
    return "unsigned char";
  else if constexpr (std::is_same_v<T, short>)
    return "short";
  else if constexpr (std::is_same_v<T, unsigned short>)
    return "unsigned short";
  else if constexpr (std::is_same_v<T, int>)
    return "int";
  else if constexpr (std::is_same_v<T, unsigned>)
    return "unsigned";
  else if constexpr (std::is_same_v<T, long>)
    return "long";
  else if constexpr (std::is_same_v<T, unsigned long>)
    return "unsigned long";
  else if constexpr (std::is_same_v<T, long long>)
    return "long long";
  else if constexpr (std::is_same_v<T, unsigned long long>)
    return "unsigned long long";
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else
    return "character";  // wchar_t, char8_t, char16_t, char32_t
}

// An enum's readable name (demangled where the compiler allows).
std::string enum_type_name(const std::type_info& type);

template <class Value>
std::string number_text(Value value) {
  char buffer[64];
  std::to_chars_result result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

template <class T>
StaticValue static_value(int position, const T& value) {
  using Value = std::remove_cvref_t<T>;
  StaticValue result;
  result.position = position;
  if constexpr (is_static_string<T>) {
    const std::string text(value);
    result.type = "std::string";
    result.bytes = text;
    result.text =
        "\"" + (text.size() > 40 ? text.substr(0, 40) + "...\" (" + std::to_string(text.size()) + " characters)"
                                 : text + "\"");
  } else {
    result.type = std::is_enum_v<Value> ? enum_type_name(typeid(Value)) : arithmetic_type_name<Value>();
    result.bytes.resize(sizeof(Value));
    std::memcpy(result.bytes.data(), &value, sizeof(Value));
    if constexpr (std::is_same_v<Value, bool>) {
      result.text = value ? "true" : "false";
    } else if constexpr (std::is_floating_point_v<Value>) {
      result.text = number_text(value);  // the shortest text that reads back to the same value
    } else {
      using Integer = std::conditional_t<std::is_enum_v<Value>, std::underlying_type<Value>, std::type_identity<Value>>;
      using Wide = std::conditional_t<std::is_signed_v<typename Integer::type>, long long, unsigned long long>;
      result.text = number_text(static_cast<Wide>(value));
    }
  }
  return result;
}

}  // namespace detail
}  // namespace kiln
