// Logging to stderr. The CLI prints model output on stdout and everything else here, so that
// `promptcache run ... > out.txt` captures only the generated text.
#pragma once

#include <cstdarg>

namespace promptcache {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kQuiet = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace promptcache

#define PC_LOG_DEBUG(...) ::promptcache::Log(::promptcache::LogLevel::kDebug, __VA_ARGS__)
#define PC_LOG_INFO(...) ::promptcache::Log(::promptcache::LogLevel::kInfo, __VA_ARGS__)
#define PC_LOG_WARN(...) ::promptcache::Log(::promptcache::LogLevel::kWarning, __VA_ARGS__)
#define PC_LOG_ERROR(...) ::promptcache::Log(::promptcache::LogLevel::kError, __VA_ARGS__)
