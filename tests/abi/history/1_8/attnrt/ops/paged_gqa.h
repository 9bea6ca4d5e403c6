/*
 * attnrt/ops/paged_gqa.h — GroupQueryAttention over a paged KV cache (llama.cpp PR 18747,
 * CPU paged attention; the PagedAttention paper, Kwon et al. 2023, vLLM; docs/paged-gqa.md).
 *
 * The math is GroupQueryAttention's (attnrt/ops/gqa.h, ONNX Runtime's com.microsoft.
 * GroupQueryAttention): every attribute, phase rule, mask, window, rotary and quantization rule is
 * the same. Only the KV cache differs: instead of past_key/past_value (B, Nkv, P, H) and the
 * present outputs, K and V live in two block pools of `num_blocks` fixed-size blocks
 *
 *   key_cache, value_cache: T_CACHE [num_blocks, block_size, Nkv, H] (kv_layout BSNH, default)
 *                           or T_CACHE [num_blocks, Nkv, block_size, H] (kv_layout BNSH)
 *   (uint8 with H/2 in the last dimension for a 4-bit cache, two int4 values per byte)
 *
 * Either pool may be a strided view (element strides per dimension, as DLPack gives them; ABI 1.2):
 * the head_size dimension must be contiguous (stride 1) and every other stride at least 0, and the
 * two pools may be views of one allocation provided no element of one is an element of the other,
 * nor of an output or another input. That is checked element by element, not by address range, so
 * the K and V halves of one cache tensor are accepted without a copy (a call that writes no rows,
 * key and value of kv_sequence_length 0 or absent in the varlen op, may even read both pools from
 * shared elements, ABI 1.8: MLA's V rows as the leading v_head_size elements of its K rows, as
 * ggml lays them out), for example
 *   vLLM's CPU cache kv [num_blocks, Nkv, block_size, 2 * H]:
 *       key_cache = kv[..., :H], value_cache = kv[..., H:]             (kv_layout BNSH)
 *   vLLM's / FlashAttention's kv [2, num_blocks, block_size, Nkv, H]:
 *       key_cache = kv[0], value_cache = kv[1]                         (kv_layout BSNH)
 *   FlashInfer's pages [num_blocks, 2, block_size, Nkv, H] (NHD) or [num_blocks, 2, Nkv,
 *   block_size, H] (HND): key_cache = pages[:, 0], value_cache = pages[:, 1] (BSNH, BNSH).
 * A view that overlaps itself (two elements sharing memory) is rejected: the run writes the pools.
 *
 * and `block_table` int32 [B, max_blocks_per_seq] maps logical block i of batch b (its tokens
 * [i*block_size, (i+1)*block_size)) to a physical block; -1 marks an unallocated slot. The row of
 * a token in a pool is given with attnrt_paged_kv_layout below.
 *
 * A run appends this step's new K/V rows (RoPE on K, quantized for a quantized cache) into the
 * blocks the table names, in place in the pools, then attends over tokens [0, T_b) of each batch
 * read through the table. Rows of a first prompt's right padding (tokens >= T_b) are not stored.
 * The pools are inputs that the run writes: only the rows of this step's new tokens change.
 *
 * Checked at run before anything is written (INVALID_ARGUMENT naming the input):
 * total_sequence_length T <= max_blocks_per_seq * block_size (the table's token capacity plays
 * the part of GroupQueryAttention's present length, which T may not exceed; a right-padded first
 * prompt has T = S, so its table must hold S tokens although the padding is not stored), every
 * seqlens_k[b] fits the table (ceil(T_b / block_size) <= max_blocks_per_seq), every slot a batch
 * needs holds a block id in [0, num_blocks) (not -1), a block this step writes rows into is
 * named by no other needed slot of the table, of its own batch or another (give each sequence its
 * own copy: attnrt_block_pool_append's copy-on-write), and no output overlaps a pool, nor a pool
 * another input. The slots batch b needs are [0, ceil(T_b / block_size)); this step writes into
 * the blocks holding its new tokens (none when key/value have kv_sequence_length 0, a shared KV).
 * Blocks that are only read may be named by any number of slots (forked sequences share them),
 * and slots past a batch's needed ones are neither read nor written, so any value there is
 * accepted. The table is read from host memory.
 *
 * Outputs equal those of GroupQueryAttention over a contiguous cache holding the same tokens,
 * bitwise for the same kernel algorithm making the same tasks (cpu_x86: paged_gqa.naive vs
 * gqa.naive always; paged_gqa.flash vs gqa.flash for prompts, and for decodes run on one thread or
 * without split-KV). A cpu_x86 paged_gqa.flash decode over BSNH blocks (or BNSH blocks whose
 * per-kv-head runs are under 64 KiB) takes a sequence with all its kv heads per task and splits the
 * key range across threads when the sequences are fewer than the threads, where gqa.flash splits
 * only when batch x kv_num_heads is below the thread count; the results then differ by the
 * float32 rounding of the split (a few ulp).
 *
 * Probability precision (p_precision, ABI 1.5; docs/gqa-semantics.md, "Probability precision"):
 * EXACT (default) keeps every softmax probability p = exp(s - m) in float32 when it multiplies V.
 * INPUT rounds each p to the query type T (to nearest even) before it multiplies V, as
 * FlashAttention, FlashInfer and vLLM's AMX CPU kernel do; the running sum l adds the unrounded
 * float32 p (as FlashAttention-2 does), m is the running maximum of the scores the kernel has seen
 * (the row maximum once the key holding it has been read; with head_sink, the sink logit where it
 * is larger), and everything else is as EXACT.
 * For T = float32 INPUT is EXACT, bit for bit; with a quantized cache T is still the query type.
 * Per output element, |INPUT - exact attention| <= (u_T + u_T) * max_j |v_j| + (float32
 * accumulation), u_T the unit roundoff of T (2^-8 bfloat16, 2^-11 float16; a float16 p below
 * 2^-14 adds at most 2^-25 |v_j| / l each).
 *
 * Value head size (ABI 1.8): V rows may be narrower or wider than Q/K rows, as in FlashAttention
 * (which takes it from v's shape) and ggml's flash_attn_ext (MLA-style models: key 192 / value 128,
 * key 96 / value 64). The value head size Hv is value_cache's last dimension: Hv elements, the
 * bytes of Hv elements for a quantized cache (Hv/2 for int4, Hv/32 blocks for PER_BLOCK_32); the
 * key head size H (head_size) is the query's and key_cache's. Then value is (B, L, Nkv*Hv), output
 * (B, S, N*Hv), a per-channel v_scale Nkv*Hv values; value_cache has key_cache's shape but for its
 * last dimension. Hv follows H's rules (a multiple of 8; of 32 for PER_BLOCK_32); packed QKV (key
 * and value absent) needs Hv == H. scale = 0 means 1/sqrt(H). Kernels that serve Hv != H say so
 * in supports(); cpu_x86/cpu_arm: the naive (row pipeline) kernels.
 *
 * Not supported with a paged cache: sliding_window_cache=1 (a ring cache; a pool frees blocks
 * instead), rejected at op creation.
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and the attnrt headers.
 */
