// FlashAttention-2 forward for GroupQueryAttention (prefill, chunked prefill and decode): block
// (64-query tile, query head, batch) of four warps, each warp owning 16 query rows. K/V tiles of
// the head's kv head pass through shared memory; QK^T and PV run on tensor cores (mma.sync
// m16n8k16, fp32 accumulation) with the probabilities kept in registers between the two products,
// and an online softmax with per-row running maximum and sum (Dao, "FlashAttention-2", 2023).
// Masks, softcap, bias and the sink follow ONNX Runtime's score order exactly.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_types.cuh"
#include "gqa_cuda_plan.h"
#include "gqa_launchers.h"
#include "gqa_softmax_end.h"
#include "mma_tiles.cuh"

namespace attnrt::cuda {
namespace {

template <typename Tr, int H>
__global__ void __launch_bounds__(128) FlashForwardKernel(AttentionParams p) {
  using T = typename Tr::T;
  constexpr int kThreads = 128, kBq = 64, kBk = H > 128 ? 32 : 64, kRow = H + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  // Q tile, then two stages of (K tile, V tile): tile it+1 is copied with cp.async while tile it
  // is computed.
  T* q_s = reinterpret_cast<T*>(smem);
  T* stages = q_s + kBq * kRow;

  // The longest causal tiles first, so that the tail of the grid is short.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBq;
  const int n = blockIdx.y;
  const int b = blockIdx.z;
  const int S = p.sequence_length;
  const int kh = n / (p.num_heads / p.kv_num_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const BatchInfo bi = BatchAt(p.batch, b);

  for (int i = threadIdx.x; i < kBq * (H / 8); i += blockDim.x) {
    const int r = i / (H / 8), c = i % (H / 8);
    const int s = q0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (s < S) {
      v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) +
                                          (int64_t{b} * S + s) * p.q_row + int64_t{n} * H + c * 8);
    }
    *reinterpret_cast<uint4*>(q_s + r * kRow + c * 8) = v;
  }

  // Window of each of this thread's two rows; rows past S see nothing.
  int row_s[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int lo[2], hi[2];
  for (int h = 0; h < 2; ++h) {
    if (row_s[h] < S) {
      KeyWindow(p, bi, row_s[h], &lo[h], &hi[h]);
    } else {
      lo[h] = hi[h] = 0;
    }
  }
  // The block's key range: lo and hi grow with the row.
  int block_lo, block_hi, unused;
  KeyWindow(p, bi, q0, &block_lo, &unused);
  KeyWindow(p, bi, min(q0 + kBq, S) - 1, &unused, &block_hi);

  const int64_t cache_base = (int64_t{b} * p.kv_num_heads + kh) * p.cache_rows * H;
  const T* kc = static_cast<const T*>(p.k_cache) + cache_base;
  const T* vc = static_cast<const T*>(p.v_cache) + cache_base;

  float o[H / 8][4];
#pragma unroll
  for (int dt = 0; dt < H / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_row[2] = {-INFINITY, -INFINITY};
  float l_row[2] = {0.0f, 0.0f};
  const T* q_warp = q_s + warp * 16 * kRow;

  auto load_tile = [&](int j0, int stage) {
    T* k_s = stages + stage * 2 * kBk * kRow;
    T* v_s = k_s + kBk * kRow;
#pragma unroll
    for (int i = threadIdx.x; i < kBk * (H / 8); i += kThreads) {
      const int r = i / (H / 8), c = i % (H / 8);
      const int j = j0 + r;
      const bool valid = j < block_hi;
      // Rows past the block's keys are zero-filled from a valid address (never read).
      const int64_t at = int64_t{valid ? j : block_lo} * H + c * 8;
      CpAsync16(k_s + r * kRow + c * 8, kc + at, valid);
      CpAsync16(v_s + r * kRow + c * 8, vc + at, valid);
    }
    CpAsyncCommit();
  };
  const int tiles = block_hi > block_lo ? (block_hi - block_lo + kBk - 1) / kBk : 0;
  if (tiles > 0) load_tile(block_lo, 0);
  for (int it = 0; it < tiles; ++it) {
    const int j0 = block_lo + it * kBk;
    if (it + 1 < tiles) {
      load_tile(j0 + kBk, (it + 1) % 2);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // tile `it` (and, the first time, Q) visible to every warp
    const T* k_s = stages + (it % 2) * 2 * kBk * kRow;
    const T* v_s = k_s + kBk * kRow;

    float sc[kBk / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBk / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
    QkTile<Tr, H, kBk, kRow>(sc, q_warp, k_s, lane);

    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kBk / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int j = j0 + nt * 8 + 2 * t + (e & 1);
        float x = -INFINITY;
        if (j >= lo[h] && j < hi[h]) x = ScoreOf<Tr>(p, sc[nt][e], b, n, row_s[h], j);
        sc[nt][e] = x;
        tile_max[h] = fmaxf(tile_max[h], x);
      }
    }
    OnlineSoftmaxStep<H, kBk>(sc, tile_max, m_row, l_row, o);
    PvTile<Tr, H, kBk, kRow>(o, sc, v_s, lane);
    __syncthreads();  // every warp is done with this stage before iteration it+1 refills it
  }

  // Normalize (with the sink logit of smooth softmax) and store the two rows; NaN and zero rows as
  // docs/gqa-semantics.md says (gqa_softmax_end.h).
  RowEnd end[2];
  for (int h = 0; h < 2; ++h) {
    end[h] = EndRow(m_row[h], QuadSum(l_row[h]), p.smooth, p.smooth ? SinkOf<Tr>(p, n) : 0.0f);
  }
  for (int h = 0; h < 2; ++h) {
    if (row_s[h] >= S) continue;
    T* out =
        static_cast<T*>(p.out) + (int64_t{b} * S + row_s[h]) * p.num_heads * H + int64_t{n} * H;
#pragma unroll
    for (int dt = 0; dt < H / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(out + dt * 8 + 2 * t) =
          Tr::Pack(EndValue(end[h], o[dt][2 * h]), EndValue(end[h], o[dt][2 * h + 1]));
    }
  }
}

template <typename Tr, int H>
int LaunchFor(const AttentionParams& p, cudaStream_t stream) {
  const FlashLaunch shape = FlashLaunchFor(H);
  auto kernel = FlashForwardKernel<Tr, H>;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(shape.smem_bytes));
  if (e != cudaSuccess) return static_cast<int>(e);
  const dim3 grid(static_cast<unsigned>((p.sequence_length + shape.block_q - 1) / shape.block_q),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch_size));
  kernel<<<grid, shape.threads, shape.smem_bytes, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <typename Tr>
int LaunchHeads(const AttentionParams& p, cudaStream_t stream) {
  switch (p.head_size) {
    case 64:
      return LaunchFor<Tr, 64>(p, stream);
    case 128:
      return LaunchFor<Tr, 128>(p, stream);
    case 256:
      return LaunchFor<Tr, 256>(p, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int LaunchFlashForward(const AttentionParams& params, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  return params.elem == ElemType::kBFloat16 ? LaunchHeads<BFloat16>(params, s)
                                            : LaunchHeads<Half>(params, s);
}

}  // namespace attnrt::cuda
