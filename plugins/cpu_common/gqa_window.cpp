// sliding_window_cache=1 in the CPU GroupQueryAttention driver (baseline ISA): the plan of one step
// over the window-sized ring cache (ONNX Runtime's PlanWindowedKvCache and WindowedCacheEnd), the
// seeding of the cache attention reads, and the write-back into present
// (docs/gqa-semantics.md, "Window-sized ring cache").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gqa_convert.h"
#include "gqa_run.h"
#include "gqa_run_internal.h"

namespace attnrt::cpu {

using namespace gqa_driver;

namespace {

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

}  // namespace

// Points `r` at the planned step in `area` (GqaWindowPlan ran) with present_key/present_value as
// the real cache, and seeds the cache attention reads with the resident rows.
void gqa_driver::BeginWindow(const attnrt_host_services& host, const attnrt_gqa_args& args,
                             void* area, GqaRun& r) {
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

}  // namespace attnrt::cpu
