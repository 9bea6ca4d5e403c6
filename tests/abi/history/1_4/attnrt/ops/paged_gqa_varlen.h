/*
 * attnrt/ops/paged_gqa_varlen.h — paged GroupQueryAttention over packed variable-length batches
 * (ABI 1.2): the call a serving engine makes per layer (vLLM's and FlashAttention's varlen
 * convention), prefill chunks and single-token decodes of any number of sequences mixed in one
 * call.
 *
 * The math is the paged op's (attnrt/ops/paged_gqa.h) and GroupQueryAttention's (scale, softcap,
 * local_window_size, head_sink, smooth_softmax, quantized caches); only the batch is packed:
 *
 *   query          T [num_tokens, N * H]    rows of sequence b: [query_start_loc[b],
 *                                           query_start_loc[b + 1]), q_len_b of them
 *   key, value     T [num_tokens, Nkv * H]  the new K/V rows, one per query row; both NULL when the
 *                                           cache already holds every row (nothing is written)
 *   key_cache,     the block pools of the paged op, compact or strided views (one tensor's K and V
 *   value_cache    halves: vLLM's CPU cache, FlashInfer's pages, ...), kv_layout BSNH or BNSH
 *   query_start_loc int32 [B + 1] host       0 = query_start_loc[0] <= ... <= query_start_loc[B]
 *                                           <= num_tokens (vLLM's query_start_loc, FlashAttention's
 *                                           cu_seqlens_q)
 *   seq_lens       int32 [B] host           T_b, the context length of sequence b including its
 *                                           new tokens (T_b >= q_len_b, T_b >= 1)
 *   block_table    int32 [B, max_blocks_per_seq] host, as the paged op's
 *   slot_mapping   int64 [num_tokens] host, optional: vLLM's slot of each new row (block id *
 *                  block_size + offset), -1 for a row not written; a slot that is not -1 must be
 *                  the row's own position in its table (token T_b - q_len_b + i of sequence b),
 *                  so a mistaken mapping is an error instead of a silent stale read
 *   head_sink      T [N], optional; k_scale, v_scale float32 for quantized caches, as GQA's
 *
 *   output         T [num_tokens, N * H]    rows past query_start_loc[B] (an engine's padding)
 *                                           are neither read nor written
 *
 * Query row i of sequence b is token P_b + i with P_b = T_b - q_len_b: it sees keys [0, P_b + i]
 * (causal; within local_window_size of it when set), so its new tokens are causal among
 * themselves and a decode is a sequence with q_len_b = 1. The new K/V rows are written into the
 * blocks the table names before attention reads them; a block written by this call must belong to
 * one sequence, as for the paged op. Everything is checked before the first write
 * (INVALID_ARGUMENT naming the input).
 *
 * Not supported (rejected at op creation, or at plan for an input): rotary embedding
 * (do_rotary = 1: engines rotate Q and K before attention), attention_bias, position_ids,
 * qk_output, packed QKV, sliding_window_cache = 1.
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and the attnrt headers.
 */
#ifndef ATTNRT_OPS_PAGED_GQA_VARLEN_H_
#define ATTNRT_OPS_PAGED_GQA_VARLEN_H_

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Input positions. Absent optional inputs are NULL. */
typedef enum attnrt_paged_gqa_varlen_input {
  ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY = 0,           /* T [num_tokens, N*H] */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY = 1,             /* T [num_tokens, Nkv*H] or NULL */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE = 2,           /* T [num_tokens, Nkv*H] or NULL */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE = 3,       /* block pool; written */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE = 4,     /* block pool; written */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC = 5, /* int32 [B+1], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS = 6,        /* int32 [B], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE = 7,     /* int32 [B, max_blocks], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING = 8,    /* int64 [num_tokens], host; optional */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK = 9,       /* T [N]; optional */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE = 10,        /* as GQA; quantized caches */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE = 11,        /* as GQA; quantized caches */
  ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS = 12
} attnrt_paged_gqa_varlen_input;

typedef enum attnrt_paged_gqa_varlen_output {
  ATTNRT_PAGED_GQA_VARLEN_OUTPUT_OUTPUT = 0, /* T [num_tokens, N*H] */
  ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS = 1
} attnrt_paged_gqa_varlen_output;

/* Attributes: attnrt_paged_gqa_attributes (attnrt/ops/paged_gqa.h), with do_rotary = 0 and
 * qk_output = 0. */

/**
 * The validated problem kernels receive. `paged` describes the call as a paged op over a padded
 * batch of B sequences of num_tokens query rows each (an upper bound: each sequence's rows are
 * its q_len_b, known at run): paged.gqa.sequence_length = num_tokens, kv_sequence_length =
 * num_tokens (0 without key/value), the pools' fields as the paged op's.
 */
typedef struct attnrt_paged_gqa_varlen_problem {
  size_t struct_size;
  attnrt_paged_gqa_problem paged;
  int64_t num_tokens;
  bool has_slot_mapping;
} attnrt_paged_gqa_varlen_problem;

/**
 * What a kernel's run() receives. `paged` holds the resolved paged arguments: paged.gqa.seqlens_k
 * points to T_b - 1 per sequence (seq_lens - 1), paged.gqa.phase is
 * ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT (the causal offset of sequence b is T_b - q_len_b),
 * paged.gqa.total_sequence_length is the largest T_b, query/key/value/output point at the packed
 * rows. max_query_len is the largest q_len_b.
 */
typedef struct attnrt_paged_gqa_varlen_args {
  size_t struct_size;
  const attnrt_paged_gqa_varlen_problem* problem;
  attnrt_paged_gqa_args paged;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  const int64_t* slot_mapping; /* NULL when absent */
  int64_t max_query_len;
} attnrt_paged_gqa_varlen_args;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_OPS_PAGED_GQA_VARLEN_H_ */
