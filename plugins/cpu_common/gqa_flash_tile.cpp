// gqa.flash tiles (baseline ISA): one task's query tokens of a kv head, all G heads of its group,
// over its key blocks, with the online softmax (FlashAttention-2's forward pass): scores, bias,
// running max and sum, rescale, P·V, and the output rows (or the flash-decoding partials). Shared
// with the grouped paged decode (gqa_flash_decode.cpp) through gqa_flash_internal.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gqa_convert.h"
#include "gqa_flash.h"
#include "gqa_flash_internal.h"
#include "gqa_run.h"

namespace attnrt::cpu::flash {
namespace {

// The keys query row s sees (KeyRange), never past the rows that exist (after the first prompt
// without past, only the new rows: docs/gqa-semantics.md). Without the causal mask a window (the
// varlen op's, ABI 1.10) bounds both sides: [p - (W - 1), p + window_right] at the row's position
// p.
KeyRange RowKeys(const GqaRun& r, int64_t total, int64_t past, int64_t s) {
  const int64_t rows = GqaExistingRows(r, total);
  if (!r.causal) {
    const int64_t p = past + s;
    const int64_t lo = r.window >= 0 ? std::max<int64_t>(0, p - r.window + 1) : 0;
    const int64_t hi = r.window_right >= 0 ? std::min(rows, p + r.window_right + 1) : rows;
    return {std::min(lo, hi), hi};
  }
  // A row before the first key (a causal sequence with fewer keys than rows: past < 0) sees none.
  const int64_t end = past + s + 1;
  const int64_t hi = std::max<int64_t>(0, std::min(end, rows));
  return {std::min(hi, r.window >= 0 ? std::max<int64_t>(0, end - r.window) : 0), hi};
}

// Rows [j, j + n) of a paged source lie in one cache block. With BNSH blocks (stride ==
// row_bytes) they are one byte range, which the block operations prefetch spread over their work
// as for a contiguous cache; with BSNH blocks the kv heads interleave, so the range to prefetch
// (the next block's rows of this head) is requested here row by row.
Prefetch SegmentPrefetch(const KvSource& s, int64_t j, int64_t n, size_t row_bytes) {
  if (n <= 0) return {nullptr, 0};
  if (s.stride == row_bytes) return {s.Row(j), static_cast<size_t>(n) * row_bytes};
  for (int64_t k = j; k < j + n; ++k) {
    const unsigned char* row = s.Row(k);
    for (size_t offset = 0; offset < row_bytes; offset += kAlign) {
      __builtin_prefetch(row + offset, 0, 2);
    }
  }
  return {nullptr, 0};
}

// Zeroes x[from, to) (relative to the block start).
void Zero(float* x, int64_t from, int64_t to) {
  if (to > from) std::memset(x + from, 0, static_cast<size_t>(to - from) * sizeof(float));
}

// x[j] += float(bias[j]) for j in [a, e); bias is a T row.
void AddBias(const void* bias, GqaFloatType type, float* x, int64_t a, int64_t e) {
  switch (type) {
    case GqaFloatType::kFloat32: {
      const float* b = static_cast<const float*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += b[j];
      return;
    }
    case GqaFloatType::kFloat16: {
      const auto* b = static_cast<const uint16_t*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += HalfToFloat(b[j]);
      return;
    }
    case GqaFloatType::kBFloat16: {
      const auto* b = static_cast<const uint16_t*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += BFloat16ToFloat(b[j]);
      return;
    }
  }
}

}  // namespace

// Output row at element `offset` of the output = sum[0, Hv) * inv, rounded to T once (to nearest
// even). For a narrow T, sum is scaled in place first.
void WriteOutput(const GqaRun& r, const GqaFlashOps& ops, float* sum, float inv, int64_t offset) {
  const int64_t h = r.v_head_size;
  if (ops.narrow != nullptr) {
    ops.narrow(sum, inv, r.type, ElementAddress(r.output, r.element_bytes, offset), h);
    return;
  }
  if (r.type == GqaFloatType::kFloat32) {
    float* out = static_cast<float*>(r.output) + offset;
    for (int64_t d = 0; d < h; ++d) out[d] = sum[d] * inv;
    return;
  }
  for (int64_t d = 0; d < h; ++d) sum[d] *= inv;
  NarrowRow(sum, r.type, ElementAddress(r.output, r.element_bytes, offset), h);
}

// The keys of chunk `chunk` that query tokens [s0, s0 + count) of batch b see (TaskSpan).
TaskSpan MakeSpan(const FlashJob& job, int64_t b, int64_t s0, int64_t count, int64_t chunk) {
  const GqaRun& r = *job.run;
  TaskSpan span{b, s0, count, chunk, r.seqlens_k[b] + 1, 0, 0, 0};
  span.past = r.past_from_seqlens ? span.total - GqaQueryLength(r, b) : 0;
  // Keys the tile needs (lo and hi are monotone in s), then this task's chunk of them.
  span.key_begin = RowKeys(r, span.total, span.past, s0).lo;
  span.key_end = RowKeys(r, span.total, span.past, s0 + count - 1).hi;
  if (job.chunks > 1 && span.key_end > span.key_begin) {
    const int64_t per_chunk = (span.key_end - span.key_begin + job.chunks - 1) / job.chunks;
    span.key_begin = std::min(span.key_end, span.key_begin + chunk * per_chunk);
    span.key_end = std::min(span.key_end, span.key_begin + per_chunk);
  }
  return span;
}

namespace {

// The K (values false) or V rows of (b, kv head kvh): `cache` of `cache_rows` rows per head, or
// the paged pool through the block table and the pool's strides.
KvSource SourceOf(const FlashJob& job, bool values, int64_t b, int64_t kvh) {
  const GqaRun& r = *job.run;
  const size_t row_bytes = values ? r.value_cache_row_bytes : r.cache_row_bytes;
  const auto* bytes = static_cast<const unsigned char*>(values ? r.value_cache : r.key_cache);
  if (job.paging == nullptr) {
    const int64_t cache_rows = values ? r.value_cache_rows : r.key_cache_rows;
    return KvSource{bytes + static_cast<size_t>((b * r.kv_heads + kvh) * cache_rows) * row_bytes,
                    row_bytes,
                    nullptr,
                    0,
                    0,
                    0};
  }
  const GqaFlashPaging& pg = *job.paging;
  const GqaPoolStrides& pool = values ? pg.value : pg.key;
  return KvSource{bytes + static_cast<size_t>(kvh) * pool.head,
                  pool.token,
                  pg.block_table + b * pg.max_blocks_per_seq,
                  pg.block_size,
                  pool.block,
                  pool.head};
}

}  // namespace

// Starts kv head kvh of a task: m = -inf, l = 0, acc = 0 and the query rows in t.q.
HeadTile BeginHead(const FlashJob& job, const TaskSpan& span, const Tile& t, int64_t kvh) {
  const GqaRun& r = *job.run;
  const int64_t h = r.head_size;
  const int64_t hv = r.v_head_size;
  const int64_t group = r.group;
  const int64_t rows = span.count * group;
  std::fill(t.m, t.m + rows, kNegInf);
  std::fill(t.l, t.l + rows, 0.0f);
  std::memset(t.acc, 0, static_cast<size_t>(rows * hv) * sizeof(float));
  if (span.key_end > span.key_begin) {
    // Tile row i*G + g is token s0 + i of query head kvh*G + g: the G heads of one token are
    // adjacent in the query, so rows of equal masks are adjacent too.
    for (int64_t i = 0; i < span.count; ++i) {
      const int64_t s = span.s0 + i;
      const void* src = ElementAddress(
          r.query, r.element_bytes, GqaQueryRow(r, span.b, s) * r.q_token_stride + kvh * group * h);
      float* dst = t.q + i * group * h;
      if (r.rotary) {
        const int64_t position = GqaRotaryPosition(r, span.b, s);
        for (int64_t g = 0; g < group; ++g) {
          GqaRotateRow(r, ElementAddress(src, r.element_bytes, g * h), dst + g * h, position);
        }
      } else {
        // The G heads of a token are adjacent: one widening (a copy for float32) for all of them.
        if (job.ops->widen != nullptr) {
          job.ops->widen(src, r.type, dst, group * h);
        } else {
          WidenRow(src, r.type, dst, group * h);
        }
      }
    }
  }
  HeadTile head{t,
                kvh,
                SourceOf(job, /*values=*/false, span.b, kvh),
                SourceOf(job, /*values=*/true, span.b, kvh),
                r.k_scale != nullptr && r.scale_per_channel ? r.k_scale + kvh * h : r.k_scale,
                r.v_scale != nullptr && r.scale_per_channel ? r.v_scale + kvh * hv : r.v_scale};
  return head;
}

// False when no row sees a key of [j0, j1) (outside the windows, or only padded rows past T_b).
bool RowsOfBlock(const GqaRun& r, const TaskSpan& span, int64_t j0, int64_t j1, BlockRows* out) {
  int64_t i_begin = 0;
  while (i_begin < span.count && RowKeys(r, span.total, span.past, span.s0 + i_begin).hi <= j0) {
    ++i_begin;
  }
  int64_t i_end = span.count;
  while (i_end > i_begin && RowKeys(r, span.total, span.past, span.s0 + i_end - 1).lo >= j1) {
    --i_end;
  }
  if (i_begin == i_end) return false;
  out->i_begin = i_begin;
  out->i_end = i_end;
  out->ja = std::max(j0, RowKeys(r, span.total, span.past, span.s0 + i_begin).lo);
  out->je = std::min(j1, RowKeys(r, span.total, span.past, span.s0 + i_end - 1).hi);
  return out->je > out->ja;
}

// The block-operation view of cache rows from `row` on, `stride` bytes apart.
GqaFlashKv RowsAt(const GqaRun& r, const void* row, size_t stride, const float* scale) {
  return GqaFlashKv{row, stride, r.cache_type, scale, r.scale_per_channel};
}

namespace {

GqaFlashKv BlockOf(const GqaRun& r, const KvSource& src, int64_t j, const float* scale) {
  return RowsAt(r, src.Row(j), src.stride, scale);
}

// p_precision INPUT (GqaRun::round_probabilities): x[0, n) rounded to T in place, through
// ops.round when the set has one.
void RoundProbabilities(const GqaFlashOps& ops, float* x, int64_t n, GqaFloatType type) {
  if (n <= 0) return;
  if (ops.round != nullptr) {
    ops.round(x, n, type);
  } else {
    GqaRoundToType(x, n, type);
  }
}

}  // namespace

// The online-softmax step of one kv head over the scores of key block [ja, je) (in t.scores,
// row stride kv_block, key ja at column 0): bias, row max, exp and sum, rescale of acc and l by
// exp(m_old - m_new); columns outside a row's window become 0 (P·V skips them: AccumulateRagged).
void SoftmaxBlock(const FlashJob& job, const TaskSpan& span, const HeadTile& head,
                  const BlockRows& br) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const Tile& t = head.t;
  const int64_t hv = r.v_head_size;
  const int64_t group = r.group;
  const int64_t ld = job.blocks.kv_block;
  const int64_t width = br.je - br.ja;
  const int64_t bias_b = r.bias_broadcast_batch ? 0 : span.b;
  const int64_t bias_heads = r.bias_broadcast_heads ? 1 : r.heads;
  for (int64_t i = br.i_begin; i < br.i_end; ++i) {
    const int64_t s = span.s0 + i;
    const KeyRange k = RowKeys(r, span.total, span.past, s);
    const int64_t a = std::max(k.lo, br.ja) - br.ja;
    const int64_t e = std::min(k.hi, br.je) - br.ja;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t row = i * group + g;
      float* x = t.scores + row * ld;
      float row_max = kNegInf;
      if (e > a) {
        if (r.attention_bias != nullptr) {
          const int64_t n = head.kvh * group + g;
          const int64_t bias_n = r.bias_broadcast_heads ? 0 : n;
          const void* bias = ElementAddress(
              r.attention_bias, r.element_bytes,
              ((bias_b * bias_heads + bias_n) * r.seq + s) * r.bias_row_length + br.ja);
          AddBias(bias, r.type, x, a, e);
        }
        // ALiBi (the varlen op's alibi_slopes): slope_n * (key position - query position).
        if (r.alibi_slopes != nullptr) {
          const float slope = r.alibi_slopes[head.kvh * group + g];
          const int64_t position = span.past + s - br.ja;
          for (int64_t j = a; j < e; ++j) x[j] += GqaAlibiBias(r, slope, j, position);
        }
        row_max = ops.max(x + a, e - a);
      }
      // Nothing to add (outside the window, or every score -inf from the bias). A NaN that the
      // max let through makes the row NaN (docs/gqa-semantics.md, non-finite values).
      if (row_max == kNegInf) {
        for (int64_t j = a; j < e; ++j) {
          if (x[j] != kNegInf) t.l[row] = std::numeric_limits<float>::quiet_NaN();
        }
        Zero(x, 0, width);
        continue;
      }
      const float m_new = std::max(t.m[row], row_max);
      const float sum = ops.exp_sum(x + a, e - a, m_new);
      // p_precision INPUT: P·V reads p rounded to T; l (below) adds the float32 p.
      if (r.round_probabilities) RoundProbabilities(ops, x + a, e - a, r.type);
      Zero(x, 0, a);
      Zero(x, e, width);
      if (t.m[row] != kNegInf && t.m[row] != m_new) {
        const float correction = std::exp(t.m[row] - m_new);
        ops.scale(correction, t.acc + row * hv, hv);
        t.l[row] *= correction;
      }
      t.l[row] += sum;
      t.m[row] = m_new;
    }
  }
}

