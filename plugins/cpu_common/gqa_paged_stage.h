// What every paged GroupQueryAttention kernel of the CPU plugins shares (attnrt/ops/paged_gqa.h):
// the struct_size checks of its problem and arguments, and the staging step that appends this
// step's new K/V rows into the block pools through the block table and resolves the run the
// attention reads (paged_gqa.flash and paged_gqa.naive in gqa_paged.cpp, paged_gqa_varlen in
// gqa_paged_varlen.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/plugin.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// True when `problem` (an attnrt_paged_gqa_problem) is at least as large as the one this plugin was
// built with; else false with the reason. Reads nothing beyond struct_size otherwise.
bool PagedGqaProblemFits(const void* problem, char* reason, size_t reason_capacity);

// ATTNRT_OK when `args` is at least as large as the attnrt_paged_gqa_args this plugin was built
// with; else ATTNRT_ERROR_ABI_MISMATCH with the message.
int32_t PagedGqaArgsFit(const attnrt_paged_gqa_args& args, char* error, size_t error_capacity);

// The value cache type of a paged problem (attnrt/ops/paged_gqa.h, "Value cache type"): the key
// cache's (GqaElementTypes) when the pools share one type. False when this driver has none for it.
bool GqaPagedValueCacheType(const attnrt_paged_gqa_problem& problem,
                            GqaCacheType* value_cache_type) noexcept;

// The key cache type of a paged problem: GqaElementTypes' unless the pools hold independent types
// (ABI 1.9), where an unquantized key cache may be any float type. False when this driver has none.
bool GqaPagedKeyCacheType(const attnrt_paged_gqa_problem& problem,
                          GqaCacheType* key_cache_type) noexcept;

// Whether a paged problem's pools hold other than GroupQueryAttention's one cache type (ABI 1.9):
// two types, or an unquantized key cache of another type than T.
bool GqaPagedTypesDiffer(const attnrt_paged_gqa_problem& problem) noexcept;

// Byte strides of a pool of `p` whose element strides (kv_layout's dimension order) are `strides`:
// p.key_cache_strides, or p.value_cache_strides with `value_pool` (whose element type may be its
// own, ABI 1.9).
GqaPoolStrides PagedGqaPoolStrides(const attnrt_paged_gqa_problem& p, const int64_t* strides,
                                   bool value_pool);

// What the staging step reads: the paged call and, for a packed variable-length batch
// (attnrt/ops/paged_gqa_varlen.h), its row layout.
struct PagedStageInput {
  const attnrt_paged_gqa_args* paged;
  const int32_t* query_start_loc;  // NULL: a padded batch of S rows per sequence
  const int64_t* slot_mapping;     // NULL: every new row is written
  const int32_t* key_start_loc;    // varlen: the K/V rows of each sequence; NULL: its query rows
  const float* alibi_slopes;       // varlen: ALiBi slope of each query head; NULL: none
  int64_t max_query_len;           // varlen: the longest sequence's query rows
  int64_t window_right = -1;       // varlen, causal = 0: local_window_right (-1: none)
  bool alibi_symmetric = false;    // varlen: alibi_form SYMMETRIC (ABI 1.12)
  const int64_t* query_positions = nullptr;  // varlen: position_ids (ABI 1.12); NULL: none
  const int64_t* key_positions = nullptr;    // varlen: key_position_ids (ABI 1.12); NULL: none
  // A varlen call (its all-decode form too, whose query_start_loc is NULL): a new key row's
  // default rotary position is its token position, whatever position_ids says of the queries.
  bool varlen = false;
};

// GqaFlashPaging::stage and GqaStageFn of the paged kernels; `user` is a PagedStageInput. Resolves
// the run, points it at the pools (key_cache/value_cache, their capacity of max_blocks_per_seq *
// block_size rows per sequence, and the block table fields of GqaRun) and writes the new K/V rows
// into the blocks the table names (RoPE on K, quantized for a quantized cache: GqaWriteCacheRow, as
// the contiguous kernels store them) on the host's pool. Rows of a first prompt's right padding
// (token >= T_b) are not stored. Call it only once every check of the run has passed: it is the
// first write of the run.
GqaRun PagedGqaStage(const attnrt_host_services& host, const void* user);

}  // namespace attnrt::cpu
