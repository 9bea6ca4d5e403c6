/*
 * attnrt/ops/sparse_mla.h — sparse MLA: CANN MixedQuantSparseFlashMla (op kind
 * ATTNRT_OP_SPARSE_MLA) and its companion MixedQuantSparseFlashMlaMetadata (op kind
 * ATTNRT_OP_SPARSE_MLA_METADATA), plus encoders that build the quantized KV token formats.
 *
 * Semantics: CANN's MixedQuantSparseFlashMla operator README and its golden (the operator's
 * reference implementation); attnrt's decisions where they leave room: docs/sparse-mla.md.
 * Notation: B batch, S1 query rows per batch, S2 ori_kv rows, C cmp_kv rows, N query heads (q_n),
 * D = 512 head dim (448 "nope" + 64 "rope"), r = cmp_ratio, K = top-k width of cmp_sparse_indices.
 *
 * One query head attends, with one online softmax, over the keys of its row: the original-KV
 * window (ori_mask_mode, ori_win_left/right) followed by compressed keys (HCA: the causal prefix of
 * cmp_kv; CSA: the entries of cmp_sparse_indices). K = V: the dequantized 512-value token is both
 * key and value. A per-head sink joins the softmax denominator only. Scenario by presence:
 * SWA = ori_kv only; CSA = ori_kv + cmp_kv + cmp_sparse_indices; HCA = ori_kv + cmp_kv.
 *
 * Workflow (as in CANN): plan and run the metadata op with the same attributes and inputs, then
 * pass its int32 [2048] output as the main op's `metadata` input. The main op rejects metadata made
 * for other attributes, shapes or sequence lengths, and metadata any word of which differs from
 * what the metadata op writes (ATTNRT_ERROR_INVALID_ARGUMENT naming `metadata[k]`, expected and
 * actual). The metadata op's output must not share memory with any of its inputs.
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and attnrt.h.
 */
#ifndef ATTNRT_OPS_SPARSE_MLA_H_
#define ATTNRT_OPS_SPARSE_MLA_H_

#include "attnrt/attnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Fixed sizes of the op (CANN's README: q_d 512, rope_head_dim 64, kv_n 1, metadata [2048]). */
#define ATTNRT_SPARSE_MLA_HEAD_DIM 512
#define ATTNRT_SPARSE_MLA_NOPE_DIM 448
#define ATTNRT_SPARSE_MLA_ROPE_DIM 64
#define ATTNRT_SPARSE_MLA_MAX_HEADS 128
#define ATTNRT_SPARSE_MLA_METADATA_SIZE 2048
/** Bytes per token (kv_d) of each quant mode's KV format (CANN's README). */
/* quant_mode 1: rope bf16[64] | nope e4m3[448] | bf16 scales[7] | 18 pad bytes */
#define ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES 608
#define ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES 584   /* block-planar: 576 feature + 8 scale bytes */
#define ATTNRT_SPARSE_MLA_MODE2_FEATURE_BYTES 576 /* nope e4m3[448] | rope bf16[64] */
#define ATTNRT_SPARSE_MLA_MODE2_SCALE_BYTES 8     /* e8m0[7] | pad */
#define ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES 258     /* 256 bytes of 4-bit codes | fp16 scale */

/**
 * Input positions, in CANN's order (its README's input list). Absent optional inputs are NULL. All
 * int32 inputs are read on the host. Shapes by layout (layout_q / layout_kv):
 */
