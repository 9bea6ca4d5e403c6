// Shared, ISA-independent part of the cpu_x86 GroupQueryAttention kernels: the resolved view of one
// run, the driver (workspace layout, KV append, threading) and rotary embedding. Semantics:
// reference/gqa-semantics.md (ONNX Runtime 1.30 com.microsoft.GroupQueryAttention, CPU EP).
//
// Included by the ISA files, so it declares only plain structs and out-of-line functions: an inline
// function here would be compiled once per ISA and the linker could keep the AVX2 copy for
// everyone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

namespace attnrt::cpu_x86 {

// One run with every pointer resolved and every flag decoded. All tensors are float32, compact.
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
  // without a past buffer (reference §2 item 13: such a subsequent prompt has causal offset 0).
  bool past_from_seqlens;
  bool first_prompt;

  const float* query;      // (B, S, q_token_stride): head n at column n*H
  int64_t q_token_stride;  // N*H, or (N+2*Nkv)*H for packed QKV
  const float*
      new_key;  // row (b, l) at new_key + (b*L + l)*new_kv_token_stride, head kvh at +kvh*H
  const float* new_value;
  int64_t new_kv_token_stride;  // Nkv*H, or (N+2*Nkv)*H for packed QKV
  const float* past_key;        // (B, Nkv, P, H) or NULL
  const float* past_value;
  int64_t past_length;  // P

  // K/V rows attention reads: the present outputs, or workspace staging when a present is absent.
  // Layout (B, Nkv, rows, H).
  float* key_cache;
  float* value_cache;
  int64_t key_cache_rows;
  int64_t value_cache_rows;
  bool key_cache_holds_past;  // present_key is past_key's memory: rows before P_b are already there
  bool value_cache_holds_past;

  bool rotary;
  bool rotary_interleaved;
  const float* cos_cache;  // (M, rotary_half)
  const float* sin_cache;
  int64_t rotary_half;          // R/2
  const int64_t* position_ids;  // (B, position_ids_stride) or NULL
  int64_t position_ids_stride;

  float scale;    // alpha: the attribute, or 1/sqrt(H) when it is 0
  float softcap;  // applied when > 0
  bool causal;
  int64_t window;               // local_window_size W; < 0 off
  const float* attention_bias;  // (B|1, N|1, S, bias_row_length) or NULL
  bool bias_broadcast_batch;
  bool bias_broadcast_heads;
  int64_t bias_row_length;
  bool sink_softmax;       // smooth_softmax == 1 or head_sink given
  const float* head_sink;  // (N) or NULL (then the sink logit is 0)
  int32_t qk_output;       // attnrt_gqa_qk_output
  float* output_qk;        // (B, N, S, T) or NULL
  float* output;           // (B, S, N*H)

  // Per-slot scratch: a score row of max T_b floats at offset 0, a rotated query row (H floats) at
  // scratch_query_offset floats.
  int64_t scratch_query_offset;
};

// Processes attention units [unit_begin, unit_end), unit = (b*N + n)*S + s, with a private scratch
// laid out as GqaRun::scratch_query_offset says.
using GqaAttendRowsFn = void (*)(const GqaRun& run, float* scratch, int64_t unit_begin,
                                 int64_t unit_end);

// Workspace bytes one run of `problem` needs with host.num_threads() slots: per-slot scratch sized
// by the longest key row a planned shape allows, plus K/V staging when there is no present output.
size_t GqaWorkspaceSize(const attnrt_host_services& host,
                        const attnrt_gqa_problem& problem) noexcept;

// Runs GroupQueryAttention on float32 tensors: appends the new K/V rows (RoPE on K), then calls
// `attend` on the host's pool. Returns ATTNRT_OK, or ATTNRT_ERROR_INVALID_ARGUMENT with a message
// when args.workspace is too small for this run's seqlens_k.
int32_t RunGqa(const attnrt_host_services& host, const attnrt_gqa_args& args,
               GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept;

// Rotary position of token s of batch b (reference §3.6).
int64_t GqaRotaryPosition(const GqaRun& run, int64_t b, int64_t s) noexcept;

// y = RoPE(x) at `position` (reference §3.6): the first R dims rotated (half-split or interleaved
// pairs), [R, H) copied. x and y are H floats and must not overlap.
void GqaRotateRow(const GqaRun& run, const float* x, float* y, int64_t position) noexcept;

}  // namespace attnrt::cpu_x86
