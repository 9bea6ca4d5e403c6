#include "gqa_workload.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "errors.h"
#include "sizes.h"

namespace plugin_inspect {
namespace {

TensorRef make(attnrt_dtype dtype, std::vector<int64_t> shape, bool allocate,
               std::string_view what) {
  return std::make_shared<HostTensor>(dtype, std::move(shape), allocate, what);
}

void fill_normal(HostTensor& tensor, std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> normal(0.0, stddev);
  const std::size_t count = tensor.numel();
  for (std::size_t i = 0; i < count; ++i)
    store_element(tensor.data(), tensor.dtype(), i, normal(rng));
}

int64_t scale_count(const GqaConfig& config) {
  const auto& a = config.attributes;
  return a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL ? a.kv_num_heads * config.head_size : 1;
}

}  // namespace

int64_t present_len(const GqaConfig& config) {
  return std::max(config.total_len, config.with_past ? config.past_len : int64_t{0});
}

int64_t cache_head_size(const attnrt_gqa_attributes& attributes, int64_t head_size) {
  if (attributes.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32) {
    const int64_t block_bytes = attributes.kv_cache_bit_width == 4
                                    ? ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES
                                    : ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES;
    const int64_t blocks =
        (head_size + ATTNRT_GQA_QUANT_BLOCK_ELEMENTS - 1) / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS;
    return blocks * block_bytes;
  }
  return attributes.kv_cache_bit_width == 4 ? head_size / 2 : head_size;
}

int64_t cache_head_size(const GqaConfig& config) {
  return cache_head_size(config.attributes, config.head_size);
}

attnrt_dtype quantized_cache_dtype(const attnrt_gqa_attributes& attributes) {
  return attributes.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32 ||
                 attributes.kv_cache_bit_width == 4
             ? kUInt8
             : kInt8;
}

bool uses_scale_inputs(const attnrt_gqa_attributes& attributes) {
  return attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE &&
         attributes.k_quant_type != ATTNRT_GQA_QUANT_PER_BLOCK_32;
}

const char* gqa_input_name(int index) {
  return attnrt_op_input_name(ATTNRT_OP_GQA, static_cast<std::size_t>(index));
}
const char* gqa_output_name(int index) {
  return attnrt_op_output_name(ATTNRT_OP_GQA, static_cast<std::size_t>(index));
}

GqaTensors make_gqa_tensors(const GqaConfig& config, bool allocate, const GqaTensors* reuse) {
  const auto& a = config.attributes;
  const int64_t B = config.batch, S = config.seq_len, H = config.head_size;
  const int64_t N = a.num_heads, Nkv = a.kv_num_heads, T = config.total_len;
  if (N <= 0 || Nkv <= 0) throw UsageError("--num-heads and --kv-num-heads must be positive");
  if (H <= 0) throw UsageError("--head-size must be positive");
  if (B <= 0 || S <= 0 || T <= 0)
    throw UsageError("batch, sequence and total lengths must be positive");
  if (config.shared_buffer && !config.with_past) {
    throw UsageError("a shared past/present buffer needs past inputs");
  }
  if (config.shared_buffer && present_len(config) != config.past_len) {
    throw UsageError("with a shared buffer the past length (capacity) " +
                     std::to_string(config.past_len) + " must be >= the total length " +
                     std::to_string(T));
  }
  GqaTensors t;
  auto& in = t.inputs;
  auto& out = t.outputs;
  if (config.packed_qkv) {
    in[ATTNRT_GQA_INPUT_QUERY] = make(config.dtype, {B, S, (N + 2 * Nkv) * H}, allocate, "query");
  } else {
    in[ATTNRT_GQA_INPUT_QUERY] = make(config.dtype, {B, S, N * H}, allocate, "query");
    in[ATTNRT_GQA_INPUT_KEY] = make(config.dtype, {B, S, Nkv * H}, allocate, "key");
    in[ATTNRT_GQA_INPUT_VALUE] = make(config.dtype, {B, S, Nkv * H}, allocate, "value");
  }
  const int64_t Hc = cache_head_size(config);
  if (reuse) {
    in[ATTNRT_GQA_INPUT_PAST_KEY] = reuse->inputs[ATTNRT_GQA_INPUT_PAST_KEY];
    in[ATTNRT_GQA_INPUT_PAST_VALUE] = reuse->inputs[ATTNRT_GQA_INPUT_PAST_VALUE];
    out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = reuse->outputs[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
    out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = reuse->outputs[ATTNRT_GQA_OUTPUT_PRESENT_VALUE];
    in[ATTNRT_GQA_INPUT_COS_CACHE] = reuse->inputs[ATTNRT_GQA_INPUT_COS_CACHE];
    in[ATTNRT_GQA_INPUT_SIN_CACHE] = reuse->inputs[ATTNRT_GQA_INPUT_SIN_CACHE];
    in[ATTNRT_GQA_INPUT_HEAD_SINK] = reuse->inputs[ATTNRT_GQA_INPUT_HEAD_SINK];
    in[ATTNRT_GQA_INPUT_K_SCALE] = reuse->inputs[ATTNRT_GQA_INPUT_K_SCALE];
    in[ATTNRT_GQA_INPUT_V_SCALE] = reuse->inputs[ATTNRT_GQA_INPUT_V_SCALE];
  } else {
    if (config.with_past) {
      in[ATTNRT_GQA_INPUT_PAST_KEY] =
          make(config.cache_dtype, {B, Nkv, config.past_len, Hc}, allocate, "past_key");
      in[ATTNRT_GQA_INPUT_PAST_VALUE] =
          make(config.cache_dtype, {B, Nkv, config.past_len, Hc}, allocate, "past_value");
    }
    if (config.shared_buffer) {
      out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = in[ATTNRT_GQA_INPUT_PAST_KEY];
      out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = in[ATTNRT_GQA_INPUT_PAST_VALUE];
    } else {
      const std::vector<int64_t> present{B, Nkv, present_len(config), Hc};
      out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] =
          make(config.cache_dtype, present, allocate, "present_key");
      out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] =
          make(config.cache_dtype, present, allocate, "present_value");
    }
    if (config.rotary_cache_len > 0) {
      in[ATTNRT_GQA_INPUT_COS_CACHE] =
          make(config.dtype, {config.rotary_cache_len, H / 2}, allocate, "cos_cache");
      in[ATTNRT_GQA_INPUT_SIN_CACHE] =
          make(config.dtype, {config.rotary_cache_len, H / 2}, allocate, "sin_cache");
    }
    if (config.head_sink)
      in[ATTNRT_GQA_INPUT_HEAD_SINK] = make(config.dtype, {N}, allocate, "head_sink");
    if (uses_scale_inputs(a)) {
      in[ATTNRT_GQA_INPUT_K_SCALE] = make(kFloat32, {scale_count(config)}, allocate, "k_scale");
      in[ATTNRT_GQA_INPUT_V_SCALE] = make(kFloat32, {scale_count(config)}, allocate, "v_scale");
    }
  }
  in[ATTNRT_GQA_INPUT_SEQLENS_K] = make(kInt32, {B}, allocate, "seqlens_k");
  in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = make(kInt32, {1}, allocate, "total_sequence_length");
  if (config.attention_bias) {
    in[ATTNRT_GQA_INPUT_ATTENTION_BIAS] =
        make(config.dtype, {B, N, S, T}, allocate, "attention_bias");
  }
  out[ATTNRT_GQA_OUTPUT_OUTPUT] = make(config.dtype, {B, S, N * H}, allocate, "output");
  if (a.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    out[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = make(config.dtype, {B, N, S, T}, allocate, "output_qk");
  }
  return t;
}

void fill_random_inputs(GqaTensors& tensors, const GqaConfig& config, std::mt19937_64& rng) {
  auto& in = tensors.inputs;
  if (config.packed_qkv) {
    // Q and K slices at 0.5·N(0,1), the V slice at N(0,1), per token.
    HostTensor& qkv = *in[ATTNRT_GQA_INPUT_QUERY];
    const int64_t H = config.head_size, N = config.attributes.num_heads;
    const int64_t Nkv = config.attributes.kv_num_heads;
    const std::size_t row = static_cast<std::size_t>((N + 2 * Nkv) * H);
    const std::size_t v_begin = static_cast<std::size_t>((N + Nkv) * H);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t i = 0; i < qkv.numel(); ++i) {
      const double stddev = i % row >= v_begin ? 1.0 : 0.5;
      store_element(qkv.data(), qkv.dtype(), i, stddev * normal(rng));
    }
  } else {
    fill_normal(*in[ATTNRT_GQA_INPUT_QUERY], rng, 0.5);
    fill_normal(*in[ATTNRT_GQA_INPUT_KEY], rng, 0.5);
    fill_normal(*in[ATTNRT_GQA_INPUT_VALUE], rng, 1.0);
  }
  if (in[ATTNRT_GQA_INPUT_ATTENTION_BIAS]) {
    fill_normal(*in[ATTNRT_GQA_INPUT_ATTENTION_BIAS], rng, 0.5);
  }
}

