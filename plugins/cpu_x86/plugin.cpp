// Entry point of libattnrt_cpu_x86.so: the only exported symbol, attnrt_plugin_query, returning the
// CPU plugin table (plugins/cpu_common/plugin_table.cpp) under this plugin's name.
#include <cstdint>

#include "attnrt/plugin.h"
#include "cpu_plugin.h"
#include "plugin_context.h"

namespace attnrt::cpu {

const char kPluginName[] = "cpu_x86";

}  // namespace attnrt::cpu

// The table is returned whatever the host's version: the runtime compares abi_major itself and then
// names both versions in its diagnostic, which a NULL could not.
extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  return attnrt::cpu::CpuPluginApi();
}