typedef enum attnrt_sparse_mla_input {
  /** bf16 (f16 also for quant_mode 3): BSND (B,S1,N,512) or TND (T1,N,512). Required. */
  ATTNRT_SPARSE_MLA_INPUT_Q = 0,
  /** Required. quant_mode 1/2: uint8 or float8_e4m3fn byte view, last dim 608 / 584;
   *  quant_mode 3: dtype of q, last dim 512. BSND (B,S2,1,kv_d), TND (T2,1,kv_d),
   *  PA_BBND (num_blocks, block_size, 1, kv_d). */
  ATTNRT_SPARSE_MLA_INPUT_ORI_KV = 1,
  /** CSA/HCA. quant_mode 1/2 as ori_kv; quant_mode 3: uint8, last dim 258. Same layouts. */
  ATTNRT_SPARSE_MLA_INPUT_CMP_KV = 2,
  /** Reserved by the reference: absent or empty. */
  ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES = 3,
  /** CSA: int32, BSND-q (B,S1,1,K) or TND-q (T1,1,K); -1 pads a row (the scan stops there). */
  ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES = 4,
  /** PA_BBND: int32 (B, max_blocks); entries used by a batch lie in [0, num_blocks). */
  ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE = 5,
  ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE = 6,
  /** TND: int32 (B+1) prefix sums, first 0, non-decreasing. cu_seqlens_q is required with
   *  layout_q TND; cu_seqlens_ori_kv (and cu_seqlens_cmp_kv with cmp_kv) with layout_kv TND. */
  ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q = 7,
  ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV = 8,
  ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV = 9,
  /** int32 (B): rows of q / ori_kv / cmp_kv that take part, per batch (override the lengths from
   *  shapes or cu_seqlens). seqused_ori_kv is required with PA_BBND. */
  ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q = 10,
  ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV = 11,
  ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV = 12,
  /** int32 (B), values in [0, cmp_ratio): the uncompressed length for the cmp-side causal mask is
   *  cmp_len * cmp_ratio + cmp_residual_kv[b] (0 when absent). */
  ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV = 13,
  /** Reserved by the reference: absent or empty. */
  ATTNRT_SPARSE_MLA_INPUT_ORI_TOPK_LENGTH = 14,
  ATTNRT_SPARSE_MLA_INPUT_CMP_TOPK_LENGTH = 15,
  /** float32 (N): per-head logit joining the softmax denominator only. Optional. */
  ATTNRT_SPARSE_MLA_INPUT_SINKS = 16,
  /** int32 (2048): output of the metadata op for these attributes and inputs. Required by the
   *  main op; must be absent for the metadata op. */
  ATTNRT_SPARSE_MLA_INPUT_METADATA = 17,
  ATTNRT_SPARSE_MLA_NUM_INPUTS = 18
} attnrt_sparse_mla_input;

/** Output positions of ATTNRT_OP_SPARSE_MLA. */
typedef enum attnrt_sparse_mla_output {
  /** dtype and shape of q. Rows outside seqused_q or with no visible key (S1 > S2) are zero. */
  ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT = 0,
  /** float32, natural log, sink included: BSND-q (B,1,S1,N), TND-q (1,T1,N). Required when
   *  return_softmax_lse is 1; otherwise absent or empty (the reference's placeholder). Rows with
   *  no key (outside seqused_q, or S1 > S2) get -inf, the log of an empty sum, or the sink when
   *  sinks are given (docs/sparse-mla.md). */
  ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE = 1,
  ATTNRT_SPARSE_MLA_NUM_OUTPUTS = 2
} attnrt_sparse_mla_output;

/** Output position of ATTNRT_OP_SPARSE_MLA_METADATA: int32 (2048). */
#define ATTNRT_SPARSE_MLA_METADATA_OUTPUT 0

/** layout_q / layout_kv ("BSND", "TND", "PA_BBND" in the reference). Pairs: BSND/BSND, TND/TND,
 *  BSND/PA_BBND, TND/PA_BBND. */
typedef enum attnrt_sparse_mla_layout {
  ATTNRT_SPARSE_MLA_LAYOUT_BSND = 0,
  ATTNRT_SPARSE_MLA_LAYOUT_TND = 1,
  ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND = 2
} attnrt_sparse_mla_layout;

/** ori_mask_mode / cmp_mask_mode values. */
typedef enum attnrt_sparse_mla_mask_mode {
  ATTNRT_SPARSE_MLA_MASK_NONE = 0,
  ATTNRT_SPARSE_MLA_MASK_RIGHT_DOWN_CAUSAL = 3,
  ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW = 4 /* ori side only */
} attnrt_sparse_mla_mask_mode;

/** Scenario, from the inputs present. */
typedef enum attnrt_sparse_mla_scenario {
  ATTNRT_SPARSE_MLA_SWA = 0,
  ATTNRT_SPARSE_MLA_CSA = 1,
  ATTNRT_SPARSE_MLA_HCA = 2
} attnrt_sparse_mla_scenario;

