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
// --no-default-paths, --json, --help, and --op (default gqa, or none when `op_default` is false).
po::options_description common_options(bool op_default = true);

struct CommonFlags {
  RuntimeSettings runtime;
  bool json = false;
};
CommonFlags read_common_flags(const po::variables_map& vm);

// The op families every subcommand names with --op.
enum class OpFamily { kGqa, kPagedGqa, kSparseMla, kPagedGqaVarlen };
inline constexpr const char* kOpNames = "gqa|paged_gqa|sparse_mla|paged_gqa_varlen";
const char* op_name(OpFamily op);
// Throws UsageError naming --op and the known ops.
OpFamily op_from_name(std::string_view name);

// The op the words after the subcommand ask for, read before parsing since the op decides which
// options exist: --op NAME or --op=NAME, else gqa; --paged BLOCK_SIZE is short for --op paged_gqa
// --block-size BLOCK_SIZE (UsageError with any other --op, or with --block-size).
OpFamily requested_op(const std::vector<std::string>& args);

// Options of a subcommand and the ops they apply to (empty: every op). The caption names them.
struct OptionGroup {
  po::options_description options;
  std::vector<OpFamily> ops;
  bool applies_to(OpFamily op) const;
};

// Parses `args` (the words after the subcommand) against the groups that apply to `op`. An option
// of another op's group is an error naming the option, `op` and the ops it belongs to. Returns
// false after printing `usage` and every group (whatever the op) when --help is given. Throws
// UsageError on unknown options, positional words, missing or malformed values.
bool parse_command_line(const std::vector<std::string>& args,
                        const std::vector<OptionGroup>& groups, OpFamily op, std::string_view usage,
                        po::variables_map& vm);

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

// --paged BLOCK_SIZE (when `shorthand`), --block-size BS (default 16), --paged-layout bsnh|bnsh,
// --p-precision exact|input.
po::options_description paged_cache_options(bool shorthand);
struct PagedFlags {
  int32_t block_size = 16;
  int32_t kv_layout = 0;    // attnrt_paged_kv_layout
  int32_t p_precision = 0;  // attnrt_p_precision
};
// Throws UsageError naming the flag for a block size outside [1, 1024] or an unknown layout.
PagedFlags read_paged_flags(const po::variables_map& vm);

// Overrides the attribute fields the flags set (num_heads, kv_num_heads, causal, scale, softcap,
// local_window_size, do_rotary, rotary_interleaved, smooth_softmax, qk_output, quant types, bits).
// --quant without --bits means 8 bits.
void apply_gqa_flags(const GqaFlags& flags, attnrt_gqa_attributes& attributes);

// "none" | "per_tensor" | "per_channel" | "per_block_32" (also the spellings NONE, PER_TENSOR,
// PER_CHANNEL, PER_BLOCK_32 of abi/attnrt/ops/gqa.h).
int32_t quant_type_from_name(std::string_view name);

}  // namespace plugin_inspect
