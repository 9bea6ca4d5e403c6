// Paged GroupQueryAttention validation: the pool and block-table checks, then GroupQueryAttention's
// own checks on an equivalent contiguous call (see paged_gqa_validation.h).
#include "core/ops/paged_gqa_validation.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/ops/gqa_validation.h"
#include "core/ops/memory_overlap.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::paged_gqa {
namespace {

constexpr const char* kInputNames[ATTNRT_PAGED_GQA_NUM_INPUTS] = {"query",
                                                                  "key",
                                                                  "value",
                                                                  "key_cache",
                                                                  "value_cache",
                                                                  "seqlens_k",
                                                                  "total_sequence_length",
                                                                  "cos_cache",
                                                                  "sin_cache",
                                                                  "position_ids",
                                                                  "attention_bias",
                                                                  "head_sink",
                                                                  "k_scale",
                                                                  "v_scale",
                                                                  "q_norm_weight",
                                                                  "k_norm_weight",
                                                                  "block_table"};
constexpr const char* kOutputNames[ATTNRT_PAGED_GQA_NUM_OUTPUTS] = {"output", "output_qk"};

// The value of lengths input `name` for a sequence of T_b tokens: seqlens_k holds T_b - 1.
int64_t ResolvedLength(const char* name, int64_t t_b) {
  return std::string_view(name) == "seqlens_k" ? t_b - 1 : t_b;
}

// value_cache's type as GroupQueryAttention's attributes state one cache type: v_quant_type and
// v_cache_bit_width in the key cache's fields (independent K/V types, ABI 1.9).
attnrt_gqa_attributes ValueTypeAttributes(const attnrt_paged_gqa_attributes& a) {
  attnrt_gqa_attributes v = a.gqa;
  v.k_quant_type = a.gqa.v_quant_type;
  v.kv_cache_bit_width = a.v_cache_bit_width;
  return v;
}

// An unquantized pool of independent K/V types: any of the float types.
Status CheckFloatCache(const attnrt_tensor& pool, const char* name, const char* quant_name) {
  if (DtypeEquals(pool.dtype, kFloat32) || DtypeEquals(pool.dtype, kFloat16) ||
      DtypeEquals(pool.dtype, kBFloat16)) {
    return Status::Ok();
  }
  return InvalidArgument(StrCat(name, ": expected dtype float32, float16 or bfloat16 for an ",
                                "unquantized cache (", quant_name, " NONE) of independent key and ",
                                "value cache types, got ", DtypeString(pool.dtype)));
}

// value_cache's dtype: key_cache's, or under independent types uint8 blocks for PER_BLOCK_32, else
// a float type.
Status CheckValueCacheDtype(const attnrt_tensor& value, const attnrt_tensor& key,
                            const attnrt_paged_gqa_attributes& a) {
  if (!IndependentCacheTypes(a)) {
    return CheckDtype(value, "value_cache", key.dtype,
                      "the dtype of key_cache (v_cache_own_type 0: one cache type)");
  }
  if (a.gqa.v_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32) {
    return CheckDtype(value, "value_cache", kUInt8,
                      a.v_cache_bit_width == 4 ? "bytes of Q4_0 blocks (v_quant_type PER_BLOCK_32, "
                                                 "v_cache_bit_width 4)"
                                               : "bytes of Q8_0 blocks (v_quant_type PER_BLOCK_32, "
                                                 "v_cache_bit_width 8)");
  }
  return CheckFloatCache(value, "value_cache", "v_quant_type");
}

// GQA messages about the stand-in past/present buffers are about the pools.
Status Rename(Status status) {
  if (status.ok()) return status;
  static constexpr std::array<std::pair<const char*, const char*>, 4> kNames = {
      {{"past_key", "key_cache"},
       {"past_value", "value_cache"},
       {"present_key", "key_cache"},
       {"present_value", "value_cache"}}};
  for (const auto& [from, to] : kNames) {
    for (size_t at = status.message.find(from); at != std::string::npos;
         at = status.message.find(from, at)) {
      status.message.replace(at, std::strlen(from), to);
      at += std::strlen(to);
    }
  }
  return status;
}

Status CheckCounts(size_t num_inputs, size_t num_outputs) {
  if (num_inputs != ATTNRT_PAGED_GQA_NUM_INPUTS) {
    return InvalidArgument(
        StrCat("PagedGroupQueryAttention expects ", static_cast<int>(ATTNRT_PAGED_GQA_NUM_INPUTS),
               " inputs (block_table is input 16 and required), got ", num_inputs));
  }
  if (num_outputs < 1 || num_outputs > ATTNRT_PAGED_GQA_NUM_OUTPUTS) {
    return InvalidArgument(StrCat(
        "PagedGroupQueryAttention expects 1 or 2 outputs (output, output_qk), got ", num_outputs));
  }
  return Status::Ok();
}

// The stand-in for past_key/past_value and present_key/present_value: (rows_b, Nkv, C, last) of
// the pool's dtype and device. At plan rows_b = B (shapes are checked); at run rows_b = 0 and data
// NULL, so the GQA aliasing checks see an empty buffer and the pools are checked here instead.
struct StandIn {
  int64_t shape[4];
  attnrt_tensor tensor;
};

void MakeStandIn(const attnrt_tensor& pool, int64_t rows_b, int64_t kv_heads, int64_t capacity,
                 StandIn* s) {
  s->shape[0] = rows_b;
  s->shape[1] = kv_heads;
  s->shape[2] = capacity;
  s->shape[3] = pool.shape[3];
  s->tensor = attnrt_tensor{};
  s->tensor.device = pool.device;
  s->tensor.ndim = 4;
  s->tensor.dtype = pool.dtype;
  s->tensor.shape = s->shape;
}

// The GQA tensor lists of the equivalent contiguous call.
struct GqaCall {
  StandIn key;
  StandIn value;
  const attnrt_tensor* in[ATTNRT_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_GQA_NUM_OUTPUTS] = {};
  size_t num_outputs = 0;
};

// value_width_as_key >= 0 (independent K/V types): the GQA checks, which know one cache type, see
// an unquantized key cache as of the query's dtype (`float_key`: its own float type is checked
// here) and the value rows as rows of that key type of that width (0 for a float value row
// narrower than a key block); value_cache's own type is checked here. < 0: the pools as they are.
void MakeGqaCall(const attnrt_tensor* const* inputs, const attnrt_tensor* const* outputs,
                 size_t num_outputs, int64_t rows_b, int64_t kv_heads, int64_t capacity,
                 int64_t value_width_as_key, bool float_key, GqaCall* c) {
  MakeStandIn(*inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE], rows_b, kv_heads, capacity, &c->key);
  MakeStandIn(*inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE], rows_b, kv_heads, capacity, &c->value);
  const attnrt_tensor* query = inputs[ATTNRT_PAGED_GQA_INPUT_QUERY];
  if (value_width_as_key >= 0 && float_key && query != nullptr) {
    c->key.tensor.dtype = query->dtype;
  }
  if (value_width_as_key >= 0) {
    c->value.tensor.dtype = c->key.tensor.dtype;
    c->value.shape[3] = value_width_as_key;
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) c->in[i] = inputs[i];
  c->in[ATTNRT_GQA_INPUT_PAST_KEY] = &c->key.tensor;
  c->in[ATTNRT_GQA_INPUT_PAST_VALUE] = &c->value.tensor;
  c->out[ATTNRT_GQA_OUTPUT_OUTPUT] = outputs[ATTNRT_PAGED_GQA_OUTPUT_OUTPUT];
  c->out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = &c->key.tensor;
  c->out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = &c->value.tensor;
  c->out[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = num_outputs > ATTNRT_PAGED_GQA_OUTPUT_OUTPUT_QK
                                            ? outputs[ATTNRT_PAGED_GQA_OUTPUT_OUTPUT_QK]
                                            : nullptr;
  c->num_outputs = c->out[ATTNRT_GQA_OUTPUT_OUTPUT_QK] != nullptr ? 4 : 3;
}

