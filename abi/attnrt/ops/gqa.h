/*
 * attnrt/ops/gqa.h — GroupQueryAttention: attributes, input/output positions, and the validated
 * problem and run arguments a kernel receives.
 *
 * Semantics: ONNX Runtime's com.microsoft.GroupQueryAttention (onnxruntime 1.30, CPU execution
 * provider), exactly: ONNX Runtime's GroupQueryAttention operator documentation (schema, CUDA
 * backends) and its CPU implementation notes (quantized KV cache, flash paths).
 * Notation: B batch_size, S sequence_length (new query tokens), L kv_sequence_length, N num_heads,
 * Nkv kv_num_heads, H head_size, P past buffer length, T total_sequence_length,
 * T_b = seqlens_k[b] + 1.
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and attnrt.h.
 */
#ifndef ATTNRT_OPS_GQA_H_
#define ATTNRT_OPS_GQA_H_

#include "attnrt/attnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Input positions (ONNX Runtime's). Absent optional inputs are NULL. */
typedef enum attnrt_gqa_input {
  ATTNRT_GQA_INPUT_QUERY = 0,      /* T (B,S,N*H), or packed QKV (B,S,(N+2*Nkv)*H) */
  ATTNRT_GQA_INPUT_KEY = 1,        /* T (B,L,Nkv*H); NULL => packed QKV */
  ATTNRT_GQA_INPUT_VALUE = 2,      /* T (B,L,Nkv*H); NULL iff key NULL */
  ATTNRT_GQA_INPUT_PAST_KEY = 3,   /* T_CACHE BNSH (B,Nkv,P,H); uint8 rows: H/2 bytes for int4, H/32
                                       blocks of 34 (Q8_0) or 18 (Q4_0) bytes for PER_BLOCK_32 */
  ATTNRT_GQA_INPUT_PAST_VALUE = 4, /* as past_key */
  ATTNRT_GQA_INPUT_SEQLENS_K = 5,  /* int32 (B) on the host: total length - 1 per batch; required */
  ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH = 6, /* int32, one element, on the host; required */
  ATTNRT_GQA_INPUT_COS_CACHE = 7,             /* T (M, R/2) */
  ATTNRT_GQA_INPUT_SIN_CACHE = 8,             /* T (M, R/2) */
  ATTNRT_GQA_INPUT_POSITION_IDS = 9,          /* int64 (B, >=S) */
  ATTNRT_GQA_INPUT_ATTENTION_BIAS = 10,       /* T (B|1, N|1, S, T) additive */
  ATTNRT_GQA_INPUT_HEAD_SINK = 11,            /* T (N) */
  ATTNRT_GQA_INPUT_K_SCALE = 12,       /* float32, 1 (PER_TENSOR) or Nkv*H (PER_CHANNEL) elements;
                                          absent for PER_BLOCK_32 (the scales are in the blocks) */
  ATTNRT_GQA_INPUT_V_SCALE = 13,       /* float32, as k_scale */
  ATTNRT_GQA_INPUT_Q_NORM_WEIGHT = 14, /* T (H); rejected on CPU, as by the reference */
  ATTNRT_GQA_INPUT_K_NORM_WEIGHT = 15, /* T (H); rejected on CPU, as by the reference */
  ATTNRT_GQA_NUM_INPUTS = 16
} attnrt_gqa_input;

/** Output positions (ONNX Runtime's). */
typedef enum attnrt_gqa_output {
  ATTNRT_GQA_OUTPUT_OUTPUT = 0,        /* T (B,S,N*H); head n at columns [n*H,(n+1)*H) */
  ATTNRT_GQA_OUTPUT_PRESENT_KEY = 1,   /* T_CACHE (B,Nkv,max(T,P),H); may be past_key's memory */
  ATTNRT_GQA_OUTPUT_PRESENT_VALUE = 2, /* as present_key */
  ATTNRT_GQA_OUTPUT_OUTPUT_QK = 3,     /* T (B,N,S,T); only with qk_output != 0 */
  ATTNRT_GQA_NUM_OUTPUTS = 4
} attnrt_gqa_output;

/** k_quant_type / v_quant_type ("NONE", "PER_TENSOR", "PER_CHANNEL" in ONNX Runtime; PER_BLOCK_32
 *  is ggml's block quantization, ABI 1.7). */
