#include <kiln/error.h>

namespace kiln {
namespace {

std::string compose(const char* kind, const std::string& op, const std::string& detail, const std::string& location) {
  std::string message = std::string(kind) + ": " + op + ": " + detail;
  if (!location.empty()) message += " (at " + location + ")";
  return message;
}

}  // namespace

std::string to_string(const std::source_location& location) {
  if (location.line() == 0) return {};
  return std::string(location.file_name()) + ":" + std::to_string(location.line());
}

Error::Error(std::string op, std::string detail, const std::string& location)
    : Error("kiln::Error", std::move(op), std::move(detail), location) {}

Error::Error(const char* kind, std::string op, std::string detail, const std::string& location)
    : std::runtime_error(compose(kind, op, detail, location)),
      op_(std::move(op)),
      detail_(std::move(detail)),
      location_(location) {}

}  // namespace kiln
