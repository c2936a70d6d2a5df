#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace promptcache {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mu;
}  // namespace

void SetLogLevel(LogLevel level) { g_level = level; }
LogLevel GetLogLevel() { return g_level; }

void Log(LogLevel level, const char* fmt, ...) {
  if (level < g_level.load()) return;
  static const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fputs(kPrefix[static_cast<int>(level)], stderr);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

}  // namespace promptcache