#ifndef ATTNRT_OPS_PAGED_GQA_H_
#define ATTNRT_OPS_PAGED_GQA_H_

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Input positions: GroupQueryAttention's, with key_cache/value_cache in place of past_key/
 *  past_value and block_table appended. Absent optional inputs are NULL. */
typedef enum attnrt_paged_gqa_input {
  ATTNRT_PAGED_GQA_INPUT_QUERY = 0,       /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_KEY = 1,         /* as GQA; NULL => packed QKV */
  ATTNRT_PAGED_GQA_INPUT_VALUE = 2,       /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_KEY_CACHE = 3,   /* T_CACHE block pool (see kv_layout); written */
  ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE = 4, /* as key_cache; written */
  ATTNRT_PAGED_GQA_INPUT_SEQLENS_K = 5,   /* int32 (B) on the host: T_b - 1; required */
  ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH = 6, /* int32, one element, on the host; required */
  ATTNRT_PAGED_GQA_INPUT_COS_CACHE = 7,             /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_SIN_CACHE = 8,             /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_POSITION_IDS = 9,          /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS = 10,       /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_HEAD_SINK = 11,            /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_K_SCALE = 12,              /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_V_SCALE = 13,              /* as GQA */
  ATTNRT_PAGED_GQA_INPUT_Q_NORM_WEIGHT = 14,        /* as GQA (rejected on CPU) */
  ATTNRT_PAGED_GQA_INPUT_K_NORM_WEIGHT = 15,        /* as GQA (rejected on CPU) */
  ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE = 16, /* int32 [B, max_blocks_per_seq] on the host; required */
  ATTNRT_PAGED_GQA_NUM_INPUTS = 17
} attnrt_paged_gqa_input;

/** Output positions. The new K/V rows go into the pools (inputs 3 and 4), in place. */
typedef enum attnrt_paged_gqa_output {
  ATTNRT_PAGED_GQA_OUTPUT_OUTPUT = 0,    /* T (B,S,N*H), as GQA */
  ATTNRT_PAGED_GQA_OUTPUT_OUTPUT_QK = 1, /* T (B,N,S,T), as GQA; only with qk_output != 0 */
  ATTNRT_PAGED_GQA_NUM_OUTPUTS = 2
} attnrt_paged_gqa_output;

