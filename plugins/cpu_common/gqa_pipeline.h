// Score pipeline of GroupQueryAttention for one query row (ONNX Runtime's masks, score order, data
// types and quantized caches), templated on an ISA "ops" struct; each gqa_kernels_<isa>.cpp
// instantiates it (MLAS pattern). Every T tensor is widened to float32 per element; scores, softmax
// and P·V are float32; the output and output_qk rows are rounded to T. Cached K/V rows are decoded
// (dequantized) inside Dot and Axpy, never copied out; the float32 query is never quantized.
//
// Ops provides, over rows of n elements (any n >= 0 unless noted):
//   static float Dot(const float* q, const GqaCacheRow& k, int64_t n);   // sum q[i]*k[i]
//   static void Axpy(float alpha, const GqaCacheRow& v, float* y, int64_t n);  // y += alpha*v
//   static void Widen(const void* x, GqaFloatType t, float* y, int64_t n);     // y = float(x)
//   static void AddWidened(const void* x, GqaFloatType t, float* y, int64_t n);  // y += float(x)
//   static void Narrow(const float* x, GqaFloatType t, void* y, int64_t n);    // y = T(x), RNE
//   static void Scale(float alpha, float* y, int64_t n);            // y *= alpha
//   static float Max(const float* x, int64_t n);                    // n >= 1
//   static float ExpSum(float* x, int64_t n, float m);              // x = exp(x - m); returns the
//   sum
// where a cache row's element i is float(k[i]) for float caches and q[i] * scale (float32) for
// quantized ones.
//
// Everything here has internal linkage and calls only C library functions, never std:: inline or
// template code: such functions would be emitted by the baseline and the AVX2 translation units
// alike, and the linker may keep the AVX2 copy for the scalar kernel, which then faults on a CPU
// without AVX.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gqa_convert.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

// Writes one output_qk row of length T in T: row[j] for j in [begin, end), 0 elsewhere (columns >=
// T_b are unspecified by the reference; zeros, as it was observed to leave them).
template <class Ops>
void WriteQkRow(const GqaRun& r, int64_t b, int64_t n, int64_t s, const float* row, int64_t begin,
                int64_t end) {
  void* dst = ElementAddress(r.output_qk, r.element_bytes,
                             ((b * r.heads + n) * r.seq + s) * r.total_length);
  memset(dst, 0, static_cast<size_t>(r.total_length) * r.element_bytes);
  if (end > begin) {
    Ops::Narrow(row + begin, r.type, ElementAddress(dst, r.element_bytes, begin), end - begin);
  }
}

// Rows [begin, end) of kv head (b, kvh) of one cache, one per Next(): a contiguous cache of `rows`
// rows per head, or with kPaged the block pools read through r.block_table (GqaRun). Only the table
// slots of blocks holding rows of [begin, end) are read, so slots past the rows a batch reads may
// hold anything. Both walks hand the row pipeline the same bytes for the same token, so a paged
// run computes bitwise what the contiguous one does. The paged walk prefetches, with each row, the
// row kPrefetchRows ahead (at most a block ahead), through the table: blocks lie anywhere in the
// pools, so the hardware prefetcher, which follows a contiguous cache, loses the stream at every
// block boundary, and in a BSNH block a head's rows are Nkv rows apart.
template <bool kPaged>
class CacheRows {
 public:
  // About 16 KiB ahead for a 1 KiB row: far enough to hide the memory latency, near enough to stay
  // in L1/L2 until the row is read.
  static constexpr int64_t kPrefetchRows = 16;

  // values: the value cache, whose rows have v_head_size elements.
  CacheRows(const GqaRun& r, bool values, const void* cache, int64_t rows,
            const GqaPoolStrides& pool, const float* scale, int64_t b, int64_t kvh, int64_t begin,
            int64_t end) {
    const int64_t width = values ? r.v_head_size : r.head_size;
    row_.data = nullptr;
    row_.type = values ? r.value_cache_type : r.cache_type;
    row_.scale = scale != nullptr && r.scale_per_channel ? scale + kvh * width : scale;
    row_.per_channel = r.scale_per_channel;
    const size_t row_bytes = values ? r.value_cache_row_bytes : r.cache_row_bytes;
    if constexpr (kPaged) {
      (void)rows;
      blocks_ = r.block_table + b * r.max_blocks_per_seq;
      block_size_ = r.block_size;
      block_bytes_ = pool.block;
      // This head's row 0 of block 0; rows of a head are pool.token apart (row_bytes in a compact
      // BNSH block, Nkv rows in a compact BSNH one).
      head_ = static_cast<const unsigned char*>(cache) + static_cast<size_t>(kvh) * pool.head;
      stride_ = pool.token;
      block_ = begin / block_size_;
      offset_ = begin % block_size_;
      last_block_ = end > begin ? (end - 1) / block_size_ : block_;
      row_bytes_ = row_bytes;
      distance_ = block_size_ < kPrefetchRows ? block_size_ : kPrefetchRows;
    } else {
      (void)end;
      (void)pool;
      next_ = static_cast<const unsigned char*>(cache) +
              static_cast<size_t>((b * r.kv_heads + kvh) * rows + begin) * row_bytes;
      stride_ = row_bytes;
    }
  }

