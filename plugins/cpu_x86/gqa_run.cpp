// Driver of the cpu_x86 GroupQueryAttention kernels (baseline ISA): workspace layout, the K/V
// append prologue with RoPE (reference §3.5, §3.6), and the threading of the ISA row pipeline.
#include "gqa_run.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace attnrt::cpu_x86 {
namespace {

// Scratch areas start on cache lines so slots of different threads never share one.
constexpr size_t kAlign = 64;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t SlotBytes(int64_t score_rows, int64_t head_size) {
  return AlignUp(static_cast<size_t>(score_rows) * sizeof(float)) +
         AlignUp(static_cast<size_t>(head_size) * sizeof(float));
}

size_t StagingBytes(const attnrt_gqa_problem& p, int64_t rows) {
  return AlignUp(static_cast<size_t>(p.batch_size * p.kv_num_heads * rows * p.head_size) *
                 sizeof(float));
}

int64_t NumThreads(const attnrt_host_services& host) {
  return std::max<int64_t>(1, host.num_threads(host.host_context));
}

// One of the two caches (K or V) the prologue fills.
struct CacheSide {
  float* cache;
  int64_t rows;
  bool holds_past;
  const float* past;
  const float* fresh;
  bool rotate;
};

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
  float* dst = side.cache + (b * r.kv_heads + kvh) * side.rows * h;
  if (!side.holds_past && past_rows > 0) {
    const float* src = side.past + (b * r.kv_heads + kvh) * r.past_length * h;
    std::memcpy(dst, src, static_cast<size_t>(past_rows * h) * sizeof(float));
  }
  for (int64_t l = 0; l < r.kv_seq && past + l < side.rows; ++l) {
    const float* src = side.fresh + (b * r.kv_seq + l) * r.new_kv_token_stride + kvh * h;
    float* row = dst + (past + l) * h;
    if (side.rotate) {
      GqaRotateRow(r, src, row, GqaRotaryPosition(r, b, l));
    } else {
      std::memcpy(row, src, static_cast<size_t>(h) * sizeof(float));
    }
  }
  // A shared present keeps its other rows: only the new rows belong to this step.
  if (!side.holds_past && written_end < side.rows) {
    std::memset(dst + written_end * h, 0,
                static_cast<size_t>((side.rows - written_end) * h) * sizeof(float));
  }
}

// parallel_for body over (b, kv head) units.
void AppendKvUnits(void* user, size_t begin, size_t end) {
  const GqaRun& r = *static_cast<const GqaRun*>(user);
  const CacheSide key{r.key_cache, r.key_cache_rows, r.key_cache_holds_past,
                      r.past_key,  r.new_key,        r.rotary};
  const CacheSide value{r.value_cache, r.value_cache_rows, r.value_cache_holds_past,
                        r.past_value,  r.new_value,        false};
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

size_t GqaWorkspaceSize(const attnrt_host_services& host, const attnrt_gqa_problem& p) noexcept {
  // T_b <= present length; without a present, T_b <= P + L with a past and T_b <= S in a first
  // prompt. Only a subsequent prompt or decode with neither past nor present can need more (T_b <=
  // T, a run-time value); RunGqa reports that.
  const int64_t rows = std::max({p.present_sequence_length,
                                 p.past_sequence_length + p.kv_sequence_length, p.sequence_length});
  size_t bytes = kAlign + static_cast<size_t>(NumThreads(host)) * SlotBytes(rows, p.head_size);
  if (!p.has_present) bytes += 2 * StagingBytes(p, rows);
  return bytes;
}

int64_t GqaRotaryPosition(const GqaRun& r, int64_t b, int64_t s) noexcept {
  if (r.first_prompt) return (r.position_ids != nullptr ? r.position_ids[0] : 0) + s;
  if (r.position_ids != nullptr) return r.position_ids[b * r.position_ids_stride + s];
  return r.seqlens_k[b] + 1 - r.seq + s;
}

void GqaRotateRow(const GqaRun& r, const float* x, float* y, int64_t position) noexcept {
  const int64_t half = r.rotary_half;
  const float* cos_row = r.cos_cache + position * half;
  const float* sin_row = r.sin_cache + position * half;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i0 = r.rotary_interleaved ? 2 * i : i;
    const int64_t i1 = r.rotary_interleaved ? 2 * i + 1 : i + half;
    const float x0 = x[i0];
    const float x1 = x[i1];
    y[i0] = x0 * cos_row[i] - x1 * sin_row[i];
    y[i1] = x1 * cos_row[i] + x0 * sin_row[i];
  }
  std::memcpy(y + 2 * half, x + 2 * half,
              static_cast<size_t>(r.head_size - 2 * half) * sizeof(float));
}

