// GroupQueryAttention validation. The checks and their order follow gqa-semantics.md §2 (ONNX
// Runtime 1.30, CPU EP); item numbers below refer to that list. Messages keep the reference's text
// where it names the offending value and add the input name, the expected and the actual value.
#include "core/ops/gqa_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa {
namespace {

constexpr const char* kInputNames[ATTNRT_GQA_NUM_INPUTS] = {"query",
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
constexpr const char* kOutputNames[ATTNRT_GQA_NUM_OUTPUTS] = {"output", "present_key",
                                                              "present_value", "output_qk"};

constexpr size_t kMinInputs = ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH + 1;

// The inputs and outputs of one call, indexed by ATTNRT_GQA_INPUT_* / ATTNRT_GQA_OUTPUT_*; entries
// past the caller's count are NULL (absent).
struct Tensors {
  const attnrt_tensor* in[ATTNRT_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_GQA_NUM_OUTPUTS] = {};
};

Status GatherTensors(const attnrt_tensor* const* inputs, size_t num_inputs,
                     const attnrt_tensor* const* outputs, size_t num_outputs, Tensors* t) {
  if (num_inputs < kMinInputs) {
    return InvalidArgument(StrCat(
        "GroupQueryAttention expects at least 7 inputs (query, key, value, past_key, past_value, "
        "seqlens_k, total_sequence_length), got ",
        num_inputs));
  }
  if (num_inputs > ATTNRT_GQA_NUM_INPUTS) {
    return InvalidArgument(StrCat("GroupQueryAttention expects at most ",
                                  static_cast<int>(ATTNRT_GQA_NUM_INPUTS), " inputs, got ",
                                  num_inputs));
  }
  if (num_outputs < 1 || num_outputs > ATTNRT_GQA_NUM_OUTPUTS) {
    return InvalidArgument(
        StrCat("GroupQueryAttention expects 1 to 4 outputs (output, present_key, present_value, "
               "output_qk), got ",
               num_outputs));
  }
  if (inputs == nullptr) return InvalidArgument("GroupQueryAttention: inputs must not be NULL");
  if (outputs == nullptr) return InvalidArgument("GroupQueryAttention: outputs must not be NULL");
  for (size_t i = 0; i < num_inputs; ++i) t->in[i] = inputs[i];
  for (size_t i = 0; i < num_outputs; ++i) t->out[i] = outputs[i];
  return Status::Ok();
}

const char* QuantName(int32_t quant_type) {
  switch (quant_type) {
    case ATTNRT_GQA_QUANT_NONE:
      return "NONE";
    case ATTNRT_GQA_QUANT_PER_TENSOR:
      return "PER_TENSOR";
    case ATTNRT_GQA_QUANT_PER_CHANNEL:
      return "PER_CHANNEL";
    default:
      return "invalid";
  }
}

bool Quantized(const attnrt_gqa_attributes& a) { return a.k_quant_type != ATTNRT_GQA_QUANT_NONE; }

// Attribute values (reference item 1, the attribute parts of items 2, 4 and 5, and the qk_output
// range of item 17, which needs no tensors and is rejected here rather than at run).
Status CheckAttributeValues(const attnrt_gqa_attributes& a) {
  // Item 1.
  if (a.num_heads <= 0) {
    return InvalidArgument(StrCat("num_heads must be positive, got ", a.num_heads));
  }
  if (a.kv_num_heads <= 0) {
    return InvalidArgument(StrCat("kv_num_heads must be positive, got ", a.kv_num_heads));
  }
  // Non-finite values would turn whole rows into NaN; attnrt rejects them (beyond the reference).
  for (const auto& [name, value] : {std::pair{"scale", a.scale}, std::pair{"softcap", a.softcap},
                                    std::pair{"qk_norm_epsilon", a.qk_norm_epsilon}}) {
    if (!std::isfinite(value)) {
      return InvalidArgument(StrCat(name, " must be a finite number, got ", value));
    }
  }
  if (a.causal != 0 && a.causal != 1) {
    return InvalidArgument(StrCat("causal must be 0 or 1, got ", a.causal));
  }
  if (a.causal == 0 && a.local_window_size != -1) {
    return InvalidArgument(
        StrCat("GroupQueryAttention (CPU): local_window_size must be -1 when causal is 0, got "
               "local_window_size=",
               a.local_window_size));
  }
  if (a.sliding_window_cache != 0 && a.sliding_window_cache != 1) {
    return InvalidArgument(
        StrCat("sliding_window_cache must be 0 or 1, got ", a.sliding_window_cache));
  }
  if (a.sliding_window_cache == 1 && a.local_window_size <= 0) {
    return InvalidArgument(
        StrCat("GroupQueryAttention (CPU): sliding_window_cache=1 requires local_window_size > 0, "
               "got local_window_size=",
               a.local_window_size));
  }
  for (const auto& [name, value] :
       {std::pair{"k_quant_type", a.k_quant_type}, std::pair{"v_quant_type", a.v_quant_type}}) {
    if (value < ATTNRT_GQA_QUANT_NONE || value > ATTNRT_GQA_QUANT_PER_CHANNEL) {
      return InvalidArgument(StrCat("Invalid KV quantization type: ", name,
                                    " must be 0 (NONE), 1 (PER_TENSOR) or 2 (PER_CHANNEL), got ",
                                    value));
    }
  }
  // Item 2 (attribute part). Only k_quant_type enables quantization; v_quant_type alone is ignored.
  if (Quantized(a)) {
    if (a.k_quant_type != a.v_quant_type) {
      return InvalidArgument(StrCat(
          "CPU GroupQueryAttention requires k_quant_type == v_quant_type, got different types: "
          "k_quant_type=",
          QuantName(a.k_quant_type), " v_quant_type=", QuantName(a.v_quant_type)));
    }
    if (a.kv_cache_bit_width != 4 && a.kv_cache_bit_width != 8) {
      return InvalidArgument(
          StrCat("kv_cache_bit_width must be 4 or 8 when quantization is enabled, got ",
                 a.kv_cache_bit_width));
    }
  } else if (a.kv_cache_bit_width != 0) {
    return InvalidArgument(StrCat(
        "kv_cache_bit_width must be 0 when quantization is disabled, got ", a.kv_cache_bit_width));
  }
  // Item 4 (needs no shapes, so it is checked at creation as well).
  if (a.num_heads % a.kv_num_heads != 0) {
    return InvalidArgument(StrCat("num_heads must be a multiple of kv_num_heads, got num_heads=",
                                  a.num_heads, " kv_num_heads=", a.kv_num_heads));
  }
  // Item 5 (kv_cache_bit_width in {0, 4, 8}) cannot fail after item 2.
  // Item 17, value range.
  if (a.qk_output < ATTNRT_GQA_QK_OUTPUT_NONE || a.qk_output > ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX) {
    return InvalidArgument(StrCat("qk_output attribute received unsupported value ", a.qk_output,
                                  ", expected 0 (none), 1 (before softmax) or 2 (after softmax)"));
  }
  return Status::Ok();
}

// ---- dtypes -------------------------------------------------------------------------------------

// T_CACHE of past_key (or of present_key without a past). Not quantized: T. 8-bit: int8, or
// float8_e4m3fn (beyond the CPU reference, which has no float8 kernel; CUDA has one). 4-bit: uint8
// holding two int4 values per byte, as the reference stores it.
Status CheckCacheDtype(const attnrt_tensor& t, const char* name, const attnrt_gqa_attributes& a,
                       attnrt_dtype query_dtype) {
  if (!Quantized(a)) {
    return CheckDtype(t, name, query_dtype, "the dtype of query; the KV cache is not quantized");
  }
  if (a.kv_cache_bit_width == 8) {
    if (DtypeEquals(t.dtype, kInt8) || DtypeEquals(t.dtype, kFloat8E4M3FN)) return Status::Ok();
    return InvalidArgument(
        StrCat(name, ": expected dtype int8 or float8_e4m3fn for an 8-bit quantized KV cache, got ",
               DtypeString(t.dtype)));
  }
  return CheckDtype(t, name, kUInt8,
                    "int4 values packed two per byte for a 4-bit quantized KV cache");
}

Status CheckTensorDtype(const Tensors& t, bool is_input, int index,
                        const attnrt_gqa_attributes& a) {
  const attnrt_tensor& x = is_input ? *t.in[index] : *t.out[index];
  const char* name = is_input ? kInputNames[index] : kOutputNames[index];
  const attnrt_dtype T = t.in[ATTNRT_GQA_INPUT_QUERY]->dtype;
  if (!is_input) {
    switch (index) {
      case ATTNRT_GQA_OUTPUT_PRESENT_KEY:
        if (const attnrt_tensor* past = t.in[ATTNRT_GQA_INPUT_PAST_KEY]) {
          return CheckDtype(x, name, past->dtype, "the dtype of past_key");
        }
        return CheckCacheDtype(x, name, a, T);
      case ATTNRT_GQA_OUTPUT_PRESENT_VALUE:
        if (const attnrt_tensor* present_key = t.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY]) {
          return CheckDtype(x, name, present_key->dtype, "the dtype of present_key");
        }
        if (const attnrt_tensor* past = t.in[ATTNRT_GQA_INPUT_PAST_VALUE]) {
          return CheckDtype(x, name, past->dtype, "the dtype of past_value");
        }
        return CheckCacheDtype(x, name, a, T);
      default:  // output, output_qk
        return CheckDtype(x, name, T, "the dtype of query");
    }
  }
  switch (index) {
    case ATTNRT_GQA_INPUT_QUERY:
      if (DtypeEquals(T, kFloat32) || DtypeEquals(T, kFloat16) || DtypeEquals(T, kBFloat16)) {
        return Status::Ok();
      }
      return InvalidArgument(
          StrCat("query: expected dtype float32, float16 or bfloat16, got ", DtypeString(T)));
    case ATTNRT_GQA_INPUT_PAST_KEY:
      return CheckCacheDtype(x, name, a, T);
    case ATTNRT_GQA_INPUT_PAST_VALUE:
      if (const attnrt_tensor* past_key = t.in[ATTNRT_GQA_INPUT_PAST_KEY]) {
        return CheckDtype(x, name, past_key->dtype, "the dtype of past_key");
      }
      return CheckCacheDtype(x, name, a, T);
    case ATTNRT_GQA_INPUT_SEQLENS_K:
    case ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH:
      return CheckDtype(x, name, kInt32);
    case ATTNRT_GQA_INPUT_POSITION_IDS:
      return CheckDtype(x, name, kInt64);
    case ATTNRT_GQA_INPUT_K_SCALE:
    case ATTNRT_GQA_INPUT_V_SCALE:
      return CheckDtype(x, name, kFloat32);
    default:  // key, value, cos/sin, attention_bias, head_sink, q/k norm weights
      return CheckDtype(x, name, T, "the dtype of query");
  }
}

// Structure, strides, device and dtype of every present tensor, inputs first.
Status CheckTensors(const Tensors& t, const attnrt_gqa_attributes& a) {
  const attnrt_tensor& query = *t.in[ATTNRT_GQA_INPUT_QUERY];
  if (query.device.device_type != ATTNRT_DEVICE_CPU &&
      query.device.device_type != ATTNRT_DEVICE_CUDA) {
    return InvalidArgument(StrCat("query: unsupported device ", DeviceString(query.device),
                                  ", expected a cpu or cuda device"));
  }
  for (int pass = 0; pass < 2; ++pass) {
    const bool is_input = pass == 0;
    const int count = is_input ? int{ATTNRT_GQA_NUM_INPUTS} : int{ATTNRT_GQA_NUM_OUTPUTS};
    for (int i = 0; i < count; ++i) {
      const attnrt_tensor* x = is_input ? t.in[i] : t.out[i];
      if (x == nullptr) continue;
      const char* name = is_input ? kInputNames[i] : kOutputNames[i];
      ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*x, name));
      ATTNRT_RETURN_IF_ERROR(CheckCompact(*x, name));
      const bool host_input = is_input && (i == ATTNRT_GQA_INPUT_SEQLENS_K ||
                                           i == ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH);
      if (host_input) {
        if (x->device.device_type != ATTNRT_DEVICE_CPU) {
          return InvalidArgument(
              StrCat(name, ": must be in host memory (device cpu), got ", DeviceString(x->device)));
        }
      } else if (!SameDevice(x->device, query.device)) {
        return InvalidArgument(StrCat(name, ": expected device ", DeviceString(query.device),
                                      " (the device of query), got ", DeviceString(x->device)));
      }
      ATTNRT_RETURN_IF_ERROR(CheckTensorDtype(t, is_input, i, a));
    }
  }
  return Status::Ok();
}

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

