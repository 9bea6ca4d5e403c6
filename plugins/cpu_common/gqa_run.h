// Shared, ISA-independent part of the CPU GroupQueryAttention kernels: the resolved view of one
// run, the driver (workspace layout, KV append, threading) and rotary embedding. Semantics:
// ONNX Runtime 1.30's com.microsoft.GroupQueryAttention, CPU EP (docs/gqa-semantics.md).
//
// Included by the ISA files, so it declares only plain structs and out-of-line functions: an inline
// function here would be compiled once per ISA and the linker could keep the AVX2 copy for
// everyone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

namespace attnrt::cpu {

// T: the element type of query, key, value, cos/sin caches, attention_bias, head_sink, output and
// output_qk.
enum class GqaFloatType : uint8_t { kFloat32, kFloat16, kBFloat16 };

// T_CACHE: the element type of past/present K and V. The float types equal T (a paged value cache
// of a type of its own may be any of them, ABI 1.9); int4 is stored as
// uint8, two elements per byte (element 2i in the low nibble, +8 biased). kBlockQ8_0/kBlockQ4_0:
// ggml's Q8_0/Q4_0 blocks of 32 elements with an inline float16 scale
// (ATTNRT_GQA_QUANT_PER_BLOCK_32, attnrt/ops/gqa.h; gqa_quant.h).
enum class GqaCacheType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt8,
  kInt4,
  kFloat8E4M3Fn,
  kFloat8E5M2,
  kBlockQ8_0,
  kBlockQ4_0
};

// Whether the cache type is ggml's Q8_0/Q4_0 blocks (their scales inline; GqaRun's k_scale NULL).
constexpr bool IsBlockCache(GqaCacheType type) {
  return type == GqaCacheType::kBlockQ8_0 || type == GqaCacheType::kBlockQ4_0;
}

// Whether the cache type is the float type T itself (rows copied, not converted, when appended).
constexpr bool IsCacheTypeOf(GqaCacheType cache, GqaFloatType t) {
  return (cache == GqaCacheType::kFloat32 && t == GqaFloatType::kFloat32) ||
         (cache == GqaCacheType::kFloat16 && t == GqaFloatType::kFloat16) ||
         (cache == GqaCacheType::kBFloat16 && t == GqaFloatType::kBFloat16);
}

// One K or V cache row as attention reads it: `data` at element 0 of the row; for quantized types
// the float32 scales of its kv head (scale[0] per tensor, scale[i] for element i per channel),
// NULL for the block types (their scales are in the row).
struct GqaCacheRow {
  const void* data;
  GqaCacheType type;
  const float* scale;  // NULL for float types
  bool per_channel;
};

// sliding_window_cache=1 (ONNX Runtime's PlanWindowedKvCache; docs/gqa-semantics.md): the row
// geometry of one step for one batch. Attention reads `seed_rows` resident rows starting at past
// row `seed_offset`, then this step's rows; with staging, rows [write_offset, write_offset +
// write_rows) of the staging cache are written back to present rows [0, write_rows).
struct GqaWindowStep {
  int64_t seed_offset;
  int64_t seed_rows;
  int64_t write_offset;
  int64_t write_rows;
};

// Byte strides of a paged block pool (attnrt/ops/paged_gqa.h, strided pools): row o of kv head kvh
// in block x starts at pool + x * block + o * token + kvh * head.
struct GqaPoolStrides {
  size_t block;
  size_t token;
  size_t head;
};

// One run with every pointer resolved and every flag decoded. All tensors are compact; element
// types as GqaRun::type and GqaRun::cache_type say.
struct GqaRun {
  int64_t batch;             // B
  int64_t seq;               // S, new query tokens
  int64_t kv_seq;            // L, new K/V tokens (0: shared KV, the past supplies every row)
  int64_t heads;             // N
  int64_t kv_heads;          // Nkv
  int64_t group;             // N / Nkv: query heads [g*kvh, g*(kvh+1)) read kv head kvh
  int64_t head_size;         // H
  int64_t total_length;      // T, length of an output_qk row
  const int32_t* seqlens_k;  // (B): T_b - 1
  // P_b = T_b - S (rows from the past, causal offset) when true, else 0: in the first prompt, and
  // without a past buffer (ONNX Runtime's phase rules: such a subsequent prompt has offset 0).
  bool past_from_seqlens;
  bool first_prompt;
  // RoPE positions (ONNX Runtime's rotary rule) follow the absolute seqlens_k input and the phase,
  // also with sliding_window_cache=1, where seqlens_k above is cache-relative and first_prompt
  // false.
  const int32_t* rotary_seqlens_k;
  bool rotary_first_prompt;

