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
 *   key, value     T [num_tokens, Nkv * H]  the new K/V rows, one per query row (num_key_tokens
 *                                           rows with key_start_loc); both NULL when the cache
 *                                           already holds every row (nothing is written)
 *   key_cache,     the block pools of the paged op, compact or strided views (one tensor's K and V
 *   value_cache    halves: vLLM's CPU cache, FlashInfer's pages, ...), kv_layout BSNH or BNSH
 *   query_start_loc int32 [B + 1] host       0 = query_start_loc[0] <= ... <= query_start_loc[B]
 *                                           <= num_tokens (vLLM's query_start_loc, FlashAttention's
 *                                           cu_seqlens_q)
 *   seq_lens       int32 [B] host           T_b, the context length of sequence b including its
 *                                           new tokens (T_b >= q_len_b, T_b >= 1)
 *   block_table    int32 [B, max_blocks_per_seq] host, as the paged op's
 *   slot_mapping   int64 [num_tokens] host (one per key row: [num_key_tokens] with
 *                  key_start_loc), optional: vLLM's slot of each new row (block id *
 *                  block_size + offset), -1 for a row not written; a slot that is not -1 must be
 *                  the row's own position in its table (token T_b - q_len_b + i of sequence b),
 *                  so a mistaken mapping is an error instead of a silent stale read
 *   head_sink      T [N], optional; k_scale, v_scale float32 for quantized caches, as GQA's
 *   key_start_loc  int32 [B + 1] host, optional (ABI 1.10; FlashAttention's cu_seqlens_k): the
 *                  new K/V rows of each sequence, when they are not its query rows (below)
 *   alibi_slopes   float32 [N], optional (ABI 1.10): ALiBi (below)
 *   cos_cache,     T [M, R/2] (ABI 1.12), with gqa.do_rotary = 1: rotary embedding (below)
 *   sin_cache
 *   position_ids   int64 [num_tokens] host, optional (ABI 1.12): each query row's rotary position
 *   key_position_ids int64 [num_(key_)tokens] host, optional (ABI 1.12): each new K/V row's
 *
 *   output         T [num_tokens, N * H]    rows past query_start_loc[B] (an engine's padding)
 *                                           are neither read nor written
 *
 * New K/V rows of their own count (key_start_loc, ABI 1.10): with key_start_loc, key and value
 * have num_key_tokens = key_start_loc[B] rows (0 = key_start_loc[0] <= ... <= key_start_loc[B]),
 * sequence b's are rows [key_start_loc[b], key_start_loc[b + 1]), k_len_b of them (any number up
 * to T_b, more or fewer than q_len_b, 0 included), written as its tokens [T_b - k_len_b, T_b);
 * slot_mapping then has one slot per key row (num_key_tokens). The queries are as without it. This
 * is FlashAttention's varlen form (cu_seqlens_q, cu_seqlens_k) over a paged cache, and the call an
 * encoder-decoder model's cross-attention makes: decoder queries over the encoder's K/V rows,
 * written into the cache on the step the encoder ran (k_len_b = T_b) and read from it after (key
 * and value absent). Without key_start_loc, k_len_b = q_len_b: one K/V row per query row. A call
 * with key rows has at least one query row. key_start_loc without key and value is an error.
 *
 * Windows of non-causal attention (ABI 1.10): with causal = 0, gqa.local_window_size W (>= 1, or
 * -1) and the attribute local_window_right R (>= 0, or -1) bound the keys a row at position p sees
 * to [p - (W - 1), p + R] within [0, T_b), FlashAttention's window_size (W - 1, R) without the
 * causal mask and vLLM's sliding window W of encoder layers (R = W - 1); -1 leaves that side open.
 * A row that sees no key (a cross-attention row far from its keys) is a zero row.
 *
 * ALiBi (alibi_slopes, ABI 1.10; Press et al., "Train Short, Test Long", as vLLM and
 * FlashAttention take it): the score of query row i of sequence b (position p = P_b + i) and key j
 * gets slope_n * (j - p) added, n the query head, after scale and softcap and before the mask and
 * the softmax; non-causal rows too (keys after p get a positive bias, as vLLM's CPU kernel adds
 * it). The slopes are read from the device of query and must be finite. With the attribute
 * alibi_form = ATTNRT_ALIBI_FORM_SYMMETRIC (ABI 1.12) the bias is -slope_n * |j - p| instead,
 * FlashAttention's form: the same on every key a causal row sees, the negative distance on both
 * sides of p without the causal mask.
 *
 * Rotary embedding (gqa.do_rotary = 1, ABI 1.12; GroupQueryAttention's RoPE: cos_cache and
 * sin_cache T [M, R/2] with 2 <= R <= H, R even, the first R dimensions rotated, half-split or
 * interleaved pairs as gqa.rotary_interleaved says, the rest copied; each rotated value rounded
 * to T): query rows are rotated before attention, new K/V rows' keys before they are stored (the
 * cache holds rotated keys; rows already in it are not touched). Query row i of sequence b is
 * rotated at position_ids[its row] when given, else at its token position P_b + i; new K/V row l
 * at key_position_ids[its row] when given, else at its token position T_b - k_len_b + l
 * (vLLM's positions, and FlashAttention's flash_attn_with_kvcache when its k has q's length).
 * The position of every query and new key row of the call's sequences (slot_mapping -1 rows
 * included) must lie in [0, M) (INVALID_ARGUMENT naming the row);
 * position_ids and key_position_ids need do_rotary = 1, key_position_ids needs key. cos_cache and
 * sin_cache have query's dtype and device and are compact.
 *
 * With a value head size Hv != H (ABI 1.8; value_cache's last dimension, attnrt/ops/paged_gqa.h)
 * value is T [num_tokens, Nkv * Hv] and output T [num_tokens, N * Hv].
 *
 * Query row i of sequence b is token P_b + i with P_b = T_b - q_len_b: it sees keys [0, P_b + i]
 * (causal; within local_window_size of it when set), so its new tokens are causal among
 * themselves and a decode is a sequence with q_len_b = 1. A causal sequence may have fewer keys
 * than query rows (ABI 1.11; only when its new K/V rows are its key_start_loc run, or when the call
 * writes none): the alignment stays at the end (FlashAttention's bottom-right causal mask), so
 * rows i < q_len_b - T_b (P_b + i < 0) see no key and give zero rows; kernels of plugins built for
 * ABI 1.10 or older are not run on such a call (UNSUPPORTED at run). With the GQA attribute
 * causal = 0 (local_window_size then -1) every row of sequence b sees keys [0, T_b), the later new
 * tokens' rows included: the encoders' non-causal self-attention, and cross-attention, whose
 * q_len_b may then exceed T_b too. The new K/V rows are written into the
 * blocks the table names before attention reads them; a block written by this call must belong to
 * one sequence, as for the paged op. Everything is checked before the first write
 * (INVALID_ARGUMENT naming the input).
 *
 * Not supported (rejected at op creation, or at plan for an input): attention_bias, qk_output,
 * packed QKV, sliding_window_cache = 1.
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
  ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY = 0,             /* T [num_tokens, N*H] */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY = 1,               /* T [num_(key_)tokens, Nkv*H] or NULL */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE = 2,             /* T [num_(key_)tokens, Nkv*H] or NULL */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE = 3,         /* block pool; written */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE = 4,       /* block pool; written */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC = 5,   /* int32 [B+1], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS = 6,          /* int32 [B], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE = 7,       /* int32 [B, max_blocks], host; required */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING = 8,      /* int64 [num_(key_)tokens], host; opt. */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK = 9,         /* T [N]; optional */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE = 10,          /* as GQA; quantized caches */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE = 11,          /* as GQA; quantized caches */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC = 12,    /* int32 [B+1], host; optional (ABI 1.10) */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES = 13,     /* float32 [N]; optional (ABI 1.10) */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE = 14,        /* T [M, R/2]; do_rotary = 1 (ABI 1.12) */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_SIN_CACHE = 15,        /* T [M, R/2]; do_rotary = 1 (ABI 1.12) */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_POSITION_IDS = 16,     /* int64 [num_tokens], host; opt. (1.12) */
  ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_POSITION_IDS = 17, /* int64 [num_(key_)tokens], host; opt. */
  ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS = 18
} attnrt_paged_gqa_varlen_input;

typedef enum attnrt_paged_gqa_varlen_output {
  ATTNRT_PAGED_GQA_VARLEN_OUTPUT_OUTPUT = 0, /* T [num_tokens, N*H] */
  ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS = 1
} attnrt_paged_gqa_varlen_output;

/* Attributes: attnrt_paged_gqa_attributes (attnrt/ops/paged_gqa.h), with qk_output = 0;
 * p_precision (ABI 1.5) as the paged op's; do_rotary = 1 and alibi_form (ABI 1.12) as above. */

/**
 * The validated problem kernels receive. `paged` describes the call as a paged op over a padded
 * batch of B sequences of num_tokens query rows each (an upper bound: each sequence's rows are
 * its q_len_b, known at run): paged.gqa.sequence_length = num_tokens, kv_sequence_length =
 * num_tokens when the call writes rows (0 without key/value or with key rows of their own count
 * numbering 0; the rows follow query_start_loc or key_start_loc), the pools' fields and
 * p_precision as the paged op's.
 * ABI 1.5 appended p_precision to attnrt_paged_gqa_problem, which moved num_tokens and
 * has_slot_mapping: a kernel of a plugin built for ABI 1.2-1.4 is handed the problem in the ABI
 * 1.4 layout it was built for (no p_precision; struct_size the 1.4 sizeof), EXACT problems only,
 * and its args' problem pointers point into that copy (the args structs did not change).
 * ABI 1.8 appended v_head_size the same way: a kernel of a plugin built for ABI 1.5-1.7 gets the
 * ABI 1.7 layout (no v_head_size), problems with Hv == H only.
 * ABI 1.10 appended num_key_tokens, has_key_start_loc, has_alibi_slopes and local_window_right
 * (the attribute; -1 unless causal = 0): plugins built for ABI 1.9 or older are offered problems
 * with none of key_start_loc, alibi_slopes or a window of non-causal attention only.
 * ABI 1.12 appended alibi_form (the attribute) and has_position_ids, has_key_position_ids: plugins
 * built for ABI 1.11 or older are offered problems without rotary embedding (paged.gqa.attributes
 * .do_rotary = 0) and with alibi_form SIGNED only. The rotary fields of paged.gqa
 * (has_rotary_cache, rotary_cache_length, rotary_dim) describe cos_cache.
 */
typedef struct attnrt_paged_gqa_varlen_problem {
  size_t struct_size;
  attnrt_paged_gqa_problem paged;
  int64_t num_tokens;
  bool has_slot_mapping;
  /* ABI 1.10: the rows of key and value (num_tokens without key_start_loc, 0 without key). */
  int64_t num_key_tokens;
  bool has_key_start_loc;
  bool has_alibi_slopes;      /* ABI 1.10 */
  int32_t local_window_right; /* ABI 1.10: the attribute, -1 unless causal = 0 */
  int32_t alibi_form;         /* ABI 1.12: the attribute (attnrt_alibi_form) */
  bool has_position_ids;      /* ABI 1.12 */
  bool has_key_position_ids;  /* ABI 1.12 */
} attnrt_paged_gqa_varlen_problem;
/** ATTNRT_STRUCT_SIZE of attnrt_paged_gqa_varlen_problem (ABI 1.13). */
#define ATTNRT_PAGED_GQA_VARLEN_PROBLEM_STRUCT_SIZE \
  ATTNRT_STRUCT_SIZE(attnrt_paged_gqa_varlen_problem, has_key_position_ids)

/**
 * What a kernel's run() receives. `paged` holds the resolved paged arguments: paged.gqa.seqlens_k
 * points to T_b - 1 per sequence (seq_lens - 1), paged.gqa.phase is
 * ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT (the causal offset of sequence b is T_b - q_len_b),
 * paged.gqa.total_sequence_length is the largest T_b, query/key/value/output point at the packed
 * rows. max_query_len is the largest q_len_b. key_start_loc and alibi_slopes (ABI 1.10),
 * position_ids and key_position_ids (ABI 1.12) are NULL unless given; with do_rotary = 1,
 * paged.gqa.cos_cache and paged.gqa.sin_cache point at the rotary caches.
 */
typedef struct attnrt_paged_gqa_varlen_args {
  size_t struct_size;
  const attnrt_paged_gqa_varlen_problem* problem;
  attnrt_paged_gqa_args paged;
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  const int64_t* slot_mapping; /* NULL when absent */
  int64_t max_query_len;
  const int32_t* key_start_loc;    /* ABI 1.10; NULL: sequence b's key rows are its query rows */
  const float* alibi_slopes;       /* ABI 1.10; float32 [N], NULL: no ALiBi */
  const int64_t* position_ids;     /* ABI 1.12; [num_tokens], NULL: token positions */
  const int64_t* key_position_ids; /* ABI 1.12; [num_(key_)tokens], NULL: token positions */
} attnrt_paged_gqa_varlen_args;
/** ATTNRT_STRUCT_SIZE of attnrt_paged_gqa_varlen_args (ABI 1.13). */
#define ATTNRT_PAGED_GQA_VARLEN_ARGS_STRUCT_SIZE \
  ATTNRT_STRUCT_SIZE(attnrt_paged_gqa_varlen_args, key_position_ids)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_OPS_PAGED_GQA_VARLEN_H_ */
