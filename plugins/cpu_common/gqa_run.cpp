// Driver of the CPU GroupQueryAttention kernels (baseline ISA): workspace layout, the K/V
// append prologue with RoPE and quantize-on-write (reference §3.5, §3.6, §4), and the threading of
// the ISA row pipeline.
#include "gqa_run.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gqa_convert.h"
#include "gqa_quant.h"

namespace attnrt::cpu {
namespace {

// Scratch areas start on cache lines so slots of different threads never share one.
constexpr size_t kAlign = 64;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// New K/V rows are rotated and quantized this many elements at a time, on the stack (H has no
// upper bound). Even, so a chunk never splits an int4 byte.
constexpr int64_t kRowChunk = 64;

size_t SlotBytes(int64_t score_rows, int64_t head_size) {
  return AlignUp(static_cast<size_t>(score_rows) * sizeof(float)) +
         2 * AlignUp(static_cast<size_t>(head_size) * sizeof(float));
}

// Only the float cache types stage (a quantized cache always has present outputs), and none of
// them is wider than float32.
size_t StagingBytes(const attnrt_gqa_problem& p, int64_t rows) {
  return AlignUp(static_cast<size_t>(p.batch_size * p.kv_num_heads * rows * p.head_size) *
                 sizeof(float));
}

int64_t NumThreads(const attnrt_host_services& host) {
  return std::max<int64_t>(1, host.num_threads(host.host_context));
}

// One of the two caches (K or V) the prologue fills.
struct CacheSide {
  void* cache;
  int64_t rows;
  bool holds_past;
  const void* past;
  const void* fresh;
  bool rotate;
  const float* scale;  // quantized: k_scale or v_scale; else NULL
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
    GqaWriteCacheRow(r, src, side.rotate, b, l, scale, ElementAddress(dst, row_bytes, past + l));
  }
  // A shared present keeps its other rows: only the new rows belong to this step.
  if (!side.holds_past && written_end < side.rows) {
    std::memset(ElementAddress(dst, row_bytes, written_end), 0,
                static_cast<size_t>(side.rows - written_end) * row_bytes);
  }
}

// parallel_for body over (b, kv head) units.
void AppendKvUnits(void* user, size_t begin, size_t end) {
  const GqaRun& r = *static_cast<const GqaRun*>(user);
  const CacheSide key{r.key_cache, r.key_cache_rows, r.key_cache_holds_past, r.past_key, r.new_key,
                      r.rotary,    r.k_scale};
  const CacheSide value{r.value_cache, r.value_cache_rows, r.value_cache_holds_past,
                        r.past_value,  r.new_value,        false,
                        r.v_scale};
  for (size_t u = begin; u < end; ++u) {
    const int64_t b = static_cast<int64_t>(u) / r.kv_heads;
    const int64_t kvh = static_cast<int64_t>(u) % r.kv_heads;
    AppendSide(r, key, b, kvh);
    AppendSide(r, value, b, kvh);
  }
}

// Attention rows are handed out in chunks from a shared counter: row costs differ (causal rows grow
// with s), so a static split would idle threads. parallel_for gives no thread index, hence one
// parallel_for index per scratch slot.
struct AttendJob {
  const GqaRun* run;
  GqaAttendRowsFn attend;
  std::byte* scratch;
  size_t slot_bytes;
  int64_t units;
  int64_t chunk;
  std::atomic<int64_t> next{0};
};

void AttendSlots(void* user, size_t begin, size_t end) {
  AttendJob& job = *static_cast<AttendJob*>(user);
  for (size_t slot = begin; slot < end; ++slot) {
    float* scratch = reinterpret_cast<float*>(job.scratch + slot * job.slot_bytes);
    for (;;) {
      const int64_t first = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
      if (first >= job.units) break;
      job.attend(*job.run, scratch, first, std::min(first + job.chunk, job.units));
    }
  }
}

}  // namespace

