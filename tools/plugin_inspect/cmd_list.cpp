// plugin-inspect list: what the runtime loaded and why, from the runtime's own records.
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "attnrt/attnrt.h"
#include "cli_options.h"
#include "commands.h"
#include "errors.h"
#include "text_output.h"

namespace plugin_inspect {
namespace {

constexpr const char* kUsage =
    "usage: plugin-inspect list [--op gqa|paged_gqa|sparse_mla|paged_gqa_varlen] [options]\n"
    "\n"
    "Lists the library's version, ABI version and thread count, the plugins the runtime loaded\n"
    "(name, path, version, ABI version, availability or the reason, probe facts), their kernels\n"
    "in rank order (with --op, only the kernels of that op), and a diagnostic for every file it\n"
    "skipped.";

// Strings from the runtime (paths, plugins' versions, facts and reasons, diagnostics) are bytes:
// shown with what is not UTF-8 escaped, in the JSON and the text alike.
std::string str(const char* s) { return s ? printable(s) : ""; }

// Everything the runtime found; with `op`, only that op's kernels.
nlohmann::ordered_json describe_runtime(const attnrt_runtime* runtime,
                                        const std::optional<std::string>& op) {
  nlohmann::ordered_json result = runtime_json(runtime);
  if (op) result["op"] = *op;
  result["plugins"] = nlohmann::ordered_json::array();
  size_t plugin_count = 0;
  check(attnrt_runtime_plugin_count(runtime, &plugin_count));
  for (size_t p = 0; p < plugin_count; ++p) {
    attnrt_plugin_info info{};
    info.struct_size = sizeof(info);
    check(attnrt_runtime_plugin_info(runtime, p, &info));
    nlohmann::ordered_json plugin;
    plugin["name"] = str(info.name);
    plugin["path"] = str(info.path);
    plugin["version"] = str(info.version);
    plugin["abi_version"] = std::to_string(info.abi_major) + "." + std::to_string(info.abi_minor);
    plugin["available"] = info.available != 0;
    plugin["reason"] = str(info.reason);
    plugin["facts"] = nlohmann::ordered_json::object();
    for (size_t f = 0; f < info.num_facts; ++f) {
      const char* key = nullptr;
      const char* value = nullptr;
      check(attnrt_runtime_plugin_fact(runtime, p, f, &key, &value));
      plugin["facts"][str(key)] = str(value);
    }
    plugin["kernels"] = nlohmann::ordered_json::array();
    for (size_t k = 0; k < info.num_kernels; ++k) {
      attnrt_kernel_info kernel{};
      kernel.struct_size = sizeof(kernel);
      check(attnrt_runtime_plugin_kernel(runtime, p, k, &kernel));
      if (op && *op != attnrt_op_kind_name(kernel.op_kind)) continue;
      plugin["kernels"].push_back({{"name", str(kernel.name)},
                                   {"op", attnrt_op_kind_name(kernel.op_kind)},
                                   {"device", device_name(kernel.device_type)},
                                   {"priority", kernel.priority}});
    }
    result["plugins"].push_back(std::move(plugin));
  }
  result["diagnostics"] = nlohmann::ordered_json::array();
  size_t diagnostic_count = 0;
  check(attnrt_runtime_diagnostic_count(runtime, &diagnostic_count));
  for (size_t d = 0; d < diagnostic_count; ++d) {
    attnrt_diagnostic diagnostic{};
    diagnostic.struct_size = sizeof(diagnostic);
    check(attnrt_runtime_diagnostic(runtime, d, &diagnostic));
    result["diagnostics"].push_back(
        {{"path", str(diagnostic.path)}, {"message", str(diagnostic.message)}});
  }
  return result;
}

void print_text(const nlohmann::ordered_json& result, std::ostream& os) {
  os << "attnrt " << result["version"].get<std::string>() << " (ABI "
     << result["abi_version"].get<std::string>() << "), " << result["threads"].get<int>()
     << " threads\n";
  if (result.contains("op")) os << "kernels of op " << result["op"].get<std::string>() << "\n";
  const auto& plugins = result["plugins"];
  os << plugins.size() << (plugins.size() == 1 ? " plugin" : " plugins") << "\n";
  for (const auto& plugin : plugins) {
    os << "\n"
       << plugin["name"].get<std::string>() << " " << plugin["version"].get<std::string>()
       << "  (ABI " << plugin["abi_version"].get<std::string>() << ")  "
       << (plugin["available"].get<bool>() ? "available"
                                           : "unavailable: " + plugin["reason"].get<std::string>())
       << "\n  path: " << plugin["path"].get<std::string>() << "\n";
    if (!plugin["facts"].empty()) {
      os << "  facts:\n";
      for (const auto& [key, value] : plugin["facts"].items()) {
        os << "    " << key << " = " << value.get<std::string>() << "\n";
      }
    }
    TextTable kernels({"kernel", "op", "device", "priority"});
    for (const auto& kernel : plugin["kernels"]) {
      kernels.add_row({kernel["name"].get<std::string>(), kernel["op"].get<std::string>(),
                       kernel["device"].get<std::string>(),
                       std::to_string(kernel["priority"].get<int>())});
    }
    if (plugin["kernels"].empty()) {
      os << "  kernels: none" << (result.contains("op") ? " of this op" : "") << "\n";
    } else {
      os << "  kernels:\n";
      kernels.print(os, "    ");
    }
  }
  const auto& diagnostics = result["diagnostics"];
  os << "\n" << diagnostics.size() << (diagnostics.size() == 1 ? " diagnostic" : " diagnostics");
  os << (diagnostics.empty() ? "\n" : ":\n");
  for (const auto& diagnostic : diagnostics) {
    os << "  " << diagnostic["path"].get<std::string>() << ": "
       << diagnostic["message"].get<std::string>() << "\n";
  }
}

}  // namespace

int cmd_list(const Args& args) {
  const OpFamily op = requested_op(args);
  po::variables_map vm;
  if (!parse_command_line(args, {{common_options(/*op_default=*/false), {}}}, op, kUsage, vm)) {
    return 0;
  }
  const CommonFlags flags = read_common_flags(vm);
  const RuntimePtr runtime = make_runtime(flags.runtime);
  const std::optional<std::string> op_filter =
      vm.count("op") ? std::optional<std::string>(op_name(op)) : std::nullopt;
  const nlohmann::ordered_json result = describe_runtime(runtime.get(), op_filter);
  if (flags.json) {
    std::cout << dump_json(result) << "\n";
  } else {
    print_text(result, std::cout);
  }
  return 0;
}

}  // namespace plugin_inspect
