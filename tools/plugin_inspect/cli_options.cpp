#include "cli_options.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <utility>

#include "attnrt/ops/paged_gqa.h"
#include "errors.h"

namespace plugin_inspect {
namespace {

template <class T>
std::optional<T> optional_value(const po::variables_map& vm, const char* name) {
  if (!vm.count(name)) return std::nullopt;
  return vm[name].as<T>();
}

}  // namespace

po::options_description common_options(bool op_default) {
  po::options_description desc("Every op");
  desc.add_options()  //
      ("op", po::value<std::string>(),
       op_default ? "op family: gqa (default), paged_gqa, sparse_mla or paged_gqa_varlen"
                  : "op family: gqa, paged_gqa, sparse_mla or paged_gqa_varlen (default: every "
                    "op)")                     //
      ("help", "show this help and exit")      //
      ("json", "print machine-readable JSON")  //
      ("plugin-path", po::value<std::vector<std::string>>()->composing(),
       "folder searched first for libattnrt_*.so (repeatable, in order; a relative folder is "
       "taken from the current directory)")  //
      ("kernel", po::value<std::string>(),
       "comma-separated kernel-name globs allowed to run (pins; default ATTNRT_KERNEL)")  //
      ("disable", po::value<std::string>(),
       "comma-separated kernel-name globs to exclude (default ATTNRT_DISABLE)")  //
      ("threads", po::value<int>(),
       "CPU threads of the runtime's pool, caller included (default ATTNRT_NUM_THREADS, else "
       "all hardware threads)")  //
      ("no-default-paths",
       "search --plugin-path folders only (not ATTNRT_PLUGIN_PATH nor "
       "attnrt/plugins beside libattnrt.so)");
  return desc;
}

CommonFlags read_common_flags(const po::variables_map& vm) {
  CommonFlags flags;
  flags.json = vm.count("json") > 0;
  if (vm.count("plugin-path")) {
    // The runtime searches absolute folders only (docs/plugins.md, Security); a folder typed on
    // the command line is meant from where the command runs.
    for (const std::string& path : vm["plugin-path"].as<std::vector<std::string>>()) {
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
      flags.runtime.plugin_paths.push_back(ec ? path : absolute.string());
    }
  }
  flags.runtime.kernel = optional_value<std::string>(vm, "kernel");
  flags.runtime.disable = optional_value<std::string>(vm, "disable");
  if (auto threads = optional_value<int>(vm, "threads")) {
    // The runtime's limit (options.num_threads), named here by the flag the user typed.
    constexpr int kMaxThreads = 1024;
    if (*threads < 1 || *threads > kMaxThreads) {
      throw UsageError("--threads must be in [1, " + std::to_string(kMaxThreads) + "], got " +
                       std::to_string(*threads));
    }
    flags.runtime.threads = *threads;
  }
  flags.runtime.no_default_paths = vm.count("no-default-paths") > 0;
  return flags;
}

const char* op_name(OpFamily op) {
  switch (op) {
    case OpFamily::kGqa:
      return "gqa";
    case OpFamily::kPagedGqa:
      return "paged_gqa";
    case OpFamily::kSparseMla:
      return "sparse_mla";
    case OpFamily::kPagedGqaVarlen:
      return "paged_gqa_varlen";
  }
  return "?";
}

OpFamily op_from_name(std::string_view name) {
  for (OpFamily op :
       {OpFamily::kGqa, OpFamily::kPagedGqa, OpFamily::kSparseMla, OpFamily::kPagedGqaVarlen}) {
    if (name == op_name(op)) return op;
  }
  throw UsageError("unknown --op '" + std::string(name) +
                   "' (known: gqa, paged_gqa, sparse_mla, paged_gqa_varlen)");
}

OpFamily requested_op(const std::vector<std::string>& args) {
  std::optional<OpFamily> op;
  bool paged = false, block_size = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view word = args[i];
    if (word == "--op" && i + 1 < args.size()) op = op_from_name(args[i + 1]);
    if (word.starts_with("--op=")) op = op_from_name(word.substr(5));
    paged = paged || word == "--paged" || word.starts_with("--paged=");
    block_size = block_size || word == "--block-size" || word.starts_with("--block-size=");
  }
  if (!paged) return op.value_or(OpFamily::kGqa);
  if (op && *op != OpFamily::kPagedGqa) {
    throw UsageError(std::string("--paged BLOCK_SIZE (short for --op paged_gqa --block-size ") +
                     "BLOCK_SIZE) does not apply to --op " + op_name(*op));
  }
  if (block_size) {
    throw UsageError("--paged BLOCK_SIZE and --block-size both give the block size: use one");
  }
  return OpFamily::kPagedGqa;
}

