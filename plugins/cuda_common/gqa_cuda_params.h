// Parameters the CUDA GroupQueryAttention kernels receive, shared by host code (g++) and device
// code (nvcc): plain structs, no CUDA types. Shapes use gqa.h's notation (B, S, L, N, Nkv, H,
// G = N / Nkv, C = rows of the cache buffer per (batch, kv head)).
#pragma once

#include <cstdint>

// Functions compiled for both sides (host tests and device kernels).
#if defined(__CUDACC__)
#define ATTNRT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ATTNRT_HOST_DEVICE inline
#endif

namespace attnrt::cuda {

enum class ElemType : int32_t { kFloat16 = 0, kBFloat16 = 1 };
enum class CacheKind : int32_t { kSameAsQuery = 0, kInt8 = 1, kFp8E4M3 = 2 };

// Per-batch lengths, computed on the host from seqlens_k (ONNX Runtime's phases and present rules)
// and copied to the device (four int32 per batch, in this order).
struct BatchInfo {
  int32_t offset;     // causal offset; new rows go to cache rows [offset, offset + L)
  int32_t rows;       // cache rows [0, rows) hold this batch's keys (T_b, or fewer without a past)
  int32_t copy_rows;  // rows copied from past into a separate present/scratch cache
  int32_t rope_base;  // rotary position of new token s is rope_base + s (without position_ids)
};

// BatchInfo of every batch, passed by value in the kernel parameters when there are at most
// kInlineBatches (no host-to-device copy in the decode loop), else from device memory.
constexpr int32_t kInlineBatches = 32;
struct BatchTable {
  const BatchInfo* device = nullptr;  // B entries in device memory; NULL: use `entries`
  BatchInfo entries[kInlineBatches] = {};
};

// The attention step: queries, the K/V cache after the append, masks and outputs.
struct AttentionParams {
  ElemType elem = ElemType::kFloat16;
  CacheKind cache = CacheKind::kSameAsQuery;
  int32_t batch_size = 0;       // B
  int32_t sequence_length = 0;  // S
  int32_t num_heads = 0;        // N
  int32_t kv_num_heads = 0;     // Nkv
  int32_t head_size = 0;        // H
  int32_t cache_rows = 0;       // C
  int32_t max_rows = 0;         // max over batches of BatchInfo::rows
  const void* q = nullptr;      // query element (b, s, n, d) at (b*S + s)*q_row + n*H + d
  int64_t q_row = 0;
  const void* k_cache = nullptr;  // BNSH (B, Nkv, C, H)
  const void* v_cache = nullptr;
  const float* k_scale = nullptr;  // device, one float (PER_TENSOR), int8/fp8 caches only
  const float* v_scale = nullptr;
  BatchTable batch;
  void* out = nullptr;                // (B, S, N*H)
  const void* bias = nullptr;         // (bias_batch, bias_heads, S, T); NULL = none
  int32_t bias_batch = 0;             // B or 1
  int32_t bias_heads = 0;             // N or 1
  int32_t total_sequence_length = 0;  // T (bias columns)
  const void* head_sink = nullptr;    // (N), element type T; NULL = none
  bool smooth = false;                // smooth_softmax or head_sink: the extra sink logit
  bool causal = true;
  int32_t local_window_size = -1;  // W >= 0 enables the window of W keys
  float alpha = 1.0f;              // score scale
  float softcap = 0.0f;            // > 0 enables softcap * tanh(x / softcap)
  // Split-KV (decode): keys [split * keys_per_split, ...) per split; num_splits == 1 writes out.
  int32_t num_splits = 1;
  int32_t keys_per_split = 0;
  float* partial_out = nullptr;  // (B, N, splits, H) unnormalized, relative to partial max
  float* partial_ml = nullptr;   // (B, N, splits, 2): max and sum of exponentials
  float* scores = nullptr;       // unfused: (B, N, S, max_rows) fp32
};

// The prologue: rotary on Q and new K, past rows copied, new rows appended (quantized when the
// cache is int8/fp8).
struct PrologueParams {
  ElemType elem = ElemType::kFloat16;
  CacheKind cache = CacheKind::kSameAsQuery;
  int32_t batch_size = 0;
  int32_t sequence_length = 0;
  int32_t kv_sequence_length = 0;  // L (0: shared KV, nothing appended)
  int32_t num_heads = 0;
  int32_t kv_num_heads = 0;
  int32_t head_size = 0;
  int32_t past_rows = 0;        // P (rows of the past buffer)
  int32_t cache_rows = 0;       // C (rows of the destination cache)
  const void* query = nullptr;  // query element (b, s, n, d) at (b*S + s)*q_row + n*H + d
  int64_t q_row = 0;
  const void* key = nullptr;  // new key (b, l, kh, d) at (b*L + l)*kv_row + kv_head_base + kh*H + d
  const void* value = nullptr;
  int64_t kv_row = 0;
  int64_t k_head_base = 0;         // N*H for packed QKV, else 0
  int64_t v_head_base = 0;         // (N + Nkv)*H for packed QKV, else 0
  const void* past_key = nullptr;  // (B, Nkv, P, H); NULL = no copy
  const void* past_value = nullptr;
  void* k_cache = nullptr;  // (B, Nkv, C, H)
  void* v_cache = nullptr;
  bool copy_past = false;          // copy rows [0, copy_rows) from past into the cache
  const float* k_scale = nullptr;  // device; int8/fp8 caches
  const float* v_scale = nullptr;
  BatchTable batch;
  // Rotary (ONNX Runtime's rotary rule); q_rotated receives rotated Q as (B, S, N, H).
  bool rotary = false;
  bool interleaved = false;
  bool first_prompt = false;
  int32_t rotary_half = 0;          // R / 2
  int32_t rotary_cache_length = 0;  // M
  const void* cos_cache = nullptr;
  const void* sin_cache = nullptr;
  const int64_t* position_ids = nullptr;  // device; NULL = none
  int64_t position_ids_row = 0;
  void* q_rotated = nullptr;
};

// Visible key range [lo, hi) of query row s of one batch (ONNX Runtime's causal and window masks):
// keys [0, rows) exist; causal rows see keys up to their position offset + s; a window of W keys
// ends at the row's last visible key.
ATTNRT_HOST_DEVICE void KeyWindow(const AttentionParams& p, const BatchInfo& bi, int s, int* lo,
                                  int* hi) {
  const int position_end = bi.offset + s + 1;
  const int ecl = p.causal ? (position_end < bi.rows ? position_end : bi.rows) : bi.rows;
  *hi = ecl;
  *lo = (p.local_window_size >= 0 && ecl > p.local_window_size) ? ecl - p.local_window_size : 0;
}

}  // namespace attnrt::cuda
