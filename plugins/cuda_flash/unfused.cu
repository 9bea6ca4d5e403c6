// Unfused GroupQueryAttention (ONNX Runtime's Unfused backend, the math path that is always
// available): the fp32 score matrix (B, N, S, max_rows) is materialized in the workspace by one
// kernel, then a second kernel per query row applies the softmax over the visible window (with the
// sink logit of smooth softmax) and multiplies by V. Any head size; products accumulate in fp32.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_types.cuh"
#include "gqa_launchers.h"
#include "gqa_softmax_end.h"

namespace attnrt::cuda {
namespace {

constexpr int kThreads = 128;

// blockIdx = (key tile of 128, query row s, b * N + n). Masked entries get -inf.
template <typename Tr>
__global__ void ScoresKernel(AttentionParams p) {
  using T = typename Tr::T;
  extern __shared__ float q_row[];
  const int s = blockIdx.y;
  const int bn = blockIdx.z;
  const int b = bn / p.num_heads, n = bn % p.num_heads;
  const int H = p.head_size;
  const int kh = n / (p.num_heads / p.kv_num_heads);
  const T* q =
      static_cast<const T*>(p.q) + (int64_t{b} * p.sequence_length + s) * p.q_row + int64_t{n} * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) q_row[d] = Tr::ToFloat(q[d]);
  __syncthreads();
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.max_rows) return;
  int lo, hi;
  KeyWindow(p, BatchAt(p.batch, b), s, &lo, &hi);
  float x = -INFINITY;
  if (j >= lo && j < hi) {
    const T* k = static_cast<const T*>(p.k_cache) +
                 ((int64_t{b} * p.kv_num_heads + kh) * p.cache_rows + j) * H;
    float dot = 0.0f;
    for (int d = 0; d < H; ++d) dot = fmaf(q_row[d], Tr::ToFloat(k[d]), dot);
    x = ScoreOf<Tr>(p, dot, b, n, s, j);
  }
  p.scores[((int64_t{bn}) * p.sequence_length + s) * p.max_rows + j] = x;
}

__device__ float BlockReduce(float v, bool is_max, float* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// blockIdx = (query row s, b * N + n).
template <typename Tr>
__global__ void SoftmaxValueKernel(AttentionParams p) {
  using T = typename Tr::T;
  __shared__ float scratch[kThreads / 32];
  const int s = blockIdx.x;
  const int bn = blockIdx.y;
  const int b = bn / p.num_heads, n = bn % p.num_heads;
  const int H = p.head_size;
  const int kh = n / (p.num_heads / p.kv_num_heads);
  const float* x = p.scores + (int64_t{bn} * p.sequence_length + s) * p.max_rows;
  int lo, hi;
  KeyWindow(p, BatchAt(p.batch, b), s, &lo, &hi);
  float m = -INFINITY;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) m = fmaxf(m, x[j]);
  m = BlockReduce(m, true, scratch);
  const float m_use = m == -INFINITY ? 0.0f : m;
  float sum = 0.0f;
  for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) sum += __expf(x[j] - m_use);
  sum = BlockReduce(sum, false, scratch);
  // NaN and zero rows as docs/gqa-semantics.md says (gqa_softmax_end.h); the sink joins there.
  const RowEnd end = EndRow(m, sum, p.smooth, p.smooth ? SinkOf<Tr>(p, n) : 0.0f);
  const T* v =
      static_cast<const T*>(p.v_cache) + (int64_t{b} * p.kv_num_heads + kh) * p.cache_rows * H;
  T* out = static_cast<T*>(p.out) + (int64_t{b} * p.sequence_length + s) * p.num_heads * H +
           int64_t{n} * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = lo; j < hi; ++j)
      acc = fmaf(__expf(x[j] - m_use), Tr::ToFloat(v[int64_t{j} * H + d]), acc);
    out[d] = Tr::FromFloat(EndValue(end, acc));
  }
}

template <typename Tr>
int Launch(const AttentionParams& p, cudaStream_t stream) {
  const int bn = p.batch_size * p.num_heads;
  if (p.max_rows > 0) {
    const dim3 grid(static_cast<unsigned>((p.max_rows + kThreads - 1) / kThreads),
                    static_cast<unsigned>(p.sequence_length), static_cast<unsigned>(bn));
    const size_t smem = static_cast<size_t>(p.head_size) * sizeof(float);
    if (smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          ScoresKernel<Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return static_cast<int>(e);
    }
    ScoresKernel<Tr><<<grid, kThreads, smem, stream>>>(p);
  }
  const dim3 grid(static_cast<unsigned>(p.sequence_length), static_cast<unsigned>(bn));
  SoftmaxValueKernel<Tr><<<grid, kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchUnfused(const AttentionParams& params, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  return params.elem == ElemType::kBFloat16 ? Launch<BFloat16>(params, s) : Launch<Half>(params, s);
}

}  // namespace attnrt::cuda
