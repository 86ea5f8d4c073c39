#pragma once
// Where kiln's warnings go. By default they are printed to stderr as
// "kiln warning: ...". KILN_LOG=off silences them, KILN_LOG=info also prints
// what the JIT does (compiles, cache hits), KILN_LOG=debug more detail.

#include <functional>
#include <string>

namespace kiln {

enum class LogLevel { off, warning, info, debug };

// Replaces the destination of messages (for tests and applications with
// their own logging); pass nullptr to restore stderr. Returns the old one.
using LogHandler = std::function<void(LogLevel level, const std::string& message)>;
LogHandler set_log_handler(LogHandler handler);

}  // namespace kiln
