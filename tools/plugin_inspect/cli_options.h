// Command-line pieces shared by the subcommands: the global runtime options, the GQA attribute
// flags, and parsing that turns every Boost.Program_options error into a UsageError (exit 2).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "attnrt/ops/gqa.h"
#include "attnrt_handles.h"

namespace plugin_inspect {

namespace po = boost::program_options;

// --plugin-path DIR (repeatable), --kernel GLOBS, --disable GLOBS, --threads N,
// --no-default-paths, --json, --help.
po::options_description common_options();

struct CommonFlags {
  RuntimeSettings runtime;
  bool json = false;
};
CommonFlags read_common_flags(const po::variables_map& vm);

// Parses `args` (the words after the subcommand) against `desc`. Returns false after printing
// `usage` and the option list when --help is given. Throws UsageError on unknown options,
// positional words, missing or malformed values.
bool parse_command_line(const std::vector<std::string>& args, const po::options_description& desc,
                        std::string_view usage, po::variables_map& vm);

// GQA attribute and input-selection flags shared by explain and run. Unset means "keep the base
// value" (reference default, model preset or attributes.json).
struct GqaFlags {
  std::optional<int> num_heads, kv_num_heads, head_size;
  std::optional<int> causal, local_window, qk_output, bits;
  std::optional<int> do_rotary, rotary_interleaved, smooth_softmax;
  std::optional<float> softcap, scale;
  std::optional<double> rope_theta;
  std::optional<std::string> dtype, cache_dtype, quant;
  bool head_sink = false, attention_bias = false, packed_qkv = false, shared_buffer = false;
};

// --num-heads --kv-num-heads --head-size --causal --local-window --softcap --scale --do-rotary
// --rotary-interleaved --rope-theta --smooth-softmax --qk-output --quant --bits --dtype
// --cache-dtype --head-sink --attention-bias --packed-qkv --shared-buffer
po::options_description gqa_flag_options();
GqaFlags read_gqa_flags(const po::variables_map& vm);

// Overrides the attribute fields the flags set (num_heads, kv_num_heads, causal, scale, softcap,
// local_window_size, do_rotary, rotary_interleaved, smooth_softmax, qk_output, quant types, bits).
// --quant without --bits means 8 bits.
void apply_gqa_flags(const GqaFlags& flags, attnrt_gqa_attributes& attributes);

// "none" | "per_tensor" | "per_channel" (also the ONNX spellings NONE/PER_TENSOR/PER_CHANNEL).
int32_t quant_type_from_name(std::string_view name);

}  // namespace plugin_inspect
