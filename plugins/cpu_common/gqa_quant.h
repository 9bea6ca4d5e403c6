// Quantized KV cache rows (ONNX Runtime's quantized KV cache, MLAS qkv_quant.cpp):
// quantize-on-write of new K/V rows, and the scalar element decoder every cache read builds on.
//   int8:  q = clamp(rint(x * inv), -128, 127), one byte per element.
//   int4:  q = clamp(rint(x * inv), -8, 7), byte i = ((q[2i] + 8) & 0xF) | ((q[2i+1] + 8) & 0xF)
//   << 4. fp8 e4m3fn (beyond the CPU reference): saturate x * inv to ±448, round to nearest even.
// inv = 1/scale in float32 (scale 0 => 1); rint rounds half to even; dequantized x = q * scale.
//
// Internal linkage throughout, for the reason gqa_convert.h gives.
#pragma once

#include <math.h>
#include <stdint.h>

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

// Scale of element i of a row.
inline float ElementScale(const float* scale, bool per_channel, int64_t i) {
  return per_channel ? scale[i] : scale[0];
}

// Quantizes x[0, n), elements [first, first + n) of a cache row, into that row (`row` is its
// start). For int4, first and n are even. Float cache types store x narrowed to the type.
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
  }
}

}  // namespace
}  // namespace attnrt::cpu