  GqaFloatType type;       // T
  size_t element_bytes;    // of T
  const void* query;       // T (B, S, q_token_stride): head n at element column n*H
  int64_t q_token_stride;  // N*H, or (N+2*Nkv)*H for packed QKV
  // T: row (b, l) at element (b*L + l)*new_kv_token_stride, head kvh at +kvh*H (new_value:
  // new_value_token_stride and +kvh*Hv).
  const void* new_key;
  const void* new_value;
  int64_t new_kv_token_stride;     // Nkv*H, or (N+2*Nkv)*H for packed QKV
  int64_t new_value_token_stride;  // Nkv*Hv, or new_kv_token_stride for packed QKV (Hv = H)
  const void* past_key;            // T_CACHE (B, Nkv, P, cache_row_bytes) or NULL
  const void* past_value;
  int64_t past_length;  // P

  GqaCacheType cache_type;  // T_CACHE (of the key cache, and of the value cache unless below)
  // The value cache's type: cache_type, unless the paged staging gives value_cache a type of its
  // own (independent K/V cache types, attnrt/ops/paged_gqa.h, ABI 1.9; the row pipeline reads it).
  GqaCacheType value_cache_type;
  size_t cache_row_bytes;  // bytes of one cache row of H elements (H/2 for int4)
  // The paged ops' value head size Hv (attnrt/ops/paged_gqa.h, ABI 1.8): value rows, output rows
  // and a per-channel v_scale have Hv elements (head_size everywhere else). Hv = H unless the
  // paged staging says otherwise (the row pipeline and the flash driver read it).
  int64_t v_head_size;
  size_t value_cache_row_bytes;  // bytes of one value cache row of Hv elements
  const float* k_scale;          // quantized caches: float32, 1 or Nkv*H values; else NULL
  const float* v_scale;
  bool scale_per_channel;  // Nkv*H scales: kv head h uses [h*H, (h+1)*H) (v_scale: Nkv*Hv)

  // K/V rows attention reads: the present outputs, or workspace staging when a present is absent.
  // Layout (B, Nkv, rows, cache_row_bytes).
  void* key_cache;
  void* value_cache;
  int64_t key_cache_rows;
  int64_t value_cache_rows;
  bool key_cache_holds_past;  // present_key is past_key's memory: rows before P_b are already there
  bool value_cache_holds_past;

  bool rotary;
  bool rotary_interleaved;
  const void* cos_cache;  // T (M, rotary_half)
  const void* sin_cache;
  int64_t rotary_half;          // R/2
  const int64_t* position_ids;  // (B, position_ids_stride) or NULL
  int64_t position_ids_stride;

  float scale;    // alpha: the attribute, or 1/sqrt(H) when it is 0
  float softcap;  // applied when > 0
  bool causal;
  int64_t window;  // local_window_size W; < 0 off
  // The varlen op with causal = 0 (ABI 1.10): keys after the row's position it sees; < 0: all. With
  // it (or window >= 0) a non-causal row at position p sees [p - (W - 1), p + window_right].
  int64_t window_right;
  const void* attention_bias;  // T (B|1, N|1, S, bias_row_length) or NULL
  bool bias_broadcast_batch;
  bool bias_broadcast_heads;
  int64_t bias_row_length;
  bool sink_softmax;      // smooth_softmax == 1 or head_sink given
  const void* head_sink;  // T (N) or NULL (then the sink logit is 0)
  int32_t qk_output;      // attnrt_gqa_qk_output
  void* output_qk;        // T (B, N, S, T) or NULL
  void* output;           // T (B, S, N*Hv)

  // sliding_window_cache=1: key_cache/value_cache are the present outputs (compacted in place) or,
  // when window_staging, a staging cache of key_cache_rows rows; seqlens_k is cache-relative, the
  // resident rows are already in place (key_cache_holds_past), and GqaWindowFinish writes the
  // surviving rows back into present (window_capacity rows per head).
  bool windowed;
  bool window_staging;
  int64_t window_capacity;
  const GqaWindowStep* window_steps;  // (B)
  void* present_key;
  void* present_value;
  bool present_shares_past;

  // Per-slot scratch: a score row of max T_b floats at offset 0, the float32 query row (H floats)
  // at scratch_query_offset floats, the float32 output accumulator (Hv floats) at
  // scratch_output_offset floats.
  int64_t scratch_query_offset;
  int64_t scratch_output_offset;

  // Paged K/V (attnrt/ops/paged_gqa.h), read by the paged row pipelines (AttendRows<Ops, true>)
  // only: key_cache/value_cache are then the block pools, and token j of (b, kv head kvh), with
  // x = block_table[b * max_blocks_per_seq + j / block_size] and o = j % block_size, starts at
  // byte x * block + o * token + kvh * head of its pool (key_strides, value_strides). NULL for a
  // contiguous cache.
  const int32_t* block_table;
  int64_t max_blocks_per_seq;
  int64_t block_size;
  GqaPoolStrides key_strides;
  GqaPoolStrides value_strides;

