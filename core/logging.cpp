#include "core/logging.h"

#include <cstdio>

namespace attnrt::core {
namespace {

const char* LevelName(int32_t level) {
  switch (level) {
    case ATTNRT_LOG_DEBUG:
      return "debug";
    case ATTNRT_LOG_INFO:
      return "info";
    case ATTNRT_LOG_WARNING:
      return "warning";
    case ATTNRT_LOG_ERROR:
      return "error";
    default:
      return "log";
  }
}

}  // namespace

void LogSink::Log(int32_t level, const std::string& message) const {
  if (fn != nullptr) {
    fn(user_data, level, message.c_str());
    return;
  }
  std::fprintf(stderr, "attnrt [%s]: %s\n", LevelName(level), message.c_str());
}

}  // namespace attnrt::core