/**
 * Every attribute of MixedQuantSparseFlashMla (the metadata op takes the same struct). Set the
 * defaults with attnrt_sparse_mla_attributes_init; quant_mode has no default (0 is rejected).
 *   quant_mode 1: bf16 q; 608-byte tokens: rope bf16[64], nope e4m3fn[448], bf16 scales[7] (one per
 *     64 nope dims), 18 pad bytes; any layout.
 *   quant_mode 2: bf16 q; PA_BBND only; a block of block_size tokens holds block_size * 576 bytes
 *     (nope e4m3fn[448], rope bf16[64]) then block_size * 8 bytes (e8m0 scales[7], 1 pad).
 *   quant_mode 3: f16 or bf16 q; ori_kv unquantized in q's dtype (512 values); cmp_kv TQ4: byte t
 *     holds dim 2t in its low nibble and 2t+1 in its high nibble (codebook index), bytes 256..257
 *     the fp16 scale; value = codebook[n] * scale. No rotation is applied inside the op.
 *   topk_value_mode 1: cmp_sparse_indices are logical token positions of the batch's cmp stream;
 *     2 (PA_BBND only): physical slots block_id * block_size + offset; a slot maps to the logical
 *     position k * block_size + offset where cmp_block_table[b][k] == block_id (the first such k
 *     among the batch's used blocks); a slot of no used block of the batch is skipped like an
 *     out-of-range index. [attnrt's definition; CANN's README leaves mode 2 open]
 */
typedef struct attnrt_sparse_mla_attributes {
  size_t struct_size;
  int32_t quant_mode;         /* 1, 2 or 3; required */
  int32_t rope_head_dim;      /* 64 only; default 64 */
  float softmax_scale;        /* finite; default 1/sqrt(512) */
  int32_t cmp_ratio;          /* 1..128; must be 1 for SWA; default 1 */
  int32_t ori_mask_mode;      /* 0, 3 or 4; default 0 */
  int32_t cmp_mask_mode;      /* 0 or 3; default 0 */
  int32_t ori_win_left;       /* -1 (unbounded) or >= 0 (only with ori_mask_mode 4); default -1 */
  int32_t ori_win_right;      /* -1 (unbounded) or >= 0 (only with ori_mask_mode 4); default -1 */
  int32_t layout_q;           /* attnrt_sparse_mla_layout, BSND or TND; default BSND */
  int32_t layout_kv;          /* attnrt_sparse_mla_layout; default BSND */
  int32_t topk_value_mode;    /* 1 or 2; default 1 */
  int32_t return_softmax_lse; /* 0 or 1; default 0 */
} attnrt_sparse_mla_attributes;

/** Fills struct_size and the defaults above; quant_mode is set to 0 (must be chosen). */
static inline void attnrt_sparse_mla_attributes_init(attnrt_sparse_mla_attributes* a) {
  a->struct_size = sizeof(attnrt_sparse_mla_attributes);
  a->quant_mode = 0;
  a->rope_head_dim = ATTNRT_SPARSE_MLA_ROPE_DIM;
  a->softmax_scale = 0.04419417382415922f; /* 1/sqrt(512) */
  a->cmp_ratio = 1;
  a->ori_mask_mode = ATTNRT_SPARSE_MLA_MASK_NONE;
  a->cmp_mask_mode = ATTNRT_SPARSE_MLA_MASK_NONE;
  a->ori_win_left = -1;
  a->ori_win_right = -1;
  a->layout_q = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  a->layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_BSND;
  a->topk_value_mode = 1;
  a->return_softmax_lse = 0;
}

