// Owning wrappers for attnrt handles (unique_ptr with the ABI's destroy/release functions) and
// runtime creation from the global command-line options.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"

namespace plugin_inspect {

struct RuntimeDeleter {
  void operator()(attnrt_runtime* runtime) const { attnrt_runtime_destroy(runtime); }
};
struct OpDeleter {
  void operator()(attnrt_op* op) const { attnrt_op_destroy(op); }
};
struct PlanDeleter {
  void operator()(attnrt_plan* plan) const { attnrt_plan_release(plan); }
};
struct ExplanationDeleter {
  void operator()(attnrt_explanation* explanation) const {
    attnrt_explanation_destroy(explanation);
  }
};

using RuntimePtr = std::unique_ptr<attnrt_runtime, RuntimeDeleter>;
using OpPtr = std::unique_ptr<attnrt_op, OpDeleter>;
using PlanPtr = std::unique_ptr<attnrt_plan, PlanDeleter>;
using ExplanationPtr = std::unique_ptr<attnrt_explanation, ExplanationDeleter>;

// The options every subcommand accepts; unset optionals defer to the runtime's defaults (and thus
// to ATTNRT_KERNEL, ATTNRT_DISABLE, ATTNRT_NUM_THREADS).
struct RuntimeSettings {
  std::vector<std::string> plugin_paths;
  std::optional<std::string> kernel;   // comma-separated globs to pin
  std::optional<std::string> disable;  // comma-separated globs to exclude
  int threads = 0;                     // 0 = runtime default
  bool no_default_paths = false;
};

// Creates a runtime from the settings; throws AttnrtError on failure.
RuntimePtr make_runtime(const RuntimeSettings& settings);

// Threads of the runtime's CPU pool.
int runtime_threads(const attnrt_runtime* runtime);

}  // namespace plugin_inspect
