#pragma once
// kiln's internal logging, filtered by KILN_LOG (see include/kiln/log.h).

#include <kiln/log.h>

#include <string>

namespace kiln::runtime {

LogLevel log_level();
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);
inline void warn(const std::string& message) { log(LogLevel::warning, message); }

}  // namespace kiln::runtime
