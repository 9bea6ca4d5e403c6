// Split-KV decode attention for S == 1 (Flash-Decoding; the XQA idea of one tile holding every
// query head of a group): block (split, kv head x 16-row query tile, batch) streams its share of
// the keys through shared memory, four warps each with an independent online softmax over
// interleaved key tiles, QK^T and PV on tensor cores (mma.sync m16n8k16, fp32 accumulation). The
// warps are merged in shared memory; with one split the block writes the output, else it writes
// its partial result for the combine kernel (gqa_combine.cu).
//
// int8 / fp8 caches: the codes are converted exactly to T and the per-tensor scales are applied
// to the fp32 products (k_scale to the scores, v_scale to the output), so no dequantized value is
// ever rounded.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "cuda_types.cuh"
#include "gqa_cuda_params.h"
#include "gqa_softmax_end.h"
#include "mma_tiles.cuh"

namespace attnrt::cuda {

template <int H>
struct DecodeShape {
  static constexpr int kWarps = 4;
  static constexpr int kKeys = H > 128 ? 16 : 32;  // keys per warp tile
  static constexpr int kRow = H + 8;               // shared-memory row, elements
};

template <typename Tr, CacheKind kCache, int H>
__global__ void __launch_bounds__(128) DecodeKernel(AttentionParams p) {
  using T = typename Tr::T;
  using Shape = DecodeShape<H>;
  constexpr int kWarps = Shape::kWarps, kKeys = Shape::kKeys, kRow = Shape::kRow;
  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* stage = q_s + 16 * kRow;

  const int G = p.num_heads / p.kv_num_heads;
  const int m_tiles = (G + 15) / 16;
  const int split = blockIdx.x;
  const int kh = blockIdx.y / m_tiles;
  const int mt = blockIdx.y % m_tiles;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const BatchInfo bi = BatchAt(p.batch, b);
  int lo, hi;
  KeyWindow(p, bi, 0, &lo, &hi);
  const int start = max(lo, split * p.keys_per_split);
  const int end = min(hi, (split + 1) * p.keys_per_split);

  // Q rows of this tile: head kh*G + mt*16 + r; rows beyond the group are zeros.
  for (int i = threadIdx.x; i < 16 * (H / 8); i += blockDim.x) {
    const int r = i / (H / 8), c = i % (H / 8);
    const int hq = mt * 16 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (hq < G) {
      const int n = kh * G + hq;
      v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + int64_t{b} * p.q_row +
                                          int64_t{n} * H + c * 8);
    }
    *reinterpret_cast<uint4*>(q_s + r * kRow + c * 8) = v;
  }
  __syncthreads();

  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kCache != CacheKind::kSameAsQuery) {
    k_scale = *p.k_scale;
    v_scale = *p.v_scale;
  }
  const int64_t cache_base = (int64_t{b} * p.kv_num_heads + kh) * p.cache_rows * H;
  T* ks = stage + warp * 2 * kKeys * kRow;
  T* vs = ks + kKeys * kRow;

  float o[H / 8][4];
