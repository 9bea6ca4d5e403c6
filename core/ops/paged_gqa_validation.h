// Paged GroupQueryAttention validation (attnrt/ops/paged_gqa.h). The GQA checks are reused: the
// call is validated as a GroupQueryAttention whose past_key/past_value and present outputs are one
// shared buffer of max_blocks_per_seq * block_size rows (messages name key_cache/value_cache);
// the pool, block table and block id checks are this file's. Nothing here writes any tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "core/status.h"

namespace attnrt::core::paged_gqa {

// struct_size, the GQA attributes (gqa::ValidateAttributes), sliding_window_cache == 0 and
// block_size in [1, 1024]. Writes a normalized copy to *out.
// `varlen`: the varlen op's, which also takes a window of non-causal attention (gqa.causal = 0
// with local_window_size and local_window_right, ABI 1.10); the paged op refuses one.
Status ValidateAttributes(const void* attributes, attnrt_paged_gqa_attributes* out,
                          bool varlen = false);

// Shapes only: input/output counts; key_cache and value_cache [num_blocks, block_size, Nkv, H]
// (H/2 for int4) of one dtype, compact or strided with a contiguous last dimension; block_table
// int32 [B, max_blocks_per_seq] on the host; then every GQA shape check. Fills *out.
Status ValidateShapes(const attnrt_paged_gqa_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_paged_gqa_problem* out);

// Values, before any memory is written: total_sequence_length and every seqlens_k[b] within the
// table's capacity, the GQA run checks, every block id batch b needs (slots [0, ceil(T_b /
// block_size))) in [0, num_blocks), no block this step writes rows into named by another of those
// needed slots (of any batch; slots past a batch's needed ones are ignored), no element of a pool
// shared with the other pool, itself, an output or another input (element by element). Fills *out
// (out->problem = &problem, out->gqa.problem = &problem.gqa).
Status ValidateRun(const attnrt_paged_gqa_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_paged_gqa_args* out);

// The value head size Hv (ABI 1.8) of 4-dimensional pools: 0 when value_cache's rows are as wide
// as key_cache's (Hv is the head size), else the head size value_cache's row width holds
// (gqa::HeadSizeOfCacheRow; INVALID_ARGUMENT naming value_cache when it holds none). With
// independent K/V cache types (ABI 1.9) always the head size of value_cache's rows under its own
// type.
Status ValueHeadSize(const attnrt_paged_gqa_attributes& attributes, const attnrt_tensor& key_cache,
                     const attnrt_tensor& value_cache, int64_t* value_head_size);

// Whether the attributes give value_cache a type of its own (v_cache_own_type 1, ABI 1.9).
bool IndependentCacheTypes(const attnrt_paged_gqa_attributes& attributes);

// Whether a validated problem's pools share one type (what a kernel of a plugin built before ABI
// 1.9 can be offered).
bool SharesOneCacheType(const attnrt_paged_gqa_problem& problem);

// Whether key_cache and value_cache of a call that passed ValidateShapes are compact row-major (a
// strided pool is an ABI 1.2 feature: only newer plugins' kernels are offered it).
bool PoolsCompact(const attnrt_tensor* const* inputs);

// A tensor with the label messages give it ("Input 'query'", "Output 'output'").
struct LabelledTensor {
  const attnrt_tensor* tensor;
  std::string label;
};

// The pools are written by a run: no element of key_cache is an element of value_cache, of itself
// twice (a zero or folding stride) or of one of `others` (on the same device type). Element by
// element (core/ops/memory_overlap.h): views of one allocation that interleave pass. A run that
// writes no rows (`writes` false) may read the two pools from shared elements (MLA's V rows as the
// leading elements of its K rows); the other rules stand.
Status CheckPoolAliasing(const attnrt_tensor& key_cache, const attnrt_tensor& value_cache,
                         const std::vector<LabelledTensor>& others, bool writes);

// The rows of one sequence a run reads and writes: tokens [0, length) are read, tokens
// [first_write, length) written by this step (first_write == length: none).
struct SequenceRows {
  int64_t length;
  int64_t first_write;
};

// Every slot sequence b needs ([0, ceil(length / block_size)) of row b of `table`, `slots` wide)
// names a block in [0, num_blocks) (-1: unallocated, an error naming lengths_name[b]); a block
// this step writes rows into is named by no other needed slot of any sequence.
Status CheckBlockTable(const int32_t* table, int64_t slots, int64_t block_size, int64_t num_blocks,
                       const std::vector<SequenceRows>& rows, const char* lengths_name);

// Names of inputs and outputs by position ("query", ..., "block_table"; "output", "output_qk");
// "?" out of range.
const char* InputName(size_t index);
const char* OutputName(size_t index);

}  // namespace attnrt::core::paged_gqa
