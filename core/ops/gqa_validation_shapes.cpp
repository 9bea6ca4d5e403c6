// GroupQueryAttention validation at plan: presence, ranks and dimensions of every input and output
// (items 2-15, 17 and 20 where they depend on shapes, in that order; gqa_validation_internal.h),
// and the attnrt_gqa_problem they describe. Never reads data.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/ops/gqa_validation.h"
#include "core/ops/gqa_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa {
namespace detail {
namespace {

// "Input 'name' dimension d should be <what>, got <actual> expected <expected>".
Status CheckDim(const attnrt_tensor& x, const char* kind, const char* name, int d, int64_t expected,
                const char* what) {
  if (x.shape[d] == expected) return Status::Ok();
  return InvalidArgument(StrCat(kind, " '", name, "' dimension ", d, " should be ", what, ", got ",
                                x.shape[d], " expected ", expected));
}
Status CheckInputDim(const attnrt_tensor& x, int index, int d, int64_t expected, const char* what) {
  return CheckDim(x, "Input", kInputNames[index], d, expected, what);
}
Status CheckOutputDim(const attnrt_tensor& x, int index, int d, int64_t expected,
                      const char* what) {
  return CheckDim(x, "Output", kOutputNames[index], d, expected, what);
}

}  // namespace

const char* PresenceWord(const attnrt_tensor* x) { return x != nullptr ? "present" : "absent"; }

namespace {

Status ValidateShapesImpl(const attnrt_gqa_attributes& a, const attnrt_tensor* const* inputs,
                          size_t num_inputs, const attnrt_tensor* const* outputs,
                          size_t num_outputs, ValueRows value_rows, attnrt_gqa_problem* out) {
  const int64_t value_head_size = value_rows.head_size;
  if (out == nullptr) return InvalidArgument("GroupQueryAttention: problem must not be NULL");
  Tensors t;
  ATTNRT_RETURN_IF_ERROR(GatherTensors(inputs, num_inputs, outputs, num_outputs, &t));
  ATTNRT_RETURN_IF_ERROR(CheckAttributeValues(a));
  for (int i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_SEQLENS_K,
                ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH}) {
    if (t.in[i] == nullptr) {
      return InvalidArgument(StrCat("Input '", kInputNames[i], "' is required but absent"));
    }
  }
  if (t.out[ATTNRT_GQA_OUTPUT_OUTPUT] == nullptr) {
    return InvalidArgument("Output 'output' is required but absent");
  }
  ATTNRT_RETURN_IF_ERROR(CheckTensors(t, a));

