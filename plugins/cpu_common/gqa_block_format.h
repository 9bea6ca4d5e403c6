// ggml's Q8_0/Q4_0 KV blocks (ATTNRT_GQA_QUANT_PER_BLOCK_32, attnrt/ops/gqa.h): where element i of
// a cache row lies. Shared by the scalar quantizer and decoder (gqa_quant.h) and the ISA loaders
// (gqa_avx2_cache.h, gqa_avx512_cache.h, gqa_neon_cache.h).
//
// Internal linkage throughout, for the reason gqa_convert.h gives.
#pragma once

#include <stdint.h>
#include <string.h>

#include "attnrt/ops/gqa.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

constexpr int64_t kBlockElements = ATTNRT_GQA_QUANT_BLOCK_ELEMENTS;

// Bytes of one block of 32 elements: the float16 scale d, then 32 int8 codes (Q8_0) or 16 bytes of
// nibbles (Q4_0).
constexpr int64_t BlockBytes(GqaCacheType type) {
  return type == GqaCacheType::kBlockQ8_0 ? ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES
                                          : ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES;
}

// The block of a row that holds element i.
inline const uint8_t* BlockOf(const void* row, GqaCacheType type, int64_t i) {
  return static_cast<const uint8_t*>(row) + i / kBlockElements * BlockBytes(type);
}

// The float16 bits of a block's scale d (its first two bytes, little-endian).
inline uint16_t BlockScaleBits(const uint8_t* block) {
  uint16_t bits;
  memcpy(&bits, block, sizeof bits);
  return bits;
}

// Stores the float16 bits of a block's scale d.
inline void StoreBlockScaleBits(uint16_t bits, uint8_t* block) {
  block[0] = static_cast<uint8_t>(bits & 0xFF);
  block[1] = static_cast<uint8_t>(bits >> 8);
}

}  // namespace
}  // namespace attnrt::cpu
