#pragma once
// The kiln::Error hierarchy. Every user-facing error names the op, describes
// the operands (shapes and dtypes), and says where in the user's code the call
// was made, e.g.
//   kiln::ShapeError: add: cannot broadcast f32[2,3] with f32[4] (at model.cpp:12)

#include <source_location>
#include <stdexcept>
#include <string>

#if !defined(__cpp_lib_source_location)
// Clang 14 with libstdc++ 12: <source_location> is empty because the compiler
// lacks __builtin_source_location. This stand-in (the same interface, built on
// the builtins clang does have, evaluated at the call site like the real one)
// lets the fuzz and sanitizer builds use clang; GCC never sees it.
#include <cstdint>
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           std::uint_least32_t line = __builtin_LINE(),
                                           std::uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location location;
    location.file_ = file;
    location.function_ = function;
    location.line_ = line;
    location.column_ = column;
    return location;
  }
  constexpr source_location() noexcept = default;
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
  std::uint_least32_t column_ = 0;
};
}  // namespace std
#endif

namespace kiln {

// "file:line" of a call site.
std::string to_string(const std::source_location& location);

class Error : public std::runtime_error {
 public:
  // `op` names the operation ("matmul", "kiln::function", "Tensor::item");
  // `detail` says what was wrong with which operands.
  Error(std::string op, std::string detail, const std::string& location);
  Error(std::string op, std::string detail, const std::source_location& location)
      : Error(std::move(op), std::move(detail), to_string(location)) {}

  const std::string& op() const { return op_; }
  const std::string& detail() const { return detail_; }
  // "file:line" of the user's call, or empty if unknown.
  const std::string& location() const { return location_; }

 protected:
  Error(const char* kind, std::string op, std::string detail, const std::string& location);

 private:
  std::string op_;
  std::string detail_;
  std::string location_;
};

#define KILN_DECLARE_ERROR(Name)                                                                 \
  class Name : public Error {                                                                     \
   public:                                                                                        \
    Name(std::string op, std::string detail, const std::string& location)                         \
        : Error("kiln::" #Name, std::move(op), std::move(detail), location) {}                    \
    Name(std::string op, std::string detail, const std::source_location& location)                \
        : Name(std::move(op), std::move(detail), to_string(location)) {}                          \
  };

KILN_DECLARE_ERROR(ShapeError)    // incompatible or invalid shapes, axes, ranks
KILN_DECLARE_ERROR(DTypeError)    // an op does not accept an operand's dtype
KILN_DECLARE_ERROR(DeviceError)   // mixed devices, a missing GPU
KILN_DECLARE_ERROR(ValueError)    // bad values: reading a traced tensor, bad arguments
KILN_DECLARE_ERROR(CompileError)  // the JIT could not compile a function
KILN_DECLARE_ERROR(ParseError)    // malformed IR text
KILN_DECLARE_ERROR(IOError)       // a file that cannot be opened, read or written, or whose bytes are not
                                  // what its format says (bad magic, truncated, malformed header)
KILN_DECLARE_ERROR(InternalError) // a broken kiln invariant: a bug, please report it

#undef KILN_DECLARE_ERROR

}  // namespace kiln