bool OptionGroup::applies_to(OpFamily op) const {
  return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end();
}

bool parse_command_line(const std::vector<std::string>& args,
                        const std::vector<OptionGroup>& groups, OpFamily op, std::string_view usage,
                        po::variables_map& vm) {
  po::options_description desc;
  for (const OptionGroup& group : groups) {
    if (group.applies_to(op)) desc.add(group.options);
  }
  // Long options only, so that negative values ("--local-window -1") are read as values.
  const int style = po::command_line_style::unix_style ^ po::command_line_style::allow_short;
  try {
    const po::parsed_options parsed =
        po::command_line_parser(args).options(desc).style(style).allow_unregistered().run();
    // An option this op lacks: name the ops it belongs to, or say it is unknown.
    for (const po::option& option : parsed.options) {
      if (!option.unregistered) continue;
      std::vector<OpFamily> owners;
      for (const OptionGroup& group : groups) {
        if (group.applies_to(op) || !group.options.find_nothrow(option.string_key, false)) {
          continue;
        }
        for (OpFamily owner : group.ops) {
          if (std::find(owners.begin(), owners.end(), owner) == owners.end()) {
            owners.push_back(owner);
          }
        }
      }
      const std::string word = option.original_tokens.empty() ? "--" + option.string_key
                                                              : option.original_tokens.front();
      if (owners.empty()) throw UsageError("unrecognised option '" + word + "'");
      std::string names;
      for (OpFamily owner : owners)
        names += std::string(names.empty() ? "" : ", ") + op_name(owner);
      throw UsageError("--" + option.string_key + " does not apply to --op " + op_name(op) +
                       " (an option of --op " + names + ")");
    }
    // Without a positional description Boost would silently drop stray words; reject them.
    for (const po::option& option : parsed.options) {
      if (option.position_key != -1) {
        throw UsageError("unexpected argument '" + option.original_tokens.front() +
                         "' (options are spelled --name)");
      }
    }
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << usage << "\n";
      for (const OptionGroup& group : groups) std::cout << "\n" << group.options;
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("op") && op_from_name(vm["op"].as<std::string>()) != op) {
    throw UsageError("--op " + vm["op"].as<std::string>() + ": write the option in full");
  }
  return true;
}

po::options_description paged_cache_options(bool shorthand) {
  po::options_description desc("Paged KV cache (--op paged_gqa)");
  if (shorthand) {
    desc.add_options()("paged", po::value<int32_t>(),
                       "short for --op paged_gqa --block-size BLOCK_SIZE");
  }
  desc.add_options()                                                                  //
      ("block-size", po::value<int32_t>(), "tokens per block, 1..1024 (default 16)")  //
      ("paged-layout", po::value<std::string>()->default_value("bsnh"),
       "block layout of the pools: bsnh or bnsh")  //
      ("p-precision", po::value<std::string>()->default_value("exact"),
       "softmax probabilities for P·V: exact (float32) or input (rounded to the query dtype)");
  return desc;
}

