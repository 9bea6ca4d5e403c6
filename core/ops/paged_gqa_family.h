// Paged GroupQueryAttention as an op family (attnrt/ops/paged_gqa.h): validation by
// paged_gqa_validation.cpp, kernels receive attnrt_paged_gqa_problem / attnrt_paged_gqa_args.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "core/ops/op_family.h"

namespace attnrt::core {

// The paged ops' p_precision attribute (both families): the plan description's text
// ("p_precision=exact" or "p_precision=input") and what a problem with it needs of a kernel's
// plugin (INPUT: the ABI minor version that added the field).
std::string PPrecisionText(int32_t p_precision);
AbiNeed PPrecisionNeed(int32_t p_precision);

// What the KV cache quantization of the three GroupQueryAttention ops needs of a kernel's plugin:
// PER_BLOCK_32 (ggml's Q8_0/Q4_0 blocks) the ABI minor version that added it, which an older
// plugin would read as an int4/int8 cache.
AbiNeed KvQuantNeed(const attnrt_gqa_attributes& attributes);

// What a KV cache of dtype float8_e5m2 (ABI 1.11) needs of a kernel's plugin: an older one knows
// no such dtype code (the three GroupQueryAttention ops).
AbiNeed CacheDtypeNeed(attnrt_dtype cache_dtype);

// What a value head size other than head_size (ABI 1.8) needs of a kernel's plugin: an older one
// reads the value rows as head_size wide.
AbiNeed ValueHeadSizeNeed(const attnrt_paged_gqa_problem& problem);

// What pools of two cache types (ABI 1.9) need of a kernel's plugin: an older one reads value_cache
// as key_cache's type.
AbiNeed ValueCacheTypeNeed(const attnrt_paged_gqa_problem& problem);

// What a head size (key or value) that is not a multiple of 8 (ABI 1.9) needs of a kernel's plugin:
// an older one was promised multiples of 8.
AbiNeed HeadSizeNeed(const attnrt_paged_gqa_problem& problem);

// The need of the newer ABI minor version of the two.
AbiNeed NewerNeed(AbiNeed a, AbiNeed b);

// What a paged problem (of either paged op) needs of a kernel's plugin: the newest of its KV cache
// quantization's, p_precision's, value head size's, value cache type's and head sizes' needs.
AbiNeed PagedProblemNeed(const attnrt_paged_gqa_problem& problem);

// Validates the attnrt_paged_gqa_attributes at `attributes` and creates the family.
Status CreatePagedGqaFamily(const void* attributes, std::unique_ptr<OpFamily>* out);

// The same for the varlen op (attnrt/ops/paged_gqa_varlen.h, paged_gqa_varlen_family.cpp).
Status CreatePagedGqaVarlenFamily(const void* attributes, std::unique_ptr<OpFamily>* out);

}  // namespace attnrt::core
