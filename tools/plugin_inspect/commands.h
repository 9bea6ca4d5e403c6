// The subcommands. Each takes the words after its name and returns the process exit code; errors
// are thrown (UsageError, AttnrtError, ToolError) and mapped to exit codes in main().
#pragma once

#include <string>
#include <vector>

namespace plugin_inspect {

using Args = std::vector<std::string>;

int cmd_list(const Args& args);
int cmd_explain(const Args& args);
int cmd_run(const Args& args);

// explain/run with --op sparse_mla (sparse_mla_commands.cpp).
bool sparse_mla_requested(const Args& args);
int cmd_explain_sparse_mla(const Args& args);
int cmd_run_sparse_mla(const Args& args);

}  // namespace plugin_inspect