const char* PresenceWord(const attnrt_tensor* x) { return x != nullptr ? "present" : "absent"; }

Status ValidateShapesImpl(const attnrt_gqa_attributes& a, const attnrt_tensor* const* inputs,
                          size_t num_inputs, const attnrt_tensor* const* outputs,
                          size_t num_outputs, attnrt_gqa_problem* out) {
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
  if (quantized) {
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
  if (H % 8 != 0) {
    return InvalidArgument(
        StrCat("head_size must be a multiple of 8, got ", H, " (query dimension 2 = ", D, ", ",
               packed ? "num_heads + 2 * kv_num_heads" : "num_heads", " = ", heads_in_query, ")"));
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
    ATTNRT_RETURN_IF_ERROR(
        CheckInputDim(*value, ATTNRT_GQA_INPUT_VALUE, 2, Nkv * H, "kv_num_heads * head_size"));
  }

  // Item 7: past key/value. Hc is the last dimension of a cache row: H elements, or H/2 bytes for
  // int4 packed in uint8 (H is a multiple of 8).
  const int64_t Hc = quantized && a.kv_cache_bit_width == 4 ? H / 2 : H;
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
      if (t.in[i]->shape[3] != Hc) {
        return InvalidArgument(
            StrCat("Input '", kInputNames[i],
                   "' dimension 3 should match the packed KV head dimension, got ",
                   t.in[i]->shape[3], " expected ", Hc));
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

  // Item 8: seqlens_k holds B values. The released libraries accept a 0-d seqlens_k when B == 1
  // (a 0-d one with another B gets the element-count message), so "at least 1D" never fires.
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
  ATTNRT_RETURN_IF_ERROR(
      CheckOutputDim(output, ATTNRT_GQA_OUTPUT_OUTPUT, 2, N * H, "num_heads * head_size"));
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
      if (x.shape[3] != Hc) {
        return InvalidArgument(
            StrCat("Output '", kOutputNames[i],
                   "' dimension 3 should match the packed KV head dimension, got ", x.shape[3],
                   " expected ", Hc));
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
  if (quantized) {
    const int64_t expected = a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL ? Nkv * H : 1;
    k_scale_count = NumElements(*k_scale);
    v_scale_count = NumElements(*v_scale);
    if (k_scale_count != expected) {
      return InvalidArgument(
          StrCat("k_scale shape mismatch: expected ", expected, " elements, got ", k_scale_count));
    }
    if (v_scale_count != expected) {
      return InvalidArgument(
          StrCat("v_scale shape mismatch: expected ", expected, " elements, got ", v_scale_count));
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

// ---- run ----------------------------------------------------------------------------------------

// The tensors the plan saw must still be there (and no others that change the problem): the
// runtime compares shapes and dtypes, this only guards against reading through a NULL descriptor.
Status CheckPresenceMatchesPlan(const Tensors& t, const attnrt_gqa_problem& p) {
  const bool quantized = Quantized(p.attributes);
  const bool expect_in[ATTNRT_GQA_NUM_INPUTS] = {true,
                                                 !p.packed_qkv,
                                                 !p.packed_qkv,
                                                 p.has_past,
                                                 p.has_past,
                                                 true,
                                                 true,
                                                 p.has_rotary_cache,
                                                 p.has_rotary_cache,
                                                 p.has_position_ids,
                                                 p.has_attention_bias,
                                                 p.has_head_sink,
                                                 quantized,
                                                 quantized,
                                                 false,
                                                 false};
  const bool expect_out[ATTNRT_GQA_NUM_OUTPUTS] = {true, p.has_present, p.has_present,
                                                   p.has_output_qk};
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    // k_scale/v_scale may be given without quantization (ignored, as at plan).
    if (!quantized && (i == ATTNRT_GQA_INPUT_K_SCALE || i == ATTNRT_GQA_INPUT_V_SCALE)) continue;
    if (expect_in[i] != (t.in[i] != nullptr)) {
      return PlanMismatch(StrCat("Input '", kInputNames[i], "' was ",
                                 expect_in[i] ? "present" : "absent",
                                 " when the plan was made, got ", PresenceWord(t.in[i])));
    }
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
    if (expect_out[i] != (t.out[i] != nullptr)) {
      return PlanMismatch(StrCat("Output '", kOutputNames[i], "' was ",
                                 expect_out[i] ? "present" : "absent",
                                 " when the plan was made, got ", PresenceWord(t.out[i])));
    }
  }
  return Status::Ok();
}

// Outputs may not overlap inputs or each other, except present_key/value that are exactly
// past_key/value's memory (same start; same length is checked with the present length).
Status CheckAliasing(const Tensors& t, const ByteRange (&in)[ATTNRT_GQA_NUM_INPUTS],
                     const ByteRange (&out)[ATTNRT_GQA_NUM_OUTPUTS], bool* shares_past) {
  auto same_start = [&](int o, int i) {
    return t.out[o] != nullptr && t.in[i] != nullptr && !in[i].empty() &&
           in[i].begin == out[o].begin;
  };
  const bool share_k = same_start(ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_INPUT_PAST_KEY);
  const bool share_v = same_start(ATTNRT_GQA_OUTPUT_PRESENT_VALUE, ATTNRT_GQA_INPUT_PAST_VALUE);
  // In-place append needs both caches in place; say which one is not, and whether it overlaps.
  if (share_k != share_v) {
    const int o = share_k ? ATTNRT_GQA_OUTPUT_PRESENT_VALUE : ATTNRT_GQA_OUTPUT_PRESENT_KEY;
    const int i = share_k ? ATTNRT_GQA_INPUT_PAST_VALUE : ATTNRT_GQA_INPUT_PAST_KEY;
    const char* shared = share_k ? "present_key shares past_key's"
                                 : "present_value shares "
                                   "past_value's";
    const bool overlaps = t.out[o] != nullptr && t.in[i] != nullptr && Overlaps(out[o], in[i]);
    return InvalidArgument(StrCat(shared, " memory, so Output '", kOutputNames[o],
                                  "' must start exactly at input '", kInputNames[i], "', but it ",
                                  overlaps ? "overlaps it at another address" : "does not"));
  }
  auto device_type = [](const attnrt_tensor* x) { return x->device.device_type; };
  for (int o = 0; o < ATTNRT_GQA_NUM_OUTPUTS; ++o) {
    if (t.out[o] == nullptr) continue;
    for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
      if (t.in[i] == nullptr || device_type(t.in[i]) != device_type(t.out[o])) continue;
      if (share_k && o == ATTNRT_GQA_OUTPUT_PRESENT_KEY && i == ATTNRT_GQA_INPUT_PAST_KEY) continue;
      if (share_v && o == ATTNRT_GQA_OUTPUT_PRESENT_VALUE && i == ATTNRT_GQA_INPUT_PAST_VALUE) {
        continue;
      }
      if (Overlaps(out[o], in[i])) {
        return InvalidArgument(StrCat(
            "Output '", kOutputNames[o], "' overlaps input '", kInputNames[i],
            "' in memory, expected disjoint buffers (only present_key/present_value may be exactly "
            "past_key/past_value's memory)"));
      }
    }
    for (int o2 = o + 1; o2 < ATTNRT_GQA_NUM_OUTPUTS; ++o2) {
      if (t.out[o2] == nullptr || device_type(t.out[o2]) != device_type(t.out[o])) continue;
      if (Overlaps(out[o], out[o2])) {
        return InvalidArgument(StrCat("Output '", kOutputNames[o], "' overlaps output '",
                                      kOutputNames[o2], "' in memory, expected disjoint buffers"));
      }
    }
  }
  *shares_past = share_k;
  return Status::Ok();
}

Status ValidateRunImpl(const attnrt_gqa_problem& p, const attnrt_tensor* const* inputs,
                       size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                       attnrt_gqa_args* out) {
  if (out == nullptr) return InvalidArgument("GroupQueryAttention: args must not be NULL");
  if (p.struct_size != sizeof(attnrt_gqa_problem)) {
    return InvalidArgument(StrCat("GroupQueryAttention: problem.struct_size must be ",
                                  sizeof(attnrt_gqa_problem), ", got ", p.struct_size));
  }
  Tensors t;
  ATTNRT_RETURN_IF_ERROR(GatherTensors(inputs, num_inputs, outputs, num_outputs, &t));
  ATTNRT_RETURN_IF_ERROR(CheckPresenceMatchesPlan(t, p));

  ByteRange in_range[ATTNRT_GQA_NUM_INPUTS];
  ByteRange out_range[ATTNRT_GQA_NUM_OUTPUTS];
  const void* in_ptr[ATTNRT_GQA_NUM_INPUTS] = {};
  void* out_ptr[ATTNRT_GQA_NUM_OUTPUTS] = {};
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    if (t.in[i] == nullptr) continue;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.in[i], kInputNames[i], &in_range[i]));
    if (t.in[i]->data != nullptr) {
      in_ptr[i] = static_cast<const char*>(t.in[i]->data) + t.in[i]->byte_offset;
    }
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
    if (t.out[i] == nullptr) continue;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.out[i], kOutputNames[i], &out_range[i]));
    if (t.out[i]->data != nullptr) {
      out_ptr[i] = static_cast<char*>(t.out[i]->data) + t.out[i]->byte_offset;
    }
  }
  bool shares_past = false;
  ATTNRT_RETURN_IF_ERROR(CheckAliasing(t, in_range, out_range, &shares_past));

  const attnrt_gqa_attributes& a = p.attributes;
  const int64_t B = p.batch_size;
  const int64_t S = p.sequence_length;
  const int64_t L = p.kv_sequence_length;
  const int64_t P = p.past_sequence_length;
  const bool windowed = a.sliding_window_cache == 1;
  const void* seqlens = in_ptr[ATTNRT_GQA_INPUT_SEQLENS_K];

  // Item 9.
  const int64_t T = ReadInt32(in_ptr[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH], 0);
  if (T <= 0) {
    return InvalidArgument(StrCat("total_sequence_length must be positive, got ", T));
  }
  // Item 10: present length max(T, P) (item 11: the window capacity P, fixed at plan). A present
  // buffer that is past's memory keeps past's length, so T may not exceed it.
  int64_t present_len = std::max(T, P);
  if (p.has_present && !windowed) {
    const int64_t actual = p.present_sequence_length;
    if (shares_past) {
      if (actual != P) {
        return InvalidArgument(StrCat(
            "present_key shares memory with past_key, so its dimension 2 must equal past_key's, "
            "got ",
            actual, " expected ", P));
      }
      if (T > P) {
        return InvalidArgument(
            StrCat("total_sequence_length must not exceed the shared past/present buffer length ",
                   P, " when present_key shares memory with past_key, got ", T));
      }
    } else if (actual != present_len) {
      return InvalidArgument(StrCat(
          "present_key dimension 2 must be max(total_sequence_length, past_sequence_length) = ",
          present_len, ", got ", actual));
    }
  }
  if (p.has_present) present_len = p.present_sequence_length;

  // Item 12: rotary cache bounds.
  if (p.has_rotary_cache) {
    for (int i : {ATTNRT_GQA_INPUT_COS_CACHE, ATTNRT_GQA_INPUT_SIN_CACHE}) {
      if (t.in[i]->shape[0] < T) {
        return InvalidArgument(StrCat("Input '", kInputNames[i],
                                      "' dimension 0 shall not be less than total_sequence_length, "
                                      "got ",
                                      t.in[i]->shape[0], " expected >= ", T));
      }
    }
    const int64_t M = p.rotary_cache_length;
    for (int64_t b = 0; b < B; ++b) {
      const int32_t v = ReadInt32(seqlens, b);
      if (v < 0 || v >= M) {
        return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                      " is out of range for rotary cache dimension 0 (", M, ")"));
      }
    }
  }

  // Item 13: phase.
  int32_t phase;
  if (S > 1 && S != T) {
    if (B != 1) {
      return InvalidArgument(
          StrCat("batch_size must be 1 when sequence_length > 1 and past context is given. Got "
                 "batch_size=",
                 B, " sequence_length=", S, " total_sequence_length=", T));
    }
    phase = ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT;
  } else if (S == T) {
    phase = ATTNRT_GQA_PHASE_FIRST_PROMPT;
  } else if (S == 1) {
    phase = ATTNRT_GQA_PHASE_DECODE;
  } else {
    return InvalidArgument(
        StrCat("sequence_length shall be 1 when it is not prompt (sequence_length != "
               "total_sequence_length), got sequence_length=",
               S, " total_sequence_length=", T));
  }
  const bool first_prompt = phase == ATTNRT_GQA_PHASE_FIRST_PROMPT;

  // Item 14 (value part).
  if (p.has_attention_bias && p.attention_bias_total_length != T) {
    return InvalidArgument(
        StrCat("Input 'attention_bias' dimension 3 should match total_sequence_length, got ",
               p.attention_bias_total_length, " expected ", T));
  }

  // Item 16: per-batch lengths. A windowed cache keeps seqlens_k absolute, so only the lower
  // bounds apply to it (its cache-relative lengths are planned by the kernel).
  for (int64_t b = 0; b < B; ++b) {
    const int64_t v = ReadInt32(seqlens, b);
    if (v < 0 || (!windowed && v >= present_len)) {
      return InvalidArgument(
          StrCat("seqlens_k[", b, "] = ", v, " is out of range [0, ", present_len, ")"));
    }
    if ((windowed || !first_prompt) && v + 1 < S) {
      return InvalidArgument(
          StrCat("seqlens_k[", b, "] = ", v, " is too small for sequence_length ", S));
    }
    if (!windowed && p.has_past && L != 0 && !first_prompt && v + 1 - S > P) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v, " requires ", v + 1 - S,
                                    " past KV rows, which exceeds the past buffer sequence length ",
                                    P, "."));
    }
    // attnrt rule beyond the reference: attention_bias and output_qk have T columns, and a kernel
    // touches columns [0, T_b) of them, so T_b <= T must hold (only possible to break when P > T).
    if (p.has_attention_bias && v >= T) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                    " exceeds the attention_bias sequence dimension ", T,
                                    " (total_sequence_length), expected < ", T));
    }
    if (p.has_output_qk && v >= T) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                    " exceeds the output_qk sequence dimension ", T,
                                    " (total_sequence_length), expected < ", T));
    }
  }

  // Item 17 (value part).
  if (p.has_output_qk) {
    const int64_t d3 = t.out[ATTNRT_GQA_OUTPUT_OUTPUT_QK]->shape[3];
    if (d3 != T) {
      return InvalidArgument(
          StrCat("Output 'output_qk' dimension 3 should match total_sequence_length, got ", d3,
                 " expected ", T));
    }
  }

  // Item 18: rotary positions. Without position_ids outside the first prompt the positions are
  // P_b + s <= seqlens_k[b], already inside [0, M) by items 12 and 16.
  if (a.do_rotary == 1) {
    const int64_t M = p.rotary_cache_length;
    // Only host memory is read here: position_ids on a CUDA device are never dereferenced by the
    // core (the CUDA kernels clamp each position into [0, M) instead).
    const int64_t* positions =
        p.device_type == ATTNRT_DEVICE_CPU
            ? static_cast<const int64_t*>(in_ptr[ATTNRT_GQA_INPUT_POSITION_IDS])
            : nullptr;
    if (first_prompt) {
      const int64_t pos0 = positions != nullptr && B > 0 ? ReadInt64(positions, 0) : 0;
      if (pos0 < 0 || pos0 > M - S) {
        return InvalidArgument(
            StrCat("position_ids value ", pos0, " at index 0 is out of range [0, ", M - S,
                   "] (first prompt: the ", S, " positions starting there must lie in the rotary ",
                   "cache dimension 0 range [0, ", M, "))"));
      }
    } else if (positions != nullptr) {
      const int64_t row = p.position_ids_length;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t s = 0; s < S; ++s) {
          const int64_t index = b * row + s;
          const int64_t pos = ReadInt64(positions, index);
          if (pos < 0 || pos >= M) {
            return InvalidArgument(StrCat("position_ids value ", pos, " at index ", index,
                                          " is out of range [0, ", M, ")"));
          }
        }
      }
    }
  }

  // Item 19: shared KV (no new rows): the past supplies every key. T_b <= P then follows from
  // item 16, since present_len = max(T, P) = P.
  if (p.has_past && L == 0 && T > P) {
    return InvalidArgument(
        StrCat("total_sequence_length must not exceed past_sequence_length with shared KV "
               "(kv_sequence_length 0), got ",
               T, " expected <= ", P));
  }

  attnrt_gqa_args args;
  std::memset(&args, 0, sizeof args);
  args.struct_size = sizeof(attnrt_gqa_args);
  args.problem = &p;
  args.total_sequence_length = static_cast<int32_t>(T);
  args.phase = phase;
  args.present_shares_past = shares_past;
  args.query = in_ptr[ATTNRT_GQA_INPUT_QUERY];
  args.key = in_ptr[ATTNRT_GQA_INPUT_KEY];
  args.value = in_ptr[ATTNRT_GQA_INPUT_VALUE];
  args.past_key = in_ptr[ATTNRT_GQA_INPUT_PAST_KEY];
  args.past_value = in_ptr[ATTNRT_GQA_INPUT_PAST_VALUE];
  args.seqlens_k = static_cast<const int32_t*>(seqlens);
  args.cos_cache = in_ptr[ATTNRT_GQA_INPUT_COS_CACHE];
  args.sin_cache = in_ptr[ATTNRT_GQA_INPUT_SIN_CACHE];
  args.position_ids = static_cast<const int64_t*>(in_ptr[ATTNRT_GQA_INPUT_POSITION_IDS]);
  args.attention_bias = in_ptr[ATTNRT_GQA_INPUT_ATTENTION_BIAS];
  args.head_sink = in_ptr[ATTNRT_GQA_INPUT_HEAD_SINK];
  if (Quantized(a)) {
    args.k_scale = static_cast<const float*>(in_ptr[ATTNRT_GQA_INPUT_K_SCALE]);
    args.v_scale = static_cast<const float*>(in_ptr[ATTNRT_GQA_INPUT_V_SCALE]);
  }
  args.output = out_ptr[ATTNRT_GQA_OUTPUT_OUTPUT];
  args.present_key = out_ptr[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
  args.present_value = out_ptr[ATTNRT_GQA_OUTPUT_PRESENT_VALUE];
  args.output_qk = out_ptr[ATTNRT_GQA_OUTPUT_OUTPUT_QK];
  *out = args;
  return Status::Ok();
}

}  // namespace

