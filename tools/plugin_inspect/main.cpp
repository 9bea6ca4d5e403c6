// plugin-inspect: lists attnrt plugins and kernels, explains kernel choice for a problem of an op
// (gqa, paged_gqa, sparse_mla, paged_gqa_varlen), and runs workloads of the op (model presets, .npy
// inputs, sparse MLA shapes) checked against the scalar kernel of the same algorithm.
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attnrt/attnrt.h"
#include "commands.h"
#include "errors.h"
#include "model_presets.h"
#include "text_output.h"

namespace {

using plugin_inspect::Args;

void print_help(std::ostream& os) {
  os << "usage: plugin-inspect <command> [options]\n"
        "\n"
        "commands:\n"
        "  list      library and ABI version, threads, plugins, their probe facts and kernels\n"
        "            (of one op with --op), and every skipped file\n"
        "  explain   every kernel for a problem of the op in rank order: selected, eligible or\n"
        "            why not\n"
        "  run       run the op (a model's prompt + decode steps, .npy inputs, or a sparse MLA\n"
        "            workload) and check it against the scalar kernel of the same algorithm\n"
        "\n"
        "ops (--op, on every command): gqa (default), paged_gqa (paged KV cache; --paged\n"
        "BLOCK_SIZE is short for --op paged_gqa --block-size BLOCK_SIZE), sparse_mla\n"
        "(MixedQuantSparseFlashMla), paged_gqa_varlen (packed variable-length batches over a\n"
        "paged KV cache: --q-lens, --seq-lens). An option that does not apply to the op is an\n"
        "error.\n"
        "\n"
        "Every command takes --op, --json, --help and the runtime options --plugin-path DIR\n"
        "(repeatable), --kernel GLOBS, --disable GLOBS, --threads N, --no-default-paths.\n"
        "\n"
        "model presets (--model; gqa and paged_gqa):\n";
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
  throw plugin_inspect::UsageError("unknown command '" + std::string(command) +
                                   "' (commands: list, explain, run)");
}

// Whether the command line asks for --json, decided before (and whatever the outcome of) option
// parsing, so that errors of the parse itself come out as JSON too. Boost accepts an unambiguous
// prefix of a long option ("--js"), and no other option starts with "j", so any such prefix of
// at least "--j" counts, exactly as Boost would read it.
bool wants_json(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word.size() >= 3 && std::string_view("--json").starts_with(word)) return true;
  }
  return false;
}

// Prints an error: "error: <message>" on stderr, and with --json also
// {"error": {"status": "<status>", "message": "<message>"}} on stdout. Returns `exit_code`. A
// message may quote paths and plugins' text: what is not UTF-8 in it is escaped (printable).
int report_error(bool json, std::string_view status, const std::string& message,
                 const std::string& hint, int exit_code) {
  std::cerr << "error: " << plugin_inspect::printable(message) << plugin_inspect::printable(hint)
            << "\n";
  if (json) {
    nlohmann::ordered_json doc;
    doc["error"]["status"] = status;
    doc["error"]["message"] = message;
    std::cout << plugin_inspect::dump_json(doc) << "\n";
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = wants_json(argc, argv);
  const std::string command = argc > 1 ? argv[1] : "";
  const bool known = command == "list" || command == "explain" || command == "run";
  try {
    return dispatch(argc, argv);
  } catch (const plugin_inspect::UsageError& e) {
    return report_error(json, "USAGE_ERROR", e.what(),
                        "\n(see 'plugin-inspect " + (known ? command + " " : "") + "--help')", 2);
  } catch (const plugin_inspect::AttnrtError& e) {
    return report_error(json, attnrt_status_name(e.status()),
                        std::string(attnrt_status_name(e.status())) + ": " + e.what(), "", 1);
  } catch (const plugin_inspect::OutOfMemoryError& e) {
    return report_error(json, "OUT_OF_MEMORY", e.what(), "", 1);
  } catch (const std::bad_alloc& e) {
    // Every allocation the tool sizes from its input goes through OutOfMemoryError with a name;
    // this is what is left (strings, vectors, the runtime's own C++ containers).
    return report_error(json, "OUT_OF_MEMORY",
                        "out of memory while allocating working memory of 'plugin-inspect " +
                            command + "' (" + e.what() + ")",
                        "", 1);
  } catch (const plugin_inspect::ToolError& e) {
    return report_error(json, "TOOL_ERROR", e.what(), "", 1);
  } catch (const std::exception& e) {
    return report_error(json, "INTERNAL_ERROR", e.what(), "", 1);
  } catch (...) {
    return report_error(json, "INTERNAL_ERROR", "unknown exception", "", 1);
  }
}