typedef enum attnrt_gqa_quant_type {
  ATTNRT_GQA_QUANT_NONE = 0,
  ATTNRT_GQA_QUANT_PER_TENSOR = 1,
  ATTNRT_GQA_QUANT_PER_CHANNEL = 2,
  /* ABI 1.7. ggml's Q8_0 (kv_cache_bit_width 8) and Q4_0 (kv_cache_bit_width 4) KV blocks: each run
   * of 32 elements of a cache row is one block holding its own float16 scale d (little-endian) in
   * its first two bytes, so k_scale/v_scale must be absent, head_size a multiple of 32, and the
   * cache uint8 with head_size / 32 * block bytes in its last dimension:
   *   Q8_0, 34 bytes: d, then int8 q[32];                         element j = q[j] * d
   *   Q4_0, 18 bytes: d, then uint8 b[16]; element j < 16 = ((b[j] & 0xF) - 8) * d,
   *                                        element j + 16 = ((b[j] >> 4) - 8) * d
   * (the product in float32, as ggml's dequantize_row_q8_0 / dequantize_row_q4_0 compute it).
   * New K/V rows are quantized as ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref:
   *   Q8_0: a = max |x_j|, d = a / 127, q[j] = roundf(x_j / d) (0 when d is 0; half away from 0);
   *   Q4_0: m = the x_j of largest |x_j| (the first one on a tie), d = m / -8,
   *         code = min(15, (int)(x_j / d + 8.5f)) (8 when d is 0);
   * x_j / d computed as x_j * (1 / d) in float32, d stored rounded to float16. A code is clamped
   * to [-127, 127] (Q8_0) or [0, 15] (Q4_0) where a non-finite x would leave the range. */
  ATTNRT_GQA_QUANT_PER_BLOCK_32 = 3
} attnrt_gqa_quant_type;

/** Elements per block and bytes per block of ATTNRT_GQA_QUANT_PER_BLOCK_32 (ABI 1.7). */
#define ATTNRT_GQA_QUANT_BLOCK_ELEMENTS 32
#define ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES 34
#define ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES 18

/** qk_output values. */
typedef enum attnrt_gqa_qk_output {
  ATTNRT_GQA_QK_OUTPUT_NONE = 0,
  ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX = 1, /* scores after scale, softcap and bias */
  ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX = 2   /* probabilities */
} attnrt_gqa_qk_output;

/**
 * Every attribute of com.microsoft.GroupQueryAttention, with the reference's defaults (set them
 * with attnrt_gqa_attributes_init). Validated by attnrt_op_create in the reference's order.
 */
typedef struct attnrt_gqa_attributes {
  size_t struct_size;
  int32_t num_heads;    /* N > 0; required */
  int32_t kv_num_heads; /* Nkv > 0, N % Nkv == 0; required */
  int32_t causal;       /* 1 (default) causal, 0 bidirectional (then local_window_size == -1) */
  float scale;          /* 0 (default) => 1/sqrt(H); any other value used as given */
  float softcap;        /* applied as softcap*tanh(x/softcap) only when > 0; default 0 */
  int32_t local_window_size; /* W >= 0: each query sees the W keys ending at itself; < 0 off (-1) */
  int32_t sliding_window_cache; /* 1: window-sized ring cache (needs local_window_size > 0); default
                                   0 */
  int32_t do_rotary;            /* 1: RoPE on Q and new K from cos_cache/sin_cache; default 0 */
  int32_t rotary_interleaved;   /* 1: interleaved pairs (2i,2i+1); 0: half-split; default 0 */
  int32_t smooth_softmax;       /* 1: softmax with an extra zero logit (or head_sink); default -1 */
  int32_t qk_output;            /* attnrt_gqa_qk_output; default 0 */
  int32_t k_quant_type;         /* attnrt_gqa_quant_type; default NONE */
  int32_t v_quant_type;         /* attnrt_gqa_quant_type; default NONE */
  int32_t kv_cache_bit_width; /* 0 when not quantized; 4 or 8 when quantized (PER_BLOCK_32: 8 Q8_0,
                                 4 Q4_0); default 0 */
  float qk_norm_epsilon;      /* epsilon of q/k RMS norm (CUDA only in the reference); 1e-6 */
} attnrt_gqa_attributes;
/** ATTNRT_STRUCT_SIZE of attnrt_gqa_attributes (ABI 1.13). */
#define ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_gqa_attributes, qk_norm_epsilon)

