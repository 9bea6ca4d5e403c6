// The paged problem structs as plugins built for older ABI minors read them. Fields were appended
// to attnrt_paged_gqa_problem, which attnrt_paged_gqa_varlen_problem embeds by value, so each
// addition moved the varlen problem's own fields (num_tokens, has_slot_mapping):
//   ABI 1.5: p_precision   (kernels of plugins built for ABI 1.2-1.4 read the 1.4 layout)
//   ABI 1.8: v_head_size   (kernels of plugins built for ABI 1.5-1.7 read the 1.7 layout)
//   ABI 1.9: value_cache_dtype, v_cache_bit_width
//                          (kernels of plugins built for ABI 1.8 read the 1.8 layout)
// A varlen kernel of such a plugin is handed a copy of the validated problem in the layout it was
// built for (attnrt/ops/paged_gqa_varlen.h; docs/plugins.md, "The plugin ABI"), and only problems
// that layout can describe (EXACT p_precision for 1.4; v_head_size == head_size for 1.4 and 1.7;
// pools of one cache type for all three). The
// padded paged op needs no copy: its problem only grew at the end, and an older kernel reads the
// prefix it knows.
//
// The args structs did not change (they hold the problems by pointer and attnrt_gqa_args by
// value), so only their problem pointers are redirected to the copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"

namespace attnrt::core::paged_gqa_layouts {

// The ABI minor versions that appended p_precision and v_head_size: kernels of plugins built for
// an older one read the layouts below.
inline constexpr uint32_t kPPrecisionMinor = 5;
inline constexpr uint32_t kValueHeadSizeMinor = 8;
inline constexpr uint32_t kValueCacheTypeMinor = 9;
// key_start_loc and alibi_slopes of the varlen op (ABI 1.10): new K/V rows of their own count,
// ALiBi.
inline constexpr uint32_t kKeyStartLocMinor = 10;
inline constexpr uint32_t kAlibiMinor = 10;
inline constexpr uint32_t kNonCausalWindowMinor = 10;
// A float8_e5m2 KV cache (a dtype code, no struct change; every GroupQueryAttention op).
inline constexpr uint32_t kFloat8E5M2Minor = 11;
// Causal sequences with fewer keys than query rows (the varlen op; known at run only).
inline constexpr uint32_t kBottomRightCausalMinor = 11;
// Rotary embedding in the varlen op (cos_cache, sin_cache, position_ids, key_position_ids) and the
// attribute alibi_form.
inline constexpr uint32_t kVarlenRotaryMinor = 12;
inline constexpr uint32_t kAlibiFormMinor = 12;

// attnrt_paged_gqa_problem of ABI 1.2-1.4: the ABI 1.5 struct without p_precision.
struct PagedGqaProblem14 {
  size_t struct_size;
  attnrt_gqa_problem gqa;
  int64_t num_blocks;
  int64_t block_size;
  int64_t max_blocks_per_seq;
  int32_t kv_layout;
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
};

// attnrt_paged_gqa_varlen_problem of ABI 1.2-1.4.
struct PagedGqaVarlenProblem14 {
  size_t struct_size;
  PagedGqaProblem14 paged;
  int64_t num_tokens;
  bool has_slot_mapping;
};

// attnrt_paged_gqa_problem of ABI 1.5-1.7: the ABI 1.8 struct without v_head_size.
struct PagedGqaProblem17 {
  size_t struct_size;
  attnrt_gqa_problem gqa;
  int64_t num_blocks;
  int64_t block_size;
  int64_t max_blocks_per_seq;
  int32_t kv_layout;
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
  int32_t p_precision;
};

// attnrt_paged_gqa_varlen_problem of ABI 1.5-1.7.
struct PagedGqaVarlenProblem17 {
  size_t struct_size;
  PagedGqaProblem17 paged;
  int64_t num_tokens;
  bool has_slot_mapping;
};

// attnrt_paged_gqa_problem of ABI 1.8: the ABI 1.9 struct without value_cache_dtype and
// v_cache_bit_width.
struct PagedGqaProblem18 {
  size_t struct_size;
  attnrt_gqa_problem gqa;
  int64_t num_blocks;
  int64_t block_size;
  int64_t max_blocks_per_seq;
  int32_t kv_layout;
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
  int32_t p_precision;
  int64_t v_head_size;
};

// attnrt_paged_gqa_varlen_problem of ABI 1.8.
struct PagedGqaVarlenProblem18 {
  size_t struct_size;
  PagedGqaProblem18 paged;
  int64_t num_tokens;
  bool has_slot_mapping;
};

// A validated varlen problem in an older layout: every field that layout has, struct_size of both
// structs that version's sizeof.
PagedGqaVarlenProblem14 ToAbi14(const attnrt_paged_gqa_varlen_problem& problem);
PagedGqaVarlenProblem17 ToAbi17(const attnrt_paged_gqa_varlen_problem& problem);
PagedGqaVarlenProblem18 ToAbi18(const attnrt_paged_gqa_varlen_problem& problem);

// Points the args' problem pointers (args->problem, args->paged.problem,
// args->paged.gqa.problem) into `problem`, which must outlive the call they are passed to.
void PointArgsAt(const PagedGqaVarlenProblem14& problem, attnrt_paged_gqa_varlen_args* args);
void PointArgsAt(const PagedGqaVarlenProblem17& problem, attnrt_paged_gqa_varlen_args* args);
void PointArgsAt(const PagedGqaVarlenProblem18& problem, attnrt_paged_gqa_varlen_args* args);

}  // namespace attnrt::core::paged_gqa_layouts