/**
 * Metadata layout (int32 [2048]), written by the metadata op, read and checked by the main op.
 * Work items are (query row, head group) pairs: item = row * num_head_groups + group, with rows
 * numbered b * S1 + i (BSND-q) or by their TND token index, and head group g covering heads
 * [g * heads_per_group, min(N, (g+1) * heads_per_group)). Worker w runs the items
 * [word[16 + 2w], word[17 + 2w]); the ranges are contiguous, in order, and cover every item once.
 * Workers are balanced by the number of visible keys of each row. The results never depend on
 * the partition (each item is computed the same way wherever it runs).
 *   [0]  magic ATTNRT_SPARSE_MLA_METADATA_MAGIC     [1]  layout version (1)
 *   [2]  signature, low 32 bits  [3] high 32 bits: FNV-1a 64 of the attributes, every input's
 *        presence, dtype and shape, and the values of cu_seqlens_*, seqused_* and cmp_residual_kv
 *   [4]  number of rows           [5]  heads_per_group     [6] num_head_groups
 *   [7]  num_workers (1 .. ATTNRT_SPARSE_MLA_METADATA_MAX_WORKERS)
 *   [8]  total items              [9..15] zero
 *   [16 + 2w], [17 + 2w]: the item range of worker w;   the remaining words are zero.
 * The main op checks every word: the header against its problem, the worker table against the
 * partition the metadata op makes for word[7] workers, [9..15] and the remaining words zero.
 */
#define ATTNRT_SPARSE_MLA_METADATA_MAGIC 0x414C4D53 /* "SMLA" little-endian */
#define ATTNRT_SPARSE_MLA_METADATA_VERSION 1
#define ATTNRT_SPARSE_MLA_METADATA_HEADER_WORDS 16
#define ATTNRT_SPARSE_MLA_METADATA_MAX_WORKERS 1016

/**
 * The validated problem a kernel's supports() and workspace_size() receive (shapes only).
 */
typedef struct attnrt_sparse_mla_problem {
  size_t struct_size;
  attnrt_sparse_mla_attributes attributes;
  int32_t scenario;       /* attnrt_sparse_mla_scenario */
  int64_t batch_size;     /* B */
  int64_t q_rows;         /* BSND: S1 capacity (q dim 1); TND: T1 */
  int64_t num_heads;      /* N */
  int64_t ori_rows;       /* BSND: S2 capacity; TND: T2; PA_BBND: num_blocks */
  int64_t ori_block_size; /* PA_BBND: tokens per block; else 0 */
  int64_t ori_max_blocks; /* PA_BBND: ori_block_table dim 1; else 0 */
  int64_t cmp_rows;       /* as ori_rows for cmp_kv; 0 without cmp_kv */
  int64_t cmp_block_size; /* PA_BBND with cmp_kv; else 0 */
  int64_t cmp_max_blocks; /* PA_BBND with cmp_kv; else 0 */
  int64_t topk;           /* CSA: K; else 0 */
  attnrt_dtype q_dtype;   /* also attn_out's */
  attnrt_dtype ori_dtype;
  attnrt_dtype cmp_dtype; /* {0,0,0} without cmp_kv */
  int32_t device_type;
  bool has_sinks;
  bool has_softmax_lse; /* return_softmax_lse with a non-empty softmax_lse */
} attnrt_sparse_mla_problem;

/**
 * Per-batch lengths the core resolves and checks at run (CANN's effective lengths), shared with
 * kernels. q_start/ori_start/cmp_start: first row of the batch in the q / ori / cmp tensor (TND:
 * the cu_seqlens value; BSND: b * capacity; PA_BBND kv: 0, rows go through the block table).
 */
typedef struct attnrt_sparse_mla_batch {
  int32_t s1;        /* query rows that take part */
  int32_t s2;        /* ori_kv rows */
  int32_t cmp_len;   /* C: cmp_kv rows (0 for SWA) */
  int32_t cmp_total; /* Lc = C * cmp_ratio + residual: uncompressed length of the cmp mask */
  int64_t q_start;
  int64_t q_capacity; /* rows of this batch in q: BSND S1 capacity; TND cu difference */
  int64_t ori_start;
  int64_t cmp_start;
} attnrt_sparse_mla_batch;

/**
 * What run() receives: the problem, data pointers (byte_offset applied; NULL = absent), the batch
 * lengths and the checked metadata. Every block-table entry a batch uses, every cu_seqlens value
 * and every length lies in range; cmp_sparse_indices values are >= -1 (other values are filtered
 * by the kernel as the reference says). Nothing has been written to any output.
 */
