// gqa.flash: tiled GroupQueryAttention with an online softmax (FlashAttention-2 on the CPU, as ONNX
// Runtime's MlasFlashAttentionGQA and, for quantized caches, MlasFlashAttentionQuantizedKV;
// ONNX Runtime's GroupQueryAttention CPU implementation notes). The driver
// (gqa_flash.cpp, baseline ISA) tiles over (batch, kv head, query block) so one pass over a K/V
// block serves all G = N/Nkv query heads of the group, and splits the key range across threads for
// decode (flash decoding). The ISA files (gqa_flash_<isa>.cpp) provide the block operations.
// Queries of every T are widened to float32 (a float16/bfloat16 query is never quantized), K/V
// tiles of every accepted cache type are dequantized inside the block operations, and the output
// is rounded to T once, to nearest even (as ONNX Runtime's flash paths).
//
// Included by the ISA files, so it declares only plain structs and out-of-line functions (see
// gqa_run.h for why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/plugin.h"
#include "gqa_run.h"

namespace attnrt::cpu {

// K or V rows of one block as the block operations read them: row j starts at
// data + j * row_bytes and holds H elements of `type`; element d is float(x) for the float types
// and q * scale (rounded to float32, as a dequantized row would hold it) for the quantized ones,
// with scale[0] per tensor or scale[d] per channel (the scales of this kv head; NULL for float
// types). The operations dequantize on the fly and never write the cache.
struct GqaFlashKv {
  const void* data;
  size_t row_bytes;
  GqaCacheType type;
  const float* scale;
  bool per_channel;
};

// Block operations of one ISA. A tile holds `rows` float32 query rows of H floats (contiguous), a
// score/probability block of `rows` x `keys` floats with row stride ld, and a float32 accumulator
// of `rows` x Hv floats (the value head size; H unless a paged run says otherwise). H and Hv are
// multiples of 8 (validation rejects other head sizes); each call is given the one it works on.
struct GqaFlashOps {
  // scores[i*ld + j] = scale * <q[i*h ..], k row j> for i < rows, j < keys; meanwhile
  // [prefetch, prefetch + prefetch_bytes) is brought towards the cache (the V rows of this block).
  void (*scores)(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h,
                 float scale, float* scores, int64_t ld, const void* prefetch,
                 size_t prefetch_bytes);
  // acc[i*h ..] += sum_j p[i*ld + j] * v row j for i < rows, j < keys; meanwhile
  // [prefetch, prefetch + prefetch_bytes) is brought towards the cache (the next K block).
  void (*accumulate)(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                     int64_t h, float* acc, const void* prefetch, size_t prefetch_bytes);
  // out[j*h + d] = element d of row j, as float32 (dequantized), for j < keys, d < h.
  void (*dequantize)(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out);
  // max of x[0, n), n >= 1.
  float (*max)(const float* x, int64_t n);
  // x = exp(x - m) over [0, n); returns the sum.
  float (*exp_sum)(float* x, int64_t n, float m);
  // y *= alpha over [0, n).
  void (*scale)(float alpha, float* y, int64_t n);
  // Scores and accumulate over keys [0, n) for tiles taller than kFusedRows (8) rows, split into
  // several calls at multiples of tall_split_keys keys from the first call's start, give the bits
  // of one call: 1 when any split does (every score alone, every key's product added in key
  // order); AMX-BF16's pack keys in pairs and in chunks of 32 from the start of each call, so 32.
  // Every set of operations must keep the bits under any split for shorter tiles (decodes of
  // groups of up to 8 heads), which a paged decode hands over a call per cache block segment.
  // Over a paged cache, tall tiles are read a call per cache block (in place, or in a grouped
  // decode) only where the splits fall on such multiples; elsewhere each key block is copied
  // into one float32 block first, so that the calls are the contiguous cache's.
  int32_t tall_split_keys;
  // Optional (NULL: a scalar loop). For runs whose probabilities are rounded to the query type T
  // before P·V (the paged ops' p_precision INPUT): x[0, n) = float(T(x)) in place, to nearest
  // even.
  void (*round)(float* x, int64_t n, GqaFloatType type);
  // Optional (NULL: a scalar loop). dst[0, n) = float(src[0, n)), src of type `type` (the query
  // rows a tile reads).
  void (*widen)(const void* src, GqaFloatType type, float* dst, int64_t n);
  // Optional (NULL: a scalar loop). dst[0, n) = T(src[0, n) * inv), the product rounded to
  // float32, then to T to nearest even (gqa_convert.h's NarrowRow: an output row).
  void (*narrow)(const float* src, float inv, GqaFloatType type, void* dst, int64_t n);
};

// Plain C++ loops; baseline ISA, runs on every CPU of the plugin's architecture.
extern const GqaFlashOps kGqaFlashOpsScalar;

// A paged K/V cache (attnrt/ops/paged_gqa.h) for the same flash algorithm: token j of batch b,
// kv head h, with x = block_table[b * max_blocks_per_seq + j / block_size], starts at byte
// x * block + (j % block_size) * token + h * head of its pool (`key`, `value`: compact BSNH or
// BNSH pools, or strided views). The tiles, key blocks, split-KV
// chunks and block operations are those of the contiguous cache; a key block that spans cache
// blocks is handed to the block operations one cache block at a time, which computes every score
// and accumulates every key in the same order, so outputs are bitwise those of the contiguous
// cache. `stage` appends this step's new rows into the pools and returns the resolved run
// (key_cache / value_cache = the pools); it is called after the workspace checks, so a failing run
// writes nothing.
struct GqaFlashPaging {
  const int32_t* block_table;
  int64_t max_blocks_per_seq;
  int64_t block_size;
  GqaPoolStrides key;
  GqaPoolStrides value;
  GqaRun (*stage)(const attnrt_host_services& host, const void* user);
  const void* user;
  // The value head size Hv (attnrt/ops/paged_gqa.h, ABI 1.8): V tiles, accumulators, partials and
  // output rows are Hv wide; the run `stage` returns says the same (GqaRun::v_head_size).
  int64_t v_head_size;
};

// gqa.flash over a paged cache; `args` as for the contiguous kernel except the K/V caches, which
// `paging` supplies. plugin_context is a PluginContext*.
int32_t GqaFlashRunPaged(void* plugin_context, const attnrt_gqa_args& args,
                         const GqaFlashPaging& paging, const GqaFlashOps& ops, char* error,
                         size_t error_capacity) noexcept;

// attnrt_kernel_desc::workspace_size of every gqa.flash kernel; plugin_context is a PluginContext*.
size_t GqaFlashWorkspaceSize(void* plugin_context, const void* problem) noexcept;

// Workspace of GqaFlashRunPaged for the paged problem's `gqa` part and `paging`'s block layout
// and size (its table and stage are not read): a decode may hold the tiles of several kv heads per
// slot (a cache block is read once for all of them).
size_t GqaFlashPagedWorkspaceSize(void* plugin_context, const attnrt_gqa_problem& p,
                                  const GqaFlashPaging& paging, const GqaFlashOps& ops) noexcept;

// attnrt_kernel_desc::run of a gqa.flash kernel whose block operations are `ops`; plugin_context is
// a PluginContext*. The caller's supports() has accepted the problem (ISA included).
int32_t GqaFlashRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                    const GqaFlashOps& ops) noexcept;

}  // namespace attnrt::cpu