  const attnrt_tensor& query = *t.in[ATTNRT_GQA_INPUT_QUERY];
  const attnrt_tensor* key = t.in[ATTNRT_GQA_INPUT_KEY];
  const attnrt_tensor* value = t.in[ATTNRT_GQA_INPUT_VALUE];
  const attnrt_tensor* past_key = t.in[ATTNRT_GQA_INPUT_PAST_KEY];
  const attnrt_tensor* past_value = t.in[ATTNRT_GQA_INPUT_PAST_VALUE];
  const attnrt_tensor& seqlens_k = *t.in[ATTNRT_GQA_INPUT_SEQLENS_K];
  const attnrt_tensor& total_seqlen = *t.in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH];
  const attnrt_tensor* cos_cache = t.in[ATTNRT_GQA_INPUT_COS_CACHE];
  const attnrt_tensor* sin_cache = t.in[ATTNRT_GQA_INPUT_SIN_CACHE];
  const attnrt_tensor* position_ids = t.in[ATTNRT_GQA_INPUT_POSITION_IDS];
  const attnrt_tensor* attention_bias = t.in[ATTNRT_GQA_INPUT_ATTENTION_BIAS];
  const attnrt_tensor* head_sink = t.in[ATTNRT_GQA_INPUT_HEAD_SINK];
  const attnrt_tensor* k_scale = t.in[ATTNRT_GQA_INPUT_K_SCALE];
  const attnrt_tensor* v_scale = t.in[ATTNRT_GQA_INPUT_V_SCALE];
  const attnrt_tensor& output = *t.out[ATTNRT_GQA_OUTPUT_OUTPUT];
  const attnrt_tensor* present_key = t.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
  const attnrt_tensor* present_value = t.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE];
  const attnrt_tensor* output_qk = t.out[ATTNRT_GQA_OUTPUT_OUTPUT_QK];
  const bool quantized = Quantized(a);
  const bool on_cpu = query.device.device_type == ATTNRT_DEVICE_CPU;
  const int64_t N = a.num_heads;
  const int64_t Nkv = a.kv_num_heads;

  // Item 2: scales of a quantized cache (their float32 dtype was checked with the other dtypes).
  if (BlockQuantized(a)) {
    for (const auto& [name, scale] :
         {std::pair{"k_scale", k_scale}, std::pair{"v_scale", v_scale}}) {
      if (scale != nullptr) {
        return InvalidArgument(
            StrCat(name,
                   " must be absent for a PER_BLOCK_32 KV cache (each 32-element "
                   "block holds its own float16 scale), got present"));
      }
    }
  } else if (quantized) {
    if (k_scale == nullptr) {
      return InvalidArgument(
          StrCat("k_scale must be provided for quantized KV cache (k_quant_type=",
                 QuantName(a.k_quant_type), ")"));
    }
    if (v_scale == nullptr) {
      return InvalidArgument(
          StrCat("v_scale must be provided for quantized KV cache (v_quant_type=",
                 QuantName(a.v_quant_type), ")"));
    }
  }
  // Item 3. The CPU reference rejects the Q/K RMS-norm inputs; attnrt_gqa_args (ABI 1.0) has no
  // field to hand them to a CUDA kernel either, so they are declined there too.
  for (int i : {ATTNRT_GQA_INPUT_Q_NORM_WEIGHT, ATTNRT_GQA_INPUT_K_NORM_WEIGHT}) {
    if (t.in[i] == nullptr) continue;
    if (on_cpu) {
      return InvalidArgument(StrCat(kInputNames[i],
                                    " is not supported by GroupQueryAttention on CPU (the per-head "
                                    "Q/K RMS normalization exists only on CUDA), expected absent"));
    }
    return Unsupported(StrCat(kInputNames[i],
                              " is not supported: attnrt ABI 1.0 has no way to pass it to a "
                              "kernel, expected absent"));
  }
  // Item 4 was checked with the attributes.

  // Item 6: query, key, value and the head size.
  ATTNRT_RETURN_IF_ERROR(CheckRank(query, "query", 3));
  const int64_t B = query.shape[0];
  const int64_t S = query.shape[1];
  const int64_t D = query.shape[2];
  const bool packed = key == nullptr;
  const int64_t heads_in_query = packed ? N + 2 * Nkv : N;
  const int64_t H = D / heads_in_query;
  // The paged ops take any head size of an unquantized cache (ABI 1.9); GroupQueryAttention's
  // rule, as the reference's, is a multiple of 8.
  const bool any_key_head_size = value_rows.any_head_size && !Quantized(a);
  const bool any_value_head_size =
      value_rows.any_head_size && (!Quantized(a) || value_rows.own_type);
  if (H % 8 != 0 && !any_key_head_size) {
    return InvalidArgument(
        StrCat("head_size must be a multiple of 8, got ", H, " (query dimension 2 = ", D, ", ",
               packed ? "num_heads + 2 * kv_num_heads" : "num_heads", " = ", heads_in_query, ")"));
  }
  if (BlockQuantized(a) && H % ATTNRT_GQA_QUANT_BLOCK_ELEMENTS != 0) {
    return InvalidArgument(
        StrCat("head_size must be a multiple of 32 for a PER_BLOCK_32 KV cache (",
               a.kv_cache_bit_width == 4 ? "Q4_0" : "Q8_0", " blocks of 32 elements), got ", H));
  }
  // The paged ops' value head size (ABI 1.8); GroupQueryAttention's is H.
  const int64_t Hv = value_head_size > 0 ? value_head_size : H;
  const char* hv_name = Hv != H ? "v_head_size (value_cache's last dimension)" : "head_size";
  if (Hv != H) {
    if (packed) {
      return InvalidArgument(StrCat(
          "packed QKV (key and value absent) needs value_cache's head size to equal head_size ", H,
          ", got v_head_size ", Hv));
    }
    if (Hv % 8 != 0 && !any_value_head_size) {
      return InvalidArgument(
          StrCat("v_head_size (value_cache dimension 3) must be a multiple of 8, got ", Hv));
    }
    // A value cache of its own type (paged ops, ABI 1.9) follows its own rules (checked by the
    // caller).
    if (!value_rows.own_type && BlockQuantized(a) && Hv % ATTNRT_GQA_QUANT_BLOCK_ELEMENTS != 0) {
      return InvalidArgument(
          StrCat("v_head_size must be a multiple of 32 for a PER_BLOCK_32 KV cache, got ", Hv));
    }
  }
  if (packed && value != nullptr) {
    return InvalidArgument(
        "Input 'key' and 'value' shall be both present, or both absent in the case of packed qkv, "
        "got key absent and value present");
  }
  if (!packed && value == nullptr) {
    return InvalidArgument(
        "Input 'key' and 'value' shall be both present, or both absent in the case of packed qkv, "
        "got key present and value absent");
  }
  // The reference lets these pass CheckInputs and fails later in a reshape; rejected here.
  if (H <= 0 || D != H * heads_in_query) {
    return InvalidArgument(StrCat("Input 'query' dimension 2 should be a positive multiple of ",
                                  packed ? "num_heads + 2 * kv_num_heads" : "num_heads", " = ",
                                  heads_in_query, ", got ", D));
  }
  int64_t L = S;
  if (!packed) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*key, "key", 3));
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*key, ATTNRT_GQA_INPUT_KEY, 0, B, "batch_size"));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*key, ATTNRT_GQA_INPUT_KEY, 2, Nkv * H, "kv_num_heads * head_size"));
    L = key->shape[1];
    ATTNRT_RETURN_IF_ERROR(CheckRank(*value, "value", 3));
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*value, ATTNRT_GQA_INPUT_VALUE, 0, B, "batch_size"));
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*value, ATTNRT_GQA_INPUT_VALUE, 1, L,
                                         "key dimension 1 (kv_sequence_length)"));
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*value, ATTNRT_GQA_INPUT_VALUE, 2, Nkv * Hv,
                                         StrCat("kv_num_heads * ", hv_name).c_str()));
  }

  // Item 7: past key/value. Hc is the last dimension of a cache row: H elements, H/2 bytes for
  // int4 packed in uint8 (H is a multiple of 8), or the bytes of H/32 Q8_0/Q4_0 blocks.
  const int64_t Hc = CacheRowWidth(a, H);
  const int64_t Hcv = CacheRowWidth(a, Hv);
  if ((past_key == nullptr) != (past_value == nullptr)) {
    return InvalidArgument(
        StrCat("Input 'past_key' and 'past_value' shall be both present or both absent, got "
               "past_key ",
               PresenceWord(past_key), " and past_value ", PresenceWord(past_value)));
  }
  int64_t P = 0;
  if (past_key != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*past_key, "past_key", 4));
    ATTNRT_RETURN_IF_ERROR(CheckRank(*past_value, "past_value", 4));
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*past_key, ATTNRT_GQA_INPUT_PAST_KEY, 0, B, "batch_size"));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*past_value, ATTNRT_GQA_INPUT_PAST_VALUE, 0, B, "batch_size"));
    P = past_key->shape[2];
    ATTNRT_RETURN_IF_ERROR(CheckInputDim(*past_value, ATTNRT_GQA_INPUT_PAST_VALUE, 2, P,
                                         "the same as past_key dimension 2"));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*past_key, ATTNRT_GQA_INPUT_PAST_KEY, 1, Nkv, "kv_num_heads"));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*past_value, ATTNRT_GQA_INPUT_PAST_VALUE, 1, Nkv, "kv_num_heads"));
    for (int i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
      const int64_t width = i == ATTNRT_GQA_INPUT_PAST_KEY ? Hc : Hcv;
      if (t.in[i]->shape[3] != width) {
        return InvalidArgument(
            StrCat("Input '", kInputNames[i],
                   "' dimension 3 should match the packed KV head dimension, got ",
                   t.in[i]->shape[3], " expected ", width));
      }
    }
    if (L != S && L != 0) {
      return InvalidArgument(StrCat(
          "Input 'key' dimension 1 (kv_sequence_length) should equal sequence_length, or be 0 for "
          "shared KV, when past_key is given, got ",
          L, " expected ", S));
    }
  } else if (L != S) {
    return InvalidArgument(StrCat(
        "Input 'key' dimension 1 (kv_sequence_length) should equal sequence_length when past_key "
        "is absent (no cross-attention, and shared KV needs a past), got ",
        L, " expected ", S));
  }

  // Item 8: seqlens_k holds B values, in at least one dimension: the pinned onnxruntime rejects a
  // 0-d seqlens_k whatever B is (tests/python/test_gqa_nonfinite_parity.py).
  if (seqlens_k.ndim == 0) return InvalidArgument("seqlens_k must be at least 1D, got scalar.");
  const int64_t seqlens_count = NumElements(seqlens_k);
  if (seqlens_count != B) {
    return InvalidArgument(
        StrCat("seqlens_k must have batch_size (", B, ") elements, got ", seqlens_count, "."));
  }
  for (int32_t i = 0; i < seqlens_k.ndim; ++i) {
    if (seqlens_k.shape[i] != 1 && seqlens_k.shape[i] != B) {
      return InvalidArgument(
          StrCat("seqlens_k has unexpected shape. Each dimension must be 1 or batch_size (", B,
                 "), got dim[", i, "] = ", seqlens_k.shape[i], "."));
    }
  }
  // Item 9 (shape part): one element, scalar or [1]; its value is checked at run.
  if (NumElements(total_seqlen) != 1) {
    return InvalidArgument(StrCat("total_sequence_length must have exactly one element, got ",
                                  NumElements(total_seqlen), " (shape ", ShapeString(total_seqlen),
                                  ")"));
  }

  // Item 10: output and present shapes. The present length max(T, P) needs T and is checked at run.
  ATTNRT_RETURN_IF_ERROR(CheckRank(output, "output", 3));
  ATTNRT_RETURN_IF_ERROR(CheckOutputDim(output, ATTNRT_GQA_OUTPUT_OUTPUT, 0, B, "batch_size"));
  ATTNRT_RETURN_IF_ERROR(CheckOutputDim(output, ATTNRT_GQA_OUTPUT_OUTPUT, 1, S, "sequence_length"));
  ATTNRT_RETURN_IF_ERROR(CheckOutputDim(output, ATTNRT_GQA_OUTPUT_OUTPUT, 2, N * Hv,
                                        StrCat("num_heads * ", hv_name).c_str()));
  if ((present_key == nullptr) != (present_value == nullptr)) {
    return InvalidArgument(
        StrCat("Output 'present_key' and 'present_value' shall be both present or both absent, got "
               "present_key ",
               PresenceWord(present_key), " and present_value ", PresenceWord(present_value)));
  }
  int64_t present_len = 0;
  if (present_key != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*present_key, "present_key", 4));
    ATTNRT_RETURN_IF_ERROR(CheckRank(*present_value, "present_value", 4));
    for (int i : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
      const attnrt_tensor& x = *t.out[i];
      ATTNRT_RETURN_IF_ERROR(CheckOutputDim(x, i, 0, B, "batch_size"));
      ATTNRT_RETURN_IF_ERROR(CheckOutputDim(x, i, 1, Nkv, "kv_num_heads"));
      if (x.shape[2] < P) {
        return InvalidArgument(StrCat("Output '", kOutputNames[i],
                                      "' dimension 2 should be at least past_sequence_length, got ",
                                      x.shape[2], " expected >= ", P));
      }
      const int64_t width = i == ATTNRT_GQA_OUTPUT_PRESENT_KEY ? Hc : Hcv;
      if (x.shape[3] != width) {
        return InvalidArgument(
            StrCat("Output '", kOutputNames[i],
                   "' dimension 3 should match the packed KV head dimension, got ", x.shape[3],
                   " expected ", width));
      }
    }
    present_len = present_key->shape[2];
    ATTNRT_RETURN_IF_ERROR(CheckOutputDim(*present_value, ATTNRT_GQA_OUTPUT_PRESENT_VALUE, 2,
                                          present_len, "the same as present_key dimension 2"));
  } else if (quantized) {
    return InvalidArgument(
        "present_key and present_value must be provided for quantized KV cache, got both absent");
  }

  // Item 11: windowed (ring) cache of capacity P; present is the same window.
  if (a.sliding_window_cache == 1) {
    if (past_key == nullptr) {
      return InvalidArgument(
          "sliding_window_cache=1 requires past_key and past_value (the window cache), got absent");
    }
    if (L == 0) {
      return InvalidArgument(
          "sliding_window_cache=1 requires new key/value rows, got kv_sequence_length 0 (shared "
          "KV)");
    }
    if (P < a.local_window_size) {
      return InvalidArgument(
          StrCat("sliding_window_cache=1 requires the cache capacity past_key dimension 2 >= "
                 "local_window_size, got ",
                 P, " expected >= ", a.local_window_size));
    }
    if (quantized && a.kv_cache_bit_width == 8 && H % 16 != 0) {
      return InvalidArgument(
          StrCat("head_size must be a multiple of 16 for an 8-bit windowed KV cache, got ", H));
    }
    if (quantized && a.kv_cache_bit_width == 4 && H % 32 != 0) {
      return InvalidArgument(
          StrCat("head_size must be a multiple of 32 for a 4-bit windowed KV cache, got ", H));
    }
    if (present_key != nullptr && present_len != P) {
      return InvalidArgument(
          StrCat("Output 'present_key' dimension 2 should be the window cache capacity (past_key "
                 "dimension 2) with sliding_window_cache=1, got ",
                 present_len, " expected ", P));
    }
    // Bias columns and output_qk columns are absolute key positions, the windowed cache holds
    // cache-relative rows: the reference rejects both combinations.
    if (attention_bias != nullptr) {
      return InvalidArgument(
          "attention_bias cannot be combined with sliding_window_cache=1, expected absent");
    }
    if (output_qk != nullptr) {
      return InvalidArgument(
          "GroupQueryAttention (CPU): qk_output is not implemented with sliding_window_cache=1, "
          "expected output_qk absent");
    }
    // The window is compacted into present (ONNX Runtime: "sliding_window_cache=1 requires the
    // present_key and present_value outputs.").
    if (present_key == nullptr) {
      return InvalidArgument(
          "sliding_window_cache=1 requires the present_key and present_value outputs, got absent");
    }
  }

  // Item 12: rotary caches, checked whenever both are given (even with do_rotary = 0).
  if ((cos_cache == nullptr) != (sin_cache == nullptr)) {
    return InvalidArgument(
        StrCat("Input 'cos_cache' and 'sin_cache' shall be both present or both absent, got "
               "cos_cache ",
               PresenceWord(cos_cache), " and sin_cache ", PresenceWord(sin_cache)));
  }
  int64_t rotary_len = 0;
  int64_t rotary_dim = 0;
  if (cos_cache != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*cos_cache, "cos_cache", 2));
    ATTNRT_RETURN_IF_ERROR(CheckRank(*sin_cache, "sin_cache", 2));
    if (H % 16 != 0) {
      return InvalidArgument(StrCat(
          "head_size must be a multiple of 16 when cos_cache and sin_cache are given, got ", H));
    }
    for (int i : {ATTNRT_GQA_INPUT_COS_CACHE, ATTNRT_GQA_INPUT_SIN_CACHE}) {
      const int64_t d1 = t.in[i]->shape[1];
      if (d1 > H / 2 || d1 % 8 != 0) {
        return InvalidArgument(StrCat("Input '", kInputNames[i],
                                      "' dimension 1 must be <= head_size / 2 = ", H / 2,
                                      " and a multiple of 8, got ", d1));
      }
    }
    if (cos_cache->shape[1] != sin_cache->shape[1]) {
      return InvalidArgument(
          StrCat("Input 'cos_cache' and 'sin_cache' dimension 1 must be the same, got ",
                 cos_cache->shape[1], " and ", sin_cache->shape[1]));
    }
    rotary_len = std::min(cos_cache->shape[0], sin_cache->shape[0]);
    rotary_dim = 2 * cos_cache->shape[1];
  }

  // Item 13 (phase) needs the value of total_sequence_length: run.
  // Item 14: custom attention inputs (attention_bias dimension 3 == T is checked at run).
  if (position_ids != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*position_ids, "position_ids", 2));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*position_ids, ATTNRT_GQA_INPUT_POSITION_IDS, 0, B, "batch_size"));
    if (position_ids->shape[1] < S) {
      return InvalidArgument(
          StrCat("Input 'position_ids' dimension 1 should be at least sequence_length, got ",
                 position_ids->shape[1], " expected >= ", S));
    }
  }
  if (attention_bias != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*attention_bias, "attention_bias", 4));
    if (attention_bias->shape[0] != B && attention_bias->shape[0] != 1) {
      return InvalidArgument(
          StrCat("Input 'attention_bias' dimension 0 should be batch_size or 1, got ",
                 attention_bias->shape[0], " expected ", B, " or 1"));
    }
    if (attention_bias->shape[1] != N && attention_bias->shape[1] != 1) {
      return InvalidArgument(
          StrCat("Input 'attention_bias' dimension 1 should be num_heads or 1, got ",
                 attention_bias->shape[1], " expected ", N, " or 1"));
    }
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*attention_bias, ATTNRT_GQA_INPUT_ATTENTION_BIAS, 2, S, "sequence_length"));
  }
  if (head_sink != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*head_sink, "head_sink", 1));
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*head_sink, ATTNRT_GQA_INPUT_HEAD_SINK, 0, N, "num_heads"));
  }

  // Item 15: scale element counts (any shape with that count is accepted, e.g. (1, Nkv, 1, H)).
  int64_t k_scale_count = 0;
  int64_t v_scale_count = 0;
  if (ScaleInputsUsed(a)) {
    const bool per_channel = a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL;
    const int64_t expected = per_channel ? Nkv * H : 1;
    const int64_t v_expected = per_channel ? Nkv * Hv : 1;
    k_scale_count = NumElements(*k_scale);
    v_scale_count = NumElements(*v_scale);
    if (k_scale_count != expected) {
      return InvalidArgument(
          StrCat("k_scale shape mismatch: expected ", expected, " elements, got ", k_scale_count));
    }
    if (v_scale_count != v_expected) {
      return InvalidArgument(StrCat("v_scale shape mismatch: expected ", v_expected,
                                    " elements, got ", v_scale_count));
    }
  }
  // Without quantization k_scale/v_scale are ignored, as by the reference (counts stay 0).

  // Item 17: output_qk (its dimension 3 == T is checked at run).
  if (a.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE && output_qk == nullptr) {
    return InvalidArgument(
        StrCat("qk_output attribute was configured but output buffer was not provided (qk_output=",
               a.qk_output, ", output_qk absent)"));
  }
  if (a.qk_output == ATTNRT_GQA_QK_OUTPUT_NONE && output_qk != nullptr) {
    return InvalidArgument(
        "Output QK buffer was provided but qk_output attribute was not configured (qk_output=0, "
        "output_qk present)");
  }
  if (output_qk != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckRank(*output_qk, "output_qk", 4));
    ATTNRT_RETURN_IF_ERROR(
        CheckOutputDim(*output_qk, ATTNRT_GQA_OUTPUT_OUTPUT_QK, 0, B, "batch_size"));
    ATTNRT_RETURN_IF_ERROR(
        CheckOutputDim(*output_qk, ATTNRT_GQA_OUTPUT_OUTPUT_QK, 1, N, "num_heads"));
    ATTNRT_RETURN_IF_ERROR(
        CheckOutputDim(*output_qk, ATTNRT_GQA_OUTPUT_OUTPUT_QK, 2, S, "sequence_length"));
  }

  // Item 18 (presence part).
  if (a.do_rotary == 1 && cos_cache == nullptr) {
    return InvalidArgument(
        "cos_cache and sin_cache must be provided when do_rotary is true, got both absent");
  }
  // Item 20: a quantized cache takes T_CACHE from the past inputs (zero-length ones are fine).
  if (quantized && past_key == nullptr) {
    return InvalidArgument(
        "past_key and past_value must be provided for quantized KV cache (zero-length buffers "
        "(B, kv_num_heads, 0, head dimension) are fine), got both absent");
  }

  attnrt_gqa_problem p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof(attnrt_gqa_problem);
  p.attributes = a;
  p.attributes.struct_size = sizeof(attnrt_gqa_attributes);
  p.batch_size = B;
  p.sequence_length = S;
  p.kv_sequence_length = L;
  p.num_heads = N;
  p.kv_num_heads = Nkv;
  p.head_size = H;
  p.past_sequence_length = P;
  p.present_sequence_length = present_len;
  p.query_dtype = query.dtype;
  p.cache_dtype = past_key != nullptr      ? past_key->dtype
                  : present_key != nullptr ? present_key->dtype
                                           : query.dtype;
  p.device_type = query.device.device_type;
  p.packed_qkv = packed;
  p.has_past = past_key != nullptr;
  p.has_present = present_key != nullptr;
  p.has_rotary_cache = cos_cache != nullptr;
  p.rotary_cache_length = rotary_len;
  p.rotary_dim = rotary_dim;
  p.has_position_ids = position_ids != nullptr;
  p.position_ids_length = position_ids != nullptr ? position_ids->shape[1] : 0;
  p.has_attention_bias = attention_bias != nullptr;
  p.attention_bias_broadcast_batch = attention_bias != nullptr && attention_bias->shape[0] == 1;
  p.attention_bias_broadcast_heads = attention_bias != nullptr && attention_bias->shape[1] == 1;
  p.attention_bias_total_length = attention_bias != nullptr ? attention_bias->shape[3] : 0;
  p.has_head_sink = head_sink != nullptr;
  p.k_scale_count = k_scale_count;
  p.v_scale_count = v_scale_count;
  p.has_output_qk = output_qk != nullptr;
  *out = p;
  return Status::Ok();
}

}  // namespace
}  // namespace detail

using namespace detail;

Status ValidateShapes(const attnrt_gqa_attributes& attributes, const attnrt_tensor* const* inputs,
                      size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_gqa_problem* out) {
  return GuardValidation("GroupQueryAttention", "ValidateShapes", [&] {
    return ValidateShapesImpl(attributes, inputs, num_inputs, outputs, num_outputs, ValueRows{},
                              out);
  });
}

Status ValidateShapes(const attnrt_gqa_attributes& attributes, const attnrt_tensor* const* inputs,
                      size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                      ValueRows value, attnrt_gqa_problem* out) {
  return GuardValidation("GroupQueryAttention", "ValidateShapes", [&] {
    return ValidateShapesImpl(attributes, inputs, num_inputs, outputs, num_outputs, value, out);
  });
}

}  // namespace attnrt::core::gqa
