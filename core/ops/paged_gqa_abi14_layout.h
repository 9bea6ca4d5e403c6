// The paged problem structs as plugins built for ABI 1.2-1.4 read them. ABI 1.5 appended
// p_precision to attnrt_paged_gqa_problem, which attnrt_paged_gqa_varlen_problem embeds by value:
// its own fields (num_tokens, has_slot_mapping) moved 8 bytes. A varlen kernel of such a plugin is
// handed a copy of the validated problem in the layout it was built for (attnrt/ops/
// paged_gqa_varlen.h; docs/plugins.md, "The plugin ABI"), EXACT problems only: it cannot see
// p_precision. The padded paged op needs no copy: its problem only grew at the end, and an older
// kernel reads the prefix it knows.
//
// The args structs did not change (they hold the problems by pointer and attnrt_gqa_args by
// value), so only their problem pointers are redirected to the copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"

namespace attnrt::core::paged_gqa_abi14 {

// The ABI minor version that appended p_precision: kernels of plugins built for an older one read
// the layouts below.
inline constexpr uint32_t kPPrecisionMinor = 5;

// attnrt_paged_gqa_problem of ABI 1.2-1.4: the ABI 1.5 struct without p_precision.
struct PagedGqaProblem {
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
struct PagedGqaVarlenProblem {
  size_t struct_size;
  PagedGqaProblem paged;
  int64_t num_tokens;
  bool has_slot_mapping;
};

// A validated varlen problem (p_precision EXACT) in the ABI 1.4 layout: every field but
// p_precision, struct_size of both structs the ABI 1.4 sizeof.
PagedGqaVarlenProblem ToAbi14(const attnrt_paged_gqa_varlen_problem& problem);

// Points the args' problem pointers (args->problem, args->paged.problem,
// args->paged.gqa.problem) into `problem`, which must outlive the call they are passed to.
void PointArgsAt(const PagedGqaVarlenProblem& problem, attnrt_paged_gqa_varlen_args* args);

}  // namespace attnrt::core::paged_gqa_abi14