PagedFlags read_paged_flags(const po::variables_map& vm) {
  PagedFlags flags;
  const char* flag = vm.count("paged") ? "paged" : "block-size";
  if (vm.count(flag)) {
    flags.block_size = vm[flag].as<int32_t>();
    if (flags.block_size < ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE ||
        flags.block_size > ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) {
      throw UsageError(std::string("--") + flag + " must be a block size in [" +
                       std::to_string(ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE) + ", " +
                       std::to_string(ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) + "], got " +
                       std::to_string(flags.block_size));
    }
  }
  const std::string layout = vm["paged-layout"].as<std::string>();
  if (layout != "bsnh" && layout != "bnsh") {
    throw UsageError("--paged-layout must be bsnh or bnsh, got '" + layout + "'");
  }
  flags.kv_layout = layout == "bnsh" ? ATTNRT_PAGED_KV_LAYOUT_BNSH : ATTNRT_PAGED_KV_LAYOUT_BSNH;
  const std::string precision = vm["p-precision"].as<std::string>();
  if (precision != "exact" && precision != "input") {
    throw UsageError("--p-precision must be exact or input, got '" + precision + "'");
  }
  flags.p_precision = precision == "input" ? ATTNRT_P_PRECISION_INPUT : ATTNRT_P_PRECISION_EXACT;
  return flags;
}

po::options_description gqa_flag_options() {
  po::options_description desc("GroupQueryAttention attributes and inputs (--op gqa, paged_gqa)");
  desc.add_options()                                                         //
      ("num-heads", po::value<int>(), "num_heads N (query heads)")           //
      ("kv-num-heads", po::value<int>(), "kv_num_heads Nkv (N % Nkv == 0)")  //
      ("head-size", po::value<int>(), "head size H (multiple of 8)")         //
      ("causal", po::value<int>(), "causal 0|1 (default 1)")                 //
      ("local-window", po::value<int>(),
       "local_window_size W (keys seen, query included; -1 off)")                                 //
      ("softcap", po::value<float>(), "softcap (applied when > 0)")                               //
      ("scale", po::value<float>(), "scale (0 = 1/sqrt(H))")                                      //
      ("do-rotary", po::value<int>()->implicit_value(1), "do_rotary (RoPE from cos/sin caches)")  //
      ("rotary-interleaved", po::value<int>()->implicit_value(1),
       "rotary_interleaved (pairs 2i,2i+1 instead of half-split)")  //
      ("rope-theta", po::value<double>(),
       "RoPE base theta for the cos/sin caches (run --model)")  //
      ("smooth-softmax", po::value<int>()->implicit_value(1),
       "smooth_softmax (extra zero logit)")                                           //
      ("qk-output", po::value<int>(), "qk_output 0|1|2 (adds the output_qk output)")  //
      ("quant", po::value<std::string>(),
       "k/v_quant_type none|per_tensor|per_channel|per_block_32 (per_block_32: ggml's Q8_0 "
       "blocks with --bits 8, Q4_0 with --bits 4; head size a multiple of 32)")        //
      ("bits", po::value<int>(), "kv_cache_bit_width 0|4|8 (default 8 with --quant)")  //
      ("dtype", po::value<std::string>(), "query dtype float32|float16|bfloat16")      //
      ("cache-dtype", po::value<std::string>(),
       "KV cache dtype float32|float16|bfloat16|int8|uint8 (default: int8 for 8-bit, uint8 "
       "for 4-bit or per_block_32 quant, else --dtype)")                       //
      ("head-sink", "add the head_sink input (N)")                             //
      ("attention-bias", "add the attention_bias input (B,N,S,T)")             //
      ("packed-qkv", "packed QKV query (B,S,(N+2Nkv)H), no key/value inputs")  //
      ("shared-buffer", "present_key/value are past_key/value's memory (capacity P)");
  return desc;
}