#pragma unroll
  for (int dt = 0; dt < H / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_row[2] = {-INFINITY, -INFINITY};
  float l_row[2] = {0.0f, 0.0f};

  for (int j0 = start + warp * kKeys; j0 < end; j0 += kWarps * kKeys) {
    // Stage K and V rows [j0, j0 + kKeys); rows at or beyond `end` are zeros (a zero probability
    // times uninitialized memory could be NaN).
    // Unrolled so that every load of the tile is in flight before the first store.
#pragma unroll
    for (int i = lane; i < kKeys * (H / 8); i += 32) {
      const int r = i / (H / 8), c = i % (H / 8);
      const int j = j0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (j < end) {
        const int64_t at = cache_base + int64_t{j} * H + c * 8;
        if constexpr (kCache == CacheKind::kSameAsQuery) {
          kv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.k_cache) + at);
          vv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.v_cache) + at);
        } else {
          const uint2 kc =
              *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.k_cache) + at);
          const uint2 vc =
              *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p.v_cache) + at);
          const uint8_t* kb = reinterpret_cast<const uint8_t*>(&kc);
          const uint8_t* vb = reinterpret_cast<const uint8_t*>(&vc);
          alignas(16) T ke[8];
          alignas(16) T ve[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            if constexpr (kCache == CacheKind::kInt8) {
              ke[e] = CodeToElem<Tr>(static_cast<int8_t>(kb[e]));
              ve[e] = CodeToElem<Tr>(static_cast<int8_t>(vb[e]));
            } else {
              ke[e] = Fp8ToElem<Tr>(kb[e]);
              ve[e] = Fp8ToElem<Tr>(vb[e]);
            }
          }
          kv = *reinterpret_cast<const uint4*>(ke);
          vv = *reinterpret_cast<const uint4*>(ve);
        }
      }
      *reinterpret_cast<uint4*>(ks + r * kRow + c * 8) = kv;
      *reinterpret_cast<uint4*>(vs + r * kRow + c * 8) = vv;
    }
    __syncwarp();

    float sc[kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
    QkTile<Tr, H, kKeys, kRow>(sc, q_s, ks, lane);

    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e < 2 ? g : g + 8;
        const int j = j0 + nt * 8 + 2 * t + (e & 1);
        const int hq = mt * 16 + r;
        float x = -INFINITY;
        if (j < end && hq < G) x = ScoreOf<Tr>(p, sc[nt][e] * k_scale, b, kh * G + hq, 0, j);
        sc[nt][e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
    OnlineSoftmaxStep<H, kKeys>(sc, tile_max, m_row, l_row, o);
    PvTile<Tr, H, kKeys, kRow>(o, sc, vs, lane);
    __syncwarp();
  }
  l_row[0] = QuadSum(l_row[0]);
  l_row[1] = QuadSum(l_row[1]);

  // Merge the warps through shared memory (the staging area is free now).
  __syncthreads();
  float* acc = reinterpret_cast<float*>(stage);  // [warps][16][H]
  float* ml = acc + kWarps * 16 * H;             // [warps][16][2]
#pragma unroll
  for (int dt = 0; dt < H / 8; ++dt) {
    const int col = dt * 8 + 2 * t;
    acc[(warp * 16 + g) * H + col] = o[dt][0] * v_scale;
    acc[(warp * 16 + g) * H + col + 1] = o[dt][1] * v_scale;
    acc[(warp * 16 + g + 8) * H + col] = o[dt][2] * v_scale;
    acc[(warp * 16 + g + 8) * H + col + 1] = o[dt][3] * v_scale;
  }
  if (t == 0) {
    ml[(warp * 16 + g) * 2] = m_row[0];
    ml[(warp * 16 + g) * 2 + 1] = l_row[0];
    ml[(warp * 16 + g + 8) * 2] = m_row[1];
    ml[(warp * 16 + g + 8) * 2 + 1] = l_row[1];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 16 * H; i += blockDim.x) {
    const int r = i / H, d = i % H;
    const int hq = mt * 16 + r;
    if (hq >= G) continue;
    const int n = kh * G + hq;
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, ml[(w * 16 + r) * 2]);
    float sum = 0.0f, value = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float mw = ml[(w * 16 + r) * 2];
      const float weight = mw == -INFINITY ? 0.0f : __expf(mw - m);
      sum += ml[(w * 16 + r) * 2 + 1] * weight;
      value += acc[(w * 16 + r) * H + d] * weight;
    }
    if (p.num_splits == 1) {
      // NaN and zero rows as docs/gqa-semantics.md says (gqa_softmax_end.h).
      const RowEnd end = EndRow(m, sum, p.smooth, p.smooth ? SinkOf<Tr>(p, n) : 0.0f);
      static_cast<T*>(p.out)[(int64_t{b} * p.num_heads + n) * H + d] =
          Tr::FromFloat(EndValue(end, value));
    } else {
      const int64_t slot = (int64_t{b} * p.num_heads + n) * p.num_splits + split;
      p.partial_out[slot * H + d] = value;
      if (d == 0) {
        p.partial_ml[slot * 2] = m;
        p.partial_ml[slot * 2 + 1] = sum;
      }
    }
  }
}

template <typename Tr, CacheKind kCache, int H>
int LaunchDecodeFor(const AttentionParams& p, size_t smem_bytes, cudaStream_t stream) {
  auto kernel = DecodeKernel<Tr, kCache, H>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem_bytes));
  if (e != cudaSuccess) return static_cast<int>(e);
  const int G = p.num_heads / p.kv_num_heads;
  const dim3 grid(static_cast<unsigned>(p.num_splits),
                  static_cast<unsigned>(p.kv_num_heads * ((G + 15) / 16)),
                  static_cast<unsigned>(p.batch_size));
  kernel<<<grid, 128, smem_bytes, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace attnrt::cuda