void fill_parameters(GqaTensors& tensors, const GqaConfig& config, std::mt19937_64& rng) {
  auto& in = tensors.inputs;
  if (in[ATTNRT_GQA_INPUT_HEAD_SINK]) fill_normal(*in[ATTNRT_GQA_INPUT_HEAD_SINK], rng, 1.0);
  if (in[ATTNRT_GQA_INPUT_K_SCALE]) {
    const double qmax = config.attributes.kv_cache_bit_width == 4 ? 7.0 : 127.0;
    HostTensor& k_scale = *in[ATTNRT_GQA_INPUT_K_SCALE];
    HostTensor& v_scale = *in[ATTNRT_GQA_INPUT_V_SCALE];
    for (std::size_t i = 0; i < k_scale.numel(); ++i) {
      k_scale.as<float>()[i] = static_cast<float>(2.5 / qmax);
      v_scale.as<float>()[i] = static_cast<float>(5.0 / qmax);
    }
  }
}

void fill_rotary_caches(GqaTensors& tensors, double theta) {
  HostTensor& cos_cache = *tensors.inputs[ATTNRT_GQA_INPUT_COS_CACHE];
  HostTensor& sin_cache = *tensors.inputs[ATTNRT_GQA_INPUT_SIN_CACHE];
  const int64_t rows = cos_cache.shape()[0], half = cos_cache.shape()[1];
  for (int64_t pos = 0; pos < rows; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(theta, -static_cast<double>(i) / static_cast<double>(half));
      const double angle = static_cast<double>(pos) * inv_freq;
      const auto index = static_cast<std::size_t>(pos * half + i);
      store_element(cos_cache.data(), cos_cache.dtype(), index, std::cos(angle));
      store_element(sin_cache.data(), sin_cache.dtype(), index, std::sin(angle));
    }
  }
}

