// Calls into plugin code, contained. A plugin may throw (C++ plugins break the rule of plugin.h),
// return a status outside attnrt_status, or have a parallel_for callback throw on a pool worker.
// None of that may reach the host as-is: an exception is described while the plugin that threw it
// is still loaded (its type, its what() and its destructor live in the plugin's code), and the
// caller turns the description into a diagnostic or a status naming the plugin or kernel.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "attnrt/attnrt.h"
#include "core/plugin_record.h"
#include "core/status.h"

namespace attnrt::core {

// Inside a catch block: "an exception (std::runtime_error): <what>" or "an exception of type T (not
// a std::exception)". Everything is copied, nothing refers to the exception afterwards.
std::string DescribeCurrentException();

// While alive, collects the first failure that host->parallel_for reports on this thread (a
// callback threw on some thread). Scopes nest; the innermost one collects.
class PluginCallScope {
 public:
  PluginCallScope();
  ~PluginCallScope();
  PluginCallScope(const PluginCallScope&) = delete;
  PluginCallScope& operator=(const PluginCallScope&) = delete;

  const std::string& parallel_failure() const { return parallel_failure_; }

  // Records `failure` ("a parallel_for callback threw ...") in the innermost scope of this thread;
  // false when there is none. The first failure is kept, except that one which lost work
  // (every_range_ran false: ranges were skipped, outputs incomplete) replaces one which did not
  // (an executor that threw after every range ran), so the description never says the outputs
  // are complete when they are not.
  static bool Report(const std::string& failure, bool every_range_ran = false);

 private:
  PluginCallScope* outer_;
  std::string parallel_failure_;
  bool failure_lost_work_ = false;
};

// Runs `body` (one call into a plugin). Returns "" when it returned normally; else what went
// wrong, worded to follow the function's name: "threw an exception (...): ..." or "returned after
// a parallel_for callback threw ...".
template <typename F>
std::string CallPlugin(F&& body) {
  PluginCallScope scope;
  try {
    std::forward<F>(body)();
  } catch (...) {
    return "threw " + DescribeCurrentException();
  }
  if (!scope.parallel_failure().empty()) {
    return "returned after " + scope.parallel_failure();
  }
  return {};
}

// True for the codes attnrt.h defines (ATTNRT_OK to ATTNRT_ERROR_INTERNAL).
bool IsKnownStatus(int32_t status);

// "ATTNRT_ERROR_INTERNAL", or "42 (not an attnrt_status)" for a value outside the enum.
std::string StatusText(int32_t status);

// Calls kernel.desc->run(args). A status outside attnrt_status, an exception or a failed
// parallel_for callback becomes ATTNRT_ERROR_INTERNAL naming the kernel.
Status RunKernel(const KernelRecord& kernel, const void* args);

}  // namespace attnrt::core
