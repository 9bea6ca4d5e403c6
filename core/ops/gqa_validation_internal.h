// Private to GroupQueryAttention validation (gqa_validation.cpp: attributes, the gathering of a
// call's tensors and the names; gqa_validation_tensors.cpp: structure, device and dtype of every
// tensor; gqa_validation_shapes.cpp: shapes at plan; gqa_validation_run.cpp: values at run): the
// input and output names, the gathered tensors and the helpers the pieces share.
//
// The checks run in the order of ONNX Runtime's GroupQueryAttention (CPU EP: the kernel, then
// group_query_attention_helper.h's CheckInputs; "the reference"). "Item N" in the pieces refers to
// this list:
//   1. attributes: num_heads, kv_num_heads > 0; causal in {0, 1}, causal 0 only with
//      local_window_size -1; sliding_window_cache 1 only with local_window_size > 0; valid
//      quantization types.
//   2. quantization: k_quant_type == v_quant_type and kv_cache_bit_width 4 or 8 when quantized
//      (v_quant_type alone is ignored), else bit width 0; k_scale and v_scale present (float32),
//      or absent for PER_BLOCK_32 (whose head_size must be a multiple of 32).
//   3. q_norm_weight / k_norm_weight are not supported.
//   4. num_heads is a multiple of kv_num_heads.
//   5. kv_cache_bit_width in {0, 4, 8}.
//   6. query, key, value and the head size (packed QKV when key is absent; H a multiple of 8).
//   7. past_key / past_value: both or neither, rank 4, (B, Nkv, P, packed head dimension); L == S,
//      or 0 (shared KV) with a past.
//   8. seqlens_k: at least 1-D, B elements, every dimension 1 or B.
//   9. total_sequence_length: one element, value > 0.
//  10. present_key / present_value and the present length max(T, P).
//  11. sliding_window_cache=1: a past, new rows, capacity P >= local_window_size, head size rules.
//  12. cos_cache / sin_cache (checked whenever both are given) and seqlens_k within their rows.
//  13. the phase: first prompt (S == T), subsequent prompt (S > 1, B == 1) or decode (S == 1).
//  14. position_ids, attention_bias and head_sink shapes.
//  15. k_scale / v_scale element counts.
//  16. every seqlens_k[b] against present, S and P.
//  17. qk_output range and output_qk.
//  18. do_rotary needs cos/sin caches; rotary positions within the caches.
//  19. shared KV (L == 0): T <= P.
//  20. a quantized cache needs the past inputs (they bind T_CACHE).
#pragma once

#include <cstddef>

#include "attnrt/ops/gqa.h"
#include "core/status.h"

namespace attnrt::core::gqa::detail {

inline constexpr const char* kInputNames[ATTNRT_GQA_NUM_INPUTS] = {"query",
                                                                   "key",
                                                                   "value",
                                                                   "past_key",
                                                                   "past_value",
                                                                   "seqlens_k",
                                                                   "total_sequence_length",
                                                                   "cos_cache",
                                                                   "sin_cache",
                                                                   "position_ids",
                                                                   "attention_bias",
                                                                   "head_sink",
                                                                   "k_scale",
                                                                   "v_scale",
                                                                   "q_norm_weight",
                                                                   "k_norm_weight"};
inline constexpr const char* kOutputNames[ATTNRT_GQA_NUM_OUTPUTS] = {"output", "present_key",
                                                                     "present_value", "output_qk"};

// The inputs and outputs of one call, indexed by ATTNRT_GQA_INPUT_* / ATTNRT_GQA_OUTPUT_*; entries
// past the caller's count are NULL (absent).
struct Tensors {
  const attnrt_tensor* in[ATTNRT_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_GQA_NUM_OUTPUTS] = {};
};

// The inputs and outputs of a call into *t, after checking their counts and that the arrays are
// given.
Status GatherTensors(const attnrt_tensor* const* inputs, size_t num_inputs,
                     const attnrt_tensor* const* outputs, size_t num_outputs, Tensors* t);

// "NONE", "PER_TENSOR", "PER_CHANNEL", "PER_BLOCK_32" or "invalid".
const char* QuantName(int32_t quant_type);

// Whether k_quant_type enables a quantized KV cache.
bool Quantized(const attnrt_gqa_attributes& a);

// Whether the cache holds ggml's Q8_0/Q4_0 blocks (ATTNRT_GQA_QUANT_PER_BLOCK_32, ABI 1.7): the
// scales are in the cache, k_scale/v_scale must be absent and head_size a multiple of 32.
bool BlockQuantized(const attnrt_gqa_attributes& a);

// Whether the cache's scales come from k_scale/v_scale (PER_TENSOR, PER_CHANNEL).
bool ScaleInputsUsed(const attnrt_gqa_attributes& a);

// The last dimension of a cache row of head_size elements: head_size (float, int8, fp8), head_size
// / 2 bytes (int4), head_size / 32 blocks of 34 (Q8_0) or 18 (Q4_0) bytes.
int64_t CacheRowWidth(const attnrt_gqa_attributes& a, int64_t head_size);

// Attribute values (item 1, the attribute parts of items 2, 4 and 5, and the qk_output range of
// item 17).
Status CheckAttributeValues(const attnrt_gqa_attributes& a);

// Structure, strides, device and dtype of every present tensor, inputs first
// (gqa_validation_tensors.cpp).
Status CheckTensors(const Tensors& t, const attnrt_gqa_attributes& a);

// "present" or "absent" (gqa_validation_shapes.cpp).
const char* PresenceWord(const attnrt_tensor* x);

}  // namespace attnrt::core::gqa::detail