bool GqaElementTypes(const attnrt_gqa_problem& p, GqaFloatType* type,
                     GqaCacheType* cache_type) noexcept {
  const attnrt_dtype q = p.query_dtype;
  const attnrt_dtype c = p.cache_dtype;
  if (q.lanes != 1 || c.lanes != 1) return false;
  if (q.code == ATTNRT_DTYPE_CODE_FLOAT && q.bits == 32) {
    *type = GqaFloatType::kFloat32;
  } else if (q.code == ATTNRT_DTYPE_CODE_FLOAT && q.bits == 16) {
    *type = GqaFloatType::kFloat16;
  } else if (q.code == ATTNRT_DTYPE_CODE_BFLOAT && q.bits == 16) {
    *type = GqaFloatType::kBFloat16;
  } else {
    return false;
  }
  const attnrt_gqa_attributes& a = p.attributes;
  if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE) {
    if (c.code != q.code || c.bits != q.bits) return false;
    *cache_type = *type == GqaFloatType::kFloat32   ? GqaCacheType::kFloat32
                  : *type == GqaFloatType::kFloat16 ? GqaCacheType::kFloat16
                                                    : GqaCacheType::kBFloat16;
    return true;
  }
  if (a.kv_cache_bit_width == 8 && c.code == ATTNRT_DTYPE_CODE_INT && c.bits == 8) {
    *cache_type = GqaCacheType::kInt8;
  } else if (a.kv_cache_bit_width == 8 && c.code == ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN &&
             c.bits == 8) {
    *cache_type = GqaCacheType::kFloat8E4M3Fn;
  } else if (a.kv_cache_bit_width == 4 && c.code == ATTNRT_DTYPE_CODE_UINT && c.bits == 8) {
    *cache_type = GqaCacheType::kInt4;
  } else {
    return false;
  }
  return true;
}

size_t GqaCacheRowBytes(GqaCacheType type, int64_t head_size) noexcept {
  const auto h = static_cast<size_t>(head_size);
  switch (type) {
    case GqaCacheType::kFloat32:
      return h * sizeof(float);
    case GqaCacheType::kFloat16:
    case GqaCacheType::kBFloat16:
      return h * sizeof(uint16_t);
    case GqaCacheType::kInt8:
    case GqaCacheType::kFloat8E4M3Fn:
      return h;
    case GqaCacheType::kInt4:
      break;
  }
  return h / 2;
}

size_t GqaWorkspaceSize(const attnrt_host_services& host, const attnrt_gqa_problem& p) noexcept {
  // T_b <= present length; without a present, T_b <= P + L with a past and T_b <= S in a first
  // prompt. Only a subsequent prompt or decode with neither past nor present can need more (T_b <=
  // T, a run-time value); RunGqa reports that.
  const int64_t rows = std::max({p.present_sequence_length,
                                 p.past_sequence_length + p.kv_sequence_length, p.sequence_length});
  size_t bytes = kAlign + GqaWindowWorkspaceBytes(p) +
                 static_cast<size_t>(NumThreads(host)) * SlotBytes(rows, p.head_size);
  if (!p.has_present) bytes += 2 * StagingBytes(p, rows);
  return bytes;
}

int64_t GqaRotaryPosition(const GqaRun& r, int64_t b, int64_t s) noexcept {
  if (r.rotary_first_prompt) return (r.position_ids != nullptr ? r.position_ids[0] : 0) + s;
  if (r.position_ids != nullptr) return r.position_ids[b * r.position_ids_stride + s];
  return r.rotary_seqlens_k[b] + 1 - r.seq + s;
}

void GqaRotateRow(const GqaRun& r, const void* x, float* y, int64_t position) noexcept {
  RotateElements(r, x, position, 0, r.head_size, y);
}