/** Fills struct_size and the reference defaults; num_heads and kv_num_heads are set to 0. */
static inline void attnrt_gqa_attributes_init(attnrt_gqa_attributes* a) {
  a->struct_size = ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE;
  a->num_heads = 0;
  a->kv_num_heads = 0;
  a->causal = 1;
  a->scale = 0.0f;
  a->softcap = 0.0f;
  a->local_window_size = -1;
  a->sliding_window_cache = 0;
  a->do_rotary = 0;
  a->rotary_interleaved = 0;
  a->smooth_softmax = -1;
  a->qk_output = 0;
  a->k_quant_type = ATTNRT_GQA_QUANT_NONE;
  a->v_quant_type = ATTNRT_GQA_QUANT_NONE;
  a->kv_cache_bit_width = 0;
  a->qk_norm_epsilon = 1e-6f;
}

/**
 * The validated problem a kernel's supports() and workspace_size() receive: shapes only, never
 * data. Built by the core after full validation, so every field is consistent.
 */
typedef struct attnrt_gqa_problem {
  size_t struct_size;
  attnrt_gqa_attributes attributes;
  int64_t batch_size;              /* B */
  int64_t sequence_length;         /* S */
  int64_t kv_sequence_length;      /* L: new K/V rows; 0 = shared KV (past supplies every row) */
  int64_t num_heads;               /* N */
  int64_t kv_num_heads;            /* Nkv */
  int64_t head_size;               /* H */
  int64_t past_sequence_length;    /* P: past buffer rows (0 when there is no past) */
  int64_t present_sequence_length; /* present buffer rows (0 when there is no present output) */
  attnrt_dtype query_dtype;        /* T */
  attnrt_dtype cache_dtype;        /* T_CACHE: of past_key, else present_key, else T */
  int32_t device_type;             /* attnrt_device_type of the tensors */
  bool packed_qkv;
  bool has_past;
  bool has_present;
  bool has_rotary_cache;       /* cos_cache and sin_cache given */
  int64_t rotary_cache_length; /* M = cos_cache.shape[0] */
  int64_t rotary_dim;          /* R = 2 * cos_cache.shape[1] */
  bool has_position_ids;
  int64_t position_ids_length; /* position_ids.shape[1] */
  bool has_attention_bias;
  bool attention_bias_broadcast_batch; /* attention_bias.shape[0] == 1 */
  bool attention_bias_broadcast_heads; /* attention_bias.shape[1] == 1 */
  int64_t attention_bias_total_length; /* attention_bias.shape[3] */
  bool has_head_sink;
  int64_t k_scale_count; /* 0 when absent */
  int64_t v_scale_count;
  bool has_output_qk;
} attnrt_gqa_problem;
/** ATTNRT_STRUCT_SIZE of attnrt_gqa_problem (ABI 1.13). */
#define ATTNRT_GQA_PROBLEM_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_gqa_problem, has_output_qk)

/** Phase of one run, from S, T and the past (ONNX Runtime's phases). */
typedef enum attnrt_gqa_phase {
  ATTNRT_GQA_PHASE_FIRST_PROMPT = 0,      /* S == T: past content ignored, new rows at [0, L) */
  ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT = 1, /* B == 1, S > 1, S != T: chunked prefill */
  ATTNRT_GQA_PHASE_DECODE = 2             /* S == 1, T > 1 */
} attnrt_gqa_phase;

/**
 * What a kernel's run() receives: the problem it was planned for, resolved data pointers
 * (byte_offset applied; NULL = absent) and run-time values, all validated by the core before the
 * call. Every seqlens_k[b] lies in [0, present or past length), every position in range.
 */
typedef struct attnrt_gqa_args {
  size_t struct_size;
  const attnrt_gqa_problem* problem;
  int32_t total_sequence_length; /* T */
  int32_t phase;                 /* attnrt_gqa_phase */
  bool present_shares_past;      /* present_key/value are the same memory as past_key/value */
  const void* query;
  const void* key;
  const void* value;
  const void* past_key;
  const void* past_value;
  const int32_t* seqlens_k;
  const void* cos_cache;
  const void* sin_cache;
  const int64_t* position_ids;
  const void* attention_bias;
  const void* head_sink;
  const float* k_scale;
  const float* v_scale;
  void* output;
  void* present_key;
  void* present_value;
  void* output_qk;
  void* workspace;
  size_t workspace_size;
  void* stream;
} attnrt_gqa_args;
/** ATTNRT_STRUCT_SIZE of attnrt_gqa_args (ABI 1.13). */
#define ATTNRT_GQA_ARGS_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_gqa_args, stream)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_OPS_GQA_H_ */
