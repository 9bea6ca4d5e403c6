// Combine step of split-KV decoding: output row (b, n) from the num_splits partial results
// (unnormalized sums relative to each split's maximum, with that maximum and the sum of
// exponentials), adding the sink logit of smooth softmax once, here.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_types.cuh"
#include "gqa_launchers.h"

namespace attnrt::cuda {
namespace {

template <typename Tr>
__global__ void CombineKernel(AttentionParams p) {
  const int bn = blockIdx.x;  // b * N + n
  const int n = bn % p.num_heads;
  const int H = p.head_size;
  const float* ml = p.partial_ml + int64_t{bn} * p.num_splits * 2;
  float m = -INFINITY;
  for (int sp = 0; sp < p.num_splits; ++sp) m = fmaxf(m, ml[sp * 2]);
  float sink = 0.0f, mf = m;
  if (p.smooth) {
    sink = SinkOf<Tr>(p, n);
    mf = fmaxf(m, sink);
  }
  float denom = p.smooth ? __expf(sink - mf) : 0.0f;
  for (int sp = 0; sp < p.num_splits; ++sp) {
    const float ms = ml[sp * 2];
    if (ms != -INFINITY) denom += ml[sp * 2 + 1] * __expf(ms - mf);
  }
  const float* po = p.partial_out + int64_t{bn} * p.num_splits * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float value = 0.0f;
    for (int sp = 0; sp < p.num_splits; ++sp) {
      const float ms = ml[sp * 2];
      if (ms != -INFINITY) value += po[sp * H + d] * __expf(ms - mf);
    }
    const float result = denom > 0.0f ? value / denom : 0.0f;
    static_cast<typename Tr::T*>(p.out)[int64_t{bn} * H + d] = Tr::FromFloat(result);
  }
}

}  // namespace

int LaunchCombine(const AttentionParams& params, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(params.batch_size * params.num_heads));
  if (params.elem == ElemType::kBFloat16) {
    CombineKernel<BFloat16><<<grid, 128, 0, s>>>(params);
  } else {
    CombineKernel<Half><<<grid, 128, 0, s>>>(params);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace attnrt::cuda