void GqaWriteCacheRow(const GqaRun& r, const void* src, bool rotate, int64_t b, int64_t l,
                      const float* scale, void* row) noexcept {
  const int64_t h = r.head_size;
  if (!rotate && scale == nullptr) {  // the cache type is T
    std::memcpy(row, src, r.cache_row_bytes);
    return;
  }
  // The rotated K row is rounded to T (the reference rotates into a T buffer), then stored or
  // quantized from that value.
  const int64_t position = rotate ? GqaRotaryPosition(r, b, l) : 0;
  float chunk[kRowChunk];
  for (int64_t first = 0; first < h; first += kRowChunk) {
    const int64_t n = std::min(kRowChunk, h - first);
    if (rotate) {
      RotateElements(r, src, position, first, n, chunk);
    } else {
      WidenRow(ElementAddress(src, r.element_bytes, first), r.type, chunk, n);
    }
    StoreCacheElements(chunk, n, r.cache_type, scale, r.scale_per_channel, row, first);
  }
}

namespace {

// Every field of GqaRun that follows from args alone (not the K/V caches or the scratch layout).
GqaRun ResolveRun(const attnrt_gqa_args& args) {
  const attnrt_gqa_problem& p = *args.problem;
  const attnrt_gqa_attributes& a = p.attributes;
  const int64_t h = p.head_size;

  GqaRun r{};
  r.batch = p.batch_size;
  r.seq = p.sequence_length;
  r.kv_seq = p.kv_sequence_length;
  r.heads = p.num_heads;
  r.kv_heads = p.kv_num_heads;
  r.group = p.num_heads / p.kv_num_heads;
  r.head_size = h;
  r.total_length = args.total_sequence_length;
  r.seqlens_k = args.seqlens_k;
  r.first_prompt = args.phase == ATTNRT_GQA_PHASE_FIRST_PROMPT;
  r.past_from_seqlens = !r.first_prompt && p.has_past;
  r.rotary_seqlens_k = args.seqlens_k;
  r.rotary_first_prompt = r.first_prompt;

  // supports() declined every problem without element types.
  GqaElementTypes(p, &r.type, &r.cache_type);
  r.element_bytes = r.type == GqaFloatType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
  r.cache_row_bytes = GqaCacheRowBytes(r.cache_type, h);
  r.query = args.query;
  if (p.packed_qkv) {
    r.q_token_stride = (p.num_heads + 2 * p.kv_num_heads) * h;
    r.new_key = ElementAddress(r.query, r.element_bytes, p.num_heads * h);
    r.new_value = ElementAddress(r.new_key, r.element_bytes, p.kv_num_heads * h);
    r.new_kv_token_stride = r.q_token_stride;
  } else {
    r.q_token_stride = p.num_heads * h;
    r.new_key = args.key;
    r.new_value = args.value;
    r.new_kv_token_stride = p.kv_num_heads * h;
  }
  r.past_key = args.past_key;
  r.past_value = args.past_value;
  r.past_length = p.past_sequence_length;
  if (a.k_quant_type != ATTNRT_GQA_QUANT_NONE) {
    r.k_scale = args.k_scale;
    r.v_scale = args.v_scale;
    r.scale_per_channel = a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL;
  }

  r.rotary = a.do_rotary == 1;
  r.rotary_interleaved = a.rotary_interleaved == 1;
  r.cos_cache = args.cos_cache;
  r.sin_cache = args.sin_cache;
  r.rotary_half = p.rotary_dim / 2;
  r.position_ids = args.position_ids;
  r.position_ids_stride = p.position_ids_length;

  r.scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(h));
  r.softcap = a.softcap;
  r.causal = a.causal == 1;
  r.window = a.local_window_size;
  r.attention_bias = args.attention_bias;
  r.bias_broadcast_batch = p.attention_bias_broadcast_batch;
  r.bias_broadcast_heads = p.attention_bias_broadcast_heads;
  r.bias_row_length = p.attention_bias_total_length;
  r.head_sink = args.head_sink;
  r.sink_softmax = a.smooth_softmax == 1 || r.head_sink != nullptr;
  r.qk_output = a.qk_output;
  r.output_qk = args.output_qk;
  r.output = args.output;
  return r;
}

