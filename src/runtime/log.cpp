#include "runtime/log.h"

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string_view>

namespace kiln::runtime {
namespace {

LogLevel level_from_environment() {
  const char* text = std::getenv("KILN_LOG");
  if (!text) return LogLevel::warning;
  std::string_view value(text);
  if (value == "off" || value == "0") return LogLevel::off;
  if (value == "info") return LogLevel::info;
  if (value == "debug") return LogLevel::debug;
  return LogLevel::warning;
}

std::mutex& handler_mutex() {
  static std::mutex mutex;
  return mutex;
}

LogHandler& handler() {
  static LogHandler instance;
  return instance;
}

const char* prefix(LogLevel level) {
  switch (level) {
    case LogLevel::warning: return "kiln warning: ";
    case LogLevel::info: return "kiln: ";
    case LogLevel::debug: return "kiln debug: ";
    case LogLevel::off: break;
  }
  return "";
}

}  // namespace

LogLevel log_level() {
  static const LogLevel level = level_from_environment();
  return level;
}

bool log_enabled(LogLevel level) { return level != LogLevel::off && level <= log_level(); }

void log(LogLevel level, const std::string& message) {
  std::lock_guard lock(handler_mutex());
  if (handler()) {
    handler()(level, message);
    return;
  }
  if (log_enabled(level)) std::cerr << prefix(level) << message << std::endl;
}

}  // namespace kiln::runtime

namespace kiln {

LogHandler set_log_handler(LogHandler handler) {
  std::lock_guard lock(runtime::handler_mutex());
  LogHandler old = std::move(runtime::handler());
  runtime::handler() = std::move(handler);
  return old;
}

}  // namespace kiln
