// Dispatch of the decode kernel over element type and head size, followed by the combine kernel
// when the keys were split. Included by the two instantiation units (same-type and quantized
// caches) so that each plugin links only the instantiations it uses.
#pragma once

#include "gqa_cuda_plan.h"
#include "gqa_decode.cuh"
#include "gqa_launchers.h"

namespace attnrt::cuda {

template <typename Tr, CacheKind kCache>
int LaunchDecodeHeads(const AttentionParams& p, cudaStream_t stream) {
  const size_t smem = DecodeLaunchFor(p.head_size).smem_bytes;
  switch (p.head_size) {
    case 64:
      return LaunchDecodeFor<Tr, kCache, 64>(p, smem, stream);
    case 128:
      return LaunchDecodeFor<Tr, kCache, 128>(p, smem, stream);
    case 256:
      return LaunchDecodeFor<Tr, kCache, 256>(p, smem, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

template <CacheKind kCache>
int LaunchDecodeThenCombine(const AttentionParams& p, void* stream) {
  auto* s = static_cast<cudaStream_t>(stream);
  const int code = p.elem == ElemType::kBFloat16 ? LaunchDecodeHeads<BFloat16, kCache>(p, s)
                                                 : LaunchDecodeHeads<Half, kCache>(p, s);
  if (code != 0 || p.num_splits == 1) return code;
  return LaunchCombine(p, stream);
}

}  // namespace attnrt::cuda