// Ends kv head kvh of a task: output rows acc / l (or the flash-decoding partials of the chunk).
void EndHead(const FlashJob& job, const TaskSpan& span, const HeadTile& head) {
  const GqaRun& r = *job.run;
  const Tile& t = head.t;
  const int64_t h = r.v_head_size;  // acc, partial and output rows
  const int64_t group = r.group;
  for (int64_t i = 0; i < span.count; ++i) {
    const int64_t s = span.s0 + i;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t row = i * group + g;
      const int64_t n = head.kvh * group + g;
      float* acc = t.acc + row * h;
      if (job.chunks > 1) {
        float* partial =
            job.partials + ((span.b * r.heads + n) * job.chunks + span.chunk) * (2 + h);
        partial[0] = t.m[row];
        partial[1] = t.l[row];
        std::memcpy(partial + 2, acc, static_cast<size_t>(h) * sizeof(float));
        continue;
      }
      // A NaN sum (a NaN or +inf score) is a NaN row; m = -inf (every score -inf, or an empty
      // window) a zero row, whatever 0 * inf from V left in acc (docs/gqa-semantics.md).
      const float l = t.l[row];
      float inv = 1.0f;
      if (l != l) {
        std::fill(acc, acc + h, l);
      } else if (t.m[row] == kNegInf) {
        std::fill(acc, acc + h, 0.0f);
      } else {
        inv = 1.0f / l;
      }
      WriteOutput(r, *job.ops, acc, inv, (GqaQueryRow(r, span.b, s) * r.heads + n) * h);
    }
  }
}

