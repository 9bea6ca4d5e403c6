// Combine step of split-KV decoding: output row (b, n) from the num_splits partial results
// (unnormalized sums relative to each split's maximum, with that maximum and the sum of
// exponentials), adding the sink logit of smooth softmax once, here.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_types.cuh"
#include "gqa_launchers.h"
#include "gqa_softmax_end.h"

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
  // Sums relative to m; a split whose sum is NaN (a NaN or +inf score) makes the row NaN even when
  // its max hid the NaN (gqa_softmax_end.h, docs/gqa-semantics.md).
  float sum = 0.0f;
  for (int sp = 0; sp < p.num_splits; ++sp) {
    const float ms = ml[sp * 2], ls = ml[sp * 2 + 1];
    if (ms != -INFINITY) {
      sum += ls * __expf(ms - m);
    } else if (ls != ls) {
      sum = ls;
    }
  }
  const RowEnd end = EndRow(m, sum, p.smooth, p.smooth ? SinkOf<Tr>(p, n) : 0.0f);
  const float* po = p.partial_out + int64_t{bn} * p.num_splits * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float value = 0.0f;
    for (int sp = 0; sp < p.num_splits; ++sp) {
      const float ms = ml[sp * 2];
      if (ms != -INFINITY) value += po[sp * H + d] * __expf(ms - m);
    }
    static_cast<typename Tr::T*>(p.out)[int64_t{bn} * H + d] = Tr::FromFloat(EndValue(end, value));
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