int32_t RunGqa(const attnrt_host_services& host, const attnrt_gqa_args& args,
               GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept {
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

  r.query = static_cast<const float*>(args.query);
  if (p.packed_qkv) {
    r.q_token_stride = (p.num_heads + 2 * p.kv_num_heads) * h;
    r.new_key = r.query + p.num_heads * h;
    r.new_value = r.new_key + p.kv_num_heads * h;
    r.new_kv_token_stride = r.q_token_stride;
  } else {
    r.q_token_stride = p.num_heads * h;
    r.new_key = static_cast<const float*>(args.key);
    r.new_value = static_cast<const float*>(args.value);
    r.new_kv_token_stride = p.kv_num_heads * h;
  }
  r.past_key = static_cast<const float*>(args.past_key);
  r.past_value = static_cast<const float*>(args.past_value);
  r.past_length = p.past_sequence_length;

  r.rotary = a.do_rotary == 1;
  r.rotary_interleaved = a.rotary_interleaved == 1;
  r.cos_cache = static_cast<const float*>(args.cos_cache);
  r.sin_cache = static_cast<const float*>(args.sin_cache);
  r.rotary_half = p.rotary_dim / 2;
  r.position_ids = args.position_ids;
  r.position_ids_stride = p.position_ids_length;

  r.scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(h));
  r.softcap = a.softcap;
  r.causal = a.causal == 1;
  r.window = a.local_window_size;
  r.attention_bias = static_cast<const float*>(args.attention_bias);
  r.bias_broadcast_batch = p.attention_bias_broadcast_batch;
  r.bias_broadcast_heads = p.attention_bias_broadcast_heads;
  r.bias_row_length = p.attention_bias_total_length;
  r.head_sink = static_cast<const float*>(args.head_sink);
  r.sink_softmax = a.smooth_softmax == 1 || r.head_sink != nullptr;
  r.qk_output = a.qk_output;
  r.output_qk = static_cast<float*>(args.output_qk);
  r.output = static_cast<float*>(args.output);

  int64_t max_total = 1;
  for (int64_t b = 0; b < r.batch; ++b)
    max_total = std::max<int64_t>(max_total, r.seqlens_k[b] + 1);
  r.scratch_query_offset =
      static_cast<int64_t>(AlignUp(static_cast<size_t>(max_total) * sizeof(float)) / sizeof(float));

  // Workspace: [K staging][V staging][slot 0 scratch][slot 1 scratch]..., each 64-byte aligned.
  const auto base = reinterpret_cast<uintptr_t>(args.workspace);
  const uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
  const size_t lead = args.workspace != nullptr ? static_cast<size_t>(aligned - base) : 0;
  const size_t available = args.workspace_size > lead ? args.workspace_size - lead : 0;
  const size_t key_staging = args.present_key != nullptr ? 0 : StagingBytes(p, max_total);
  const size_t value_staging = args.present_value != nullptr ? 0 : StagingBytes(p, max_total);
  const size_t slot_bytes = SlotBytes(max_total, h);
  const size_t staging = key_staging + value_staging;
  const size_t slots_fit = available > staging ? (available - staging) / slot_bytes : 0;
  if (args.workspace == nullptr || slots_fit == 0) {
    if (error != nullptr && error_capacity > 0) {
      std::snprintf(error, error_capacity,
                    "workspace of %zu bytes is too small: this run (longest key row T_b = %lld) "
                    "needs at least %zu bytes",
                    args.workspace_size, static_cast<long long>(max_total),
                    kAlign + staging + slot_bytes);
    }
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  auto* area = reinterpret_cast<std::byte*>(aligned);
  r.key_cache = args.present_key != nullptr ? static_cast<float*>(args.present_key)
                                            : reinterpret_cast<float*>(area);
  r.value_cache = args.present_value != nullptr ? static_cast<float*>(args.present_value)
                                                : reinterpret_cast<float*>(area + key_staging);
  r.key_cache_rows = args.present_key != nullptr ? p.present_sequence_length : max_total;
  r.value_cache_rows = args.present_value != nullptr ? p.present_sequence_length : max_total;
  r.key_cache_holds_past = args.present_key != nullptr && args.present_shares_past;
  r.value_cache_holds_past = args.present_value != nullptr && args.present_shares_past;

  host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1, AppendKvUnits,
                    &r);

  const int64_t units = r.batch * r.heads * r.seq;
  if (units == 0) return ATTNRT_OK;
  const int64_t slots = std::min({NumThreads(host), units, static_cast<int64_t>(slots_fit)});
  AttendJob job;
  job.run = &r;
  job.attend = attend;
  job.scratch = area + staging;
  job.slot_bytes = slot_bytes;
  job.units = units;
  job.chunk = std::max<int64_t>(1, units / (slots * 8));
  host.parallel_for(host.host_context, static_cast<size_t>(slots), 1, AttendSlots, &job);
  return ATTNRT_OK;
}

}  // namespace attnrt::cpu_x86
