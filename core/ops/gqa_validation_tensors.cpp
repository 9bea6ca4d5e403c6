// GroupQueryAttention validation, every tensor on its own: well-formed, compact, on the device of
// query (seqlens_k and total_sequence_length in host memory) and of the dtype its input or output
// takes (T, T_CACHE, int32, int64 or float32).
#include <string>

#include "core/ops/gqa_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa::detail {
namespace {

// T_CACHE of past_key (or of present_key without a past). Not quantized: T. 8-bit: int8,
// float8_e4m3fn (beyond the CPU reference, which has no float8 kernel; CUDA has one) or
// float8_e5m2 (ABI 1.11, vLLM's fp8_e5m2 cache). 4-bit: uint8 holding two int4 values per byte, as
// the reference stores it.
Status CheckCacheDtype(const attnrt_tensor& t, const char* name, const attnrt_gqa_attributes& a,
                       attnrt_dtype query_dtype) {
  if (!Quantized(a)) {
    return CheckDtype(t, name, query_dtype, "the dtype of query; the KV cache is not quantized");
  }
  if (BlockQuantized(a)) {
    return CheckDtype(t, name, kUInt8,
                      a.kv_cache_bit_width == 4
                          ? "bytes of Q4_0 blocks for a PER_BLOCK_32 KV cache"
                          : "bytes of Q8_0 blocks for a PER_BLOCK_32 KV cache");
  }
  if (a.kv_cache_bit_width == 8) {
    if (DtypeEquals(t.dtype, kInt8) || DtypeEquals(t.dtype, kFloat8E4M3FN) ||
        DtypeEquals(t.dtype, kFloat8E5M2)) {
      return Status::Ok();
    }
    return InvalidArgument(StrCat(name,
                                  ": expected dtype int8, float8_e4m3fn or float8_e5m2 for an "
                                  "8-bit quantized KV cache, got ",
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

}  // namespace

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

}  // namespace attnrt::core::gqa::detail