// A pool may be a strided view: its head_size dimension contiguous, no negative stride.
Status CheckPoolStrides(const attnrt_tensor& pool, const char* name) {
  if (pool.strides == nullptr || NumElements(pool) == 0) return Status::Ok();
  for (int d = 0; d < 4; ++d) {
    if (pool.shape[d] > 1 && pool.strides[d] < 0) {
      return InvalidArgument(StrCat(name, ": dimension ", d, " has stride ", pool.strides[d],
                                    ", expected strides of at least 0"));
    }
  }
  if (pool.shape[3] > 1 && pool.strides[3] != 1) {
    return InvalidArgument(StrCat(name, ": dimension 3 (head_size) must be contiguous (stride 1), ",
                                  "got stride ", pool.strides[3], " for shape ",
                                  ShapeString(pool)));
  }
  return Status::Ok();
}

// Element strides of a pool: as given, or the compact ones.
void PoolStrides(const attnrt_tensor& pool, int64_t* strides) {
  int64_t compact = 1;
  for (int d = 3; d >= 0; --d) {
    // An extent of 1 may carry any stride; the compact one keeps the problem canonical.
    strides[d] = pool.strides != nullptr && pool.shape[d] != 1 ? pool.strides[d] : compact;
    compact *= pool.shape[d];
  }
}

