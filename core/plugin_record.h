// A loaded plugin and its kernels as the runtime holds them. The record owns the shared library:
// it is unloaded only after shutdown(), and records live as long as the RuntimeState that every op
// and plan keeps alive (plugins stay loaded while anything made from them lives).
#pragma once

#include <boost/dll/shared_library.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/plugin.h"
#include "core/logging.h"

namespace attnrt::core {

struct PluginRecord;

struct KernelRecord {
  std::string name;
  const attnrt_kernel_desc* desc = nullptr;
  const PluginRecord* plugin = nullptr;
  int32_t op_kind = 0;
  int32_t device_type = 0;
  int32_t priority = 0;
};

// The newest ABI minor version whose fields a problem uses (0: any plugin of this major version
// reads it whole) and what needs it, for the reason given to older plugins' kernels.
struct AbiNeed {
  uint32_t minor = 0;
  const char* feature = "";
};

struct PluginRecord {
  // Declared first so it is destroyed last: the library outlives shutdown().
  boost::dll::shared_library library;
  const attnrt_plugin_api* api = nullptr;
  void* context = nullptr;
  std::string name;
  std::string path;
  std::string version;
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
  bool available = false;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> facts;
  std::vector<KernelRecord> kernels;
  // Where the destructor reports a shutdown() that threw (the runtime's logger, which outlives
  // its plugins); may be null.
  const LogSink* log = nullptr;

  PluginRecord() = default;
  PluginRecord(const PluginRecord&) = delete;
  PluginRecord& operator=(const PluginRecord&) = delete;
  // Calls shutdown(context) once, contained (core/plugin_call.cpp): "" when it returned normally,
  // else what it did. Later calls do nothing.
  std::string Shutdown();
  ~PluginRecord();
};

struct Diagnostic {
  std::string path;
  std::string message;
};

}  // namespace attnrt::core
