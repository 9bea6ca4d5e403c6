// Conversions for the attnrt calls of a FLASH_ATTN_EXT node (see convert.h).
#include "convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace attnrt_ggml {

void FromFloat(const float* src, void* dst, int64_t n, const attnrt_dtype& dtype) {
  if (dtype.bits == 32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dtype.code == ATTNRT_DTYPE_CODE_FLOAT) {
    ggml_fp32_to_fp16_row(src, static_cast<ggml_fp16_t*>(dst), n);
  } else {
    ggml_fp32_to_bf16_row(src, static_cast<ggml_bf16_t*>(dst), n);
  }
}

void ToFloat(const void* src, float* dst, int64_t n, const attnrt_dtype& dtype) {
  if (dtype.bits == 32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dtype.code == ATTNRT_DTYPE_CODE_FLOAT) {
    ggml_fp16_to_fp32_row(static_cast<const ggml_fp16_t*>(src), dst, n);
  } else {
    ggml_bf16_to_fp32_row(static_cast<const ggml_bf16_t*>(src), dst, n);
  }
}

// F16 mask row, times the head's slope, to the cache's type. Where that rounds (bfloat16 caches,
// or an ALiBi slope) and `shift` allows, the row's largest finite value is subtracted first: the
// softmax is the same (every logit of the row moves by it), and the values that carry the weight
// are small, so rounding moves them by little (a mask near -1000 loses 4 per logit in bfloat16,
// not 0). A sink is one more logit of the row, so with sinks the row stays as it is, and a row
// whose rounding moved an entry too far is reported (the return value) for ggml's algorithm.
bool MaskRow(const ggml_fp16_t* src, void* dst, int64_t n, const attnrt_dtype& dtype, float slope,
             bool shift, float* scratch) {
  if (dtype.code == ATTNRT_DTYPE_CODE_FLOAT && dtype.bits == 16 && slope == 1.0f) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(ggml_fp16_t));
    return true;
  }
  ggml_fp16_to_fp32_row(src, scratch, n);
  if (slope != 1.0f) {
    for (int64_t j = 0; j < n; ++j) scratch[j] *= slope;
  }
  if (shift && dtype.bits != 32) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      if (std::isfinite(scratch[j])) top = std::max(top, scratch[j]);
    }
    if (std::isfinite(top) && top != 0.0f) {
      for (int64_t j = 0; j < n; ++j) scratch[j] -= top;
    }
  }
  FromFloat(scratch, dst, n, dtype);
  // Shifted, the entries that carry weight are near 0, where rounding moves them by little.
  if (shift || dtype.bits == 32) return true;
  const bool bf16 = dtype.code == ATTNRT_DTYPE_CODE_BFLOAT;
  const float slack = bf16 ? 0x1p-8f : 0x1p-11f;
  const auto* bits = static_cast<const uint16_t*>(dst);
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(scratch[j])) continue;
    float rounded;
    if (bf16) {
      const uint32_t word = static_cast<uint32_t>(bits[j]) << 16;
      std::memcpy(&rounded, &word, sizeof rounded);
    } else {
      rounded = ggml_fp16_to_fp32(bits[j]);
    }
    if (!(std::fabs(rounded - scratch[j]) <= slack)) return false;
  }
  return true;
}

float OpParam(const ggml_tensor* node, int index) {
  float v;
  std::memcpy(&v, reinterpret_cast<const char*>(node->op_params) + index * sizeof(float), sizeof v);
  return v;
}

int32_t OpParamInt(const ggml_tensor* node, int index) {
  int32_t v;
  std::memcpy(&v, reinterpret_cast<const char*>(node->op_params) + index * sizeof(int32_t),
              sizeof v);
  return v;
}

float AlibiSlope(float max_bias, int64_t num_heads, int64_t h) {
  if (max_bias <= 0.0f) return 1.0f;
  const uint32_t n_head_log2 = 1u << static_cast<uint32_t>(std::floor(std::log2(num_heads)));
  const float m0 = std::pow(2.0f, -(max_bias) / static_cast<float>(n_head_log2));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n_head_log2));
  const uint32_t head = static_cast<uint32_t>(h);
  return head < n_head_log2 ? std::pow(m0, static_cast<float>(head + 1))
                            : std::pow(m1, static_cast<float>(2 * (head - n_head_log2) + 1));
}

}  // namespace attnrt_ggml