Status ValidateAttributes(const void* attributes, attnrt_gqa_attributes* out) {
  try {
    if (attributes == nullptr) {
      return InvalidArgument("GroupQueryAttention: attributes must not be NULL");
    }
    if (out == nullptr) return InvalidArgument("GroupQueryAttention: out must not be NULL");
    size_t struct_size;
    std::memcpy(&struct_size, attributes, sizeof struct_size);
    if (struct_size < sizeof(attnrt_gqa_attributes)) {
      return AbiMismatch(StrCat("attnrt_gqa_attributes struct_size must be at least ",
                                sizeof(attnrt_gqa_attributes), " (ABI ", ATTNRT_ABI_VERSION_MAJOR,
                                ".", ATTNRT_ABI_VERSION_MINOR, "), got ", struct_size));
    }
    // Fields appended by a newer minor version lie beyond sizeof and are ignored.
    attnrt_gqa_attributes a;
    std::memcpy(&a, attributes, sizeof a);
    a.struct_size = sizeof(attnrt_gqa_attributes);
    ATTNRT_RETURN_IF_ERROR(CheckAttributeValues(a));
    // Normalized so that kernels can test flags plainly: the reference enables these only with
    // the value 1, disables the window with any negative value and ignores v_quant_type when
    // k_quant_type is NONE.
    a.do_rotary = a.do_rotary == 1;
    a.rotary_interleaved = a.rotary_interleaved == 1;
    a.smooth_softmax = a.smooth_softmax == 1;
    if (a.local_window_size < 0) a.local_window_size = -1;
    if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE) a.v_quant_type = ATTNRT_GQA_QUANT_NONE;
    *out = a;
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return ValidationException("GroupQueryAttention", "ValidateAttributes", /*out_of_memory=*/true);
  } catch (...) {
    return ValidationException("GroupQueryAttention", "ValidateAttributes",
                               /*out_of_memory=*/false);
  }
}

Status ValidateShapes(const attnrt_gqa_attributes& attributes, const attnrt_tensor* const* inputs,
                      size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_gqa_problem* out) {
  return GuardValidation("GroupQueryAttention", "ValidateShapes", [&] {
    return ValidateShapesImpl(attributes, inputs, num_inputs, outputs, num_outputs, out);
  });
}

Status ValidateRun(const attnrt_gqa_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_gqa_args* out) {
  return GuardValidation("GroupQueryAttention", "ValidateRun", [&] {
    return ValidateRunImpl(problem, inputs, num_inputs, outputs, num_outputs, out);
  });
}

const char* InputName(size_t index) {
  return index < ATTNRT_GQA_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) {
  return index < ATTNRT_GQA_NUM_OUTPUTS ? kOutputNames[index] : "?";
}

}  // namespace attnrt::core::gqa