/**
 * Layout of a block in key_cache/value_cache (kv_layout attribute). Token j of batch b, kv head h,
 * with x = block_table[b][j / block_size] and r = j % block_size, is row
 *   BSNH: (x * block_size + r) * Nkv + h   pools [num_blocks, block_size, Nkv, H] (default; vLLM's
 *                                           and FlashAttention's paged layout)
 *   BNSH: (x * Nkv + h) * block_size + r   pools [num_blocks, Nkv, block_size, H] (a kv head's rows
 *                                           of a block are contiguous; measured faster on CPUs, see
 *                                           README "Paged KV cache")
 */
typedef enum attnrt_paged_kv_layout {
  ATTNRT_PAGED_KV_LAYOUT_BSNH = 0,
  ATTNRT_PAGED_KV_LAYOUT_BNSH = 1
} attnrt_paged_kv_layout;

/** Precision of the softmax probabilities P when they multiply V (p_precision attribute, ABI 1.5;
 *  see above). */
typedef enum attnrt_p_precision {
  ATTNRT_P_PRECISION_EXACT = 0, /* P stays float32 (default) */
  ATTNRT_P_PRECISION_INPUT = 1  /* P rounded to the query type T before P·V */
} attnrt_p_precision;

/** Smallest and largest block_size (tokens per block). */
#define ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE 1
#define ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE 1024

/** Attributes: every GroupQueryAttention attribute plus the block size. */
typedef struct attnrt_paged_gqa_attributes {
  size_t struct_size;
  attnrt_gqa_attributes gqa; /* sliding_window_cache must be 0 */
  int32_t block_size;        /* tokens per block, in [1, 1024] */
  int32_t kv_layout;         /* attnrt_paged_kv_layout; default BSNH */
  /* ABI 1.5: attnrt_p_precision; default EXACT. A caller whose struct_size ends before this field
   * (built against ABI 1.2-1.4) gets EXACT. */
  int32_t p_precision;
} attnrt_paged_gqa_attributes;

/** Fills struct_size, the GQA defaults (attnrt_gqa_attributes_init), block_size = 0,
 *  kv_layout = BSNH and p_precision = EXACT. */
static inline void attnrt_paged_gqa_attributes_init(attnrt_paged_gqa_attributes* a) {
  a->struct_size = sizeof(attnrt_paged_gqa_attributes);
  attnrt_gqa_attributes_init(&a->gqa);
  a->block_size = 0;
  a->kv_layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  a->p_precision = ATTNRT_P_PRECISION_EXACT;
}

/**
 * The validated problem kernels receive. `gqa` describes the same call as a GroupQueryAttention
 * whose past_key/past_value and present_key/present_value are one shared buffer of
 * max_blocks_per_seq * block_size rows per (b, kv head): has_past = has_present = true,
 * past_sequence_length = present_sequence_length = max_blocks_per_seq * block_size, cache_dtype
 * the pools' dtype, has_output_qk as given.
 */
typedef struct attnrt_paged_gqa_problem {
  size_t struct_size;
  attnrt_gqa_problem gqa;
  int64_t num_blocks;         /* key_cache.shape[0] */
  int64_t block_size;         /* key_cache.shape[1] */
  int64_t max_blocks_per_seq; /* block_table.shape[1] */
  int32_t kv_layout;          /* attnrt_paged_kv_layout */
  /* ABI 1.2: element strides of key_cache and value_cache, one per dimension of the shape as given
   * (kv_layout's order); the compact row-major strides when the tensor has none. The last is 1.
   * A kernel of an older plugin does not see these fields: the runtime offers it only problems
   * whose pools are compact. */
  int64_t key_cache_strides[4];
  int64_t value_cache_strides[4];
  /* ABI 1.5: attnrt_p_precision, as the attribute. A kernel of an older plugin does not see this
   * field: the runtime offers it only EXACT problems (paged varlen ones in the ABI 1.4 layout,
   * which this field changed: attnrt/ops/paged_gqa_varlen.h). A kernel that cannot round P as
   * INPUT says so in supports(). */
  int32_t p_precision;
  /* ABI 1.8: the value head size Hv (see above); gqa.head_size when V rows are as wide as K rows.
   * A kernel of an older plugin does not see this field: the runtime offers it only problems with
   * Hv == head_size (paged varlen ones in the ABI 1.5-1.7 layout, which this field changed). */
  int64_t v_head_size;
} attnrt_paged_gqa_problem;

/**
 * What a kernel's run() receives. `gqa` holds the resolved GroupQueryAttention arguments
 * (gqa.problem = &problem->gqa; past_key, past_value, present_key and present_value are NULL,
 * present_shares_past is true); every block id a batch needs was checked to lie in
 * [0, num_blocks).
 */
typedef struct attnrt_paged_gqa_args {
  size_t struct_size;
  const attnrt_paged_gqa_problem* problem;
  attnrt_gqa_args gqa;
  void* key_cache;
  void* value_cache;
  const int32_t* block_table;
} attnrt_paged_gqa_args;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_OPS_PAGED_GQA_H_ */
