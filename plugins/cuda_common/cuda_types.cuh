// Element types and tensor-core MMA of the CUDA GroupQueryAttention kernels (sm_80 and newer).
//
// mma.sync.m16n8k16 fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row-major), 4 registers of two elements: a0 (row g, cols 2t..2t+1), a1 (row g+8, same
//     cols), a2 (row g, cols 2t+8..2t+9), a3 (row g+8, cols 2t+8..2t+9);
//   B (16x8, column-major), 2 registers: b0 (rows 2t..2t+1, col g), b1 (rows 2t+8..2t+9, col g);
//   C/D (16x8, fp32): c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, cols 2t, 2t+1).
// The C layout of two adjacent n-tiles equals the A layout of one k-step, which lets the
// probabilities of QK^T feed PV straight from registers (FlashAttention-2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "gqa_cuda_params.h"

namespace attnrt::cuda {

struct Half {
  using T = __half;
  static __device__ __forceinline__ float ToFloat(T x) { return __half2float(x); }
  static __device__ __forceinline__ T FromFloat(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

struct BFloat16 {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float ToFloat(T x) { return __bfloat162float(x); }
  static __device__ __forceinline__ T FromFloat(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Cache element codes converted exactly to the query type: int8 values and every e4m3 value are
// representable in both float16 and bfloat16, so the per-tensor scale can be applied to the fp32
// products instead (no rounding of dequantized values).
template <typename Tr>
__device__ __forceinline__ typename Tr::T CodeToElem(int8_t code) {
  return Tr::FromFloat(static_cast<float>(code));
}
template <typename Tr>
__device__ __forceinline__ typename Tr::T Fp8ToElem(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return Tr::FromFloat(__half2float(__half(h)));
}

// Warp reductions over the four lanes of one MMA row group (lanes 4g..4g+3).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ BatchInfo BatchAt(const BatchTable& table, int b) {
  return table.device != nullptr ? table.device[b] : table.entries[b];
}

// ONNX Runtime's score order after the dot product: scale, softcap, bias.
template <typename Tr>
__device__ __forceinline__ float ScoreOf(const AttentionParams& p, float dot, int b, int n, int s,
                                         int j) {
  float x = p.alpha * dot;
  if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
  if (p.bias != nullptr) {
    const int bb = p.bias_batch == 1 ? 0 : b;
    const int bn = p.bias_heads == 1 ? 0 : n;
    const auto* bias = static_cast<const typename Tr::T*>(p.bias);
    x += Tr::ToFloat(bias[((static_cast<int64_t>(bb) * p.bias_heads + bn) * p.sequence_length + s) *
                              p.total_sequence_length +
                          j]);
  }
  return x;
}

// The sink logit of head n (raw: not scaled, capped or biased), when smooth softmax is on.
template <typename Tr>
__device__ __forceinline__ float SinkOf(const AttentionParams& p, int n) {
  if (p.head_sink == nullptr) return 0.0f;
  return Tr::ToFloat(static_cast<const typename Tr::T*>(p.head_sink)[n]);
}

}  // namespace attnrt::cuda