  // The current row; the walk then moves to the next one.
  const GqaCacheRow& Next() {
    if constexpr (kPaged) {
      if (offset_ == block_size_) {
        ++block_;
        offset_ = 0;
        block_start_ = nullptr;
      }
      if (block_start_ == nullptr) {
        block_start_ = head_ + static_cast<size_t>(blocks_[block_]) * block_bytes_;
        next_block_ = block_ < last_block_
                          ? head_ + static_cast<size_t>(blocks_[block_ + 1]) * block_bytes_
                          : nullptr;
      }
      row_.data = block_start_ + static_cast<size_t>(offset_) * stride_;
      // The row `distance_` ahead: in this block, or in the next one (none after the last).
      const int64_t ahead = offset_ + distance_;
      const unsigned char* prefetch =
          ahead < block_size_ ? block_start_ + static_cast<size_t>(ahead) * stride_
          : next_block_ != nullptr
              ? next_block_ + static_cast<size_t>(ahead - block_size_) * stride_
              : nullptr;
      if (prefetch != nullptr) {
        for (size_t line = 0; line < row_bytes_; line += 64) __builtin_prefetch(prefetch + line);
      }
      ++offset_;
    } else {
      row_.data = next_;
      next_ += stride_;
    }
    return row_;
  }

 private:
  GqaCacheRow row_;
  size_t stride_ = 0;
  const unsigned char* next_ = nullptr;  // contiguous: the next row
  // Paged: the batch's table row, the block being walked and the next row's offset in it.
  const int32_t* blocks_ = nullptr;
  const unsigned char* head_ = nullptr;
  const unsigned char* block_start_ = nullptr;
  const unsigned char* next_block_ = nullptr;  // NULL in the last block of [begin, end)
  size_t block_bytes_ = 0;
  size_t row_bytes_ = 0;
  int64_t block_size_ = 1;
  int64_t block_ = 0;
  int64_t last_block_ = 0;
  int64_t offset_ = 0;
  int64_t distance_ = 1;  // rows between the row read and the row prefetched
};

