#include "gqa_config.h"

#include <sstream>

#include "dtypes.h"
#include "errors.h"

namespace plugin_inspect {

GqaConfig config_from_flags(const GqaFlags& flags, const ModelPreset* preset) {
  GqaConfig config;
  attnrt_gqa_attributes_init(&config.attributes);
  if (preset) {
    config.attributes.num_heads = preset->num_heads;
    config.attributes.kv_num_heads = preset->kv_num_heads;
    config.attributes.local_window_size = preset->local_window_size;
    config.attributes.softcap = preset->softcap;
    config.attributes.do_rotary = 1;
    config.head_size = preset->head_size;
  }
  apply_gqa_flags(flags, config.attributes);
  if (flags.head_size) config.head_size = *flags.head_size;
  if (config.attributes.num_heads == 0 || config.attributes.kv_num_heads == 0) {
    throw UsageError("--num-heads and --kv-num-heads are required (or --model NAME)");
  }
  if (config.head_size == 0) throw UsageError("--head-size is required (or --model NAME)");
  if (flags.dtype) config.dtype = query_dtype_from_name(*flags.dtype);
  if (flags.cache_dtype) {
    config.cache_dtype = cache_dtype_from_name(*flags.cache_dtype);
  } else if (config.attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE) {
    config.cache_dtype = quantized_cache_dtype(config.attributes);
  } else {
    config.cache_dtype = config.dtype;
  }
  config.packed_qkv = flags.packed_qkv;
  config.head_sink = flags.head_sink;
  config.attention_bias = flags.attention_bias;
  config.shared_buffer = flags.shared_buffer;
  return config;
}

std::string describe_config(const GqaConfig& config) {
  const auto& a = config.attributes;
  std::ostringstream os;
  os << "B=" << config.batch << " S=" << config.seq_len << " P=" << config.past_len
     << " T=" << config.total_len << " N=" << a.num_heads << " Nkv=" << a.kv_num_heads
     << " H=" << config.head_size << " " << dtype_name(config.dtype) << "/"
     << dtype_name(config.cache_dtype);
  if (a.causal == 0) os << " non-causal";
  if (a.local_window_size >= 0) os << " window=" << a.local_window_size;
  if (a.softcap > 0) os << " softcap=" << a.softcap;
  if (a.scale != 0) os << " scale=" << a.scale;
  if (a.do_rotary == 1) os << (a.rotary_interleaved == 1 ? " rotary(interleaved)" : " rotary");
  if (a.smooth_softmax == 1) os << " smooth-softmax";
  if (a.qk_output != 0) os << " qk_output=" << a.qk_output;
  if (a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32) {
    os << (a.kv_cache_bit_width == 4 ? " per-block-q4_0" : " per-block-q8_0");
  } else if (a.k_quant_type != ATTNRT_GQA_QUANT_NONE) {
    os << (a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL ? " per-channel" : " per-tensor")
       << "-int" << a.kv_cache_bit_width;
  }
  if (config.packed_qkv) os << " packed-qkv";
  if (config.head_sink) os << " head-sink";
  if (config.attention_bias) os << " attention-bias";
  if (config.shared_buffer) os << " shared-buffer";
  return os.str();
}

}  // namespace plugin_inspect
