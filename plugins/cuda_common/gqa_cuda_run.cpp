// Run pipeline of the CUDA GroupQueryAttention kernels (see gqa_cuda_run.h).
#include "gqa_cuda_run.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace attnrt::cuda {
namespace {

bool IsBf16(attnrt_dtype d) { return d.code == ATTNRT_DTYPE_CODE_BFLOAT; }

CacheKind CacheKindOf(const attnrt_gqa_problem& p) {
  if (p.attributes.k_quant_type == ATTNRT_GQA_QUANT_NONE) return CacheKind::kSameAsQuery;
  return p.cache_dtype.code == ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN ? CacheKind::kFp8E4M3
                                                               : CacheKind::kInt8;
}

int64_t CacheElemBytes(const attnrt_gqa_problem& p) {
  return CacheKindOf(p) == CacheKind::kSameAsQuery ? 2 : 1;
}

int32_t CudaFailure(const char* step, int code, char* error, size_t capacity) {
  const auto e = static_cast<cudaError_t>(code);
  WriteMessage(
      error, capacity,
      std::string(step) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  return ATTNRT_ERROR_INTERNAL;
}

int32_t Run(const PluginContext& context, const attnrt_gqa_args& a, KernelKind kind,
            AttentionLauncher launcher, char* error, size_t capacity) {
  if (!context.probe.available) {
    WriteMessage(error, capacity, "CUDA unavailable: " + context.probe.reason);
    return ATTNRT_ERROR_UNAVAILABLE;
  }
  const attnrt_gqa_problem& p = *a.problem;
  const attnrt_gqa_attributes& attr = p.attributes;
  const WorkspaceLayout ws = ComputeWorkspace(p, kind);
  if (a.workspace_size < ws.total || (ws.total > 0 && a.workspace == nullptr)) {
    WriteMessage(error, capacity,
                 "workspace: expected at least " + std::to_string(ws.total) + " bytes, got " +
                     std::to_string(a.workspace_size));
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  const std::string misaligned = MisalignedPointer(a);
  if (!misaligned.empty()) {
    WriteMessage(error, capacity, misaligned + " (the CUDA kernels load 16-byte vectors)");
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }
  // attnrt_plan_run allocates host memory for a NULL workspace, and a caller may pass host
  // tensors labelled as CUDA ones: the kernels would fault on them, so say so instead.
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"workspace", a.workspace},
                                  std::pair<const char*, const void*>{"output", a.output}}) {
    if (ptr == nullptr) continue;
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
    if (status != cudaSuccess ||
        (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)) {
      (void)cudaGetLastError();
      WriteMessage(error, capacity,
                   std::string(name) +
                       " is not CUDA device memory (pass cudaMalloc'ed memory; a NULL workspace "
                       "makes the runtime allocate host memory)");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
  }
  auto* stream = static_cast<cudaStream_t>(a.stream);
  char* base = static_cast<char*>(a.workspace);

  const std::vector<BatchInfo> batch = BuildBatchInfo(p, a.seqlens_k, a.total_sequence_length);
  int32_t max_rows = 0;
  for (const BatchInfo& bi : batch) max_rows = std::max(max_rows, bi.rows);
  BatchTable table;
  cudaError_t e = cudaSuccess;
  if (batch.size() <= static_cast<size_t>(kInlineBatches)) {
    std::copy(batch.begin(), batch.end(), table.entries);
  } else {
    auto* batch_dev = reinterpret_cast<BatchInfo*>(base + ws.batch_info);
    // From pageable memory: the call returns once `batch` has been staged.
    e = cudaMemcpyAsync(batch_dev, batch.data(), batch.size() * sizeof(BatchInfo),
                        cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) return CudaFailure("copying per-batch lengths", e, error, capacity);
    table.device = batch_dev;
  }

  const int64_t B = p.batch_size, S = p.sequence_length, N = p.num_heads, Nkv = p.kv_num_heads;
  const int64_t H = p.head_size, P = p.has_past ? p.past_sequence_length : 0;
  const int64_t L = p.packed_qkv ? S : p.kv_sequence_length;
  const int64_t C = CacheCapacity(p);
  void* k_cache = p.has_present ? a.present_key : base + ws.k_scratch;
  void* v_cache = p.has_present ? a.present_value : base + ws.v_scratch;
  const bool shares = p.has_present && a.present_shares_past;
  if (!shares) {
    // A separate present (or scratch) cache starts as zeros, then receives the past rows.
    const size_t bytes = static_cast<size_t>(B * Nkv * C * H * CacheElemBytes(p));
    e = cudaMemsetAsync(k_cache, 0, bytes, stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(v_cache, 0, bytes, stream);
    if (e != cudaSuccess) return CudaFailure("zero-filling the present cache", e, error, capacity);
  }

  PrologueParams pro;
  pro.elem = IsBf16(p.query_dtype) ? ElemType::kBFloat16 : ElemType::kFloat16;
  pro.cache = CacheKindOf(p);
  pro.batch_size = static_cast<int32_t>(B);
  pro.sequence_length = static_cast<int32_t>(S);
  pro.kv_sequence_length = static_cast<int32_t>(L);
  pro.num_heads = static_cast<int32_t>(N);
  pro.kv_num_heads = static_cast<int32_t>(Nkv);
  pro.head_size = static_cast<int32_t>(H);
  pro.past_rows = static_cast<int32_t>(P);
  pro.cache_rows = static_cast<int32_t>(C);
  pro.query = a.query;
  pro.q_row = p.packed_qkv ? (N + 2 * Nkv) * H : N * H;
  pro.key = p.packed_qkv ? a.query : a.key;
  pro.value = p.packed_qkv ? a.query : a.value;
  pro.kv_row = p.packed_qkv ? (N + 2 * Nkv) * H : Nkv * H;
  pro.k_head_base = p.packed_qkv ? N * H : 0;
  pro.v_head_base = p.packed_qkv ? (N + Nkv) * H : 0;
  pro.past_key = a.past_key;
  pro.past_value = a.past_value;
  pro.k_cache = k_cache;
  pro.v_cache = v_cache;
  pro.copy_past = !shares && p.has_past && a.past_key != nullptr;
  pro.k_scale = a.k_scale;
  pro.v_scale = a.v_scale;
  pro.batch = table;
  pro.rotary = attr.do_rotary == 1;
  pro.interleaved = attr.rotary_interleaved == 1;
  pro.first_prompt = a.phase == ATTNRT_GQA_PHASE_FIRST_PROMPT;
  pro.rotary_half = static_cast<int32_t>(p.rotary_dim / 2);
  pro.rotary_cache_length = static_cast<int32_t>(p.rotary_cache_length);
  pro.cos_cache = a.cos_cache;
  pro.sin_cache = a.sin_cache;
  pro.position_ids = a.position_ids;
  pro.position_ids_row = p.position_ids_length;
  pro.q_rotated = pro.rotary ? base + ws.q_rotated : nullptr;
  int code = LaunchPrologue(pro, stream);
  if (code != 0) return CudaFailure("prologue (rotary, cache append)", code, error, capacity);

  AttentionParams ap;
  ap.elem = pro.elem;
  ap.cache = pro.cache;
  ap.batch_size = static_cast<int32_t>(B);
  ap.sequence_length = static_cast<int32_t>(S);
  ap.num_heads = static_cast<int32_t>(N);
  ap.kv_num_heads = static_cast<int32_t>(Nkv);
  ap.head_size = static_cast<int32_t>(H);
  ap.cache_rows = static_cast<int32_t>(C);
  ap.max_rows = max_rows;
  ap.q = pro.rotary ? pro.q_rotated : a.query;
  ap.q_row = pro.rotary ? N * H : pro.q_row;
  ap.k_cache = k_cache;
  ap.v_cache = v_cache;
  ap.k_scale = a.k_scale;
  ap.v_scale = a.v_scale;
  ap.batch = table;
  ap.out = a.output;
  ap.bias = a.attention_bias;
  ap.bias_batch = p.attention_bias_broadcast_batch ? 1 : static_cast<int32_t>(B);
  ap.bias_heads = p.attention_bias_broadcast_heads ? 1 : static_cast<int32_t>(N);
  ap.total_sequence_length = a.total_sequence_length;
  ap.head_sink = a.head_sink;
  ap.smooth = attr.smooth_softmax == 1 || p.has_head_sink;
  ap.causal = attr.causal == 1;
  ap.local_window_size = attr.local_window_size;
  ap.alpha = attr.scale != 0.0f ? attr.scale : 1.0f / std::sqrt(static_cast<float>(H));
  ap.softcap = attr.softcap > 0.0f ? attr.softcap : 0.0f;
  if (kind == KernelKind::kXqa || kind == KernelKind::kFlashDecode) {
    const int64_t tiles = B * Nkv * DecodeQueryTiles(N / Nkv);
    const SplitPlan plan = PlanSplits(tiles, max_rows, context.probe.caps.sm_count, MaxSplits(C));
    ap.num_splits = plan.num_splits;
    ap.keys_per_split = plan.keys_per_split;
    ap.partial_out = reinterpret_cast<float*>(base + ws.partial_out);
    ap.partial_ml = reinterpret_cast<float*>(base + ws.partial_ml);
  }
  if (kind == KernelKind::kUnfused) ap.scores = reinterpret_cast<float*>(base + ws.scores);
  code = launcher(ap, stream);
  if (code != 0) return CudaFailure("attention kernel", code, error, capacity);
  return ATTNRT_OK;
}

}  // namespace

int32_t RunGqa(void* plugin_context, const void* args, KernelKind kind, AttentionLauncher launcher,
               char* error, size_t error_capacity) noexcept {
  try {
    if (plugin_context == nullptr || args == nullptr) {
      WriteMessage(error, error_capacity, "run: plugin_context and args are required");
      return ATTNRT_ERROR_INVALID_ARGUMENT;
    }
    const auto& a = *static_cast<const attnrt_gqa_args*>(args);
    if (a.struct_size < sizeof(attnrt_gqa_args) || a.problem == nullptr) {
      WriteMessage(error, error_capacity, "run: attnrt_gqa_args is too small or has no problem");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    return Run(*static_cast<const PluginContext*>(plugin_context), a, kind, launcher, error,
               error_capacity);
  } catch (...) {
    WriteMessage(error, error_capacity, "run: unexpected exception (out of memory?)");
    return ATTNRT_ERROR_INTERNAL;
  }
}

}  // namespace attnrt::cuda
