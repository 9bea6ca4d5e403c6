// A FLASH_ATTN_EXT node as attnrt's paged GroupQueryAttention takes it: the types, shapes and
// strides of its calls, decided from the node alone (docs/llama-cpp.md).
#ifndef ATTNRT_GGML_NODE_SHAPE_H_
#define ATTNRT_GGML_NODE_SHAPE_H_

#include <cstdint>
#include <string>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"
#include "ggml.h"

namespace attnrt_ggml {

// The most bytes of converted or gathered attention_bias one call makes: rows are taken in calls
// that keep within it.
constexpr int64_t kMaxBiasBytes = int64_t{16} << 20;

// One FLASH_ATTN_EXT node as attnrt's paged GroupQueryAttention takes it: shapes only.
struct NodeShape {
  int64_t head_size = 0;       // D: of q and K
  int64_t v_head_size = 0;     // Dv: of V and the output (attnrt's value head size)
  int64_t rows = 0;            // S: query rows per stream
  int64_t num_heads = 0;       // H
  int64_t streams = 0;         // B: ggml's dimension 3, one attnrt call (or more) each
  int64_t total = 0;           // T: keys per stream
  int64_t kv_num_heads = 0;    // Hkv
  int64_t rows_per_call = 0;   // min(S, T): attnrt takes at most T query rows per sequence
  attnrt_dtype dtype{};        // T: of query, bias, sinks and output (CacheTypes)
  attnrt_dtype cache_dtype{};  // of key_cache
  int32_t kv_bits = 0;         // PER_BLOCK_32's kv_cache_bit_width (Q8_0 8, Q4_0 4); 0 otherwise
  // V's own type when it is not K's (llama.cpp's -ctk/-ctv): attnrt's independent K/V cache types
  // (v_cache_bit_width, attnrt/ops/paged_gqa.h). Else v_cache_dtype = cache_dtype, v_bits =
  // kv_bits.
  bool two_types = false;
  attnrt_dtype v_cache_dtype{};  // of value_cache
  int32_t v_bits = 0;            // value_cache's bit width (Q8_0 8, Q4_0 4); 0 otherwise
  // Two types under an F16/BF16 K: q is rounded to K's type (as ggml's CPU backend converts q to
  // K's vec_dot type) and held in the float32 query. bits 0: q as it is.
  attnrt_dtype q_rounding{};
  int64_t row_width = 0;    // a K row in pool elements: head_size, or its blocks' bytes
  int64_t v_row_width = 0;  // a V row: v_head_size, or its blocks' bytes
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  int32_t kv_layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  int64_t k_strides[4] = {};
  int64_t v_strides[4] = {};
  int64_t pool_shape[4] = {};    // of key_cache
  int64_t v_pool_shape[4] = {};  // of value_cache: pool_shape but for its rows
  float scale = 0;
  float softcap = 0;
  int64_t bias_heads = 0;  // 0: no mask; 1: shared by the heads; H: one per head
  float max_bias = 0;      // ALiBi: head h adds slope(h) * mask
  bool sinks = false;
  // A sparse mask (sparse_mask.h): each query row is a sequence of its visible keys over pages of
  // one token; n_kv_max (the keys a row sees at most) sizes the planned block_table.
  bool sparse = false;
  int64_t n_kv_max = 0;
};

// Describes `node` (a FLASH_ATTN_EXT node) as attnrt takes it, or says in *reason why attnrt does
// not.
bool Describe(const ggml_tensor* node, NodeShape* s, std::string* reason);

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_NODE_SHAPE_H_