// acc rows [row0, row0 + rows) of a tile += P columns [c0, c1) of key block [ja, ...) times those
// V rows (tiles: the dequantized V tile of the block), one cache segment at a time.
void AccumulateColumns(const FlashJob& job, const Tile& t, const HeadTile& head, int64_t ja,
                       bool tiles, int64_t row0, int64_t rows, int64_t c0, int64_t c1) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const int64_t h = r.v_head_size;  // V rows and acc rows
  const int64_t ld = job.blocks.kv_block;
  if (c1 <= c0 || rows <= 0) return;
  const float* p = t.scores + row0 * ld + c0;
  float* acc = t.acc + row0 * h;
  if (tiles) {
    const GqaFlashKv v_rows{t.v_tile + c0 * h, static_cast<size_t>(h) * sizeof(float),
                            GqaCacheType::kFloat32, nullptr, false};
    ops.accumulate(p, rows, ld, v_rows, c1 - c0, h, acc, nullptr, 0);
    return;
  }
  for (int64_t j = ja + c0, n; j < ja + c1; j += n) {
    n = head.values.Segment(j, ja + c1);
    ops.accumulate(p + (j - ja - c0), rows, ld, BlockOf(r, head.values, j, head.v_scale), n, h, acc,
                   nullptr, 0);
  }
}

