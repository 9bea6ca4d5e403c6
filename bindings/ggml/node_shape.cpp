// A FLASH_ATTN_EXT node's types, shapes and strides as attnrt takes them (see node_shape.h).
#include "node_shape.h"

#include <algorithm>
#include <cmath>

#include "convert.h"
#include "views.h"

namespace attnrt_ggml {
namespace {

constexpr int64_t kMaxBlockSize = ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE;

// attnrt's types for a K/V type: a float cache is read as its own type and q, the bias, the sinks
// and the output take K's (as ggml's CPU backend rounds q to it); ggml's Q8_0/Q4_0 blocks are
// attnrt's PER_BLOCK_32 cache (uint8 rows of head_size / 32 blocks) under a float32 query. K and V
// of two types are attnrt's independent cache types, each read as its own type, under a float32
// query.
struct CacheTypes {
  attnrt_dtype dtype;        // T
  attnrt_dtype cache_dtype;  // T_CACHE
  int32_t kv_bits;           // 0: not quantized; 8: Q8_0; 4: Q4_0
};

bool CacheTypesOf(ggml_type type, CacheTypes* out) {
  constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
  constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
  switch (type) {
    case GGML_TYPE_F32:
      *out = {kF32, kF32, 0};
      return true;
    case GGML_TYPE_F16:
      out->dtype = out->cache_dtype = ATTNRT_DTYPE_FLOAT16;
      out->kv_bits = 0;
      return true;
    case GGML_TYPE_BF16:
      out->dtype = out->cache_dtype = ATTNRT_DTYPE_BFLOAT16;
      out->kv_bits = 0;
      return true;
    case GGML_TYPE_Q8_0:
      *out = {kF32, kU8, 8};
      return true;
    case GGML_TYPE_Q4_0:
      *out = {kF32, kU8, 4};
      return true;
    default:
      return false;
  }
}

// The largest block size in [1, 1024] that divides T, so that the pool is exactly the view's rows.
int64_t BlockSizeFor(int64_t t) {
  for (int64_t bs = std::min(t, kMaxBlockSize); bs > 1; --bs) {
    if (t % bs == 0) return bs;
  }
  return 1;
}

// Element strides of a pool over a view [D, T, Hkv] with byte strides nb1 (token), nb2 (head). The
// pools are read in place through typed pointers: every stream's view must start on an element
// boundary, as attnrt requires (ggml lets a view start at any byte).
bool PoolStrides(const ggml_tensor* t, const char* who, const NodeShape& s, attnrt_dtype dtype,
                 int64_t row_width, int64_t* out, std::string* reason) {
  // The pool's element (block-quantized rows are uint8 pools: strides in bytes, any start).
  const size_t es = dtype.bits / 8;
  if (t->nb[1] % es != 0 || t->nb[2] % es != 0 || t->nb[3] % es != 0) {
    *reason = std::string(who) + ": strides " + std::to_string(t->nb[1]) + ", " +
              std::to_string(t->nb[2]) + ", " + std::to_string(t->nb[3]) + " bytes are not whole " +
              ggml_type_name(t->type) + " elements";
    return false;
  }
  if (const size_t off = es == 1 ? 0 : Misalignment(t); off != 0) {
    *reason = std::string(who) + ": starts " + std::to_string(off) + " bytes past a " +
              ggml_type_name(t->type) + " element boundary";
    return false;
  }
  const int64_t token = static_cast<int64_t>(t->nb[1] / es);
  const int64_t head = static_cast<int64_t>(t->nb[2] / es);
  if (!DistinctElements(token, s.total, head, s.kv_num_heads, row_width)) {
    *reason = std::string(who) + ": token stride " + std::to_string(token) + " and head stride " +
              std::to_string(head) + " elements put two elements of " + std::to_string(s.total) +
              " tokens x " + std::to_string(s.kv_num_heads) + " heads x " +
              std::to_string(row_width) + " in one place";
    return false;
  }
  out[0] = s.block_size * token;
  if (s.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BSNH) {
    out[1] = token;
    out[2] = head;
  } else {
    out[1] = head;
    out[2] = token;
  }
  out[3] = 1;
  return true;
}

}  // namespace

bool Describe(const ggml_tensor* node, NodeShape* s, std::string* reason) {
  const ggml_tensor* q = node->src[0];
  const ggml_tensor* k = node->src[1];
  const ggml_tensor* v = node->src[2];
  const ggml_tensor* mask = node->src[3];
  const ggml_tensor* sinks = node->src[4];
  if (q == nullptr || k == nullptr || v == nullptr) {
    *reason = "q, k or v is missing";
    return false;
  }
  if (q->type != GGML_TYPE_F32) {
    *reason = std::string("q is ") + ggml_type_name(q->type) + ", not f32";
    return false;
  }
  CacheTypes types{};
  if (!CacheTypesOf(k->type, &types)) {
    *reason = std::string("K type ") + ggml_type_name(k->type) +
              " is not served (f32, f16, bf16, q8_0 and q4_0 are)";
    return false;
  }
  s->dtype = types.dtype;
  s->cache_dtype = types.cache_dtype;
  s->kv_bits = types.kv_bits;
  CacheTypes v_types{};
  if (!CacheTypesOf(v->type, &v_types)) {
    *reason = std::string("V type ") + ggml_type_name(v->type) +
              " is not served (f32, f16, bf16, q8_0 and q4_0 are)";
    return false;
  }
  s->two_types = v->type != k->type;
  s->v_cache_dtype = v_types.cache_dtype;
  s->v_bits = v_types.kv_bits;
  // With two types q, the bias, the sinks and the output stay float32 (as ggml's CPU backend, which
  // sums P·V in float32 for a V that is not F16, writes them): a float16 output would drop what an
  // F32, BF16 or block V holds (values below float16's normal range, its 11 bits).
  if (s->two_types) {
    if (types.dtype.bits == 16) s->q_rounding = types.dtype;
    s->dtype = ATTNRT_DTYPE_FLOAT32;
  }
  if (node->type != GGML_TYPE_F32 || !ggml_is_contiguous(node)) {
    *reason = "the output is not a contiguous f32 tensor";
    return false;
  }
  s->head_size = q->ne[0];
  s->v_head_size = v->ne[0];
  s->rows = q->ne[1];
  s->num_heads = q->ne[2];
  s->streams = q->ne[3];
  s->total = k->ne[1];
  s->kv_num_heads = k->ne[2];
  // A row in pool elements: its head size, or the bytes of its blocks.
  const auto row_width = [&](const ggml_tensor* t, int64_t head_size) {
    return ggml_is_quantized(t->type) ? static_cast<int64_t>(ggml_row_size(t->type, head_size))
                                      : head_size;
  };
  s->row_width = row_width(k, s->head_size);
  s->v_row_width = row_width(v, s->v_head_size);
  // V may be narrower or wider than q and K (MLA-style models): attnrt's value head size.
  if (k->ne[0] != s->head_size) {
    *reason = "K head size " + std::to_string(k->ne[0]) + " differs from q's " +
              std::to_string(s->head_size);
    return false;
  }
  if (node->ne[0] != s->v_head_size) {
    *reason = "the output rows have " + std::to_string(node->ne[0]) + " elements, V rows " +
              std::to_string(s->v_head_size);
    return false;
  }
  if (v->ne[1] != s->total || v->ne[2] != s->kv_num_heads || k->ne[3] != s->streams ||
      v->ne[3] != s->streams) {
    *reason = "K and V shapes differ";
    return false;
  }
  if (s->kv_num_heads <= 0 || s->num_heads % s->kv_num_heads != 0 || s->rows <= 0 ||
      s->total <= 0) {
    *reason = "the head counts or lengths are not those of grouped-query attention";
    return false;
  }
  if (q->nb[0] != sizeof(float) || k->nb[0] != ggml_type_size(k->type) ||
      v->nb[0] != ggml_type_size(v->type)) {
    *reason = "q, K or V rows are not contiguous";
    return false;
  }
  // A sparse mask (ggml_flash_attn_ext_set_n_kv_max: at most n_kv_max visible keys per row, as
  // DeepSeek's sparse attention makes) is served by gathering each row's keys (sparse_mask.h), as
  // ggml's CPU backend reads only those; one mask for all heads, so that the heads share them.
  if (const int32_t n_kv_max = OpParamInt(node, 4);
      n_kv_max > 0 && n_kv_max < s->total && mask != nullptr) {
    if (mask->ne[2] != 1) {
      *reason = "a sparse mask (n_kv_max " + std::to_string(n_kv_max) + ") with " +
                std::to_string(mask->ne[2]) + " head slices (one shared by the heads is served)";
      return false;
    }
    s->sparse = true;
    s->n_kv_max = n_kv_max;
  }
  s->scale = OpParam(node, 0);
  const float max_bias = OpParam(node, 1);
  const float logit_softcap = OpParam(node, 2);
  if (!std::isfinite(max_bias) || max_bias < 0.0f || (max_bias > 0.0f && mask == nullptr)) {
    *reason =
        "max_bias " + std::to_string(max_bias) + " is not ALiBi's (finite, >= 0, with a mask)";
    return false;
  }
  s->max_bias = max_bias;
  if (!std::isfinite(s->scale) || s->scale == 0.0f || !std::isfinite(logit_softcap)) {
    *reason = "scale " + std::to_string(s->scale) + " or logit_softcap " +
              std::to_string(logit_softcap) + " is not a finite nonzero scale";
    return false;
  }
  // ggml: c * tanh(scale * q.k / c), odd in c, so the softcap is |c|; attnrt applies softcap *
  // tanh(x / softcap) to x = scale * q.k.
  s->softcap = std::fabs(logit_softcap);
  if (mask != nullptr) {
    if (mask->type != GGML_TYPE_F16 || !ggml_is_contiguous(mask) || mask->ne[0] < s->total ||
        mask->ne[1] < s->rows || mask->ne[2] <= 0 || s->num_heads % mask->ne[2] != 0 ||
        mask->ne[3] <= 0 || s->streams % mask->ne[3] != 0) {
      *reason = "the mask is not a contiguous f16 [>= n_kv, >= n_q, H / r, B / r] tensor";
      return false;
    }
    // With ALiBi each head scales the mask by its own slope: one bias per head.
    s->bias_heads = mask->ne[2] == 1 && s->max_bias == 0.0f ? 1 : s->num_heads;
  }
  if (sinks != nullptr) {
    if (sinks->type != GGML_TYPE_F32 || sinks->ne[0] != s->num_heads ||
        !ggml_is_contiguous(sinks)) {
      *reason = "the sinks are not a contiguous f32 [H] tensor";
      return false;
    }
    s->sinks = true;
  }
  // ggml skips a key where slope * mask is -inf: under an ALiBi slope that underflows to 0 (a
  // max_bias in the hundreds) it reads every key (0 * -inf is NaN), as the dense path does.
  for (int64_t h = 0; s->sparse && s->max_bias > 0.0f && h < s->num_heads; ++h) {
    s->sparse = AlibiSlope(s->max_bias, s->num_heads, h) > 0.0f;
  }
  s->rows_per_call = std::min(s->rows, s->total);
  if (s->sparse) {
    // One-row sequences: as many per call as keep the gathered bias within kMaxBiasBytes.
    const int64_t row_bytes = std::max<int64_t>(1, s->bias_heads) * s->n_kv_max * s->dtype.bits / 8;
    s->rows_per_call = std::min(s->rows, std::max<int64_t>(1, kMaxBiasBytes / row_bytes));
  }
  s->block_size = s->sparse ? 1 : BlockSizeFor(s->total);
  s->num_blocks = s->total / s->block_size;
  // Read as they lie: a kv head's rows contiguous (BNSH, ggml's own layout) or a token's heads
  // contiguous (BSNH, llama.cpp's KV cache).
  s->kv_layout = (s->kv_num_heads > 1 && k->nb[1] < k->nb[2]) ? ATTNRT_PAGED_KV_LAYOUT_BNSH
                                                              : ATTNRT_PAGED_KV_LAYOUT_BSNH;
  s->pool_shape[0] = s->num_blocks;
  s->pool_shape[1] = s->kv_layout == ATTNRT_PAGED_KV_LAYOUT_BSNH ? s->block_size : s->kv_num_heads;
  s->pool_shape[2] = s->kv_layout == ATTNRT_PAGED_KV_LAYOUT_BSNH ? s->kv_num_heads : s->block_size;
  s->pool_shape[3] = s->row_width;
  std::copy(s->pool_shape, s->pool_shape + 4, s->v_pool_shape);
  s->v_pool_shape[3] = s->v_row_width;
  return PoolStrides(k, "K", *s, s->cache_dtype, s->row_width, s->k_strides, reason) &&
         PoolStrides(v, "V", *s, s->v_cache_dtype, s->v_row_width, s->v_strides, reason);
}

}  // namespace attnrt_ggml