Status CheckPools(const attnrt_paged_gqa_attributes& a, const attnrt_tensor* const* in) {
  for (int i : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE,
                ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE}) {
    if (in[i] == nullptr) {
      return InvalidArgument(StrCat("Input '", kInputNames[i], "' is required but absent"));
    }
    ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*in[i], kInputNames[i]));
  }
  ATTNRT_RETURN_IF_ERROR(CheckCompact(*in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE], "block_table"));
  const attnrt_tensor& key = *in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE];
  const attnrt_tensor& value = *in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE];
  ATTNRT_RETURN_IF_ERROR(CheckRank(key, "key_cache", 4));
  ATTNRT_RETURN_IF_ERROR(CheckRank(value, "value_cache", 4));
  const bool bnsh = a.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const char* layout = bnsh ? "BNSH [num_blocks, kv_num_heads, block_size, head_size]"
                            : "BSNH [num_blocks, block_size, kv_num_heads, head_size]";
  const int block_dim = bnsh ? 2 : 1;
  const int heads_dim = bnsh ? 1 : 2;
  if (key.shape[block_dim] != a.block_size) {
    return InvalidArgument(StrCat("key_cache: dimension ", block_dim,
                                  " (block_size) must equal the block_size attribute ",
                                  a.block_size, ", got ", key.shape[block_dim], " (shape ",
                                  ShapeString(key), ", kv_layout ", layout, ")"));
  }
  if (key.shape[heads_dim] != a.gqa.kv_num_heads) {
    return InvalidArgument(StrCat("key_cache: dimension ", heads_dim, " must be kv_num_heads ",
                                  a.gqa.kv_num_heads, ", got ", key.shape[heads_dim], " (shape ",
                                  ShapeString(key), ", kv_layout ", layout, ")"));
  }
  if (key.shape[0] < 1) {
    return InvalidArgument(
        StrCat("key_cache: dimension 0 (num_blocks) must be at least 1, got ", key.shape[0]));
  }
  // The last dimension may differ: the value head size (ABI 1.8).
  for (int d = 0; d < 3; ++d) {
    if (value.shape[d] != key.shape[d]) {
      return InvalidArgument(StrCat("value_cache: expected the shape of key_cache ",
                                    ShapeString(key), " in dimensions 0-2 (only dimension 3, the ",
                                    "value head size, may differ), got ", ShapeString(value)));
    }
  }
  ATTNRT_RETURN_IF_ERROR(CheckValueCacheDtype(value, key, a));
  if (IndependentCacheTypes(a) && a.gqa.k_quant_type == ATTNRT_GQA_QUANT_NONE) {
    ATTNRT_RETURN_IF_ERROR(CheckFloatCache(key, "key_cache", "k_quant_type"));
  }
  ATTNRT_RETURN_IF_ERROR(CheckPoolStrides(key, "key_cache"));
  ATTNRT_RETURN_IF_ERROR(CheckPoolStrides(value, "value_cache"));
  if (!SameDevice(value.device, key.device)) {
    return InvalidArgument(StrCat("value_cache: expected device ", DeviceString(key.device),
                                  " (the device of key_cache), got ", DeviceString(value.device)));
  }
  const attnrt_tensor& table = *in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE];
  ATTNRT_RETURN_IF_ERROR(CheckRank(table, "block_table", 2));
  ATTNRT_RETURN_IF_ERROR(CheckDtype(table, "block_table", kInt32));
  if (table.device.device_type != ATTNRT_DEVICE_CPU) {
    return InvalidArgument(StrCat("block_table: must be in host memory (device cpu), got ",
                                  DeviceString(table.device)));
  }
  if (table.shape[1] < 1) {
    return InvalidArgument(StrCat(
        "block_table: dimension 1 (max_blocks_per_seq) must be at least 1, got ", table.shape[1]));
  }
  if (table.shape[1] > kMaxDimExtent / a.block_size) {
    return InvalidArgument(StrCat("block_table: dimension 1 (max_blocks_per_seq) ", table.shape[1],
                                  " times block_size ", a.block_size, " exceeds ", kMaxDimExtent,
                                  " tokens"));
  }
  return Status::Ok();
}

