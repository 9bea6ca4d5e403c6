// The prologue of every CUDA GroupQueryAttention kernel (ONNX Runtime's GQA operator documentation:
// RoPE, packed-QKV unpacking and the cache append happen before the backend runs): past rows copied
// into a separate cache, RoPE on Q and the new K rows (ONNX Runtime's rotary rule, in float with
// separately rounded products like the reference), and the new rows appended at
// [offset, offset + L), quantized with the per-tensor scale for int8/fp8 caches
// (q = clamp(rint(x / scale)), fp8 saturating).
#include <cuda_runtime.h>

#include "cuda_types.cuh"
#include "gqa_launchers.h"

namespace attnrt::cuda {
namespace {

// Copies rows [0, copy_rows) of each (batch, kv head) from past (P rows) to the cache (C rows) in
// 8-byte chunks (a row is H * element bytes, H a multiple of 8).
__global__ void CopyPastKernel(PrologueParams p, int64_t row_chunks) {
  const int bh = blockIdx.y;
  const int b = bh / p.kv_num_heads;
  const int64_t rows = BatchAt(p.batch, b).copy_rows;
  const int64_t total = rows * row_chunks;
  const auto* pk = static_cast<const uint2*>(p.past_key) + bh * p.past_rows * row_chunks;
  const auto* pv = static_cast<const uint2*>(p.past_value) + bh * p.past_rows * row_chunks;
  auto* ck = static_cast<uint2*>(p.k_cache) + bh * static_cast<int64_t>(p.cache_rows) * row_chunks;
  auto* cv = static_cast<uint2*>(p.v_cache) + bh * static_cast<int64_t>(p.cache_rows) * row_chunks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    ck[i] = pk[i];
    cv[i] = pv[i];
  }
}

// Element d of a head row after RoPE at cos/sin row `pos`; dimensions [R, H) unchanged.
template <typename Tr>
__device__ float Rotated(const PrologueParams& p, const typename Tr::T* row, int d, int64_t pos) {
  const float x = Tr::ToFloat(row[d]);
  const int half = p.rotary_half;
  if (d >= 2 * half) return x;
  const auto* cos_row = static_cast<const typename Tr::T*>(p.cos_cache) + pos * half;
  const auto* sin_row = static_cast<const typename Tr::T*>(p.sin_cache) + pos * half;
  if (p.interleaved) {
    const int i = d / 2;
    const float c = Tr::ToFloat(cos_row[i]), s = Tr::ToFloat(sin_row[i]);
    if (d % 2 == 0) return __fsub_rn(__fmul_rn(x, c), __fmul_rn(Tr::ToFloat(row[d + 1]), s));
    return __fadd_rn(__fmul_rn(x, c), __fmul_rn(Tr::ToFloat(row[d - 1]), s));
  }
  if (d < half) {
    const float c = Tr::ToFloat(cos_row[d]), s = Tr::ToFloat(sin_row[d]);
    return __fsub_rn(__fmul_rn(x, c), __fmul_rn(Tr::ToFloat(row[d + half]), s));
  }
  const float c = Tr::ToFloat(cos_row[d - half]), s = Tr::ToFloat(sin_row[d - half]);
  return __fadd_rn(__fmul_rn(x, c), __fmul_rn(Tr::ToFloat(row[d - half]), s));
}

__device__ float InverseScale(const float* scale) {
  const float s = *scale;
  return s == 0.0f ? 1.0f : 1.0f / s;
}

// blockIdx = (token s, head slot, batch); head slots: [0, q_heads) rotated Q heads, then Nkv K
// heads, then Nkv V heads (when L > 0).
template <typename Tr>
__global__ void AppendKernel(PrologueParams p, int q_heads) {
  using T = typename Tr::T;
  const int s = blockIdx.x;
  const int slot = blockIdx.y;
  const int b = blockIdx.z;
  const BatchInfo bi = BatchAt(p.batch, b);
  int64_t pos = 0;
  if (p.rotary) {
    if (p.first_prompt) {
      pos = (p.position_ids != nullptr ? p.position_ids[0] : 0) + s;
    } else {
      pos = p.position_ids != nullptr ? p.position_ids[b * p.position_ids_row + s]
                                      : int64_t{bi.rope_base} + s;
    }
    // The core validates position values in host memory only; device values are clamped so that
    // a bad position can never read outside the rotary cache.
    pos = min(max(pos, int64_t{0}), int64_t{p.rotary_cache_length} - 1);
  }
  const int H = p.head_size;
  if (slot < q_heads) {
    const T* row = static_cast<const T*>(p.query) + (int64_t{b} * p.sequence_length + s) * p.q_row +
                   int64_t{slot} * H;
    T* dst = static_cast<T*>(p.q_rotated) +
             ((int64_t{b} * p.sequence_length + s) * p.num_heads + slot) * H;
    for (int d = threadIdx.x; d < H; d += blockDim.x)
      dst[d] = Tr::FromFloat(Rotated<Tr>(p, row, d, pos));
    return;
  }
  const bool is_key = slot - q_heads < p.kv_num_heads;
  const int kh = is_key ? slot - q_heads : slot - q_heads - p.kv_num_heads;
  const int64_t dst_row = int64_t{bi.offset} + s;
  if (dst_row >= p.cache_rows) return;
  const T* row = static_cast<const T*>(is_key ? p.key : p.value) +
                 (int64_t{b} * p.kv_sequence_length + s) * p.kv_row +
                 (is_key ? p.k_head_base : p.v_head_base) + int64_t{kh} * H;
  const int64_t at = ((int64_t{b} * p.kv_num_heads + kh) * p.cache_rows + dst_row) * H;
  void* cache = is_key ? p.k_cache : p.v_cache;
  const float inv =
      p.cache == CacheKind::kSameAsQuery ? 1.0f : InverseScale(is_key ? p.k_scale : p.v_scale);
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    // The row as stored in T (RoPE result rounded to T), then quantized.
    const T y = is_key && p.rotary ? Tr::FromFloat(Rotated<Tr>(p, row, d, pos)) : row[d];
    switch (p.cache) {
      case CacheKind::kSameAsQuery:
        static_cast<T*>(cache)[at + d] = y;
        break;
      case CacheKind::kInt8: {
        const float q = fminf(fmaxf(rintf(__fmul_rn(Tr::ToFloat(y), inv)), -128.0f), 127.0f);
        static_cast<int8_t*>(cache)[at + d] = static_cast<int8_t>(q);
        break;
      }
      case CacheKind::kFp8E4M3:
        static_cast<uint8_t*>(cache)[at + d] = static_cast<uint8_t>(
            __nv_cvt_float_to_fp8(__fmul_rn(Tr::ToFloat(y), inv), __NV_SATFINITE, __NV_E4M3));
        break;
    }
  }
}