// ---- sliding_window_cache=1 (reference §3.8; ONNX Runtime's PlanWindowedKvCache) -------------
//
// The cache (capacity C = P) holds the most recent resident rows at [0, end); a step appends at
// end. When the append would run past C, whole blocks of gap = C - W + 1 rows are reclaimed from
// the front, so end is a function of the absolute past length alone. A step whose compaction
// would drop rows its own first query still reads (kept < min(P_abs, W - 1)) runs against a
// staging cache of max(end) + S rows instead, and only the surviving tail is written back. RoPE
// has used the absolute positions already; masks depend only on query-key distances, so
// attention on the cache-relative lengths is exact.

// Area layout: a header, the cache-relative seqlens_k (B int32), the steps (B), and with S > 1
// the K and V staging caches of up to (P + S) rows per head (a one-token step never stages).
struct WindowHeader {
  int64_t staging;
  int64_t staged_capacity;
};

struct WindowLayout {
  size_t seqlens;
  size_t steps;
  size_t staged_key;
  size_t staged_value;
  size_t bytes;
};

WindowLayout LayoutWindow(const attnrt_gqa_problem& p) {
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  const size_t batch = static_cast<size_t>(p.batch_size);
  const size_t staging =
      p.sequence_length > 1
          ? AlignUp(static_cast<size_t>(p.batch_size * p.kv_num_heads *
                                        (p.past_sequence_length + p.sequence_length)) *
                    GqaCacheRowBytes(cache_type, p.head_size))
          : 0;
  WindowLayout w{};
  w.seqlens = AlignUp(sizeof(WindowHeader));
  w.steps = w.seqlens + AlignUp(batch * sizeof(int32_t));
  w.staged_key = w.steps + AlignUp(batch * sizeof(GqaWindowStep));
  w.staged_value = w.staged_key + staging;
  w.bytes = w.staged_value + staging;
  return w;
}

// One past the last resident row once `length` tokens have been seen: whole gap-sized blocks are
// reclaimed, keeping it in [C - gap + 1, C] once the cache has filled.
int64_t WindowEnd(int64_t length, int64_t capacity, int64_t gap) {
  if (length <= capacity) return length;
  return length - gap * ((length - capacity + gap - 1) / gap);
}

// Seed (write_back false: past -> present or staging) or write back (staging -> present) the rows
// of the (b, kv head) units [begin, end); rows are moved verbatim (any cache type).
struct WindowMove {
  const GqaRun* run;
  bool write_back;
};

void MoveWindowSide(const GqaRun& r, const void* past, void* present, void* cache, int64_t unit,
                    bool write_back) {
  const int64_t b = unit / r.kv_heads;
  const GqaWindowStep& step = r.window_steps[b];
  const size_t row_bytes = r.cache_row_bytes;
  const int64_t capacity = r.window_capacity;
  if (!write_back) {
    if (step.seed_rows <= 0) return;
    const void* src = ElementAddress(past, row_bytes, unit * capacity + step.seed_offset);
    void* dst = ElementAddress(cache, row_bytes, unit * r.key_cache_rows);
    // memmove: compacting a present that is past's memory shifts rows down within one buffer.
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(step.seed_rows) * row_bytes);
    return;
  }
  void* dst = ElementAddress(present, row_bytes, unit * capacity);
  int64_t resident = step.seed_rows + r.seq;
  if (r.window_staging) {
    resident = step.write_rows;
    if (resident > 0) {
      std::memcpy(dst,
                  ElementAddress(cache, row_bytes, unit * r.key_cache_rows + step.write_offset),
                  static_cast<size_t>(resident) * row_bytes);
    }
  }
  // A present of its own gets zeros after the resident rows (ONNX Runtime leaves them
  // unspecified); one that is past's memory keeps them.
  if (!r.present_shares_past && resident < capacity) {
    std::memset(ElementAddress(dst, row_bytes, resident), 0,
                static_cast<size_t>(capacity - resident) * row_bytes);
  }
}

