// Validation of paged GroupQueryAttention over packed variable-length batches
// (attnrt/ops/paged_gqa_varlen.h). The packed tensors and the lengths are checked here; the pools,
// the block table, dtypes, head_sink and scales by the paged op's checks on a padded stand-in call
// of the same sequences (shapes only). Nothing here writes any tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "core/status.h"

namespace attnrt::core::paged_gqa_varlen {

// The paged op's attribute checks, then do_rotary == 0 and qk_output == 0.
Status ValidateAttributes(const void* attributes, attnrt_paged_gqa_attributes* out);

// Shapes only: counts; query [num_tokens, N*H] (or [num_tokens, N, H]) and output alike; key and
// value both or neither, [num_tokens, Nkv*H]; query_start_loc int32 [B+1], seq_lens int32 [B] and
// slot_mapping int64 [num_tokens] (optional) on the host; then the paged op's checks. Fills *out.
Status ValidateShapes(const attnrt_paged_gqa_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_paged_gqa_varlen_problem* out);

// Values, before anything is written: query_start_loc from 0, non-decreasing, within num_tokens;
// every seq_lens[b] in [max(1, q_len_b), the table's capacity]; the block table (paged rules);
// every slot_mapping entry -1 or its row's own slot; no pool element shared with another tensor.
// Fills *out; out->paged.gqa.seqlens_k points into *seqlens_k (T_b - 1), which must outlive it.
Status ValidateRun(const attnrt_paged_gqa_varlen_problem& problem,
                   const attnrt_tensor* const* inputs, size_t num_inputs,
                   const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_paged_gqa_varlen_args* out, std::vector<int32_t>* seqlens_k);

// Names of inputs and outputs by position ("query", ..., "v_scale"; "output"); "?" out of range.
const char* InputName(size_t index);
const char* OutputName(size_t index);

}  // namespace attnrt::core::paged_gqa_varlen
