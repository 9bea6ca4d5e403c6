// Quantized KV cache rows (ONNX Runtime's quantized KV cache, MLAS qkv_quant.cpp):
// quantize-on-write of new K/V rows, and the scalar element decoder every cache read builds on.
//   int8:  q = clamp(rint(x * inv), -128, 127), one byte per element.
//   int4:  q = clamp(rint(x * inv), -8, 7), byte i = ((q[2i] + 8) & 0xF) | ((q[2i+1] + 8) & 0xF)
//   << 4. fp8 e4m3fn (beyond the CPU reference): saturate x * inv to ±448, round to nearest even;
//   fp8 e5m2 (vLLM's fp8_e5m2 cache) the same with ±57344.
// inv = 1/scale in float32 (scale 0 => 1); rint rounds half to even; dequantized x = q * scale.
// ggml's Q8_0/Q4_0 blocks (ATTNRT_GQA_QUANT_PER_BLOCK_32, attnrt/ops/gqa.h): 32 elements with their
// float16 scale d in front, quantized as ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref and
// dequantized x = q * d (Q4_0: (code - 8) * d).
//
// Internal linkage throughout, for the reason gqa_convert.h gives.
#pragma once

#include <math.h>
#include <stdint.h>

#include "gqa_block_format.h"
#include "gqa_convert.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

inline float InverseScale(float scale) { return scale != 0.0f ? 1.0f / scale : 1.0f; }

// rint(x * inv) clamped to [lo, hi]. NaN goes to hi, as the reference's max(lo, min(hi, q)) sends
// it.
inline int QuantizeToInt(float x, float inv, float lo, float hi) {
  const float q = nearbyintf(x * inv);
  return static_cast<int>(q < hi ? (q > lo ? q : lo) : hi);
}

// The float32 scale d of the block at `block`.
inline float BlockScale(const uint8_t* block) { return HalfToFloat(BlockScaleBits(block)); }

// ggml's quantize_row_q8_0_ref for the 32 elements x into `block`. a = max |x_j| (ggml's MAX
// macro, so a NaN is skipped unless it is the last element), codes clamped to [-127, 127] where a
// non-finite x would leave the range.
inline void QuantizeBlockQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kBlockElements; ++j) {
    const float a = fabsf(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreBlockScaleBits(FloatToHalf(d), block);
  for (int64_t j = 0; j < kBlockElements; ++j) {
    const float q = roundf(x[j] * id);
    block[2 + j] = static_cast<uint8_t>(
        static_cast<int8_t>(q < 127.0f ? (q > -127.0f ? q : -127.0f) : 127.0f));
  }
}

// ggml's quantize_row_q4_0_ref for the 32 elements x into `block`: m = the x_j of largest |x_j|
// (the first on a tie), d = m / -8, code = min(15, (int)(x_j / d + 8.5f)) (0 for a NaN or a
// value below the range).
inline void QuantizeBlockQ4_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int64_t j = 0; j < kBlockElements; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreBlockScaleBits(FloatToHalf(d), block);
  // x_j * (1/d) is rounded to float32 before 8.5 is added: a compiler may not fuse the two into
  // one FMA (AArch64 compilers contract a * b + c by default, which moves codes at .5 boundaries).
  const auto code = [](float value, float inv) {
    volatile float scaled = value * inv;
    const float c = scaled + 8.5f;
    return c >= 15.0f ? 15 : (c >= 0.0f ? static_cast<int>(c) : 0);
  };
  for (int64_t j = 0; j < kBlockElements / 2; ++j) {
    block[2 + j] = static_cast<uint8_t>(code(x[j], id) | (code(x[j + 16], id) << 4));
  }
}

// Scale of element i of a row.
inline float ElementScale(const float* scale, bool per_channel, int64_t i) {
  return per_channel ? scale[i] : scale[0];
}

