// Eligibility rules of the CUDA GroupQueryAttention kernels (gqa_cuda_rules.h).
#include "gqa_cuda_rules.h"

#include <string>

namespace attnrt::cuda {
namespace {

bool IsHalfOrBf16(attnrt_dtype d) {
  return d.lanes == 1 && d.bits == 16 &&
         (d.code == ATTNRT_DTYPE_CODE_FLOAT || d.code == ATTNRT_DTYPE_CODE_BFLOAT);
}

bool SameDtype(attnrt_dtype a, attnrt_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

bool IsInt8(attnrt_dtype d) {
  return d.code == ATTNRT_DTYPE_CODE_INT && d.bits == 8 && d.lanes == 1;
}

bool IsFp8E4M3(attnrt_dtype d) {
  return d.code == ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN && d.bits == 8 && d.lanes == 1;
}

bool Quantized(const attnrt_gqa_problem& p) {
  return p.attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE;
}

std::string Num(int64_t v) { return std::to_string(v); }

// Reasons of the non-quantized kernels (flash, flash_decode, unfused).
std::string NonQuantizedCacheReason(const attnrt_gqa_problem& p, const char* kernel) {
  if (Quantized(p) || !SameDtype(p.cache_dtype, p.query_dtype)) {
    return std::string("quantized KV cache (k_quant_type != NONE): ") + kernel +
           " reads float16/bfloat16 caches only; int8/fp8 caches are served by cuda_xqa "
           "(ONNX Runtime's CUDA GroupQueryAttention)";
  }
  return {};
}

}  // namespace

bool IsTiledHeadSize(int64_t head_size) {
  return head_size == 64 || head_size == 128 || head_size == 256;
}

bool XqaGroupSupported(int64_t group_size, bool quantized_cache) {
  if (quantized_cache) {
    return group_size == 4 || group_size == 8 || group_size == 16 || group_size == 32;
  }
  return group_size >= 1 && group_size <= 32;
}

std::string CommonDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device) {
  if (p.struct_size < sizeof(attnrt_gqa_problem)) {
    return "attnrt_gqa_problem struct_size " + Num(static_cast<int64_t>(p.struct_size)) +
           " is smaller than the " + Num(sizeof(attnrt_gqa_problem)) +
           " bytes this plugin was built with";
  }
  if (p.device_type != ATTNRT_DEVICE_CUDA) return "tensors are not on a CUDA device";
  if (!device.present) return "no CUDA device";
  if (device.compute_major < 8) {
    return "compute capability " + Num(device.compute_major) + "." + Num(device.compute_minor) +
           " is below 8.0 (the kernels are built for sm_80 and sm_90)";
  }
  if (!IsHalfOrBf16(p.query_dtype)) {
    return "query dtype must be float16 or bfloat16 on CUDA (ONNX Runtime's CUDA GQA has no "
           "float32 kernel)";
  }
  if (p.has_output_qk) {
    return "qk_output is not supported on CUDA (ONNX Runtime's CUDA provider rejects it)";
  }
  if (p.attributes.sliding_window_cache == 1) {
    return "sliding_window_cache=1 (window-sized ring cache) is not implemented on CUDA";
  }
  return {};
}

std::string XqaDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device) {
  std::string r = CommonDeclineReason(p, device);
  if (!r.empty()) return r;
  const attnrt_gqa_attributes& a = p.attributes;
  const bool quantized = Quantized(p);
  if (p.sequence_length != 1) {
    return "sequence_length " + Num(p.sequence_length) + " != 1 (XQA serves single-token decode)";
  }
  if (p.kv_sequence_length == 0) {
    return "kv_sequence_length == 0 (XQA needs a new K/V row to append)";
  }
  // Sharing is decided by buffer identity at run time; the plan sees the shapes it requires. The
  // kernel also computes correctly when present is a separate buffer (the past is copied first).
  if (!p.has_past || !p.has_present || p.present_sequence_length != p.past_sequence_length) {
    return "past and present KV must share one buffer (past_key and present_key of equal "
           "length); got " +
           std::string(p.has_past ? "past length " + Num(p.past_sequence_length) : "no past") +
           ", " +
           std::string(p.has_present ? "present length " + Num(p.present_sequence_length)
                                     : "no present");
  }
  if (a.softcap > 0.0f) return "softcap > 0 (XQA has no soft-capping)";
  if (p.has_attention_bias) return "attention_bias is not supported by XQA";
  if (!IsTiledHeadSize(p.head_size)) {
    return "head_size " + Num(p.head_size) + " is not one of 64, 128, 256";
  }
  const int64_t group = p.num_heads / p.kv_num_heads;
  if (!XqaGroupSupported(group, quantized)) {
    return "group size num_heads/kv_num_heads = " + Num(group) +
           (quantized ? " is not one of 4, 8, 16, 32 (quantized cache)" : " is not in [1, 32]");
  }
  if (quantized) {
    if (a.k_quant_type != ATTNRT_GQA_QUANT_PER_TENSOR ||
        a.v_quant_type != ATTNRT_GQA_QUANT_PER_TENSOR) {
      return "quantized cache needs PER_TENSOR k_quant_type and v_quant_type";
    }
    if (IsFp8E4M3(p.cache_dtype)) {
      if (device.compute_major * 10 + device.compute_minor < 89) {
        return "float8_e4m3fn cache needs compute capability 8.9 or newer";
      }
    } else if (!IsInt8(p.cache_dtype)) {
      return "quantized cache dtype must be int8 or float8_e4m3fn (int4 is not built on CUDA)";
    }
    if (p.has_head_sink) {
      return "head_sink with a quantized KV cache (XQA supports the sink on non-quantized caches "
             "only)";
    }
    if (a.smooth_softmax == 1) return "smooth_softmax with a quantized KV cache";
  } else {
    if (!SameDtype(p.cache_dtype, p.query_dtype)) {
      return "cache dtype must equal the query dtype when not quantized";
    }
    if (a.smooth_softmax == 1 && !p.has_head_sink) {
      return "smooth_softmax=1 without head_sink (XQA takes smooth softmax only as a head_sink "
             "tensor)";
    }
  }
  return {};
}

std::string FlashDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device) {
  std::string r = CommonDeclineReason(p, device);
  if (!r.empty()) return r;
  r = NonQuantizedCacheReason(p, "flash");
  if (!r.empty()) return r;
  if (!IsTiledHeadSize(p.head_size)) {
    return "head_size " + Num(p.head_size) + " is not one of 64, 128, 256";
  }
  return {};
}

std::string FlashDecodeDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device) {
  std::string r = FlashDeclineReason(p, device);
  if (!r.empty()) return r;
  if (p.sequence_length != 1) {
    return "sequence_length " + Num(p.sequence_length) + " != 1 (split-KV decoding is for S == 1)";
  }
  if (!p.has_past || !p.has_present || p.present_sequence_length != p.past_sequence_length) {
    return "past and present KV must share one buffer (past_key and present_key of equal length)";
  }
  return {};
}

std::string UnfusedDeclineReason(const attnrt_gqa_problem& p, const DeviceCaps& device) {
  std::string r = CommonDeclineReason(p, device);
  if (!r.empty()) return r;
  return NonQuantizedCacheReason(p, "unfused");
}

}  // namespace attnrt::cuda