  // Packed variable-length batches (attnrt/ops/paged_gqa_varlen.h): the query, key, value and
  // output rows of sequence b are [query_start_loc[b], query_start_loc[b + 1]), and `seq` is the
  // longest such run. NULL: a padded batch, S rows per sequence at b * S (GqaQueryRow).
  const int32_t* query_start_loc;
  // Varlen only: the new K/V rows of sequence b are [key_start_loc[b], key_start_loc[b + 1]),
  // its tokens T_b - k_len_b onwards (ABI 1.10); NULL: its query rows.
  const int32_t* key_start_loc;
  // Varlen only: the pool slot of each new K/V row, -1 for a row not written; NULL: every row.
  const int64_t* slot_mapping;
  // Varlen only (ABI 1.10): float32 ALiBi slope of each query head; NULL: none. The row pipeline
  // adds slope * (j - position) to the score of key j.
  const float* alibi_slopes;
  // Varlen only (ABI 1.12): the bias is -slope * |j - position| (alibi_form SYMMETRIC).
  bool alibi_symmetric;
  // Varlen only (ABI 1.12), with rotary: the rotary position of each query row (packed row index)
  // and of each new K/V row (key row index); NULL: the row's token position.
  const int64_t* query_positions;
  const int64_t* key_positions;
  // Varlen only (its all-decode form included): a new key row is rotated at its token position
  // unless key_positions says otherwise.
  bool varlen_key_positions;

  // The paged ops' p_precision INPUT with a 16-bit T (attnrt/ops/paged_gqa.h): each probability
  // p = exp(s - m) is rounded to T (to nearest even) before it multiplies V; the softmax sum adds
  // the unrounded p. False: P stays float32 (EXACT, and INPUT with T = float32).
  bool round_probabilities;
};

// x[0, n) = float(T(x)) in place, to nearest even (T float16 or bfloat16; nothing for float32).
void GqaRoundToType(float* x, int64_t n, GqaFloatType type) noexcept;

// Query rows of sequence b: query_start_loc[b + 1] - query_start_loc[b], or S.
int64_t GqaQueryLength(const GqaRun& run, int64_t b) noexcept;

// Row index of token s of sequence b in query, output and (when L == S) the new key/value
// tensors: query_start_loc[b] + s, or b * S + s.
int64_t GqaQueryRow(const GqaRun& run, int64_t b, int64_t s) noexcept;

// Processes attention units [unit_begin, unit_end), unit = (b*N + n)*S + s, with a private scratch
// laid out as GqaRun::scratch_query_offset and scratch_output_offset say.
using GqaAttendRowsFn = void (*)(const GqaRun& run, float* scratch, int64_t unit_begin,
                                 int64_t unit_end);

// The element types of `problem` (T and T_CACHE). False when this driver has none for them: T not
// float32/float16/bfloat16, or T_CACHE not T (not quantized), int8 or float8_e4m3fn (8-bit), uint8
// (4-bit).
bool GqaElementTypes(const attnrt_gqa_problem& problem, GqaFloatType* type,
                     GqaCacheType* cache_type) noexcept;

// Bytes of one cache row of head_size elements of `type` (head_size / 2 for int4).
size_t GqaCacheRowBytes(GqaCacheType type, int64_t head_size) noexcept;

// Workspace bytes one run of `problem` needs with host.num_threads() slots: per-slot scratch sized
// by the longest key row a planned shape allows, plus K/V staging when there is no present output.
size_t GqaWorkspaceSize(const attnrt_host_services& host,
                        const attnrt_gqa_problem& problem) noexcept;

// GqaWorkspaceSize of a paged problem whose value rows have v_head_size elements (its output
// accumulator is that wide).
size_t GqaWorkspaceSize(const attnrt_host_services& host, const attnrt_gqa_problem& problem,
                        int64_t v_head_size) noexcept;

// Workspace bytes (a multiple of 64) the sliding_window_cache=1 plan and staging caches of
// `problem` take at the 64-byte aligned start of the workspace; 0 when the attribute is 0.
size_t GqaWindowWorkspaceBytes(const attnrt_gqa_problem& problem) noexcept;

// sliding_window_cache=1: plans the step (ONNX Runtime's PlanWindowedKvCache) into `area`
// (GqaWindowWorkspaceBytes bytes, 64-byte aligned) and returns the cache-relative seqlens_k (B
// values) attention runs on.
const int32_t* GqaWindowPlan(const attnrt_gqa_args& args, void* area) noexcept;

