// Score pipeline of GroupQueryAttention for one query row (reference gqa-semantics.md §3.2–§3.4),
// templated on an ISA "ops" struct; each gqa_kernels_<isa>.cpp instantiates it (MLAS pattern).
//
// Ops provides, over float rows of n elements (any n >= 0 unless noted):
//   static float Dot(const float* a, const float* b, int64_t n);    // sum a[i]*b[i]
//   static void Axpy(float alpha, const float* x, float* y, int64_t n);  // y += alpha*x
//   static void Scale(float alpha, float* y, int64_t n);            // y *= alpha
//   static float Max(const float* x, int64_t n);                    // n >= 1
//   static float ExpSum(float* x, int64_t n, float m);              // x = exp(x - m); returns the
//   sum
//
// Everything here has internal linkage and calls only C library functions, never std:: inline or
// template code: such functions would be emitted by the baseline and the AVX2 translation units
// alike, and the linker may keep the AVX2 copy for the scalar kernel, which then faults on a CPU
// without AVX.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gqa_run.h"

namespace attnrt::cpu_x86 {
namespace {

// Writes one output_qk row of length T: row[j] for j in [begin, end), 0 elsewhere (columns >= T_b
// are unspecified by the reference; zeros, as it was observed to leave them).
void WriteQkRow(const GqaRun& r, int64_t b, int64_t n, int64_t s, const float* row, int64_t begin,
                int64_t end) {
  float* dst = r.output_qk + ((b * r.heads + n) * r.seq + s) * r.total_length;
  memset(dst, 0, static_cast<size_t>(r.total_length) * sizeof(float));
  if (end > begin) {
    memcpy(dst + begin, row + begin, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

// One (b, n, s) row: scores over the window, softcap, bias, softmax (optionally with a sink), P·V.
// scores holds max T_b floats, q_rotated H floats.
template <class Ops>
void AttendRow(const GqaRun& r, int64_t unit, float* scores, float* q_rotated) {
  const int64_t s = unit % r.seq;
  const int64_t n = (unit / r.seq) % r.heads;
  const int64_t b = unit / (r.seq * r.heads);
  const int64_t h = r.head_size;
  const int64_t kvh = n / r.group;
  const int64_t total = r.seqlens_k[b] + 1;
  const int64_t past = r.past_from_seqlens ? total - r.seq : 0;

  // Keys [begin, end). A padded row of a right-padded first prompt (s >= T_b) gets end = T_b and,
  // with a local window, begin = T_b - W: the reference's naive-path rule (§3.3). Its flash path
  // measures that window from s instead; the two differ only on such padded rows.
  const int64_t causal_end = past + s + 1 < total ? past + s + 1 : total;
  const int64_t end = r.causal ? causal_end : total;
  const int64_t begin = (r.window >= 0 && end > r.window) ? end - r.window : 0;
  const int64_t count = end > begin ? end - begin : 0;

  const float* q = r.query + (b * r.seq + s) * r.q_token_stride + n * h;
  if (r.rotary) {
    GqaRotateRow(r, q, q_rotated, GqaRotaryPosition(r, b, s));
    q = q_rotated;
  }
  const float* keys = r.key_cache + (b * r.kv_heads + kvh) * r.key_cache_rows * h;
  const float* values = r.value_cache + (b * r.kv_heads + kvh) * r.value_cache_rows * h;

  for (int64_t j = begin; j < end; ++j) scores[j] = r.scale * Ops::Dot(q, keys + j * h, h);
  if (r.softcap > 0.0f) {
    for (int64_t j = begin; j < end; ++j) scores[j] = r.softcap * tanhf(scores[j] / r.softcap);
  }
  // The bias comes after softcap and is never capped.
  if (r.attention_bias != nullptr) {
    const int64_t bias_b = r.bias_broadcast_batch ? 0 : b;
    const int64_t bias_heads = r.bias_broadcast_heads ? 1 : r.heads;
    const int64_t bias_n = r.bias_broadcast_heads ? 0 : n;
    const float* bias =
        r.attention_bias + ((bias_b * bias_heads + bias_n) * r.seq + s) * r.bias_row_length;
    for (int64_t j = begin; j < end; ++j) scores[j] += bias[j];
  }
  if (r.qk_output == ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX) {
    WriteQkRow(r, b, n, s, scores, begin, end);
  }

  float* x = scores + begin;
  if (r.sink_softmax) {
    // The sink joins the softmax as one more logit, raw: not scaled, capped or biased.
    const float sink = r.head_sink != nullptr ? r.head_sink[n] : 0.0f;
    float m = sink;
    if (count > 0) {
      const float row_max = Ops::Max(x, count);
      m = row_max > sink ? row_max : sink;
    }
    const float sum = Ops::ExpSum(x, count, m) + expf(sink - m);
    Ops::Scale(1.0f / sum, x, count);
  } else if (count > 0) {
    const float m = Ops::Max(x, count);
    Ops::Scale(1.0f / Ops::ExpSum(x, count, m), x, count);
  }
  if (r.qk_output == ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX) {
    WriteQkRow(r, b, n, s, scores, begin, end);
  }

  // An empty window (W = 0) leaves an all-zero output row.
  float* out = r.output + ((b * r.seq + s) * r.heads + n) * h;
  memset(out, 0, static_cast<size_t>(h) * sizeof(float));
  for (int64_t j = 0; j < count; ++j) Ops::Axpy(x[j], values + (begin + j) * h, out, h);
}

// GqaAttendRowsFn body for one ISA.
template <class Ops>
void AttendRows(const GqaRun& r, float* scratch, int64_t unit_begin, int64_t unit_end) {
  float* scores = scratch;
  float* q_rotated = scratch + r.scratch_query_offset;
  for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
    AttendRow<Ops>(r, unit, scores, q_rotated);
  }
}

}  // namespace
}  // namespace attnrt::cpu_x86
