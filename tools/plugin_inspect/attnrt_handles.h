// Owning wrappers for attnrt handles (unique_ptr with the ABI's destroy/release functions) and
// runtime creation from the global command-line options.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// Whether a kernel of this exact name is registered by a plugin the runtime found available.
bool runtime_has_kernel(const attnrt_runtime* runtime, const std::string& name);

// What every --json document starts with: {"version": library version, "abi_version":
// "MAJOR.MINOR" of the C ABI the library was built with, "threads": the runtime's CPU threads}.
nlohmann::ordered_json runtime_json(const attnrt_runtime* runtime);

// "cpu", "cuda" or "device(N)".
std::string device_name(int32_t device_type);

// Appends {"name", "shape", "dtype", "device"} (and "strides", in elements, for a strided view)
// for each non-NULL tensors[i] to `list`, named by name(i).
template <class Name>
void append_tensors_json(nlohmann::ordered_json& list, const attnrt_tensor* const* tensors,
                         size_t count, Name name) {
  for (size_t i = 0; i < count; ++i) {
    const attnrt_tensor* t = tensors[i];
    if (t == nullptr) continue;
    list.push_back({{"name", std::string(name(i))},
                    {"shape", std::vector<int64_t>(t->shape, t->shape + t->ndim)},
                    {"dtype", attnrt_dtype_name(t->dtype)},
                    {"device", device_name(t->device.device_type)}});
    // A strided view (sparse MLA's PA_BBND caches with a block stride): its strides, in elements.
    if (t->strides != nullptr) {
      list.back()["strides"] = std::vector<int64_t>(t->strides, t->strides + t->ndim);
    }
  }
}

}  // namespace plugin_inspect