void MoveWindowUnits(void* user, size_t begin, size_t end) {
  const WindowMove& m = *static_cast<const WindowMove*>(user);
  const GqaRun& r = *m.run;
  for (size_t u = begin; u < end; ++u) {
    const auto unit = static_cast<int64_t>(u);
    MoveWindowSide(r, r.past_key, r.present_key, r.key_cache, unit, m.write_back);
    MoveWindowSide(r, r.past_value, r.present_value, r.value_cache, unit, m.write_back);
  }
}

// Points `r` at the planned step in `area` (GqaWindowPlan ran) with present_key/present_value as
// the real cache, and seeds the cache attention reads with the resident rows.
void BeginWindow(const attnrt_host_services& host, const attnrt_gqa_args& args, void* area,
                 GqaRun& r) {
  const attnrt_gqa_problem& p = *args.problem;
  const WindowLayout w = LayoutWindow(p);
  auto* base = static_cast<std::byte*>(area);
  const auto* header = reinterpret_cast<const WindowHeader*>(base);
  r.windowed = true;
  r.window_staging = header->staging != 0;
  r.window_capacity = p.past_sequence_length;
  r.window_steps = reinterpret_cast<const GqaWindowStep*>(base + w.steps);
  r.present_key = args.present_key;
  r.present_value = args.present_value;
  r.present_shares_past = args.present_shares_past;
  r.seqlens_k = reinterpret_cast<const int32_t*>(base + w.seqlens);
  r.first_prompt = false;
  r.past_from_seqlens = true;
  int64_t max_total = 1;
  for (int64_t b = 0; b < r.batch; ++b)
    max_total = std::max<int64_t>(max_total, r.seqlens_k[b] + 1);
  r.total_length = max_total;
  if (r.window_staging) {
    r.key_cache = base + w.staged_key;
    r.value_cache = base + w.staged_value;
    r.key_cache_rows = header->staged_capacity;
  } else {
    r.key_cache = args.present_key;
    r.value_cache = args.present_value;
    r.key_cache_rows = r.window_capacity;
  }
  r.value_cache_rows = r.key_cache_rows;
  r.key_cache_holds_past = true;
  r.value_cache_holds_past = true;
  WindowMove move{&r, false};
  host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1,
                    MoveWindowUnits, &move);
}

}  // namespace

size_t GqaWindowWorkspaceBytes(const attnrt_gqa_problem& p) noexcept {
  return p.attributes.sliding_window_cache == 1 ? LayoutWindow(p).bytes : 0;
}

const int32_t* GqaWindowPlan(const attnrt_gqa_args& args, void* area) noexcept {
  const attnrt_gqa_problem& p = *args.problem;
  const WindowLayout w = LayoutWindow(p);
  auto* base = static_cast<std::byte*>(area);
  auto* header = reinterpret_cast<WindowHeader*>(base);
  auto* seqlens = reinterpret_cast<int32_t*>(base + w.seqlens);
  auto* steps = reinterpret_cast<GqaWindowStep*>(base + w.steps);
  const int64_t seq = p.sequence_length;
  const int64_t capacity = p.past_sequence_length;
  const int64_t window = p.attributes.local_window_size;
  // Validation guarantees capacity >= window > 0, so gap >= 1.
  const int64_t gap = capacity - window + 1;
  int64_t max_resident = 0;
  bool staging = false;
  for (int64_t b = 0; b < p.batch_size; ++b) {
    const int64_t past = std::max<int64_t>(int64_t{args.seqlens_k[b]} + 1 - seq, 0);
    const int64_t end_before = WindowEnd(past, capacity, gap);
    const int64_t kept = WindowEnd(past + seq, capacity, gap) - seq;
    // The first new query reaches W - 1 rows back: compacting in place must keep them.
    staging = staging || kept < std::min<int64_t>(past, window - 1);
    steps[b] = GqaWindowStep{end_before - kept, end_before, 0, 0};
    max_resident = std::max(max_resident, end_before);
  }
  header->staging = staging ? 1 : 0;
  header->staged_capacity = staging ? max_resident + seq : capacity;
  for (int64_t b = 0; b < p.batch_size; ++b) {
    GqaWindowStep& step = steps[b];
    if (staging) {
      step.write_offset = step.seed_offset;
      step.write_rows = step.seed_rows + seq - step.seed_offset;
      step.seed_offset = 0;
    } else {
      step.seed_rows -= step.seed_offset;
    }
    seqlens[b] = static_cast<int32_t>(step.seed_rows + seq - 1);
  }
  return seqlens;
}