template <typename Tr>
int Launch(const PrologueParams& p, cudaStream_t stream) {
  if (p.copy_past && p.past_rows > 0) {
    const int64_t elem = p.cache == CacheKind::kSameAsQuery ? 2 : 1;
    const int64_t row_chunks = p.head_size * elem / 8;
    const int64_t chunks = int64_t{p.past_rows} * row_chunks;
    const int64_t x = std::min<int64_t>((chunks + 255) / 256, 1024);
    const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(p.batch_size * p.kv_num_heads));
    CopyPastKernel<<<grid, 256, 0, stream>>>(p, row_chunks);
  }
  const int q_heads = p.rotary ? p.num_heads : 0;
  const int kv_heads = p.kv_sequence_length > 0 ? 2 * p.kv_num_heads : 0;
  if (q_heads + kv_heads > 0) {
    const dim3 grid(static_cast<unsigned>(p.sequence_length),
                    static_cast<unsigned>(q_heads + kv_heads), static_cast<unsigned>(p.batch_size));
    AppendKernel<Tr><<<grid, 128, 0, stream>>>(p, q_heads);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchPrologue(const PrologueParams& params, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  return params.elem == ElemType::kBFloat16 ? Launch<BFloat16>(params, s) : Launch<Half>(params, s);
}

}  // namespace attnrt::cuda
