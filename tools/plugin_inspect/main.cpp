// plugin-inspect: lists attnrt plugins and kernels, explains kernel choice for a GQA problem, and
// runs GQA workloads (model presets or .npy inputs) checked against the scalar reference kernel.
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "attnrt/attnrt.h"
#include "commands.h"
#include "errors.h"
#include "model_presets.h"

namespace {

using plugin_inspect::Args;

void print_help(std::ostream& os) {
  os << "usage: plugin-inspect <command> [options]\n"
        "\n"
        "commands:\n"
        "  list      plugins, their probe facts and kernels, and every skipped file\n"
        "  explain   every kernel for a GQA problem in rank order: selected, eligible or why not\n"
        "  run       run GQA through the runtime (a model's prompt + decode steps, or .npy\n"
        "            inputs) and check it against the scalar reference kernel\n"
        "\n"
        "Every command takes --json, --help and the runtime options --plugin-path DIR\n"
        "(repeatable), --kernel GLOBS, --disable GLOBS, --threads N, --no-default-paths.\n"
        "\n"
        "model presets (--model):\n";
  for (const auto& preset : plugin_inspect::model_presets()) {
    std::string name(preset.name);
    if (preset.name == plugin_inspect::kDefaultModel) name += " (default)";
    os << "  " << name << std::string(name.size() < 24 ? 24 - name.size() : 1, ' ')
       << "N=" << preset.num_heads << " Nkv=" << preset.kv_num_heads << " H=" << preset.head_size
       << "  " << preset.notes << "\n";
  }
  os << "\n'plugin-inspect <command> --help' shows the options of a command.\n";
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_help(std::cerr);
    return 2;
  }
  const std::string_view command = argv[1];
  const Args args(argv + 2, argv + argc);
  if (command == "list") return plugin_inspect::cmd_list(args);
  if (command == "explain") return plugin_inspect::cmd_explain(args);
  if (command == "run") return plugin_inspect::cmd_run(args);
  if (command == "help" || command == "--help" || command == "-h") {
    print_help(std::cout);
    return 0;
  }
  if (command == "--version") {
    uint32_t major = 0, minor = 0;
    attnrt_abi_version(&major, &minor);
    std::cout << "plugin-inspect (attnrt " << attnrt_version_string() << ", ABI " << major << "."
              << minor << ")\n";
    return 0;
  }
  std::cerr << "error: unknown command '" << command << "'\n\n";
  print_help(std::cerr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const plugin_inspect::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n(see 'plugin-inspect " << (argc > 1 ? argv[1] : "")
              << " --help')\n";
    return 2;
  } catch (const plugin_inspect::AttnrtError& e) {
    std::cerr << "error: " << attnrt_status_name(e.status()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "error: unknown exception\n";
    return 1;
  }
}