// sliding_window_cache=1, after attention: writes the staging cache's surviving rows back into
// present and, unless present is past's memory, zeroes the present rows after the resident ones.
void GqaWindowFinish(const attnrt_host_services& host, const GqaRun& run) noexcept;

// Runs GroupQueryAttention: appends the new K/V rows (RoPE on K, quantized for a quantized cache;
// past rows copied verbatim), then calls `attend` on the host's pool. Returns ATTNRT_OK, or
// ATTNRT_ERROR_INVALID_ARGUMENT with a message when args.workspace is too small for this run's
// seqlens_k.
int32_t RunGqa(const attnrt_host_services& host, const attnrt_gqa_args& args,
               GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept;

// Stages a run whose K/V caches are not GroupQueryAttention's past/present buffers: appends this
// step's new rows wherever the kernel keeps them (the paged kernels: the block pools) and returns
// the resolved run reading them. `user` is the kernel's own argument.
using GqaStageFn = GqaRun (*)(const attnrt_host_services& host, const void* user);

// RunGqa over K/V caches that `stage` fills (the paged naive kernels): checks the workspace for the
// per-slot scratch of this run's seqlens_k (GqaWorkspaceSize of a problem with a present output
// suffices), then calls `stage`, then `attend` on the host's pool. Returns ATTNRT_OK, or
// ATTNRT_ERROR_INVALID_ARGUMENT with a message when args.workspace is too small; `stage` is not
// called then, so a failing run writes nothing.
// v_head_size: the value head size the staged run will have (the output accumulator's width).
int32_t RunGqaStaged(const attnrt_host_services& host, const attnrt_gqa_args& args,
                     int64_t v_head_size, GqaStageFn stage, const void* user,
                     GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept;

// RunGqa's prologue alone, for kernels that need the present outputs (gqa.flash): resolves `args`
// into a GqaRun whose key_cache/value_cache are present_key/present_value (both must be given) and
// appends the new K/V rows into them (RoPE on K) on the host's pool. scratch_query_offset stays 0.
// With sliding_window_cache=1, `window_area` holds GqaWindowPlan's plan: the resident rows are
// moved first (into present, or into the staging cache the returned run then reads), and the
// caller runs GqaWindowFinish after attention; otherwise it is ignored.
GqaRun GqaStagePresentKv(const attnrt_host_services& host, const attnrt_gqa_args& args,
                         void* window_area) noexcept;

// Every field of GqaRun that follows from `args` alone; the K/V cache fields and the scratch
// layout are left zero (the paged kernels fill them).
GqaRun GqaResolveRun(const attnrt_gqa_args& args) noexcept;

// Writes a new K/V row (`src`, a T row of H elements, Hv for a value row) into the cache row
// `row`: RoPE at `position` when `rotate` (then rounded to T; key rows only), quantized with
// `scale` (this kv head's scales) when not NULL, else stored as T. What the prologue stores for
// every new row.
void GqaWriteCacheRow(const GqaRun& run, const void* src, bool rotate, int64_t position,
                      const float* scale, void* row, bool value_row) noexcept;

// Rotary position of query token s of batch b: ONNX Runtime's rotary rule; for a packed varlen
// batch (ABI 1.12) query_positions[its row], else its token position P_b + s.
int64_t GqaRotaryPosition(const GqaRun& run, int64_t b, int64_t s) noexcept;

// ALiBi's bias of key j for the query row at `position` (the varlen op's alibi_slopes): slope *
// (j - position), or -slope * |j - position| with alibi_symmetric.
inline float GqaAlibiBias(const GqaRun& run, float slope, int64_t j, int64_t position) noexcept {
  const int64_t d = j - position;
  return slope * static_cast<float>(run.alibi_symmetric && d > 0 ? -d : d);
}

// Key rows of a batch with T_b = `total` that exist: T_b, except after the first prompt without a
// past buffer, where only the L new rows do (docs/gqa-semantics.md, "No past, not the first
// prompt").
inline int64_t GqaExistingRows(const GqaRun& run, int64_t total) noexcept {
  const bool new_rows_only = !run.first_prompt && !run.past_from_seqlens && run.kv_seq > 0;
  return new_rows_only && total > run.kv_seq ? run.kv_seq : total;
}

// y = RoPE(x) at `position` (ONNX Runtime's rotary rule): the first R dims rotated (half-split or
// interleaved pairs), [R, H) copied. x is a T row of H elements, y H floats, each rounded to T as
// the reference stores its rotated Q and K in T; for float32 bit-identical to ONNX Runtime's (MLAS
// AVX2) RoPE.
void GqaRotateRow(const GqaRun& run, const void* x, float* y, int64_t position) noexcept;

}  // namespace attnrt::cpu
