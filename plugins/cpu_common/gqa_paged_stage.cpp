// The shared part of the CPU plugins' paged GroupQueryAttention kernels (gqa_paged_stage.h):
// struct size checks and the append of new K/V rows into the block pools. Baseline ISA.
#include "gqa_paged_stage.h"

#include <string>

#include "gqa_convert.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// Pool row of token j of batch b, kv head kvh.
void* PoolRow(void* pool, const GqaPoolStrides& strides, const attnrt_paged_gqa_args& a, int64_t b,
              int64_t kvh, int64_t j) {
  const attnrt_paged_gqa_problem& p = *a.problem;
  const int64_t block = a.block_table[b * p.max_blocks_per_seq + j / p.block_size];
  return static_cast<unsigned char*>(pool) + static_cast<size_t>(block) * strides.block +
         static_cast<size_t>(j % p.block_size) * strides.token +
         static_cast<size_t>(kvh) * strides.head;
}

struct AppendJob {
  const attnrt_paged_gqa_args* args;
  const GqaRun* run;
};

// New rows of (b, kv head) units: token P_b + l for l < L (the sequence's query rows when packed,
// its key_start_loc rows, tokens T_b - k_len_b + l, when given),
// written only below T_b (a first prompt's right padding is not stored: no query reads it, and its
// slots may be unallocated) and not where slot_mapping says -1.
void AppendUnits(void* user, size_t begin, size_t end) {
  const AppendJob& job = *static_cast<const AppendJob*>(user);
  const GqaRun& r = *job.run;
  const int64_t h = r.head_size;
  const int64_t hv = r.v_head_size;
  for (size_t u = begin; u < end; ++u) {
    const int64_t b = static_cast<int64_t>(u) / r.kv_heads;
    const int64_t kvh = static_cast<int64_t>(u) % r.kv_heads;
    const int64_t total = r.seqlens_k[b] + 1;
    // A packed sequence's new rows are its query rows, or its key_start_loc run: the last k_len_b
    // tokens of its context; a padded batch has L per sequence.
    const bool own_rows = r.key_start_loc != nullptr;
    const bool varlen = r.varlen_key_positions;
    const int64_t key_begin = own_rows ? r.key_start_loc[b] : 0;
    const int64_t new_rows = own_rows                       ? r.key_start_loc[b + 1] - key_begin
                             : r.query_start_loc != nullptr ? GqaQueryLength(r, b)
                                                            : r.kv_seq;
    const int64_t past = own_rows              ? total - new_rows
                         : r.past_from_seqlens ? total - GqaQueryLength(r, b)
                                               : 0;
    const float* k_scale =
        r.k_scale != nullptr && r.scale_per_channel ? r.k_scale + kvh * h : r.k_scale;
    const float* v_scale =
        r.v_scale != nullptr && r.scale_per_channel ? r.v_scale + kvh * hv : r.v_scale;
    for (int64_t l = 0; l < new_rows && past + l < total; ++l) {
      const int64_t row = own_rows                       ? key_begin + l
                          : r.query_start_loc != nullptr ? GqaQueryRow(r, b, l)
                                                         : b * r.kv_seq + l;
      if (r.slot_mapping != nullptr && r.slot_mapping[row] == -1) continue;
      const int64_t key_offset = row * r.new_kv_token_stride + kvh * h;
      const int64_t value_offset = row * r.new_value_token_stride + kvh * hv;
      // A packed row's rotary position (ABI 1.12): key_positions[row], else its token position;
      // a padded batch's follows ONNX Runtime's rule.
      const int64_t position = !r.rotary                    ? 0
                               : r.key_positions != nullptr ? r.key_positions[row]
                               : varlen                     ? past + l
                                                            : GqaRotaryPosition(r, b, l);
      GqaWriteCacheRow(r, ElementAddress(r.new_key, r.element_bytes, key_offset), r.rotary,
                       position, k_scale,
                       PoolRow(r.key_cache, r.key_strides, *job.args, b, kvh, past + l), false);
      GqaWriteCacheRow(r, ElementAddress(r.new_value, r.element_bytes, value_offset), false, 0,
                       v_scale,
                       PoolRow(r.value_cache, r.value_strides, *job.args, b, kvh, past + l), true);
    }
  }
}

}  // namespace