// P·V of a block whose rows see different keys of it (the causal diagonal, a window's lower edge):
// the columns every row sees in one call, the rest token by token over that token's own keys, so
// that no row multiplies the value of a key it cannot see (0 * inf would turn it into NaN;
// docs/gqa-semantics.md, non-finite values). False (nothing done) when every row sees the whole
// block.
bool AccumulateRagged(const FlashJob& job, const TaskSpan& span, const Tile& t,
                      const HeadTile& head, const BlockRows& br, bool tiles) {
  const GqaRun& r = *job.run;
  const int64_t width = br.je - br.ja;
  int64_t ca = 0, ce = width;
  bool ragged = false;
  for (int64_t i = br.i_begin; i < br.i_end; ++i) {
    const KeyRange k = RowKeys(r, span.total, span.past, span.s0 + i);
    const int64_t a = std::max(k.lo, br.ja) - br.ja;
    const int64_t e = std::min(k.hi, br.je) - br.ja;
    ragged = ragged || a != 0 || e != width;
    ca = std::max(ca, a);
    ce = std::min(ce, e);
  }
  if (!ragged) return false;
  const int64_t g = r.group;
  if (ce > ca) {
    AccumulateColumns(job, t, head, br.ja, tiles, br.i_begin * g, (br.i_end - br.i_begin) * g, ca,
                      ce);
  }
  for (int64_t i = br.i_begin; i < br.i_end; ++i) {
    const KeyRange k = RowKeys(r, span.total, span.past, span.s0 + i);
    const int64_t a = std::max(k.lo, br.ja) - br.ja;
    const int64_t e = std::min(k.hi, br.je) - br.ja;
    if (ce > ca) {
      AccumulateColumns(job, t, head, br.ja, tiles, i * g, g, a, ca);
      AccumulateColumns(job, t, head, br.ja, tiles, i * g, g, ce, e);
    } else {
      AccumulateColumns(job, t, head, br.ja, tiles, i * g, g, a, e);
    }
  }
  return true;
}

