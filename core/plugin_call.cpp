#include "core/plugin_call.h"

#include <cxxabi.h>

#include <cstdlib>
#include <exception>
#include <typeinfo>

namespace attnrt::core {
namespace {

constexpr size_t kErrorCapacity = 1024;

thread_local PluginCallScope* t_innermost_scope = nullptr;

std::string Demangle(const char* mangled) {
  if (mangled == nullptr) return "unknown type";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = (status == 0 && demangled != nullptr) ? demangled : mangled;
  std::free(demangled);
  return name;
}

}  // namespace

std::string DescribeCurrentException() {
  try {
    throw;
  } catch (const std::exception& e) {
    const char* what = e.what();
    return "an exception (" + Demangle(typeid(e).name()) + "): " + (what != nullptr ? what : "");
  } catch (...) {
    const std::type_info* type = abi::__cxa_current_exception_type();
    return "an exception of type " + Demangle(type != nullptr ? type->name() : nullptr) +
           " (not a std::exception)";
  }
}

PluginCallScope::PluginCallScope() : outer_(t_innermost_scope) { t_innermost_scope = this; }

PluginCallScope::~PluginCallScope() { t_innermost_scope = outer_; }

bool PluginCallScope::Report(const std::string& failure, bool every_range_ran) {
  PluginCallScope* scope = t_innermost_scope;
  if (scope == nullptr) return false;
  if (scope->parallel_failure_.empty() || (!every_range_ran && !scope->failure_lost_work_)) {
    scope->parallel_failure_ = failure;
    scope->failure_lost_work_ = !every_range_ran;
  }
  return true;
}

bool IsKnownStatus(int32_t status) {
  return status >= ATTNRT_OK && status <= ATTNRT_ERROR_INTERNAL;
}

std::string StatusText(int32_t status) {
  if (IsKnownStatus(status)) return attnrt_status_name(static_cast<attnrt_status>(status));
  return std::to_string(status) + " (not an attnrt_status)";
}

std::string PluginRecord::Shutdown() {
  const attnrt_plugin_api* const table = api;
  api = nullptr;
  if (table == nullptr || table->shutdown == nullptr || context == nullptr) return {};
  return CallPlugin([&] { table->shutdown(context); });
}

PluginRecord::~PluginRecord() {
  try {
    const std::string failure = Shutdown();
    if (!failure.empty() && log != nullptr) {
      log->Log(ATTNRT_LOG_ERROR, "plugin '" + name + "' (" + path + ") shutdown() " + failure);
    }
  } catch (...) {
    // Out of memory while describing the failure: nothing more can be reported.
  }
}

Status RunKernel(const KernelRecord& kernel, const void* args) {
  char error[kErrorCapacity] = {0};
  int32_t status = ATTNRT_ERROR_INTERNAL;
  const std::string failure = CallPlugin(
      [&] { status = kernel.desc->run(kernel.plugin->context, args, error, sizeof(error)); });
  error[sizeof(error) - 1] = '\0';
  if (!failure.empty()) return Internal("kernel " + kernel.name + ": run() " + failure);
  if (status == ATTNRT_OK) return Status::Ok();
  const std::string message = error[0] != '\0' ? error : "no message";
  if (!IsKnownStatus(status)) {
    return Internal("kernel " + kernel.name + ": run() returned " + StatusText(status) +
                    "; its message: " + message);
  }
  return {static_cast<attnrt_status>(status), "kernel " + kernel.name + " failed: " + message};
}

}  // namespace attnrt::core