bool PagedGqaProblemFits(const void* problem, char* reason, size_t reason_capacity) {
  const auto& p = *static_cast<const attnrt_paged_gqa_problem*>(problem);
  if (p.struct_size >= sizeof(attnrt_paged_gqa_problem)) return true;
  WriteMessage(reason, reason_capacity,
               "attnrt_paged_gqa_problem struct_size " + std::to_string(p.struct_size) +
                   " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_problem)) +
                   " bytes this kernel was built with");
  return false;
}

int32_t PagedGqaArgsFit(const attnrt_paged_gqa_args& a, char* error, size_t error_capacity) {
  if (a.struct_size >= sizeof(attnrt_paged_gqa_args)) return ATTNRT_OK;
  WriteMessage(error, error_capacity,
               "attnrt_paged_gqa_args struct_size " + std::to_string(a.struct_size) +
                   " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_args)) +
                   " bytes this kernel was built with");
  return ATTNRT_ERROR_ABI_MISMATCH;
}

namespace {

bool SameDtype(attnrt_dtype a, attnrt_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// A pool of independent types (ABI 1.9): a float type (quant NONE) or Q8_0/Q4_0 blocks.
bool OwnCacheType(attnrt_dtype d, int32_t quant_type, int32_t bit_width, GqaCacheType* type) {
  if (d.lanes != 1) return false;
  switch (quant_type) {
    case ATTNRT_GQA_QUANT_NONE:
      if (d.code == ATTNRT_DTYPE_CODE_FLOAT && d.bits == 32) {
        *type = GqaCacheType::kFloat32;
      } else if (d.code == ATTNRT_DTYPE_CODE_FLOAT && d.bits == 16) {
        *type = GqaCacheType::kFloat16;
      } else if (d.code == ATTNRT_DTYPE_CODE_BFLOAT && d.bits == 16) {
        *type = GqaCacheType::kBFloat16;
      } else {
        return false;
      }
      return true;
    case ATTNRT_GQA_QUANT_PER_BLOCK_32:
      if (d.code != ATTNRT_DTYPE_CODE_UINT || d.bits != 8) return false;
      if (bit_width != 8 && bit_width != 4) return false;
      *type = bit_width == 8 ? GqaCacheType::kBlockQ8_0 : GqaCacheType::kBlockQ4_0;
      return true;
    default:
      return false;
  }
}

}  // namespace

bool GqaPagedTypesDiffer(const attnrt_paged_gqa_problem& p) noexcept {
  const attnrt_gqa_attributes& a = p.gqa.attributes;
  const bool float_key_not_t =
      a.k_quant_type == ATTNRT_GQA_QUANT_NONE && !SameDtype(p.gqa.cache_dtype, p.gqa.query_dtype);
  return float_key_not_t || !SameDtype(p.value_cache_dtype, p.gqa.cache_dtype) ||
         p.v_cache_bit_width != a.kv_cache_bit_width || a.v_quant_type != a.k_quant_type;
}

bool GqaPagedKeyCacheType(const attnrt_paged_gqa_problem& p,
                          GqaCacheType* key_cache_type) noexcept {
  GqaFloatType type = GqaFloatType::kFloat32;
  if (!GqaPagedTypesDiffer(p)) return GqaElementTypes(p.gqa, &type, key_cache_type);
  const attnrt_gqa_attributes& a = p.gqa.attributes;
  return OwnCacheType(p.gqa.cache_dtype, a.k_quant_type, a.kv_cache_bit_width, key_cache_type);
}

bool GqaPagedValueCacheType(const attnrt_paged_gqa_problem& p,
                            GqaCacheType* value_cache_type) noexcept {
  GqaFloatType type = GqaFloatType::kFloat32;
  if (!GqaPagedTypesDiffer(p)) return GqaElementTypes(p.gqa, &type, value_cache_type);
  return OwnCacheType(p.value_cache_dtype, p.gqa.attributes.v_quant_type, p.v_cache_bit_width,
                      value_cache_type);
}

GqaPoolStrides PagedGqaPoolStrides(const attnrt_paged_gqa_problem& p, const int64_t* strides,
                                   bool value_pool) {
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  if (value_pool) {
    GqaPagedValueCacheType(p, &cache_type);
  } else {
    GqaPagedKeyCacheType(p, &cache_type);
  }
  // Bytes per element of the pool tensor: a 4-bit or block pool is uint8 (two values per byte,
  // blocks of 32 values and their scale).
  const size_t element_bytes =
      cache_type == GqaCacheType::kInt4 || IsBlockCache(cache_type)
          ? 1
          : GqaCacheRowBytes(cache_type, p.gqa.head_size) / static_cast<size_t>(p.gqa.head_size);
  const bool bnsh = p.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  return GqaPoolStrides{static_cast<size_t>(strides[0]) * element_bytes,
                        static_cast<size_t>(strides[bnsh ? 2 : 1]) * element_bytes,
                        static_cast<size_t>(strides[bnsh ? 1 : 2]) * element_bytes};
}

GqaRun PagedGqaStage(const attnrt_host_services& host, const void* user) {
  const auto& input = *static_cast<const PagedStageInput*>(user);
  const attnrt_paged_gqa_args& a = *input.paged;
  const attnrt_paged_gqa_problem& p = *a.problem;
  GqaRun r = GqaResolveRun(a.gqa);
  r.query_start_loc = input.query_start_loc;
  r.slot_mapping = input.slot_mapping;
  r.key_start_loc = input.key_start_loc;
  r.alibi_slopes = input.alibi_slopes;
  r.alibi_symmetric = input.alibi_symmetric;
  r.query_positions = input.query_positions;
  r.key_positions = input.key_positions;
  r.varlen_key_positions = input.varlen;
  r.window_right = input.window_right;
  if (input.query_start_loc != nullptr) r.seq = input.max_query_len;
  const int64_t capacity = p.max_blocks_per_seq * p.block_size;
  r.key_cache = a.key_cache;
  r.value_cache = a.value_cache;
  r.key_cache_rows = capacity;
  r.value_cache_rows = capacity;
  r.key_cache_holds_past = true;
  r.value_cache_holds_past = true;
  r.block_table = a.block_table;
  r.max_blocks_per_seq = p.max_blocks_per_seq;
  r.block_size = p.block_size;
  // The value head size (ABI 1.8): the value rows' own width; the output rows follow it. The value
  // cache's own type (ABI 1.9): supports() declined a problem without one.
  r.v_head_size = p.v_head_size;
  GqaPagedKeyCacheType(p, &r.cache_type);  // a float key cache of its own type need not be T
  r.cache_row_bytes = GqaCacheRowBytes(r.cache_type, r.head_size);
  GqaPagedValueCacheType(p, &r.value_cache_type);
  r.value_cache_row_bytes = GqaCacheRowBytes(r.value_cache_type, r.v_head_size);
  if (!p.gqa.packed_qkv) r.new_value_token_stride = p.gqa.kv_num_heads * r.v_head_size;
  r.key_strides = PagedGqaPoolStrides(p, p.key_cache_strides, false);
  r.value_strides = PagedGqaPoolStrides(p, p.value_cache_strides, true);
  r.round_probabilities =
      p.p_precision == ATTNRT_P_PRECISION_INPUT && r.type != GqaFloatType::kFloat32;
  if (r.kv_seq > 0) {
    AppendJob job{&a, &r};
    host.parallel_for(host.host_context, static_cast<size_t>(r.batch * r.kv_heads), 1, AppendUnits,
                      &job);
  }
  return r;
}

}  // namespace attnrt::cpu
