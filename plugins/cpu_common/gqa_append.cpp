// The K/V append prologue of the CPU GroupQueryAttention driver (baseline ISA): rotary embedding
// (RoPE, as ONNX Runtime's MLAS computes it) and the new K/V rows written into the cache after
// their past rows, quantized on write for a quantized cache.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gqa_convert.h"
#include "gqa_quant.h"
#include "gqa_run.h"
#include "gqa_run_internal.h"

namespace attnrt::cpu {
namespace {

// New K/V rows are rotated and quantized this many elements at a time, on the stack (H has no
// upper bound). Even, so a chunk never splits an int4 byte.
constexpr int64_t kRowChunk = 64;

// One of the two caches (K or V) the prologue fills.
struct CacheSide {
  void* cache;
  int64_t rows;
  bool holds_past;
  const void* past;
  const void* fresh;
  bool rotate;
  const float* scale;  // quantized: k_scale or v_scale; else NULL
  bool value_row;      // the value side (rows of Hv elements; Hv = H in GroupQueryAttention)
};

// Elements [first, first + n) of RoPE(x) into y[0, n); x is a T row of H elements. Each output is
// computed on its own from its pair, so any element range comes out as the whole row would. The
// arithmetic is that of MLAS's AVX2 RoPE, which ONNX Runtime runs on AVX2 CPUs for float32 and
// float16 alike: y0 = fma(x0, c, -(x1*s)), y1 = fma(x0, s, x1*c), then rounded to T. fmaf is the C
// library's, correctly rounded on every CPU (not std::fma: an inline copy of it could come from an
// FMA-compiled file).
void RotateElements(const GqaRun& r, const void* x, int64_t position, int64_t first, int64_t n,
                    float* y) {
  const int64_t half = r.rotary_half;
  const void* cos_row = ElementAddress(r.cos_cache, r.element_bytes, position * half);
  const void* sin_row = ElementAddress(r.sin_cache, r.element_bytes, position * half);
  for (int64_t k = first; k < first + n; ++k) {
    if (k >= 2 * half) {
      y[k - first] = LoadElement(x, r.type, k);
      continue;
    }
    // Pair index i; k is its first (x0) or second (x1) element.
    const bool second = r.rotary_interleaved ? (k & 1) != 0 : k >= half;
    const int64_t i = r.rotary_interleaved ? k / 2 : (second ? k - half : k);
    const int64_t i0 = r.rotary_interleaved ? 2 * i : i;
    const int64_t i1 = r.rotary_interleaved ? 2 * i + 1 : i + half;
    const float x0 = LoadElement(x, r.type, i0);
    const float x1 = LoadElement(x, r.type, i1);
    const float c = LoadElement(cos_row, r.type, i);
    const float s = LoadElement(sin_row, r.type, i);
    const float rotated = second ? fmaf(x0, s, x1 * c) : fmaf(x0, c, -(x1 * s));
    y[k - first] = RoundToType(rotated, r.type);
  }
}

// Rows of (b, kvh) in one cache, as ONNX Runtime's present: past rows [0, P_b), new rows at
// [P_b, P_b + L), zeros after. Row indices are clipped to the buffer: staging holds only max T_b
// rows, and rows at or beyond T_b are never read.
void AppendSide(const GqaRun& r, const CacheSide& side, int64_t b, int64_t kvh) {
  const int64_t h = r.head_size;
  const int64_t total = r.seqlens_k[b] + 1;
  const int64_t past = r.past_from_seqlens ? total - r.seq : 0;
  // Shared KV (L == 0) takes all T_b rows from the past; otherwise P_b past rows precede the new
  // ones.
  const int64_t past_rows = std::min(r.kv_seq == 0 ? total : past, side.rows);
  const int64_t written_end = std::min(r.kv_seq == 0 ? past_rows : past + r.kv_seq, side.rows);
  const size_t row_bytes = r.cache_row_bytes;
  void* dst = ElementAddress(side.cache, row_bytes, (b * r.kv_heads + kvh) * side.rows);
  // Past bytes are copied verbatim: a quantized past is never re-quantized.
  if (!side.holds_past && past_rows > 0) {
    const void* src = ElementAddress(side.past, row_bytes, (b * r.kv_heads + kvh) * r.past_length);
    std::memcpy(dst, src, static_cast<size_t>(past_rows) * row_bytes);
  }
  const bool quantized = side.scale != nullptr;
  const float* scale = quantized && r.scale_per_channel ? side.scale + kvh * h : side.scale;
  for (int64_t l = 0; l < r.kv_seq && past + l < side.rows; ++l) {
    const void* src = ElementAddress(side.fresh, r.element_bytes,
                                     (b * r.kv_seq + l) * r.new_kv_token_stride + kvh * h);
    const int64_t position = side.rotate ? GqaRotaryPosition(r, b, l) : 0;
    GqaWriteCacheRow(r, src, side.rotate, position, scale, ElementAddress(dst, row_bytes, past + l),
                     side.value_row);
  }
  // A shared present keeps its other rows: only the new rows belong to this step.
  if (!side.holds_past && written_end < side.rows) {
    std::memset(ElementAddress(dst, row_bytes, written_end), 0,
                static_cast<size_t>(side.rows - written_end) * row_bytes);
  }
}

}  // namespace

// parallel_for body over (b, kv head) units.
void gqa_driver::AppendKvUnits(void* user, size_t begin, size_t end) {
  const GqaRun& r = *static_cast<const GqaRun*>(user);
  const CacheSide key{r.key_cache,
                      r.key_cache_rows,
                      r.key_cache_holds_past,
                      r.past_key,
                      r.new_key,
                      r.rotary,
                      r.k_scale,
                      false};
  const CacheSide value{r.value_cache,
                        r.value_cache_rows,
                        r.value_cache_holds_past,
                        r.past_value,
                        r.new_value,
                        false,
                        r.v_scale,
                        true};
  for (size_t u = begin; u < end; ++u) {
    const int64_t b = static_cast<int64_t>(u) / r.kv_heads;
    const int64_t kvh = static_cast<int64_t>(u) % r.kv_heads;
    AppendSide(r, key, b, kvh);
    AppendSide(r, value, b, kvh);
  }
}

int64_t GqaRotaryPosition(const GqaRun& r, int64_t b, int64_t s) noexcept {
  if (r.query_positions != nullptr) return r.query_positions[GqaQueryRow(r, b, s)];
  if (r.query_start_loc != nullptr) return r.seqlens_k[b] + 1 - GqaQueryLength(r, b) + s;
  if (r.rotary_first_prompt) return (r.position_ids != nullptr ? r.position_ids[0] : 0) + s;
  if (r.position_ids != nullptr) return r.position_ids[b * r.position_ids_stride + s];
  return r.rotary_seqlens_k[b] + 1 - r.seq + s;
}

void GqaRotateRow(const GqaRun& r, const void* x, float* y, int64_t position) noexcept {
  RotateElements(r, x, position, 0, r.head_size, y);
}

void GqaWriteCacheRow(const GqaRun& r, const void* src, bool rotate, int64_t position,
                      const float* scale, void* row, bool value_row) noexcept {
  const int64_t h = value_row ? r.v_head_size : r.head_size;
  const GqaCacheType type = value_row ? r.value_cache_type : r.cache_type;
  if (!rotate && scale == nullptr && IsCacheTypeOf(type, r.type)) {  // the cache type is T
    std::memcpy(row, src, value_row ? r.value_cache_row_bytes : r.cache_row_bytes);
    return;
  }
  // The rotated K row is rounded to T (ONNX Runtime rotates into a T buffer), then stored or
  // quantized from that value.
  float chunk[kRowChunk];
  for (int64_t first = 0; first < h; first += kRowChunk) {
    const int64_t n = std::min(kRowChunk, h - first);
    if (rotate) {
      RotateElements(r, src, position, first, n, chunk);
    } else {
      WidenRow(ElementAddress(src, r.element_bytes, first), r.type, chunk, n);
    }
    StoreCacheElements(chunk, n, type, scale, r.scale_per_channel, row, first);
  }
}

}  // namespace attnrt::cpu