void GqaWindowFinish(const attnrt_host_services& host, const GqaRun& r) noexcept {
  if (!r.windowed) return;
  WindowMove move{&r, true};
  host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1,
                    MoveWindowUnits, &move);
}

GqaRun GqaResolveRun(const attnrt_gqa_args& args) noexcept { return ResolveRun(args); }

GqaRun GqaStagePresentKv(const attnrt_host_services& host, const attnrt_gqa_args& args,
                         void* window_area) noexcept {
  GqaRun r = ResolveRun(args);
  r.key_cache = static_cast<float*>(args.present_key);
  r.value_cache = static_cast<float*>(args.present_value);
  r.key_cache_rows = args.problem->present_sequence_length;
  r.value_cache_rows = args.problem->present_sequence_length;
  r.key_cache_holds_past = args.present_shares_past;
  r.value_cache_holds_past = args.present_shares_past;
  if (args.problem->attributes.sliding_window_cache == 1) BeginWindow(host, args, window_area, r);
  host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1, AppendKvUnits,
                    &r);
  return r;
}

namespace {

// The per-slot scratch of a run whose key rows are at most max_total long: sets the scratch
// offsets of `r` and returns the bytes of one slot.
size_t LayOutSlots(GqaRun& r, int64_t max_total) {
  const int64_t h = r.head_size;
  r.scratch_query_offset =
      static_cast<int64_t>(AlignUp(static_cast<size_t>(max_total) * sizeof(float)) / sizeof(float));
  r.scratch_output_offset =
      r.scratch_query_offset +
      static_cast<int64_t>(AlignUp(static_cast<size_t>(h) * sizeof(float)) / sizeof(float));
  return SlotBytes(max_total, h);
}

int64_t LongestKeyRow(const int32_t* seqlens, int64_t batch) {
  int64_t max_total = 1;
  for (int64_t b = 0; b < batch; ++b) max_total = std::max<int64_t>(max_total, seqlens[b] + 1);
  return max_total;
}

void ReportSmallWorkspace(char* error, size_t error_capacity, size_t workspace_size,
                          int64_t max_total, size_t needed) {
  if (error != nullptr && error_capacity > 0) {
    std::snprintf(error, error_capacity,
                  "workspace of %zu bytes is too small: this run (longest key row T_b = %lld) "
                  "needs at least %zu bytes",
                  workspace_size, static_cast<long long>(max_total), needed);
  }
}

// The 64-byte aligned start of the workspace and the bytes available from there.
std::byte* AlignedWorkspace(const attnrt_gqa_args& args, size_t* available) {
  const auto base = reinterpret_cast<uintptr_t>(args.workspace);
  const uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
  const size_t lead = args.workspace != nullptr ? static_cast<size_t>(aligned - base) : 0;
  *available = args.workspace_size > lead ? args.workspace_size - lead : 0;
  return reinterpret_cast<std::byte*>(aligned);
}

// Runs `attend` over every (b, n, s) unit of `r` on at most slots_fit scratch slots at `scratch`.
void AttendOnSlots(const attnrt_host_services& host, const GqaRun& r, std::byte* scratch,
                   size_t slot_bytes, size_t slots_fit, GqaAttendRowsFn attend) {
  const int64_t units = r.batch * r.heads * r.seq;
  if (units == 0) return;
  const int64_t slots = std::min({NumThreads(host), units, static_cast<int64_t>(slots_fit)});
  AttendJob job;
  job.run = &r;
  job.attend = attend;
  job.scratch = scratch;
  job.slot_bytes = slot_bytes;
  job.units = units;
  job.chunk = std::max<int64_t>(1, units / (slots * 8));
  host.parallel_for(host.host_context, static_cast<size_t>(slots), 1, AttendSlots, &job);
}

}  // namespace

