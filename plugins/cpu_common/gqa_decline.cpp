// Acceptance of the CPU GroupQueryAttention kernels (gqa_decline.h): which problems the shared
// naive and flash drivers compute as the reference does, and the reason for every other one.
#include "gqa_decline.h"

#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// The names attnrt_dtype_name gives (the plugin cannot link the core); any other dtype named from
// its fields ("int16", "float64", "dtype(code=9, bits=8, lanes=1)"), as the core's messages do.
std::string DtypeName(attnrt_dtype d) {
  if (d.lanes == 1) {
    switch (d.code) {
      case ATTNRT_DTYPE_CODE_FLOAT:
        if (d.bits == 32) return "float32";
        if (d.bits == 16) return "float16";
        break;
      case ATTNRT_DTYPE_CODE_BFLOAT:
        if (d.bits == 16) return "bfloat16";
        break;
      case ATTNRT_DTYPE_CODE_INT:
        if (d.bits == 4) return "int4";
        if (d.bits == 8) return "int8";
        if (d.bits == 32) return "int32";
        if (d.bits == 64) return "int64";
        break;
      case ATTNRT_DTYPE_CODE_UINT:
        if (d.bits == 8) return "uint8";
        break;
      case ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN:
        if (d.bits == 8) return "float8_e4m3fn";
        break;
      case ATTNRT_DTYPE_CODE_FLOAT8_E5M2:
        if (d.bits == 8) return "float8_e5m2";
        break;
      case ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU:
        if (d.bits == 8) return "float8_e8m0fnu";
        break;
      default:
        break;
    }
  }
  const char* family = d.code == ATTNRT_DTYPE_CODE_INT      ? "int"
                       : d.code == ATTNRT_DTYPE_CODE_UINT   ? "uint"
                       : d.code == ATTNRT_DTYPE_CODE_FLOAT  ? "float"
                       : d.code == ATTNRT_DTYPE_CODE_BFLOAT ? "bfloat"
                                                            : nullptr;
  if (family == nullptr) {
    return "dtype(code=" + std::to_string(d.code) + ", bits=" + std::to_string(d.bits) +
           ", lanes=" + std::to_string(d.lanes) + ")";
  }
  return family + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
}

std::string QuantTypeName(int32_t type) {
  switch (type) {
    case ATTNRT_GQA_QUANT_PER_TENSOR:
      return "PER_TENSOR";
    case ATTNRT_GQA_QUANT_PER_CHANNEL:
      return "PER_CHANNEL";
    case ATTNRT_GQA_QUANT_PER_BLOCK_32:
      return "PER_BLOCK_32";
    default:
      return std::to_string(type);
  }
}

std::string DeviceName(int32_t device_type) {
  switch (device_type) {
    case ATTNRT_DEVICE_CPU:
      return "CPU";
    case ATTNRT_DEVICE_CUDA:
      return "CUDA";
    default:
      return std::to_string(device_type);
  }
}

// Empty when the naive pipeline computes `p` as the reference does; else the reason it does not.
// Supported: T float32, float16, bfloat16 with a T cache, or with a quantized cache (k_quant_type
// == v_quant_type, PER_TENSOR or PER_CHANNEL float32 scales): int8, float8_e4m3fn or float8_e5m2
// (8-bit), uint8
// holding int4 (4-bit); or ggml's Q8_0/Q4_0 blocks in uint8 (PER_BLOCK_32, head_size a multiple of
// 32, no scale inputs); and everything the reference defines on CPU (phases, packing, shared
// buffers, masks, rotary, softcap, bias, sinks, qk_output, sliding_window_cache=1) with each.
}  // namespace

std::string GqaNaiveDeclineReason(const attnrt_gqa_problem& p) {
  if (p.struct_size < sizeof(attnrt_gqa_problem)) {
    return "attnrt_gqa_problem struct_size " + std::to_string(p.struct_size) +
           " is smaller than the " + std::to_string(sizeof(attnrt_gqa_problem)) +
           " bytes this kernel was built with";
  }
  if (p.device_type != ATTNRT_DEVICE_CPU) {
    return "device " + DeviceName(p.device_type) + " is not supported (CPU tensors only)";
  }
  const attnrt_gqa_attributes& a = p.attributes;
  GqaFloatType type;
  GqaCacheType cache_type;
  if (!GqaElementTypes(p, &type, &cache_type)) {
    if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE) {
      return "query dtype " + DtypeName(p.query_dtype) + " with KV cache dtype " +
             DtypeName(p.cache_dtype) +
             " is not supported (query float32, float16 or bfloat16 with a cache of the same "
             "dtype)";
    }
    return "query dtype " + DtypeName(p.query_dtype) + " with KV cache dtype " +
           DtypeName(p.cache_dtype) +
           " and kv_cache_bit_width=" + std::to_string(a.kv_cache_bit_width) +
           " is not supported (query float32, float16 or bfloat16; cache int8, float8_e4m3fn or "
           "float8_e5m2 for 8 bits, uint8 for 4 bits and for PER_BLOCK_32)";
  }
  if (a.k_quant_type != ATTNRT_GQA_QUANT_NONE) {
    if (a.v_quant_type != a.k_quant_type) {
      return "v_quant_type=" + QuantTypeName(a.v_quant_type) +
             " differs from k_quant_type=" + QuantTypeName(a.k_quant_type) +
             " (one quantization type for K and V only)";
    }
    if (a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32) {
      if (p.head_size % ATTNRT_GQA_QUANT_BLOCK_ELEMENTS != 0) {
        return "head_size " + std::to_string(p.head_size) +
               " is not a multiple of 32 (k_quant_type=PER_BLOCK_32)";
      }
    } else if (a.k_quant_type != ATTNRT_GQA_QUANT_PER_TENSOR &&
               a.k_quant_type != ATTNRT_GQA_QUANT_PER_CHANNEL) {
      return "k_quant_type=" + QuantTypeName(a.k_quant_type) + " is not supported";
    }
    const int64_t scales = a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32 ? 0
                           : a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL
                               ? p.kv_num_heads * p.head_size
                               : 1;
    if (p.k_scale_count != scales || p.v_scale_count != scales) {
      return "k_scale/v_scale with " + std::to_string(p.k_scale_count) + "/" +
             std::to_string(p.v_scale_count) +
             " elements are not supported with k_quant_type=" + QuantTypeName(a.k_quant_type) +
             " (expected " + std::to_string(scales) + ")";
    }
  }
  // sliding_window_cache=1 compacts the window into present (validation requires it).
  if (a.sliding_window_cache == 1 && !p.has_present) {
    return "sliding_window_cache=1 needs the present_key and present_value outputs";
  }
  return {};
}

}  // namespace attnrt::cpu