// One (b, n, s) row: scores over the window, softcap, bias, softmax (optionally with a sink), P·V.
// scores holds max T_b floats, q_row H floats and acc Hv floats (the value head size, which the
// output row has too). kPaged: K/V through the block table.
template <class Ops, bool kPaged>
void AttendRow(const GqaRun& r, int64_t unit, float* scores, float* q_row, float* acc) {
  const int64_t s = unit % r.seq;
  const int64_t n = (unit / r.seq) % r.heads;
  const int64_t b = unit / (r.seq * r.heads);
  const int64_t h = r.head_size;
  const int64_t hv = r.v_head_size;
  const int64_t kvh = n / r.group;
  const int64_t total = r.seqlens_k[b] + 1;
  const int64_t q_len = GqaQueryLength(r, b);
  if (s >= q_len) return;  // a packed sequence shorter than the longest
  const int64_t past = r.past_from_seqlens ? total - q_len : 0;

  // Keys [begin, end). A padded row of a right-padded first prompt (s >= T_b) gets end = T_b and,
  // with a local window, begin = T_b - W: the reference's naive-path rule (docs/gqa-semantics.md).
  // Its flash path measures that window from s instead; the two differ only on such padded rows.
  const int64_t causal_end = past + s + 1 < total ? past + s + 1 : total;
  const int64_t rows = GqaExistingRows(r, total);
  const int64_t unclipped_end = r.causal ? causal_end : total;
  int64_t end = unclipped_end < rows ? unclipped_end : rows;
  int64_t begin = (r.window >= 0 && end > r.window) ? end - r.window : 0;
  if (!r.causal && (r.window >= 0 || r.window_right >= 0)) {
    // A window of non-causal attention (the varlen op): [p - (W - 1), p + window_right].
    const int64_t position = past + s;
    begin = r.window >= 0 && position - r.window + 1 > 0 ? position - r.window + 1 : 0;
    if (r.window_right >= 0 && position + r.window_right + 1 < end) {
      end = position + r.window_right + 1;
    }
  }
  const int64_t count = end > begin ? end - begin : 0;

  const void* q_in =
      ElementAddress(r.query, r.element_bytes, GqaQueryRow(r, b, s) * r.q_token_stride + n * h);
  const float* q = q_row;
  if (r.rotary) {
    GqaRotateRow(r, q_in, q_row, GqaRotaryPosition(r, b, s));
  } else if (r.type == GqaFloatType::kFloat32) {
    q = static_cast<const float*>(q_in);
  } else {
    Ops::Widen(q_in, r.type, q_row, h);
  }

  CacheRows<kPaged> keys(r, false, r.key_cache, r.key_cache_rows, r.key_strides, r.k_scale, b, kvh,
                         begin, end);
  for (int64_t j = begin; j < end; ++j) scores[j] = r.scale * Ops::Dot(q, keys.Next(), h);
  if (r.softcap > 0.0f) {
    for (int64_t j = begin; j < end; ++j) scores[j] = r.softcap * tanhf(scores[j] / r.softcap);
  }
  // The bias comes after softcap and is never capped.
  if (r.attention_bias != nullptr) {
    const int64_t bias_b = r.bias_broadcast_batch ? 0 : b;
    const int64_t bias_heads = r.bias_broadcast_heads ? 1 : r.heads;
    const int64_t bias_n = r.bias_broadcast_heads ? 0 : n;
    const int64_t bias_row = ((bias_b * bias_heads + bias_n) * r.seq + s) * r.bias_row_length;
    Ops::AddWidened(ElementAddress(r.attention_bias, r.element_bytes, bias_row + begin), r.type,
                    scores + begin, count);
  }
  // ALiBi (the varlen op's alibi_slopes): slope_n * (key position - query position), after softcap
  // too, never capped.
  if (r.alibi_slopes != nullptr) {
    const float slope = r.alibi_slopes[n];
    const int64_t position = past + s;
    for (int64_t j = begin; j < end; ++j) scores[j] += GqaAlibiBias(r, slope, j, position);
  }
  if (r.qk_output == ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX) {
    WriteQkRow<Ops>(r, b, n, s, scores, begin, end);
  }

  // Non-finite scores (docs/gqa-semantics.md, non-finite values), decided once per row: a NaN or
  // +inf score or sink makes the row NaN, which the softmax's sum carries (exp keeps NaN, and
  // exp(+inf - +inf) is NaN); a row of -inf scores only, or no key, is a zero row whose V is never
  // read. The max may hide a NaN (SIMD max returns one operand), so a -inf max rescans the row.
  float* x = scores + begin;
  // The sink joins the softmax as one more logit, raw: not scaled, capped or biased.
  const float sink =
      r.sink_softmax && r.head_sink != nullptr ? LoadElement(r.head_sink, r.type, n) : 0.0f;
  float sum = 1.0f;
  bool zero_row = false;
  if (r.sink_softmax && (sink != sink || sink == INFINITY)) {
    sum = NAN;
  } else if (count == 0) {
    zero_row = true;
  } else {
    const float row_max = Ops::Max(x, count);
    if (row_max == -INFINITY) {
      zero_row = true;
      for (int64_t j = 0; j < count; ++j) zero_row = zero_row && x[j] == -INFINITY;
      if (!zero_row) sum = NAN;
    } else {
      const float m = r.sink_softmax && sink > row_max ? sink : row_max;
      sum = Ops::ExpSum(x, count, m) + (r.sink_softmax ? expf(sink - m) : 0.0f);
      // p_precision INPUT (paged ops): P·V reads each p = exp(s - m) rounded to T; the sum above
      // is of the float32 p. Normalizing by 1/sum below is P·V's own float32 scaling.
      if (r.round_probabilities) GqaRoundToType(x, count, r.type);
    }
  }
  if (zero_row) {
    memset(x, 0, static_cast<size_t>(count) * sizeof(float));
  } else {
    Ops::Scale(1.0f / sum, x, count);  // NaN: every probability NaN
  }
  if (r.qk_output == ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX) {
    WriteQkRow<Ops>(r, b, n, s, scores, begin, end);
  }

  // float32 output accumulates in place; the narrow types accumulate in float32 and round once.
  // An empty window (W = 0) leaves an all-zero output row.
  void* out = ElementAddress(r.output, r.element_bytes, (GqaQueryRow(r, b, s) * r.heads + n) * hv);
  float* o = r.type == GqaFloatType::kFloat32 ? static_cast<float*>(out) : acc;
  if (sum != sum) {
    for (int64_t d = 0; d < hv; ++d) o[d] = NAN;
  } else {
    memset(o, 0, static_cast<size_t>(hv) * sizeof(float));
    if (!zero_row) {
      CacheRows<kPaged> values(r, true, r.value_cache, r.value_cache_rows, r.value_strides,
                               r.v_scale, b, kvh, begin, end);
      for (int64_t j = 0; j < count; ++j) Ops::Axpy(x[j], values.Next(), o, hv);
    }
  }
  if (o == acc) Ops::Narrow(acc, r.type, out, hv);
}

// GqaAttendRowsFn body for one ISA; kPaged: over the block pools of a paged run (GqaRun).
template <class Ops, bool kPaged = false>
void AttendRows(const GqaRun& r, float* scratch, int64_t unit_begin, int64_t unit_end) {
  float* scores = scratch;
  float* q_row = scratch + r.scratch_query_offset;
  float* acc = scratch + r.scratch_output_offset;
  for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
    AttendRow<Ops, kPaged>(r, unit, scores, q_row, acc);
  }
}

}  // namespace
}  // namespace attnrt::cpu
