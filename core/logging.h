// The runtime's logger: one sink (the host's callback, or stderr) shared by the core and plugins.
#pragma once

#include <string>

#include "attnrt/attnrt.h"

namespace attnrt::core {

struct LogSink {
  attnrt_log_fn fn = nullptr;  // nullptr: stderr
  void* user_data = nullptr;

  void Log(int32_t level, const std::string& message) const;
};

}  // namespace attnrt::core
