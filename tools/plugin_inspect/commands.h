// The subcommands. Each takes the words after its name and returns the process exit code; errors
// are thrown (UsageError, AttnrtError, ToolError) and mapped to exit codes in main().
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnrt/attnrt.h"
#include "cli_options.h"

namespace plugin_inspect {

using Args = std::vector<std::string>;

int cmd_list(const Args& args);
int cmd_explain(const Args& args);
int cmd_run(const Args& args);

// explain/run --op sparse_mla (sparse_mla_commands.cpp): the options (run adds --steps) and the
// commands on parsed options.
po::options_description sparse_mla_options(bool run);
int explain_sparse_mla(const po::variables_map& vm);
int run_sparse_mla(const po::variables_map& vm);

// explain/run --op paged_gqa_varlen (varlen_commands.cpp): the options (run adds --steps, --seed)
// and the commands on parsed options.
po::options_description varlen_options(bool run);
int explain_varlen(const po::variables_map& vm);
int run_varlen(const po::variables_map& vm);

// Shared by explain's ops (cmd_explain.cpp): --device, the candidates as JSON, and the text table
// of result["candidates"] under a headline.
attnrt_device device_from_flags(const po::variables_map& vm);
nlohmann::ordered_json explanation_json(const attnrt_explanation* explanation);
void print_explanation(const nlohmann::ordered_json& result, const std::string& headline);

}  // namespace plugin_inspect