Status ValidateShapesImpl(const attnrt_paged_gqa_attributes& a, const attnrt_tensor* const* inputs,
                          size_t num_inputs, const attnrt_tensor* const* outputs,
                          size_t num_outputs, attnrt_paged_gqa_problem* out) {
  if (out == nullptr) return InvalidArgument("PagedGroupQueryAttention: problem must not be NULL");
  ATTNRT_RETURN_IF_ERROR(CheckCounts(num_inputs, num_outputs));
  if (inputs == nullptr || outputs == nullptr) {
    return InvalidArgument("PagedGroupQueryAttention: inputs and outputs must not be NULL");
  }
  ATTNRT_RETURN_IF_ERROR(CheckPools(a, inputs));
  const attnrt_tensor& table = *inputs[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE];
  const attnrt_tensor* query = inputs[ATTNRT_PAGED_GQA_INPUT_QUERY];
  const int64_t capacity = table.shape[1] * a.block_size;
  // The batch of the stand-ins is the query's; a malformed query is reported by the GQA checks.
  const int64_t batch =
      query != nullptr && query->ndim >= 1 && query->shape != nullptr ? query->shape[0] : 0;
  int64_t value_head_size = 0;
  ATTNRT_RETURN_IF_ERROR(ValueHeadSize(a, *inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE],
                                       *inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE],
                                       &value_head_size));
  const bool independent = IndependentCacheTypes(a);
  if (independent) {
    for (int i : {ATTNRT_PAGED_GQA_INPUT_K_SCALE, ATTNRT_PAGED_GQA_INPUT_V_SCALE}) {
      if (inputs[i] != nullptr) {
        return InvalidArgument(StrCat(kInputNames[i], ": expected absent with independent key ",
                                      "and value cache types (v_cache_own_type 1: NONE or ",
                                      "PER_BLOCK_32 caches), got present"));
      }
    }
  }
  GqaCall call;
  const bool float_key = a.gqa.k_quant_type == ATTNRT_GQA_QUANT_NONE;
  MakeGqaCall(inputs, outputs, num_outputs, batch, a.gqa.kv_num_heads, capacity,
              independent ? gqa::CacheRowWidth(a.gqa, value_head_size) : -1, float_key, &call);
  attnrt_gqa_problem gqa{};
  // GroupQueryAttention's checks know one cache type: with independent types they see the key
  // cache's (v_quant_type as k_quant_type), value_cache's own was checked above.
  attnrt_gqa_attributes one_type = a.gqa;
  if (independent) one_type.v_quant_type = one_type.k_quant_type;
  // Nor a window of non-causal attention (the varlen op's, ValidateAttributes checked it).
  if (one_type.causal == 0) one_type.local_window_size = -1;
  ATTNRT_RETURN_IF_ERROR(Rename(gqa::ValidateShapes(
      one_type, call.in, ATTNRT_GQA_NUM_INPUTS, call.out, call.num_outputs,
      gqa::ValueRows{value_head_size, independent, /*any_head_size=*/true}, &gqa)));
  gqa.attributes.v_quant_type = a.gqa.v_quant_type;
  gqa.attributes.local_window_size = a.gqa.local_window_size;
  // The key pool's own dtype (a float key cache of independent types need not be T).
  gqa.cache_dtype = inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]->dtype;
  if (table.shape[0] != gqa.batch_size) {
    return InvalidArgument(StrCat("block_table: dimension 0 must be batch_size ", gqa.batch_size,
                                  ", got ", table.shape[0]));
  }
  attnrt_paged_gqa_problem p{};
  p.struct_size = sizeof(attnrt_paged_gqa_problem);
  p.gqa = gqa;
  p.num_blocks = inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]->shape[0];
  p.block_size = a.block_size;
  p.max_blocks_per_seq = table.shape[1];
  p.kv_layout = a.kv_layout;
  p.p_precision = a.p_precision;
  p.v_head_size = value_head_size > 0 ? value_head_size : gqa.head_size;
  p.value_cache_dtype = inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]->dtype;
  p.v_cache_bit_width = independent ? a.v_cache_bit_width : gqa.attributes.kv_cache_bit_width;
  PoolStrides(*inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE], p.key_cache_strides);
  PoolStrides(*inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE], p.value_cache_strides);
  *out = p;
  return Status::Ok();
}

// Names the overlap of `what` with a pool, or that it could not be decided.
Status OverlapError(Overlap overlap, const std::string& what, const char* pool) {
  if (overlap == Overlap::kDisjoint) return Status::Ok();
  if (overlap == Overlap::kUndecided) {
    return InvalidArgument(StrCat(what, " and ", pool, " could not be proven disjoint (more than ",
                                  kMaxOverlapRuns, " contiguous runs to compare); the run writes ",
                                  pool, ", expected disjoint memory"));
  }
  return InvalidArgument(StrCat(what, " shares memory with ", pool, "; the run writes ", pool,
                                ", expected disjoint memory"));
}

// The pools' inputs and outputs of a paged call, labelled for messages.
std::vector<LabelledTensor> OtherTensors(const attnrt_tensor* const* inputs,
                                         const attnrt_tensor* const* outputs, size_t num_outputs) {
  std::vector<LabelledTensor> others;
  for (int i = 0; i < ATTNRT_PAGED_GQA_NUM_INPUTS; ++i) {
    if (inputs[i] == nullptr || i == ATTNRT_PAGED_GQA_INPUT_KEY_CACHE ||
        i == ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE) {
      continue;
    }
    others.push_back({inputs[i], StrCat("Input '", kInputNames[i], "'")});
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    if (outputs[o] != nullptr) {
      others.push_back({outputs[o], StrCat("Output '", kOutputNames[o], "'")});
    }
  }
  return others;
}

