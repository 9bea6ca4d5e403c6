// Conversions between float32 and a cache's type for the attnrt calls of a FLASH_ATTN_EXT node
// (docs/llama-cpp.md): q and the output, the mask (times ALiBi's slope) as attention_bias.
#ifndef ATTNRT_GGML_CONVERT_H_
#define ATTNRT_GGML_CONVERT_H_

#include <cstdint>

#include "attnrt/attnrt.h"
#include "ggml.h"

namespace attnrt_ggml {

// n floats to the cache's type (float32, float16 or bfloat16) at dst.
void FromFloat(const float* src, void* dst, int64_t n, const attnrt_dtype& dtype);

// n elements of the cache's type to floats.
void ToFloat(const void* src, float* dst, int64_t n, const attnrt_dtype& dtype);

// Float parameter `index` of a node's op_params (FLASH_ATTN_EXT: 0 scale, 1 max_bias, 2
// logit_softcap).
float OpParam(const ggml_tensor* node, int index);

// The int32 op parameter at `index` (FLASH_ATTN_EXT: 4 is n_kv_max,
// ggml_flash_attn_ext_set_n_kv_max).
int32_t OpParamInt(const ggml_tensor* node, int index);

// ALiBi's slope of head h, computed as ggml's CPU backend does (the same float operations); 1
// without ALiBi (max_bias 0).
float AlibiSlope(float max_bias, int64_t num_heads, int64_t h);

// A float16 mask row of n entries, times `slope`, to the cache's type at dst; scratch holds n
// floats. See convert.cpp for `shift`. Returns false when rounding to the cache's type moved a
// finite entry by more than rounding q to it moves a logit of magnitude 1 (2^-8 bfloat16, 2^-11
// float16): large entries that no shift brought near 0, whose row ggml's algorithm then computes.
bool MaskRow(const ggml_fp16_t* src, void* dst, int64_t n, const attnrt_dtype& dtype, float slope,
             bool shift, float* scratch);

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_CONVERT_H_