GqaFlags read_gqa_flags(const po::variables_map& vm) {
  GqaFlags flags;
  flags.num_heads = optional_value<int>(vm, "num-heads");
  flags.kv_num_heads = optional_value<int>(vm, "kv-num-heads");
  flags.head_size = optional_value<int>(vm, "head-size");
  flags.causal = optional_value<int>(vm, "causal");
  flags.local_window = optional_value<int>(vm, "local-window");
  flags.qk_output = optional_value<int>(vm, "qk-output");
  flags.bits = optional_value<int>(vm, "bits");
  flags.do_rotary = optional_value<int>(vm, "do-rotary");
  flags.rotary_interleaved = optional_value<int>(vm, "rotary-interleaved");
  flags.smooth_softmax = optional_value<int>(vm, "smooth-softmax");
  flags.softcap = optional_value<float>(vm, "softcap");
  flags.scale = optional_value<float>(vm, "scale");
  flags.rope_theta = optional_value<double>(vm, "rope-theta");
  // Boost reads "nan" and "inf" as floats; no attribute means anything with them.
  for (const auto& [name, value] : {std::pair{"softcap", flags.softcap.value_or(0.0f)},
                                    {"scale", flags.scale.value_or(0.0f)}}) {
    if (!std::isfinite(value)) {
      throw UsageError(std::string("--") + name + " must be a finite number, got " +
                       std::to_string(value));
    }
  }
  if (flags.rope_theta && !(std::isfinite(*flags.rope_theta) && *flags.rope_theta > 0)) {
    throw UsageError("--rope-theta must be a finite number > 0, got " +
                     std::to_string(*flags.rope_theta));
  }
  flags.dtype = optional_value<std::string>(vm, "dtype");
  flags.cache_dtype = optional_value<std::string>(vm, "cache-dtype");
  flags.quant = optional_value<std::string>(vm, "quant");
  flags.head_sink = vm.count("head-sink") > 0;
  flags.attention_bias = vm.count("attention-bias") > 0;
  flags.packed_qkv = vm.count("packed-qkv") > 0;
  flags.shared_buffer = vm.count("shared-buffer") > 0;
  return flags;
}

int32_t quant_type_from_name(std::string_view name) {
  if (name == "none" || name == "NONE") return ATTNRT_GQA_QUANT_NONE;
  if (name == "per_tensor" || name == "PER_TENSOR") return ATTNRT_GQA_QUANT_PER_TENSOR;
  if (name == "per_channel" || name == "PER_CHANNEL") return ATTNRT_GQA_QUANT_PER_CHANNEL;
  if (name == "per_block_32" || name == "PER_BLOCK_32") return ATTNRT_GQA_QUANT_PER_BLOCK_32;
  throw UsageError("unknown quantization type '" + std::string(name) +
                   "' (expected none, per_tensor, per_channel or per_block_32)");
}

void apply_gqa_flags(const GqaFlags& flags, attnrt_gqa_attributes& attributes) {
  if (flags.num_heads) attributes.num_heads = *flags.num_heads;
  if (flags.kv_num_heads) attributes.kv_num_heads = *flags.kv_num_heads;
  if (flags.causal) attributes.causal = *flags.causal;
  if (flags.local_window) attributes.local_window_size = *flags.local_window;
  if (flags.softcap) attributes.softcap = *flags.softcap;
  if (flags.scale) attributes.scale = *flags.scale;
  if (flags.do_rotary) attributes.do_rotary = *flags.do_rotary;
  if (flags.rotary_interleaved) attributes.rotary_interleaved = *flags.rotary_interleaved;
  if (flags.smooth_softmax) attributes.smooth_softmax = *flags.smooth_softmax;
  if (flags.qk_output) attributes.qk_output = *flags.qk_output;
  if (flags.quant) {
    const int32_t type = quant_type_from_name(*flags.quant);
    attributes.k_quant_type = type;
    attributes.v_quant_type = type;
    attributes.kv_cache_bit_width = type == ATTNRT_GQA_QUANT_NONE ? 0 : 8;
  }
  if (flags.bits) attributes.kv_cache_bit_width = *flags.bits;
}

}  // namespace plugin_inspect