// Quantizes x[0, n), elements [first, first + n) of a cache row, into that row (`row` is its
// start). For int4, first and n are even; for the block types, multiples of 32. Float cache types
// store x narrowed to the type.
inline void StoreCacheElements(const float* x, int64_t n, GqaCacheType type, const float* scale,
                               bool per_channel, void* row, int64_t first) {
  switch (type) {
    case GqaCacheType::kFloat32:
      NarrowRow(x, GqaFloatType::kFloat32, static_cast<float*>(row) + first, n);
      return;
    case GqaCacheType::kFloat16:
      NarrowRow(x, GqaFloatType::kFloat16, static_cast<uint16_t*>(row) + first, n);
      return;
    case GqaCacheType::kBFloat16:
      NarrowRow(x, GqaFloatType::kBFloat16, static_cast<uint16_t*>(row) + first, n);
      return;
    case GqaCacheType::kInt8: {
      int8_t* dst = static_cast<int8_t*>(row) + first;
      for (int64_t i = 0; i < n; ++i) {
        const float inv = InverseScale(ElementScale(scale, per_channel, first + i));
        dst[i] = static_cast<int8_t>(QuantizeToInt(x[i], inv, -128.0f, 127.0f));
      }
      return;
    }
    case GqaCacheType::kInt4: {
      uint8_t* dst = static_cast<uint8_t*>(row) + first / 2;
      for (int64_t i = 0; i < n; i += 2) {
        const float inv0 = InverseScale(ElementScale(scale, per_channel, first + i));
        const float inv1 = InverseScale(ElementScale(scale, per_channel, first + i + 1));
        const int q0 = QuantizeToInt(x[i], inv0, -8.0f, 7.0f);
        const int q1 = QuantizeToInt(x[i + 1], inv1, -8.0f, 7.0f);
        dst[i / 2] = static_cast<uint8_t>(((q0 + 8) & 0xF) | (((q1 + 8) & 0xF) << 4));
      }
      return;
    }
    case GqaCacheType::kFloat8E4M3Fn: {
      uint8_t* dst = static_cast<uint8_t*>(row) + first;
      for (int64_t i = 0; i < n; ++i) {
        const float inv = InverseScale(ElementScale(scale, per_channel, first + i));
        dst[i] = FloatToFloat8E4M3Fn(x[i] * inv);
      }
      return;
    }
    case GqaCacheType::kFloat8E5M2: {
      uint8_t* dst = static_cast<uint8_t*>(row) + first;
      for (int64_t i = 0; i < n; ++i) {
        const float inv = InverseScale(ElementScale(scale, per_channel, first + i));
        dst[i] = FloatToFloat8E5M2(x[i] * inv);
      }
      return;
    }
    case GqaCacheType::kBlockQ8_0:
    case GqaCacheType::kBlockQ4_0: {
      uint8_t* dst = static_cast<uint8_t*>(row) + first / kBlockElements * BlockBytes(type);
      for (int64_t i = 0; i < n; i += kBlockElements) {
        if (type == GqaCacheType::kBlockQ8_0) {
          QuantizeBlockQ8_0(x + i, dst);
        } else {
          QuantizeBlockQ4_0(x + i, dst);
        }
        dst += BlockBytes(type);
      }
      return;
    }
  }
}

// Calls f(i, x_i) for i in [begin, end), x_i the float value of element i of `row`: widened for
// float caches, q * scale (rounded to float32) for quantized ones. The type switch sits outside the
// element loops.
template <class F>
inline void ForEachCacheElement(const GqaCacheRow& row, int64_t begin, int64_t end, F& f) {
  switch (row.type) {
    case GqaCacheType::kFloat32: {
      const float* x = static_cast<const float*>(row.data);
      for (int64_t i = begin; i < end; ++i) f(i, x[i]);
      return;
    }
    case GqaCacheType::kFloat16: {
      const uint16_t* x = static_cast<const uint16_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) f(i, HalfToFloat(x[i]));
      return;
    }
    case GqaCacheType::kBFloat16: {
      const uint16_t* x = static_cast<const uint16_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) f(i, BFloat16ToFloat(x[i]));
      return;
    }
    case GqaCacheType::kInt8: {
      const int8_t* x = static_cast<const int8_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) {
        f(i, static_cast<float>(x[i]) * ElementScale(row.scale, row.per_channel, i));
      }
      return;
    }
    case GqaCacheType::kInt4: {
      const uint8_t* x = static_cast<const uint8_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) {
        const int nibble = (i & 1) != 0 ? x[i / 2] >> 4 : x[i / 2] & 0xF;
        f(i, static_cast<float>(nibble - 8) * ElementScale(row.scale, row.per_channel, i));
      }
      return;
    }
    case GqaCacheType::kFloat8E4M3Fn: {
      const uint8_t* x = static_cast<const uint8_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) {
        f(i, Float8E4M3FnToFloat(x[i]) * ElementScale(row.scale, row.per_channel, i));
      }
      return;
    }
    case GqaCacheType::kFloat8E5M2: {
      const uint8_t* x = static_cast<const uint8_t*>(row.data);
      for (int64_t i = begin; i < end; ++i) {
        f(i, Float8E5M2ToFloat(x[i]) * ElementScale(row.scale, row.per_channel, i));
      }
      return;
    }
    case GqaCacheType::kBlockQ8_0:
    case GqaCacheType::kBlockQ4_0: {
      for (int64_t i = begin; i < end; ++i) {
        const uint8_t* block = BlockOf(row.data, row.type, i);
        const int64_t j = i % kBlockElements;
        const int q = row.type == GqaCacheType::kBlockQ8_0
                          ? static_cast<int8_t>(block[2 + j])
                          : (j < 16 ? block[2 + j] & 0xF : block[2 + j - 16] >> 4) - 8;
        f(i, static_cast<float>(q) * BlockScale(block));
      }
      return;
    }
  }
}

}  // namespace
}  // namespace attnrt::cpu
