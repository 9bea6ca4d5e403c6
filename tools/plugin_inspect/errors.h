// Error types of plugin-inspect and how main() maps them to exit codes:
//   UsageError  → exit 2 (bad command line: unknown option, missing or conflicting flag)
//   AttnrtError → exit 1, printed as "error: <status name>: <attnrt_last_error_message()>"
//   ToolError   → exit 1 (input files, I/O, failed checks the tool makes itself)
//   OutOfMemoryError → exit 1, "out of memory while allocating <what> (<bytes>)"; any other
//                 std::bad_alloc is reported the same way, naming the command
// With --json every error is also printed to stdout as {"error": {"status", "message"}}.
#pragma once

#include <stdexcept>
#include <string>

#include "attnrt/attnrt.h"

namespace plugin_inspect {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ToolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AttnrtError : public std::runtime_error {
 public:
  AttnrtError(attnrt_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  attnrt_status status() const { return status_; }

 private:
  attnrt_status status_;
};

// Throws AttnrtError with the thread's last error message when status is not ATTNRT_OK.
inline void check(attnrt_status status) {
  if (status != ATTNRT_OK) throw AttnrtError(status, attnrt_last_error_message());
}

}  // namespace plugin_inspect