Status ValidateRunImpl(const attnrt_paged_gqa_problem& p, const attnrt_tensor* const* inputs,
                       size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                       attnrt_paged_gqa_args* out) {
  if (out == nullptr) return InvalidArgument("PagedGroupQueryAttention: args must not be NULL");
  if (p.struct_size != sizeof(attnrt_paged_gqa_problem)) {
    return InvalidArgument(StrCat("PagedGroupQueryAttention: problem.struct_size must be ",
                                  sizeof(attnrt_paged_gqa_problem), ", got ", p.struct_size));
  }
  ATTNRT_RETURN_IF_ERROR(CheckCounts(num_inputs, num_outputs));
  for (int i : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE,
                ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE, ATTNRT_PAGED_GQA_INPUT_SEQLENS_K,
                ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH}) {
    if (inputs[i] == nullptr) {
      return PlanMismatch(
          StrCat("Input '", kInputNames[i], "' was present when the plan was made, got absent"));
    }
  }
  const int64_t B = p.gqa.batch_size;
  const int64_t block_size = p.block_size;
  const int64_t slots = p.max_blocks_per_seq;
  const int64_t capacity = slots * block_size;
  const void* seqlens = DataOf(inputs[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K]);
  const void* total = DataOf(inputs[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH]);
  const auto* table =
      static_cast<const int32_t*>(DataOf(inputs[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE]));

  // The table's capacity bounds every length; said in its terms before the GQA checks would say it
  // as a buffer length.
  const int64_t T = ReadInt32(total, 0);
  if (T > capacity) {
    return InvalidArgument(StrCat("total_sequence_length ", T,
                                  " exceeds the block table's capacity of max_blocks_per_seq ",
                                  slots, " x block_size ", block_size, " = ", capacity, " tokens"));
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t v = ReadInt32(seqlens, b);
    if (v >= capacity) {
      return InvalidArgument(StrCat("block_table: too short for seqlens_k[", b, "] = ", v, ": ",
                                    v + 1, " tokens need ", (v + block_size) / block_size,
                                    " blocks of ", block_size, ", a row has max_blocks_per_seq ",
                                    slots, " slots"));
    }
  }

  GqaCall call;
  MakeGqaCall(inputs, outputs, num_outputs, 0, p.gqa.kv_num_heads, capacity,
              SharesOneCacheType(p) ? -1 : gqa::CacheRowWidth(p.gqa.attributes, p.v_head_size),
              p.gqa.attributes.k_quant_type == ATTNRT_GQA_QUANT_NONE, &call);
  attnrt_gqa_args gqa{};
  ATTNRT_RETURN_IF_ERROR(Rename(
      gqa::ValidateRun(p.gqa, call.in, ATTNRT_GQA_NUM_INPUTS, call.out, call.num_outputs, &gqa)));

  // Block ids: every slot a batch reads must name a block of the pools. Rows [first_write, T_b) of
  // batch b are written by this step (none with a shared KV, L == 0).
  const bool first_prompt = gqa.phase == ATTNRT_GQA_PHASE_FIRST_PROMPT;
  const int64_t S = p.gqa.sequence_length;
  const int64_t L = p.gqa.kv_sequence_length;
  std::vector<SequenceRows> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t_b = ReadInt32(seqlens, b) + 1;
    rows[static_cast<size_t>(b)] = {t_b, L == 0 ? t_b : (first_prompt ? 0 : t_b - S)};
  }
  ATTNRT_RETURN_IF_ERROR(
      CheckBlockTable(table, slots, block_size, p.num_blocks, rows, "seqlens_k"));
  ATTNRT_RETURN_IF_ERROR(CheckPoolAliasing(*inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE],
                                           *inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE],
                                           OtherTensors(inputs, outputs, num_outputs), L > 0));

  gqa.present_shares_past = true;
  attnrt_paged_gqa_args args{};
  args.struct_size = sizeof(attnrt_paged_gqa_args);
  args.problem = &p;
  args.gqa = gqa;
  args.gqa.problem = &p.gqa;
  args.key_cache = const_cast<void*>(DataOf(inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]));
  args.value_cache = const_cast<void*>(DataOf(inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]));
  args.block_table = table;
  *out = args;
  return Status::Ok();
}

