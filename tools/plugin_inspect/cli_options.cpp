#include "cli_options.h"

#include <cmath>
#include <iostream>
#include <utility>

#include "errors.h"

namespace plugin_inspect {
namespace {

template <class T>
std::optional<T> optional_value(const po::variables_map& vm, const char* name) {
  if (!vm.count(name)) return std::nullopt;
  return vm[name].as<T>();
}

}  // namespace

po::options_description common_options() {
  po::options_description desc("Runtime options");
  desc.add_options()                           //
      ("help", "show this help and exit")      //
      ("json", "print machine-readable JSON")  //
      ("plugin-path", po::value<std::vector<std::string>>()->composing(),
       "folder searched first for libattnrt_*.so (repeatable, in order)")  //
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
    flags.runtime.plugin_paths = vm["plugin-path"].as<std::vector<std::string>>();
  }
  flags.runtime.kernel = optional_value<std::string>(vm, "kernel");
  flags.runtime.disable = optional_value<std::string>(vm, "disable");
  if (auto threads = optional_value<int>(vm, "threads")) {
    if (*threads < 1)
      throw UsageError("--threads must be at least 1, got " + std::to_string(*threads));
    flags.runtime.threads = *threads;
  }
  flags.runtime.no_default_paths = vm.count("no-default-paths") > 0;
  return flags;
}

bool parse_command_line(const std::vector<std::string>& args, const po::options_description& desc,
                        std::string_view usage, po::variables_map& vm) {
  // Long options only, so that negative values ("--local-window -1") are read as values.
  const int style = po::command_line_style::unix_style ^ po::command_line_style::allow_short;
  try {
    const po::parsed_options parsed =
        po::command_line_parser(args).options(desc).style(style).run();
    // Without a positional description Boost would silently drop stray words; reject them.
    for (const po::option& option : parsed.options) {
      if (option.position_key != -1) {
        throw UsageError("unexpected argument '" + option.original_tokens.front() +
                         "' (options are spelled --name)");
      }
    }
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << usage << "\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  return true;
}

po::options_description gqa_flag_options() {
  po::options_description desc("GroupQueryAttention attributes and inputs");
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
       "smooth_softmax (extra zero logit)")                                              //
      ("qk-output", po::value<int>(), "qk_output 0|1|2 (adds the output_qk output)")     //
      ("quant", po::value<std::string>(), "k/v_quant_type none|per_tensor|per_channel")  //
      ("bits", po::value<int>(), "kv_cache_bit_width 0|4|8 (default 8 with --quant)")    //
      ("dtype", po::value<std::string>(), "query dtype float32|float16|bfloat16")        //
      ("cache-dtype", po::value<std::string>(),
       "KV cache dtype (default: int8 for 8-bit, uint8 for 4-bit quant, else --dtype)")  //
      ("head-sink", "add the head_sink input (N)")                                       //
      ("attention-bias", "add the attention_bias input (B,N,S,T)")                       //
      ("packed-qkv", "packed QKV query (B,S,(N+2Nkv)H), no key/value inputs")            //
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
  throw UsageError("unknown quantization type '" + std::string(name) +
                   "' (expected none, per_tensor or per_channel)");
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
