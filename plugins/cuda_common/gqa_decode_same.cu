// Decode kernels over a float16/bfloat16 cache (cuda_flash's flash_decode and cuda_xqa).
#include "gqa_decode_dispatch.cuh"

namespace attnrt::cuda {

int LaunchDecodeSameCache(const AttentionParams& params, void* stream) {
  return LaunchDecodeThenCombine<CacheKind::kSameAsQuery>(params, stream);
}

}  // namespace attnrt::cuda
