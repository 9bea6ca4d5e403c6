// Driver of the CPU GroupQueryAttention kernels (baseline ISA): element types, workspace layout,
// the resolved run, and the threading of the K/V append prologue (gqa_append.cpp) and of the ISA
// row pipeline; the sliding_window_cache=1 plan is in gqa_window.cpp.
#include "gqa_run.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "gqa_block_format.h"
#include "gqa_convert.h"
#include "gqa_run_internal.h"

namespace attnrt::cpu {

// The driver's pieces in gqa_append.cpp and gqa_window.cpp (gqa_run_internal.h).
using namespace gqa_driver;

size_t gqa_driver::AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

namespace {

size_t SlotBytes(int64_t score_rows, int64_t head_size, int64_t v_head_size) {
  return AlignUp(static_cast<size_t>(score_rows) * sizeof(float)) +
         AlignUp(static_cast<size_t>(head_size) * sizeof(float)) +
         AlignUp(static_cast<size_t>(v_head_size) * sizeof(float));
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
  if (a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32) {
    if (c.code != ATTNRT_DTYPE_CODE_UINT || c.bits != 8) return false;
    if (a.kv_cache_bit_width != 8 && a.kv_cache_bit_width != 4) return false;
    *cache_type = a.kv_cache_bit_width == 8 ? GqaCacheType::kBlockQ8_0 : GqaCacheType::kBlockQ4_0;
    return true;
  }
  if (a.kv_cache_bit_width == 8 && c.code == ATTNRT_DTYPE_CODE_INT && c.bits == 8) {
    *cache_type = GqaCacheType::kInt8;
  } else if (a.kv_cache_bit_width == 8 && c.code == ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN &&
             c.bits == 8) {
    *cache_type = GqaCacheType::kFloat8E4M3Fn;
  } else if (a.kv_cache_bit_width == 8 && c.code == ATTNRT_DTYPE_CODE_FLOAT8_E5M2 && c.bits == 8) {
    *cache_type = GqaCacheType::kFloat8E5M2;
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
    case GqaCacheType::kFloat8E5M2:
      return h;
    case GqaCacheType::kBlockQ8_0:
    case GqaCacheType::kBlockQ4_0:
      return h / static_cast<size_t>(kBlockElements) * static_cast<size_t>(BlockBytes(type));
    case GqaCacheType::kInt4:
      break;
  }
  return h / 2;
}

size_t GqaWorkspaceSize(const attnrt_host_services& host, const attnrt_gqa_problem& p) noexcept {
  return GqaWorkspaceSize(host, p, p.head_size);
}

size_t GqaWorkspaceSize(const attnrt_host_services& host, const attnrt_gqa_problem& p,
                        int64_t v_head_size) noexcept {
  // T_b <= present length; without a present, T_b <= P + L with a past and T_b <= S in a first
  // prompt. Without past and present after the first prompt, T_b may reach T (a run-time value),
  // but only the L new rows exist (GqaExistingRows).
  const int64_t rows = std::max({p.present_sequence_length,
                                 p.past_sequence_length + p.kv_sequence_length, p.sequence_length});
  size_t bytes = kAlign + GqaWindowWorkspaceBytes(p) +
                 static_cast<size_t>(NumThreads(host)) * SlotBytes(rows, p.head_size, v_head_size);
  if (!p.has_present) bytes += 2 * StagingBytes(p, rows);
  return bytes;
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

  // supports() declined every problem without element types; a paged key cache of independent
  // types (not T's) is resolved by the paged staging.
  GqaElementTypes(p, &r.type, &r.cache_type);
  r.element_bytes = r.type == GqaFloatType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
  r.cache_row_bytes = GqaCacheRowBytes(r.cache_type, h);
  r.v_head_size = h;
  r.value_cache_type = r.cache_type;
  r.value_cache_row_bytes = r.cache_row_bytes;
  r.query = args.query;
  if (p.packed_qkv) {
    r.q_token_stride = (p.num_heads + 2 * p.kv_num_heads) * h;
    r.new_key = ElementAddress(r.query, r.element_bytes, p.num_heads * h);
    r.new_value = ElementAddress(r.new_key, r.element_bytes, p.kv_num_heads * h);
    r.new_kv_token_stride = r.q_token_stride;
    r.new_value_token_stride = r.q_token_stride;
  } else {
    r.q_token_stride = p.num_heads * h;
    r.new_key = args.key;
    r.new_value = args.value;
    r.new_kv_token_stride = p.kv_num_heads * h;
    r.new_value_token_stride = p.kv_num_heads * h;
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
  r.window_right = -1;  // the varlen op's stage sets its own
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

}  // namespace

GqaRun GqaResolveRun(const attnrt_gqa_args& args) noexcept { return ResolveRun(args); }

void GqaRoundToType(float* x, int64_t n, GqaFloatType type) noexcept {
  if (type == GqaFloatType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) x[i] = BFloat16ToFloat(FloatToBFloat16(x[i]));
  } else if (type == GqaFloatType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) x[i] = HalfToFloat(FloatToHalf(x[i]));
  }
}

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
  return SlotBytes(max_total, h, r.v_head_size);
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

  // Rows a key row reads (sliding_window_cache=1 reads from the past whatever the phase).
  const int64_t max_total = windowed ? LongestKeyRow(seqlens, r.batch)
                                     : GqaExistingRows(r, LongestKeyRow(seqlens, r.batch));
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
                     int64_t v_head_size, GqaStageFn stage, const void* user,
                     GqaAttendRowsFn attend, char* error, size_t error_capacity) noexcept {
  // Workspace: [slot 0 scratch][slot 1 scratch]..., 64-byte aligned; no staging (the caches are
  // the kernel's own).
  size_t available = 0;
  std::byte* area = AlignedWorkspace(args, &available);
  GqaRun layout{};
  layout.head_size = args.problem->head_size;
  layout.v_head_size = v_head_size;
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

int64_t GqaQueryLength(const GqaRun& run, int64_t b) noexcept {
  return run.query_start_loc != nullptr ? run.query_start_loc[b + 1] - run.query_start_loc[b]
                                        : run.seq;
}

int64_t GqaQueryRow(const GqaRun& run, int64_t b, int64_t s) noexcept {
  return run.query_start_loc != nullptr ? run.query_start_loc[b] + s : b * run.seq + s;
}

}  // namespace attnrt::cpu
