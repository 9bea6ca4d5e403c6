// State of one init() of a CPU plugin (cpu_x86, cpu_arm), and its plugin table. Two runtimes may
// init the same loaded library, so everything mutable lives here, never in globals.
//
// CpuFeatures and ProbeCpu() come from the architecture's probe (cpu_probe.h); what each plugin
// defines itself (kPluginName, its kernel list) is declared in cpu_plugin.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "attnrt/plugin.h"
#include "cpu_probe.h"

namespace attnrt::cpu {

struct PluginContext {
  attnrt_host_services host;  // copy of the runtime's services, valid until shutdown()
  CpuFeatures cpu;
  std::vector<attnrt_plugin_fact> facts;  // points into cpu.facts
};

// The plugin table (abi/attnrt/plugin.h) every CPU plugin returns from attnrt_plugin_query: init
// copies the host services and runs ProbeCpu(); probe reports the plugin available (its scalar
// kernels run on every CPU of its architecture; SIMD kernels decline on their own in supports())
// with the probe's facts; the kernels are PluginKernels() (cpu_plugin.h).
const attnrt_plugin_api* CpuPluginApi() noexcept;

// Copies `message` into the ABI's (buffer, capacity) pair: truncated, always NUL-terminated; a NULL
// buffer or zero capacity is left alone.
void WriteMessage(char* buffer, size_t capacity, std::string_view message) noexcept;

// Only inside a catch block: writes "<where>: <what()>" of the exception in flight, without
// allocating (the failure may be std::bad_alloc).
void WriteCurrentException(char* buffer, size_t capacity, const char* where) noexcept;

// The body of a kernel's supports(): 1 when decline(context, problem) gives no reason, else 0
// with the reason written to (reason, reason_capacity); an exception is reported as "<where>: ..."
// and declines. Problem is the op's problem struct.
template <class Problem, class Decline>
int32_t AnswerSupports(void* plugin_context, const void* problem, char* reason,
                       size_t reason_capacity, const char* where, Decline&& decline) noexcept {
  try {
    const std::string why = decline(*static_cast<const PluginContext*>(plugin_context),
                                    *static_cast<const Problem*>(problem));
    if (why.empty()) return 1;
    WriteMessage(reason, reason_capacity, why);
  } catch (...) {
    WriteCurrentException(reason, reason_capacity, where);
  }
  return 0;
}

}  // namespace attnrt::cpu