int32_t RunGqa(const attnrt_host_services& host, const attnrt_gqa_args& args,
               GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept {
  const attnrt_gqa_problem& p = *args.problem;
  GqaRun r = ResolveRun(args);

  // Workspace: [window plan and staging][K staging][V staging][slot 0 scratch][slot 1 scratch]...,
  // each 64-byte aligned.
  size_t available = 0;
  std::byte* area = AlignedWorkspace(args, &available);
  const size_t window_bytes = GqaWindowWorkspaceBytes(p);
  const bool windowed = p.attributes.sliding_window_cache == 1;
  const bool window_fits = args.workspace != nullptr && available >= window_bytes;
  // Attention's T_b: cache-relative with sliding_window_cache=1.
  const int32_t* seqlens = windowed && window_fits ? GqaWindowPlan(args, area) : args.seqlens_k;

  const int64_t max_total = LongestKeyRow(seqlens, r.batch);
  const size_t slot_bytes = LayOutSlots(r, max_total);
  const size_t key_staging = args.present_key != nullptr ? 0 : StagingBytes(p, max_total);
  const size_t value_staging = args.present_value != nullptr ? 0 : StagingBytes(p, max_total);
  const size_t staging = window_bytes + key_staging + value_staging;
  const size_t slots_fit = available > staging ? (available - staging) / slot_bytes : 0;
  if (args.workspace == nullptr || slots_fit == 0) {
    ReportSmallWorkspace(error, error_capacity, args.workspace_size, max_total,
                         kAlign + staging + slot_bytes);
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  std::byte* kv_area = area + window_bytes;
  r.key_cache = args.present_key != nullptr ? args.present_key : static_cast<void*>(kv_area);
  r.value_cache = args.present_value != nullptr ? args.present_value
                                                : static_cast<void*>(kv_area + key_staging);
  r.key_cache_rows = args.present_key != nullptr ? p.present_sequence_length : max_total;
  r.value_cache_rows = args.present_value != nullptr ? p.present_sequence_length : max_total;
  r.key_cache_holds_past = args.present_key != nullptr && args.present_shares_past;
  r.value_cache_holds_past = args.present_value != nullptr && args.present_shares_past;
  if (windowed) BeginWindow(host, args, area, r);

  host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1, AppendKvUnits,
                    &r);
  AttendOnSlots(host, r, area + staging, slot_bytes, slots_fit, attend);
  GqaWindowFinish(host, r);
  return ATTNRT_OK;
}

int32_t RunGqaStaged(const attnrt_host_services& host, const attnrt_gqa_args& args,
                     GqaStageFn stage, const void* user, GqaAttendRowsFn attend, char* error,
                     size_t error_capacity) noexcept {
  // Workspace: [slot 0 scratch][slot 1 scratch]..., 64-byte aligned; no staging (the caches are
  // the kernel's own).
  size_t available = 0;
  std::byte* area = AlignedWorkspace(args, &available);
  GqaRun layout{};
  layout.head_size = args.problem->head_size;
  const int64_t max_total = LongestKeyRow(args.seqlens_k, args.problem->batch_size);
  const size_t slot_bytes = LayOutSlots(layout, max_total);
  const size_t slots_fit = available / slot_bytes;
  if (args.workspace == nullptr || slots_fit == 0) {
    ReportSmallWorkspace(error, error_capacity, args.workspace_size, max_total,
                         kAlign + slot_bytes);
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  GqaRun r = stage(host, user);
  r.scratch_query_offset = layout.scratch_query_offset;
  r.scratch_output_offset = layout.scratch_output_offset;
  AttendOnSlots(host, r, area, slot_bytes, slots_fit, attend);
  return ATTNRT_OK;
}

}  // namespace attnrt::cpu