// One task: query tokens [s0, s0 + count) of (b, kvh), all G heads, over the keys of chunk c.
void RunTile(const FlashJob& job, const Tile& t, int64_t b, int64_t kvh, int64_t s0, int64_t count,
             int64_t chunk) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const int64_t h = r.head_size;
  const int64_t hv = r.v_head_size;
  const int64_t ld = job.blocks.kv_block;
  const TaskSpan span = MakeSpan(job, b, s0, count, chunk);
  const HeadTile head = BeginHead(job, span, t, kvh);
  const KvSource& keys = head.keys;
  const KvSource& values = head.values;
  const bool paged = job.paging != nullptr;
  const size_t row_bytes = r.cache_row_bytes;
  const size_t value_row_bytes = r.value_cache_row_bytes;
  const size_t float_row = static_cast<size_t>(h) * sizeof(float);
  const size_t float_value_row = static_cast<size_t>(hv) * sizeof(float);

  for (int64_t j0 = span.key_begin; j0 < span.key_end; j0 += ld) {
    const int64_t j1 = std::min(j0 + ld, span.key_end);
    BlockRows br{};
    if (!RowsOfBlock(r, span, j0, j1, &br)) continue;
    const int64_t ja = br.ja;
    const int64_t je = br.je;
    const int64_t width = je - ja;
    const int64_t row_begin = br.i_begin * r.group;
    const int64_t row_count = (br.i_end - br.i_begin) * r.group;

    // V of this block streams in while the scores are computed, the next K block while P·V is
    // (contiguous: by the block operations; paged: by PrefetchRows, one cache block ahead). A
    // contiguous cache is one segment: the block operations see [ja, je) at once.
    const void* v_prefetch = paged ? nullptr : values.Row(ja);
    const size_t v_prefetch_bytes = paged ? 0 : static_cast<size_t>(width) * value_row_bytes;
    // Tall tiles of a quantized cache: K (now) and V (before P·V) dequantized once into scratch.
    const bool tiles =
        (job.blocks.dequant_tiles || job.blocks.copy_tiles) && row_count > kFusedRows;
    float* block_scores = t.scores + row_begin * ld;
    if (tiles) {
      for (int64_t j = ja, n; j < je; j += n) {
        n = keys.Segment(j, je);
        ops.dequantize(BlockOf(r, keys, j, head.k_scale), n, h, t.k_tile + (j - ja) * h);
      }
      const GqaFlashKv k_rows{t.k_tile, float_row, GqaCacheType::kFloat32, nullptr, false};
      const Prefetch v_next =
          paged ? SegmentPrefetch(values, ja, values.Segment(ja, je), value_row_bytes)
                : Prefetch{v_prefetch, v_prefetch_bytes};
      ops.scores(t.q + row_begin * h, row_count, k_rows, width, h, r.scale, block_scores, ld,
                 v_next.begin, v_next.bytes);
    } else {
      for (int64_t j = ja, n; j < je; j += n) {
        n = keys.Segment(j, je);
        // Paged: this segment's V rows stream in while its scores are computed.
        const Prefetch v_next = paged ? SegmentPrefetch(values, j, n, value_row_bytes)
                                      : Prefetch{v_prefetch, v_prefetch_bytes};
        ops.scores(t.q + row_begin * h, row_count, BlockOf(r, keys, j, head.k_scale), n, h, r.scale,
                   block_scores + (j - ja), ld, v_next.begin, v_next.bytes);
      }
    }

    SoftmaxBlock(job, span, head, br);

    const int64_t next_end = std::min(span.key_end, j1 + ld);
    const void* k_prefetch = paged ? nullptr : keys.Row(j1);
    const size_t k_prefetch_bytes =
        !paged && j1 < span.key_end ? static_cast<size_t>(next_end - j1) * row_bytes : 0;
    if (tiles) {
      for (int64_t j = ja, n; j < je; j += n) {
        n = values.Segment(j, je);
        ops.dequantize(BlockOf(r, values, j, head.v_scale), n, hv, t.v_tile + (j - ja) * hv);
      }
      if (AccumulateRagged(job, span, t, head, br, true)) continue;
      const GqaFlashKv v_rows{t.v_tile, float_value_row, GqaCacheType::kFloat32, nullptr, false};
      const Prefetch k_next = !paged ? Prefetch{k_prefetch, k_prefetch_bytes}
                              : j1 < span.key_end
                                  ? SegmentPrefetch(keys, j1, keys.Segment(j1, next_end), row_bytes)
                                  : Prefetch{nullptr, 0};
      ops.accumulate(block_scores, row_count, ld, v_rows, width, hv, t.acc + row_begin * hv,
                     k_next.begin, k_next.bytes);
    } else {
      if (AccumulateRagged(job, span, t, head, br, false)) continue;
      // Paged: V in runs of rows that lie in one cache block, each run split further so that the
      // next key block's rows at the same offset (which stream in meanwhile, up to next_end) lie
      // in one cache block too. The splits fall on cache block boundaries only (where the
      // operations of GqaFlashOps::tall_split_keys > 1 need them), and keys accumulate in order
      // whatever the split, so the sums are unchanged.
      for (int64_t j = ja, n; j < je; j += n) {
        n = values.Segment(j, je);
        const int64_t jn = j + (j1 - ja);
        Prefetch k_next{k_prefetch, k_prefetch_bytes};
        if (paged) {
          k_next = Prefetch{nullptr, 0};
          if (jn < next_end) {
            n = keys.Segment(jn, jn + n);
            k_next = SegmentPrefetch(keys, jn, std::min(n, next_end - jn), row_bytes);
          }
        }
        ops.accumulate(block_scores + (j - ja), row_count, ld, BlockOf(r, values, j, head.v_scale),
                       n, hv, t.acc + row_begin * hv, k_next.begin, k_next.bytes);
      }
    }
  }
  EndHead(job, span, head);
}

}  // namespace attnrt::cpu::flash
