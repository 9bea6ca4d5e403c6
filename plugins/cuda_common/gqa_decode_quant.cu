// Decode kernels over an int8 or float8 e4m3 cache with per-tensor scales (cuda_xqa).
#include "gqa_decode_dispatch.cuh"

namespace attnrt::cuda {

int LaunchDecodeQuantCache(const AttentionParams& params, void* stream) {
  if (params.cache == CacheKind::kFp8E4M3) {
    return LaunchDecodeThenCombine<CacheKind::kFp8E4M3>(params, stream);
  }
  return LaunchDecodeThenCombine<CacheKind::kInt8>(params, stream);
}

}  // namespace attnrt::cuda