// The attribute rules of independent K/V cache types ("Value cache type" in
// attnrt/ops/paged_gqa.h); the key cache's were checked as GroupQueryAttention's.
Status CheckIndependentTypes(const attnrt_paged_gqa_attributes& a) {
  const int32_t bits = a.v_cache_bit_width;
  if (bits != 0 && bits != 4 && bits != 8) {
    return InvalidArgument(
        StrCat("v_cache_bit_width must be 0, 4 or 8 with v_cache_own_type 1, got ", bits));
  }
  for (const auto& [name, type] : {std::pair{"k_quant_type", a.gqa.k_quant_type},
                                   std::pair{"v_quant_type", a.gqa.v_quant_type}}) {
    if (type != ATTNRT_GQA_QUANT_NONE && type != ATTNRT_GQA_QUANT_PER_BLOCK_32) {
      return InvalidArgument(StrCat(name, " must be NONE (0) or PER_BLOCK_32 (3) with independent ",
                                    "key and value cache types (v_cache_own_type 1), got ", type));
    }
  }
  if (a.gqa.v_quant_type == ATTNRT_GQA_QUANT_NONE && bits != 0) {
    return InvalidArgument(StrCat("v_cache_bit_width must be 0 for an unquantized value cache ",
                                  "(v_quant_type NONE), got ", bits));
  }
  if (a.gqa.v_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32 && bits != 4 && bits != 8) {
    return InvalidArgument(StrCat("v_cache_bit_width must be 8 (Q8_0) or 4 (Q4_0) for ",
                                  "v_quant_type PER_BLOCK_32, got ", bits));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateAttributes(const void* attributes, attnrt_paged_gqa_attributes* out, bool varlen) {
  try {
    if (attributes == nullptr) {
      return InvalidArgument("PagedGroupQueryAttention: attributes must not be NULL");
    }
    size_t struct_size;
    std::memcpy(&struct_size, attributes, sizeof struct_size);
    // ABI 1.2-1.4 callers end at kv_layout; p_precision (ABI 1.5) is EXACT for them.
    constexpr size_t kMinSize = offsetof(attnrt_paged_gqa_attributes, p_precision);
    constexpr size_t kPrecisionEnd = kMinSize + sizeof(int32_t);
    if (struct_size < kMinSize) {
      return AbiMismatch(StrCat("attnrt_paged_gqa_attributes struct_size must be at least ",
                                kMinSize, ", got ", struct_size));
    }
    // An older caller's struct ends at its struct_size: nothing past it is read.
    attnrt_paged_gqa_attributes a{};
    std::memcpy(&a, attributes, std::min(struct_size, sizeof a));
    if (struct_size < kPrecisionEnd) a.p_precision = ATTNRT_P_PRECISION_EXACT;
    // ABI 1.5-1.8 callers end at p_precision (their struct of 96 bytes pads it; the two fields of
    // ABI 1.9 make 104): value_cache has key_cache's type for them.
    constexpr size_t kValueBitsEnd =
        offsetof(attnrt_paged_gqa_attributes, v_cache_bit_width) + sizeof(int32_t);
    static_assert(kValueBitsEnd > 96, "ABI 1.8's attnrt_paged_gqa_attributes was 96 bytes");
    if (struct_size < kValueBitsEnd) {
      a.v_cache_own_type = 0;
      a.v_cache_bit_width = 0;
    }
    if (a.v_cache_own_type != 0 && a.v_cache_own_type != 1) {
      return InvalidArgument(
          StrCat("v_cache_own_type must be 0 (value_cache has key_cache's type) ",
                 "or 1 (its own, v_quant_type and v_cache_bit_width), got ", a.v_cache_own_type));
    }
    if (a.v_cache_own_type == 0) a.v_cache_bit_width = 0;  // ignored
    // ABI 1.2-1.9 callers end before local_window_right (their struct of 104 bytes, the last 4
    // padding: the reserved field).
    constexpr size_t kWindowRightEnd =
        offsetof(attnrt_paged_gqa_attributes, local_window_right) + sizeof(int32_t);
    static_assert(kWindowRightEnd > 104, "ABI 1.9's attnrt_paged_gqa_attributes was 104 bytes");
    if (struct_size < kWindowRightEnd) a.local_window_right = -1;
    if (a.local_window_right < -1) {
      return InvalidArgument(
          StrCat("local_window_right must be -1 (no bound) or >= 0, got ", a.local_window_right));
    }
    // FlashAttention's causal window (left, 0): nothing after the row is seen anyway.
    if (a.gqa.causal == 1 && a.local_window_right == 0) a.local_window_right = -1;
    // A window of non-causal attention (the varlen op, ABI 1.10): GroupQueryAttention's checks
    // below refuse local_window_size with causal = 0, so they see it off.
    const int32_t window = a.gqa.local_window_size;
    const bool non_causal_window =
        varlen && a.gqa.causal == 0 && (window != -1 || a.local_window_right != -1);
    if (non_causal_window) {
      if (window == 0 || window < -1) {
        return InvalidArgument(
            StrCat("gqa.local_window_size must be -1 (no bound) or >= 1 (the keys up to and "
                   "including the row's own position) in non-causal attention, got ",
                   window));
      }
      a.gqa.local_window_size = -1;
    } else if (a.local_window_right != -1) {
      return InvalidArgument(
          StrCat("local_window_right must be -1 ", varlen ? "with causal = 1" : "for the paged op",
                 " (a window of non-causal attention is the varlen op's, with causal = 0), got ",
                 a.local_window_right));
    }
    // ABI 1.2-1.11 callers end before alibi_form (ABI 1.10-1.11's struct of 112 bytes, the last 4
    // padding: reserved_1_11).
    constexpr size_t kAlibiFormEnd =
        offsetof(attnrt_paged_gqa_attributes, alibi_form) + sizeof(int32_t);
    static_assert(kAlibiFormEnd > 112, "ABI 1.11's attnrt_paged_gqa_attributes was 112 bytes");
    if (struct_size < kAlibiFormEnd) a.alibi_form = ATTNRT_ALIBI_FORM_SIGNED;
    if (a.alibi_form != ATTNRT_ALIBI_FORM_SIGNED &&
        (!varlen || a.alibi_form != ATTNRT_ALIBI_FORM_SYMMETRIC)) {
      return InvalidArgument(StrCat(
          "alibi_form must be 0 (SIGNED, slope * (j - p))",
          varlen ? " or 1 (SYMMETRIC, -slope * |j - p|)" : " for the paged op (it has no ALiBi)",
          ", got ", a.alibi_form));
    }
    a.struct_size = sizeof(attnrt_paged_gqa_attributes);
    // GroupQueryAttention's checks know one cache type: with independent types they see the key
    // cache's (v_quant_type as k_quant_type); value_cache's type is checked below.
    const int32_t v_quant_type = a.gqa.v_quant_type;
    if (IndependentCacheTypes(a)) a.gqa.v_quant_type = a.gqa.k_quant_type;
    {
      Status st = gqa::ValidateAttributes(&a.gqa, &a.gqa);
      if (!st.ok()) {  // the caller filled the outer struct: name the member it got wrong
        st.message = "attnrt_paged_gqa_attributes.gqa: " + st.message +
                     (st.code == ATTNRT_ERROR_ABI_MISMATCH
                          ? " (set it with attnrt_paged_gqa_attributes_init, which fills gqa too)"
                          : "");
        return st;
      }
    }
    if (IndependentCacheTypes(a)) {
      a.gqa.v_quant_type = v_quant_type;
      ATTNRT_RETURN_IF_ERROR(CheckIndependentTypes(a));
    }
    if (non_causal_window) a.gqa.local_window_size = window;
    if (a.gqa.sliding_window_cache != 0) {
      return InvalidArgument(
          StrCat("gqa.sliding_window_cache must be 0 with a paged KV cache (a pool releases blocks "
                 "instead of a ring buffer), got ",
                 a.gqa.sliding_window_cache));
    }
    if (a.block_size < ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE ||
        a.block_size > ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) {
      return InvalidArgument(StrCat("block_size must be in [", ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE,
                                    ", ", ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE, "], got ",
                                    a.block_size));
    }
    if (a.kv_layout != ATTNRT_PAGED_KV_LAYOUT_BSNH && a.kv_layout != ATTNRT_PAGED_KV_LAYOUT_BNSH) {
      return InvalidArgument(StrCat("kv_layout must be 0 (BSNH) or 1 (BNSH), got ", a.kv_layout));
    }
    if (a.p_precision != ATTNRT_P_PRECISION_EXACT && a.p_precision != ATTNRT_P_PRECISION_INPUT) {
      return InvalidArgument(
          StrCat("p_precision must be 0 (EXACT) or 1 (INPUT), got ", a.p_precision));
    }
    if (out == nullptr) return InvalidArgument("PagedGroupQueryAttention: out must not be NULL");
    *out = a;
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return ValidationException("PagedGroupQueryAttention", "ValidateAttributes",
                               /*out_of_memory=*/true);
  } catch (...) {
    return ValidationException("PagedGroupQueryAttention", "ValidateAttributes",
                               /*out_of_memory=*/false);
  }
}

Status ValidateShapes(const attnrt_paged_gqa_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_paged_gqa_problem* out) {
  return GuardValidation("PagedGroupQueryAttention", "ValidateShapes", [&] {
    return ValidateShapesImpl(attributes, inputs, num_inputs, outputs, num_outputs, out);
  });
}

Status ValidateRun(const attnrt_paged_gqa_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_paged_gqa_args* out) {
  return GuardValidation("PagedGroupQueryAttention", "ValidateRun", [&] {
    return ValidateRunImpl(problem, inputs, num_inputs, outputs, num_outputs, out);
  });
}

Status ValueHeadSize(const attnrt_paged_gqa_attributes& a, const attnrt_tensor& key_cache,
                     const attnrt_tensor& value_cache, int64_t* value_head_size) {
  *value_head_size = 0;
  // The dtype first: a row width is read in its elements.
  ATTNRT_RETURN_IF_ERROR(CheckValueCacheDtype(value_cache, key_cache, a));
  if (IndependentCacheTypes(a)) {
    return gqa::HeadSizeOfCacheRow(ValueTypeAttributes(a), value_cache.shape[3], "value_cache",
                                   value_head_size);
  }
  if (value_cache.shape[3] == key_cache.shape[3]) return Status::Ok();
  return gqa::HeadSizeOfCacheRow(a.gqa, value_cache.shape[3], "value_cache", value_head_size);
}

bool IndependentCacheTypes(const attnrt_paged_gqa_attributes& a) { return a.v_cache_own_type == 1; }

bool SharesOneCacheType(const attnrt_paged_gqa_problem& p) {
  const attnrt_gqa_attributes& a = p.gqa.attributes;
  const bool key_as_gqa =
      a.k_quant_type != ATTNRT_GQA_QUANT_NONE || DtypeEquals(p.gqa.cache_dtype, p.gqa.query_dtype);
  return key_as_gqa && DtypeEquals(p.value_cache_dtype, p.gqa.cache_dtype) &&
         p.v_cache_bit_width == a.kv_cache_bit_width && a.v_quant_type == a.k_quant_type;
}

bool PoolsCompact(const attnrt_tensor* const* inputs) {
  for (int i : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
    if (!CheckCompact(*inputs[i], kInputNames[i]).ok()) return false;
  }
  return true;
}

// The pools are written: no element of one is an element of the other, of itself twice, of an
// output or of another input. Checked element by element (memory_overlap.h), so two views of one
// allocation that interleave without sharing an element pass.
Status CheckPoolAliasing(const attnrt_tensor& key_cache, const attnrt_tensor& value_cache,
                         const std::vector<LabelledTensor>& others, bool writes) {
  StridedBytes pools[2];
  const attnrt_tensor* tensors[2] = {&key_cache, &value_cache};
  const char* names[2] = {"key_cache", "value_cache"};
  for (int k = 0; k < 2; ++k) {
    ATTNRT_RETURN_IF_ERROR(DescribeStrided(*tensors[k], names[k], &pools[k]));
    const Overlap self = SelfOverlap(pools[k]);
    if (self == Overlap::kOverlap) {
      return InvalidArgument(StrCat(names[k], ": two elements share memory (strides ",
                                    StridesString(*tensors[k]), " for shape ",
                                    ShapeString(*tensors[k]),
                                    "); the run writes the pool, expected distinct elements"));
    }
    ATTNRT_RETURN_IF_ERROR(OverlapError(self, StrCat(names[k], "'s elements"), names[k]));
  }
  if (writes) {
    ATTNRT_RETURN_IF_ERROR(
        OverlapError(ViewsOverlap(pools[0], pools[1]), "value_cache", "key_cache"));
  }
  for (int k = 0; k < 2; ++k) {
    for (const LabelledTensor& other : others) {
      if (other.tensor->device.device_type != tensors[k]->device.device_type) continue;
      StridedBytes view;
      ATTNRT_RETURN_IF_ERROR(DescribeStrided(*other.tensor, other.label, &view));
      ATTNRT_RETURN_IF_ERROR(OverlapError(ViewsOverlap(pools[k], view), other.label, names[k]));
    }
  }
  return Status::Ok();
}

Status CheckBlockTable(const int32_t* table, int64_t slots, int64_t block_size, int64_t num_blocks,
                       const std::vector<SequenceRows>& rows, const char* lengths_name) {
  // Every needed slot as (block, batch, slot, this step writes rows of it). Slots from
  // ceil(T_b / block_size) on are never read nor written, so they are not looked at.
  struct Use {
    int32_t block;
    int64_t batch;
    int64_t slot;
    bool written;
  };
  std::vector<Use> uses;
  for (size_t sb = 0; sb < rows.size(); ++sb) {
    const auto b = static_cast<int64_t>(sb);
    const int64_t t_b = rows[sb].length;
    const int64_t first_write = rows[sb].first_write;
    const int64_t needed = (t_b + block_size - 1) / block_size;
    for (int64_t i = 0; i < needed; ++i) {
      const int32_t id = table[b * slots + i];
      if (id == -1) {
        return InvalidArgument(
            StrCat("block_table[", b, "][", i, "] is -1 (unallocated), but ", lengths_name, "[", b,
                   "] = ", ResolvedLength(lengths_name, t_b), " needs blocks [0, ", needed,
                   ") of block_size ", block_size));
      }
      if (id < 0 || id >= num_blocks) {
        return InvalidArgument(StrCat("block_table[", b, "][", i, "] = ", id,
                                      " is out of range [0, ", num_blocks,
                                      ") (num_blocks of key_cache)"));
      }
      uses.push_back({id, b, i, first_write < t_b && (i + 1) * block_size > first_write});
    }
  }
  // A block this step writes rows into must appear in one needed slot only: another needed slot
  // naming it (of any batch, this one included) would read rows this step overwrites, or write
  // them too (shared blocks are copied first: attnrt_block_pool_append). Blocks only read may be
  // named by any number of slots (forked sequences sharing their blocks).
  std::sort(uses.begin(), uses.end(), [](const Use& x, const Use& y) {
    return x.block != y.block ? x.block < y.block : x.written > y.written;
  });
  for (size_t k = 0; k + 1 < uses.size(); ++k) {
    const Use& w = uses[k];
    const Use& other = uses[k + 1];
    if (w.block != other.block || !w.written) continue;
    return InvalidArgument(StrCat(
        "block_table[", w.batch, "][", w.slot, "] = ", w.block,
        " is written by this step and also named by block_table[", other.batch, "][", other.slot,
        "]; a block being written must belong to one sequence (copy a shared block first, as "
        "attnrt_block_pool_append reports)"));
  }
  return Status::Ok();
}

const char* InputName(size_t index) {
  return index < ATTNRT_PAGED_GQA_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) {
  return index < ATTNRT_PAGED_GQA_NUM_OUTPUTS ? kOutputNames[index] : "?";
}

}  // namespace attnrt::core::paged_gqa
