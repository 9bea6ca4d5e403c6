// State of one init() of the cpu_x86 plugin. Two runtimes may init the same loaded library, so
// everything mutable lives here, never in globals.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "attnrt/plugin.h"
#include "probe.h"

namespace attnrt::cpu_x86 {

struct PluginContext {
  attnrt_host_services host;  // copy of the runtime's services, valid until shutdown()
  CpuFeatures cpu;
  std::vector<attnrt_plugin_fact> facts;  // points into cpu.facts
};

// Copies `message` into the ABI's (buffer, capacity) pair: truncated, always NUL-terminated; a NULL
// buffer or zero capacity is left alone.
void WriteMessage(char* buffer, size_t capacity, std::string_view message) noexcept;

// Only inside a catch block: writes "<where>: <what()>" of the exception in flight, without
// allocating (the failure may be std::bad_alloc).
void WriteCurrentException(char* buffer, size_t capacity, const char* where) noexcept;

}  // namespace attnrt::cpu_x86