typedef struct attnrt_sparse_mla_args {
  size_t struct_size;
  const attnrt_sparse_mla_problem* problem;
  const attnrt_sparse_mla_batch* batches; /* B entries */
  const int32_t* metadata;                /* checked layout (see above) */
  const void* q;
  const uint8_t* ori_kv;
  const uint8_t* cmp_kv;
  const int32_t* cmp_sparse_indices;
  const int32_t* ori_block_table;
  const int32_t* cmp_block_table;
  const float* sinks;
  void* attn_out;
  float* softmax_lse;
  void* workspace;
  size_t workspace_size;
  void* stream;
} attnrt_sparse_mla_args;

/* ---- encoders (implemented in libattnrt) ----------------------------------------------------- */

/*
 * Every encoder validates all of its input (every token) before it writes the first output byte:
 * on an error the output is untouched. Values must be finite and must fit the stored format after
 * rounding: rope values rounding past bf16's largest finite value (3.3895e38) and TQ4 scales of
 * 65520 or more (fp16 infinity) are rejected, naming the token, dimension, value and limit; fp8
 * e4m3 codes saturate to +-448 as documented and the scales of quant_mode 1 and 2 stay finite for
 * every finite input. num_tokens whose input or output byte size overflows size_t is rejected
 * (INVALID_ARGUMENT naming num_tokens), and so is an output (out, or mode 2's whole block) that
 * shares a byte with kv: the encoders write tokens while later rows are still to be read.
 */

/**
 * Quantizes num_tokens KV rows of 512 values (nope dims 0..447, rope dims 448..511) given as
 * float32 or bfloat16 (kv_dtype) into 608-byte quant_mode-1 tokens at out (num_tokens * 608 bytes):
 * rope rounded to bf16; per group of 64 nope dims scale = bf16(amax / 448) (1 when amax is 0),
 * code = e4m3fn(x / scale) rounded to nearest even and saturated to +-448; pad bytes zero.
 * Errors: INVALID_ARGUMENT for NULL pointers, an unsupported dtype, non-finite values, rope values
 * that overflow bf16, or a num_tokens whose byte sizes overflow size_t.
 */
ATTNRT_API attnrt_status attnrt_sparse_mla_encode_mode1(const void* kv, attnrt_dtype kv_dtype,
                                                        size_t num_tokens, uint8_t* out);

/**
 * Quantizes one KV row (as above) into slot `slot` of a quant_mode-2 block of block_size tokens
 * starting at `block` (block_size * 584 bytes): features at slot * 576, scales at
 * block_size * 576 + slot * 8. Scale = 2^ceil(log2(max(amax / 448, 1e-4))) stored as e8m0
 * (DeepSeek FlashMLA's quantizer); code = e4m3fn(x / scale); pad byte zero.
 * Errors: INVALID_ARGUMENT for NULL pointers, block_size outside 1..1024, slot outside
 * [0, block_size), an unsupported dtype, non-finite values or rope values that overflow bf16.
 */
ATTNRT_API attnrt_status attnrt_sparse_mla_encode_mode2(const void* kv, attnrt_dtype kv_dtype,
                                                        uint8_t* block, int64_t block_size,
                                                        int64_t slot);

/**
 * Quantizes num_tokens KV rows (as above, already rotated by the caller) into 258-byte TQ4 tokens
 * (vllm-ascend's TQ4 quantizer): unit = x / sqrt(|x|^2 + 1e-16); code n_d = number of codebook
 * midpoints <= unit_d; scale = |x| / sqrt(sum_d codebook[n_d]^2) as fp16 (0 for a zero row).
 * Errors: INVALID_ARGUMENT for NULL pointers, an unsupported dtype, non-finite values, a scale that
 * overflows fp16 (65520 or more), or a num_tokens whose byte sizes overflow size_t.
 */
ATTNRT_API attnrt_status attnrt_sparse_mla_encode_tq4(const void* kv, attnrt_dtype kv_dtype,
                                                      size_t num_tokens, uint8_t* out);

/** The 16 TQ4 codebook values (vllm-ascend's TurboQuant), ascending; index = nibble value. */
ATTNRT_API const float* attnrt_sparse_mla_tq4_codebook(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_OPS_SPARSE_MLA_H_ */