void set_lengths(GqaTensors& tensors, int32_t seqlen_k, int32_t total) {
  HostTensor& seqlens = *tensors.inputs[ATTNRT_GQA_INPUT_SEQLENS_K];
  std::fill_n(seqlens.as<int32_t>(), seqlens.numel(), seqlen_k);
  *tensors.inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH]->as<int32_t>() = total;
}

namespace {
bool is_input(const GqaTensors& tensors, const TensorRef& tensor) {
  return std::find(tensors.inputs.begin(), tensors.inputs.end(), tensor) != tensors.inputs.end();
}
}  // namespace

void poison_outputs(GqaTensors& tensors) {
  for (TensorRef& output : tensors.outputs) {
    if (output && !is_input(tensors, output)) output->poison();
  }
}

GqaTensors reference_copy(const GqaTensors& tensors) {
  GqaTensors copy = tensors;
  for (std::size_t o = 0; o < copy.outputs.size(); ++o) {
    TensorRef& output = copy.outputs[o];
    if (!output) continue;
    const auto input = std::find(tensors.inputs.begin(), tensors.inputs.end(), output);
    const std::string what =
        std::string("the reference run's ") + gqa_output_name(static_cast<int>(o));
    if (input != tensors.inputs.end()) {
      // Shared past/present: the reference gets its own copy of the current cache contents.
      output = std::make_shared<HostTensor>(output->clone(what));
      copy.inputs[static_cast<std::size_t>(input - tensors.inputs.begin())] = output;
    } else {
      output = std::make_shared<HostTensor>(output->dtype(), output->shape(), true, what);
      output->poison();
    }
  }
  return copy;
}

std::optional<uint64_t> tensors_bytes(const GqaTensors& tensors, const GqaTensors* exclude,
                                      bool outputs_only) {
  std::vector<const HostTensor*> seen;
  if (exclude) {
    for (const TensorRef& t : exclude->inputs) seen.push_back(t.get());
    for (const TensorRef& t : exclude->outputs) seen.push_back(t.get());
  }
  std::optional<uint64_t> total = 0;
  const auto add = [&](const TensorRef& tensor) {
    if (!tensor || std::find(seen.begin(), seen.end(), tensor.get()) != seen.end()) return;
    seen.push_back(tensor.get());
    total = checked_add(total, tensor->checked_nbytes());
  };
  if (!outputs_only) {
    for (const TensorRef& tensor : tensors.inputs) add(tensor);
  }
  for (const TensorRef& tensor : tensors.outputs) add(tensor);
  return total;
}

GqaBinding::GqaBinding(const GqaTensors& tensors) {
  for (std::size_t i = 0; i < tensors.inputs.size(); ++i) {
    if (!tensors.inputs[i]) continue;
    input_views_[i] = tensors.inputs[i]->view();
    input_ptrs_[i] = &input_views_[i];
  }
  for (std::size_t o = 0; o < tensors.outputs.size(); ++o) {
    if (!tensors.outputs[o]) continue;
    output_views_[o] = tensors.outputs[o]->view();
    output_ptrs_[o] = &output_views_[o];
  }
}

void GqaBinding::place_on(attnrt_device device) {
  for (std::size_t i = 0; i < input_views_.size(); ++i) {
    if (i == ATTNRT_GQA_INPUT_SEQLENS_K || i == ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH) continue;
    input_views_[i].device = device;
  }
  for (attnrt_tensor& view : output_views_) view.device = device;
}

}  // namespace plugin_inspect
