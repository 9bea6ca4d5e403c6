// The key loop of the flash P·V kernels (gqa_flash_avx512_pv.cpp, gqa_flash_avx2.cpp).
//
// A P·V block operation loads V rows j = 0, 1, ..., keys - 1 at one constant stride (row_bytes),
// which trains the core's stride prefetcher on those load instructions; it then requests the rows
// after the last one, past the end of the rows the call was given. Over a contiguous cache those
// are the next call's rows; over a paged BSNH block (a kv head's rows Nkv rows apart, 4 KiB for
// Llama-3-8B float32) they lie past the end of the cache block, in whatever block the pool put next
// in memory, and the requests cost memory bandwidth for nothing. So the last kStrideTailKeys keys
// go through code of their own (other load instructions), and the trained loads stop before the
// end. The keys are visited in the same order either way: the sums, and so the outputs, are bitwise
// unchanged. Measured with the paged benchmark (Llama-3-8B decode, past 4096 and 16384,
// same-process A/B): AVX-512 kernels, BSNH blocks of 16 4.1-4.3% faster with two threads
// and 2.4-2.7% with one, blocks of 64 0.9-1.6%, BNSH blocks and the contiguous decode within 1.2%;
// AVX2 kernels, BSNH blocks of 16 3.3-3.4% faster. A tail of 4 or 8 keys measured the same as 2.
//
// Internal linkage throughout, for the reason gqa_avx2_math.h gives.
#pragma once

#include <stdint.h>

namespace attnrt::cpu {
namespace {

constexpr int64_t kStrideTailKeys = 2;

// key(j) for j = 0, 1, ..., keys - 1 in order, the last kStrideTailKeys of them inlined separately.
template <class Key>
__attribute__((always_inline)) inline void ForEachKey(int64_t keys, Key&& key) {
  const int64_t strided = keys > kStrideTailKeys ? keys - kStrideTailKeys : 0;
  for (int64_t j = 0; j < strided; ++j) key(j);
  static_assert(kStrideTailKeys == 2, "the tail below is written out for two keys");
  if (strided < keys) key(strided);
  if (strided + 1 < keys) key(strided + 1);
}

}  // namespace
}  // namespace attnrt::cpu
