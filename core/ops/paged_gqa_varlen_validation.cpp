// Paged GroupQueryAttention over packed variable-length batches: the packed tensors and lengths,
// then the paged op's checks on a padded stand-in call (see paged_gqa_varlen_validation.h).
#include "core/ops/paged_gqa_varlen_validation.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <string>

#include "core/ops/paged_gqa_validation.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::paged_gqa_varlen {
namespace {

constexpr const char* kInputNames[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS] = {
    "query",           "key",          "value",           "key_cache",    "value_cache",
    "query_start_loc", "seq_lens",     "block_table",     "slot_mapping", "head_sink",
    "k_scale",         "v_scale",      "key_start_loc",   "alibi_slopes", "cos_cache",
    "sin_cache",       "position_ids", "key_position_ids"};
constexpr const char* kOp = "PagedGroupQueryAttentionVarlen";

const attnrt_tensor* In(const attnrt_tensor* const* inputs, attnrt_paged_gqa_varlen_input i) {
  return inputs[i];
}

Status CheckCounts(size_t num_inputs, size_t num_outputs) {
  if (num_inputs != ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS) {
    return InvalidArgument(StrCat(kOp, " expects ",
                                  static_cast<int>(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS),
                                  " inputs (query ... key_position_ids), got ", num_inputs));
  }
  if (num_outputs != ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS) {
    return InvalidArgument(StrCat(kOp, " expects 1 output (output), got ", num_outputs));
  }
  return Status::Ok();
}

// A packed token tensor: rank 2 [rows, heads*H] or rank 3 [rows, heads, H], compact; `rows_name`
// names the rows (num_tokens, or num_key_tokens for key rows of their own count).
Status CheckPacked(const attnrt_tensor& t, const char* name, int64_t num_tokens, int64_t heads,
                   int64_t head_size, const char* heads_name,
                   const char* head_size_name = "head_size", const char* rows_name = "num_tokens") {
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(t, name));
  ATTNRT_RETURN_IF_ERROR(CheckCompact(t, name));
  const bool rank2 = t.ndim == 2 && t.shape[1] == heads * head_size;
  const bool rank3 = t.ndim == 3 && t.shape[1] == heads && t.shape[2] == head_size;
  if ((!rank2 && !rank3) || (num_tokens >= 0 && t.shape[0] != num_tokens)) {
    return InvalidArgument(StrCat(name, ": expected [", rows_name, num_tokens >= 0 ? " " : "",
                                  num_tokens >= 0 ? std::to_string(num_tokens) : std::string(),
                                  ", ", heads_name, " * ", head_size_name, " = ", heads * head_size,
                                  "] or [", rows_name, ", ", heads, ", ", head_size, "], got ",
                                  ShapeString(t)));
  }
  return Status::Ok();
}

// A host integer vector of `length` elements.
Status CheckHostVector(const attnrt_tensor* t, const char* name, attnrt_dtype dtype, int64_t length,
                       const char* length_text) {
  if (t == nullptr) return InvalidArgument(StrCat("Input '", name, "' is required but absent"));
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*t, name));
  ATTNRT_RETURN_IF_ERROR(CheckCompact(*t, name));
  ATTNRT_RETURN_IF_ERROR(CheckDtype(*t, name, dtype));
  ATTNRT_RETURN_IF_ERROR(CheckRank(*t, name, 1));
  if (t->device.device_type != ATTNRT_DEVICE_CPU) {
    return InvalidArgument(
        StrCat(name, ": must be in host memory (device cpu), got ", DeviceString(t->device)));
  }
  if (length >= 0 && t->shape[0] != length) {
    return InvalidArgument(
        StrCat(name, ": expected [", length_text, " = ", length, "], got ", ShapeString(*t)));
  }
  return Status::Ok();
}

// A start_loc vector (query_start_loc, key_start_loc) starts at 0.
Status StartsAtZero(const void* starts, const char* name) {
  if (ReadInt32(starts, 0) == 0) return Status::Ok();
  return InvalidArgument(StrCat(name, "[0] must be 0, got ", ReadInt32(starts, 0)));
}

// Run b of a start_loc vector: its length, once its end is known to lie in [its start, `limit`]
// (named `limit_name`, with `limit_note` after its value in the message).
Status RunLength(const void* starts, const char* name, int64_t b, int64_t limit,
                 const char* limit_name, const char* limit_note, int64_t* length) {
  const int64_t begin = ReadInt32(starts, b);
  const int64_t end = ReadInt32(starts, b + 1);
  if (end < begin || end > limit) {
    return InvalidArgument(StrCat(name, "[", b + 1, "] = ", end, " must lie in [", name, "[", b,
                                  "] = ", begin, ", ", limit_name, " = ", limit, limit_note, "]"));
  }
  *length = end - begin;
  return Status::Ok();
}

// Rotary caches (ABI 1.12): with do_rotary = 1, cos_cache and sin_cache T [M, R/2] beside the
// query, 2 <= R <= head_size; without it, absent. `rotary_half` is R/2 (0 without).
Status CheckRotaryCaches(const attnrt_paged_gqa_attributes& a, const attnrt_tensor* const* in,
                         const attnrt_tensor& query, int64_t head_size, int64_t* rotary_half) {
  const attnrt_tensor* cos = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE);
  const attnrt_tensor* sin = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_SIN_CACHE);
  *rotary_half = 0;
  if (a.gqa.do_rotary != 1) {
    if (cos != nullptr || sin != nullptr) {
      return InvalidArgument(StrCat("Input '", cos != nullptr ? "cos_cache" : "sin_cache",
                                    "' is given with gqa.do_rotary = 0, expected do_rotary = 1 "
                                    "or the rotary caches absent"));
    }
    return Status::Ok();
  }
  if (cos == nullptr || sin == nullptr) {
    return InvalidArgument(
        StrCat("cos_cache and sin_cache must be provided when do_rotary is 1, got cos_cache ",
               cos == nullptr ? "absent" : "present", " and sin_cache ",
               sin == nullptr ? "absent" : "present"));
  }
  for (const attnrt_tensor* t : {cos, sin}) {
    const char* name = t == cos ? "cos_cache" : "sin_cache";
    ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*t, name));
    ATTNRT_RETURN_IF_ERROR(CheckCompact(*t, name));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*t, name, query.dtype, "the dtype of query"));
    ATTNRT_RETURN_IF_ERROR(CheckRank(*t, name, 2));
    if (!SameDevice(t->device, query.device)) {
      return InvalidArgument(StrCat(name, ": must be on the device of query (",
                                    DeviceString(query.device), "), got ",
                                    DeviceString(t->device)));
    }
    if (t->shape[1] < 1 || 2 * t->shape[1] > head_size || t->shape[0] < 1) {
      return InvalidArgument(StrCat(name,
                                    ": expected [max_position >= 1, rotary_dim / 2] with 1 <= "
                                    "rotary_dim / 2 <= head_size / 2 = ",
                                    head_size / 2, ", got ", ShapeString(*t)));
    }
  }
  if (cos->shape[0] != sin->shape[0] || cos->shape[1] != sin->shape[1]) {
    return InvalidArgument(StrCat("cos_cache and sin_cache must have one shape, got ",
                                  ShapeString(*cos), " and ", ShapeString(*sin)));
  }
  *rotary_half = cos->shape[1];
  return Status::Ok();
}

// The rotary positions of `count` rows of sequence b starting at packed row `begin`: ids[row] when
// `ids` is given, else first_position + i (their token positions); each must lie in [0, rows of
// cos_cache).
Status CheckRotaryPositions(const void* ids, const char* ids_name, const char* what, int64_t begin,
                            int64_t count, int64_t first_position, int64_t b, int64_t rotary_len) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t position = ids != nullptr ? ReadInt64(ids, begin + i) : first_position + i;
    if (position >= 0 && position < rotary_len) continue;
    if (ids != nullptr) {
      return InvalidArgument(StrCat(ids_name, "[", begin + i, "] = ", position,
                                    " must lie in [0, cos_cache rows = ", rotary_len, ")"));
    }
    return InvalidArgument(StrCat(
        what, " row ", begin + i, " (row ", i, " of sequence ", b, ") is rotated at its position ",
        position, ", expected one in [0, cos_cache rows = ", rotary_len, ")",
        position < 0 ? "; give its position in " : "", position < 0 ? ids_name : ""));
  }
  return Status::Ok();
}

// The padded stand-in of a varlen call: the paged op over B sequences of num_tokens rows each.
struct StandIns {
  std::array<int64_t, 3> q_shape, out_shape, kv_shape, v_shape;
  std::array<int64_t, 1> b_shape, one_shape;
  attnrt_tensor query{}, key{}, value{}, seqlens_k{}, total{}, output{};
  const attnrt_tensor* in[ATTNRT_PAGED_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* out[1] = {};
};

attnrt_tensor ShapeOnly(const attnrt_tensor& like, attnrt_dtype dtype, const int64_t* shape,
                        int32_t ndim) {
  attnrt_tensor t{};
  t.device = like.device;
  t.dtype = dtype;
  t.ndim = ndim;
  t.shape = shape;
  return t;
}

// `writes`: the call has new K/V rows (the stand-in's L is then num_tokens, GroupQueryAttention's
// rule; the rows themselves are laid out by query_start_loc or key_start_loc at run).
void MakeStandIns(const attnrt_tensor* const* in, int64_t batch, int64_t num_tokens, int64_t heads,
                  int64_t kv_heads, int64_t head_size, int64_t v_head_size, bool writes,
                  StandIns* s) {
  const attnrt_tensor& q = *In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY);
  s->q_shape = {batch, num_tokens, heads * head_size};
  s->out_shape = {batch, num_tokens, heads * v_head_size};
  s->kv_shape = {batch, num_tokens, kv_heads * head_size};
  s->v_shape = {batch, num_tokens, kv_heads * v_head_size};
  s->b_shape = {batch};
  s->one_shape = {1};
  const attnrt_tensor& lens = *In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS);
  s->query = ShapeOnly(q, q.dtype, s->q_shape.data(), 3);
  s->output = ShapeOnly(q, q.dtype, s->out_shape.data(), 3);
  s->seqlens_k = ShapeOnly(lens, lens.dtype, s->b_shape.data(), 1);
  s->total = ShapeOnly(lens, lens.dtype, s->one_shape.data(), 1);
  s->in[ATTNRT_PAGED_GQA_INPUT_QUERY] = &s->query;
  // Without new rows the cache holds every row: GroupQueryAttention's shared KV (L = 0).
  const attnrt_tensor* key = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY);
  if (!writes) s->kv_shape[1] = s->v_shape[1] = 0;
  s->key = ShapeOnly(q, key != nullptr ? key->dtype : q.dtype, s->kv_shape.data(), 3);
  s->value = ShapeOnly(q, key != nullptr ? key->dtype : q.dtype, s->v_shape.data(), 3);
  s->in[ATTNRT_PAGED_GQA_INPUT_KEY] = &s->key;
  s->in[ATTNRT_PAGED_GQA_INPUT_VALUE] = &s->value;
  s->in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE);
  s->in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE);
  s->in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = &s->seqlens_k;
  s->in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &s->total;
  s->in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK);
  s->in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE);
  s->in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE);
  s->in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = In(in, ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE);
  s->out[0] = &s->output;
}

Status ValidateShapesImpl(const attnrt_paged_gqa_attributes& a, const attnrt_tensor* const* inputs,
                          size_t num_inputs, const attnrt_tensor* const* outputs,
                          size_t num_outputs, attnrt_paged_gqa_varlen_problem* out) {
  if (out == nullptr) return InvalidArgument(StrCat(kOp, ": problem must not be NULL"));
  ATTNRT_RETURN_IF_ERROR(CheckCounts(num_inputs, num_outputs));
  if (inputs == nullptr || outputs == nullptr) {
    return InvalidArgument(StrCat(kOp, ": inputs and outputs must not be NULL"));
  }
  const int64_t heads = a.gqa.num_heads;
  const int64_t kv_heads = a.gqa.kv_num_heads;
  const attnrt_tensor* query = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY);
  if (query == nullptr) return InvalidArgument("Input 'query' is required but absent");
  const attnrt_tensor* key_cache = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE);
  if (key_cache == nullptr) return InvalidArgument("Input 'key_cache' is required but absent");
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*key_cache, "key_cache"));
  ATTNRT_RETURN_IF_ERROR(CheckRank(*key_cache, "key_cache", 4));
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*query, "query"));
  // head_size from the query: its last dimension (rank 3) or its row over num_heads (rank 2).
  // A query that gives none (another rank, a row that is no multiple of num_heads) is refused
  // naming the head size of the key cache, not a quotient of its own wrong shape.
  const int64_t row = query->ndim >= 2 ? query->shape[query->ndim - 1] : 0;
  int64_t head_size = query->ndim == 3 ? row : (heads > 0 ? row / heads : 0);
  const bool query_gives_head_size =
      row > 0 && (query->ndim == 3 || (query->ndim == 2 && heads > 0 && row % heads == 0));
  if (!query_gives_head_size) {
    head_size = key_cache->shape[3] * (key_cache->dtype.bits == 4 ? 2 : 1);
  }
  ATTNRT_RETURN_IF_ERROR(CheckPacked(*query, "query", -1, heads, head_size, "num_heads"));
  const int64_t num_tokens = query->shape[0];
  // The value head size (ABI 1.8): value_cache's rows where they differ from key_cache's. A
  // malformed value_cache is reported by the paged checks.
  int64_t v_head_size = 0;
  const attnrt_tensor* value_cache = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE);
  if (value_cache != nullptr && value_cache->ndim == 4 && value_cache->shape != nullptr) {
    ATTNRT_RETURN_IF_ERROR(paged_gqa::ValueHeadSize(a, *key_cache, *value_cache, &v_head_size));
  }
  if (v_head_size == 0) v_head_size = head_size;
  const char* v_text =
      v_head_size != head_size ? "v_head_size (value_cache's last dimension)" : "head_size";
  const attnrt_tensor* key = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY);
  const attnrt_tensor* value = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE);
  if ((key == nullptr) != (value == nullptr)) {
    return InvalidArgument(
        StrCat("Inputs 'key' and 'value' must be both given or both absent, got ",
               key == nullptr ? "value only" : "key only"));
  }
  // key_start_loc (ABI 1.10): key and value have rows of their own count, num_key_tokens.
  const attnrt_tensor* key_start_loc = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC);
  if (key_start_loc != nullptr && key == nullptr) {
    return InvalidArgument(
        "Input 'key_start_loc' is given without key and value: there are no rows to write");
  }
  int64_t num_key_tokens = 0;
  if (key != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckPacked(*key, "key", key_start_loc != nullptr ? -1 : num_tokens,
                                       kv_heads, head_size, "kv_num_heads"));
    num_key_tokens = key->shape[0];
    ATTNRT_RETURN_IF_ERROR(
        CheckPacked(*value, "value", num_key_tokens, kv_heads, v_head_size, "kv_num_heads", v_text,
                    key_start_loc != nullptr ? "num_key_tokens (key's rows)" : "num_tokens"));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*key, "key", query->dtype, "the dtype of query"));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*value, "value", query->dtype, "the dtype of query"));
  }
  // ALiBi (ABI 1.10): one float32 slope per query head, beside the query.
  const attnrt_tensor* slopes = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES);
  if (slopes != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*slopes, "alibi_slopes"));
    ATTNRT_RETURN_IF_ERROR(CheckCompact(*slopes, "alibi_slopes"));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*slopes, "alibi_slopes", kFloat32));
    if (slopes->ndim != 1 || slopes->shape[0] != heads) {
      return InvalidArgument(StrCat("alibi_slopes: expected [num_heads = ", heads,
                                    "] (one slope per query head), got ", ShapeString(*slopes)));
    }
    if (!SameDevice(slopes->device, query->device)) {
      return InvalidArgument(StrCat("alibi_slopes: must be on the device of query (",
                                    DeviceString(query->device), "), got ",
                                    DeviceString(slopes->device)));
    }
  } else if (a.alibi_form == ATTNRT_ALIBI_FORM_SYMMETRIC) {
    return InvalidArgument(
        "alibi_form = 1 (SYMMETRIC, -slope * |key position - query position|) needs the "
        "alibi_slopes input, which is absent: without slopes there is no bias to shape");
  }
  int64_t rotary_half = 0;
  ATTNRT_RETURN_IF_ERROR(CheckRotaryCaches(a, inputs, *query, head_size, &rotary_half));
  const attnrt_tensor* output = outputs[ATTNRT_PAGED_GQA_VARLEN_OUTPUT_OUTPUT];
  if (output == nullptr) return InvalidArgument("Output 'output' is required but absent");
  ATTNRT_RETURN_IF_ERROR(
      CheckPacked(*output, "output", num_tokens, heads, v_head_size, "num_heads", v_text));
  ATTNRT_RETURN_IF_ERROR(CheckDtype(*output, "output", query->dtype, "the dtype of query"));

  const attnrt_tensor* lens = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS);
  ATTNRT_RETURN_IF_ERROR(CheckHostVector(lens, "seq_lens", kInt32, -1, ""));
  const int64_t batch = lens->shape[0];
  ATTNRT_RETURN_IF_ERROR(CheckHostVector(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC),
                                         "query_start_loc", kInt32, batch + 1,
                                         "batch_size + 1, seq_lens' length + 1"));
  if (key_start_loc != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckHostVector(key_start_loc, "key_start_loc", kInt32, batch + 1,
                                           "batch_size + 1, seq_lens' length + 1"));
    if (num_key_tokens > 0 && num_tokens == 0) {
      return InvalidArgument(StrCat("Input 'key' has ", num_key_tokens,
                                    " rows (key_start_loc) but query has none: a call that "
                                    "writes rows attends with at least one query row"));
    }
  }
  const attnrt_tensor* slots = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING);
  if (slots != nullptr) {
    ATTNRT_RETURN_IF_ERROR(
        CheckHostVector(slots, "slot_mapping", kInt64, key != nullptr ? num_key_tokens : num_tokens,
                        key_start_loc != nullptr ? "num_key_tokens, key's rows" : "num_tokens"));
    if (key == nullptr) {
      return InvalidArgument(
          "Input 'slot_mapping' is given without key and value: there are no rows to write");
    }
  }
  // Rotary positions (ABI 1.12): one per query row, one per key row.
  const attnrt_tensor* position_ids = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_POSITION_IDS);
  const attnrt_tensor* key_position_ids =
      In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_POSITION_IDS);
  for (const attnrt_tensor* ids : {position_ids, key_position_ids}) {
    if (ids != nullptr && a.gqa.do_rotary != 1) {
      return InvalidArgument(StrCat("Input '",
                                    ids == position_ids ? "position_ids" : "key_position_ids",
                                    "' is given with gqa.do_rotary = 0: they are rotary positions, "
                                    "expected do_rotary = 1 or the input absent"));
    }
  }
  if (position_ids != nullptr) {
    ATTNRT_RETURN_IF_ERROR(
        CheckHostVector(position_ids, "position_ids", kInt64, num_tokens, "num_tokens"));
  }
  if (key_position_ids != nullptr) {
    if (key == nullptr) {
      return InvalidArgument(
          "Input 'key_position_ids' is given without key and value: there are no rows to rotate");
    }
    ATTNRT_RETURN_IF_ERROR(
        CheckHostVector(key_position_ids, "key_position_ids", kInt64, num_key_tokens,
                        key_start_loc != nullptr ? "num_key_tokens, key's rows" : "num_tokens"));
  }

  StandIns s;
  MakeStandIns(inputs, batch, num_tokens, heads, kv_heads, head_size, v_head_size,
               key != nullptr && num_key_tokens > 0, &s);
  attnrt_paged_gqa_varlen_problem p{};
  p.struct_size = sizeof(p);
  // The stand-in has no rotary caches (they were checked above, by the varlen op's rules).
  attnrt_paged_gqa_attributes stand_in_attributes = a;
  stand_in_attributes.gqa.do_rotary = 0;
  ATTNRT_RETURN_IF_ERROR(paged_gqa::ValidateShapes(
      stand_in_attributes, s.in, ATTNRT_PAGED_GQA_NUM_INPUTS, s.out, 1, &p.paged));
  if (a.gqa.do_rotary == 1) {
    attnrt_gqa_problem& gqa = p.paged.gqa;
    gqa.attributes.do_rotary = 1;
    gqa.attributes.rotary_interleaved = a.gqa.rotary_interleaved;
    gqa.has_rotary_cache = true;
    gqa.rotary_cache_length = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE)->shape[0];
    gqa.rotary_dim = 2 * rotary_half;
  }
  p.num_tokens = num_tokens;
  p.has_slot_mapping = slots != nullptr;
  p.num_key_tokens = num_key_tokens;
  p.has_key_start_loc = key_start_loc != nullptr;
  p.has_alibi_slopes = slopes != nullptr;
  p.local_window_right = a.local_window_right;
  p.alibi_form = a.alibi_form;
  p.has_position_ids = position_ids != nullptr;
  p.has_key_position_ids = key_position_ids != nullptr;
  *out = p;
  return Status::Ok();
}

Status ValidateRunImpl(const attnrt_paged_gqa_varlen_problem& p, const attnrt_tensor* const* inputs,
                       size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                       attnrt_paged_gqa_varlen_args* out, std::vector<int32_t>* seqlens_k) {
  if (out == nullptr || seqlens_k == nullptr) {
    return InvalidArgument(StrCat(kOp, ": args must not be NULL"));
  }
  ATTNRT_RETURN_IF_ERROR(CheckCounts(num_inputs, num_outputs));
  const attnrt_paged_gqa_problem& paged = p.paged;
  const int64_t B = paged.gqa.batch_size;
  const int64_t block_size = paged.block_size;
  const int64_t slots = paged.max_blocks_per_seq;
  const int64_t capacity = slots * block_size;
  const void* starts = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC));
  const void* lens = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS));
  const auto* table =
      static_cast<const int32_t*>(DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE)));
  ATTNRT_RETURN_IF_ERROR(StartsAtZero(starts, "query_start_loc"));
  // ALiBi slopes in host memory are read here: a NaN or infinite slope would make its head's rows
  // NaN (inf * 0 at the row's own key).
  const attnrt_tensor* slopes = In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES);
  if (p.has_alibi_slopes && slopes->device.device_type == ATTNRT_DEVICE_CPU) {
    const auto* values = static_cast<const float*>(DataOf(slopes));
    for (int64_t n = 0; n < slopes->shape[0]; ++n) {
      if (!std::isfinite(values[n])) {
        return InvalidArgument(
            StrCat("alibi_slopes[", n, "] = ", values[n], " must be a finite number"));
      }
    }
  }
  // The new K/V rows of each sequence: key_start_loc's runs (ABI 1.10), else its query rows.
  const void* key_starts = p.has_key_start_loc
                               ? DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC))
                               : nullptr;
  if (key_starts != nullptr) ATTNRT_RETURN_IF_ERROR(StartsAtZero(key_starts, "key_start_loc"));
  // Rotary positions (ABI 1.12), each checked against the rows of cos_cache.
  const bool rotary = paged.gqa.attributes.do_rotary == 1;
  const int64_t rotary_len = paged.gqa.rotary_cache_length;
  const void* position_ids =
      p.has_position_ids ? DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_POSITION_IDS)) : nullptr;
  const void* key_position_ids =
      p.has_key_position_ids ? DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_POSITION_IDS))
                             : nullptr;
  seqlens_k->assign(static_cast<size_t>(B), 0);
  int64_t max_total = 1;
  int64_t max_query_len = 0;
  int64_t max_distance = 0;  // of |key position - query position| over the call's sequences
  std::vector<paged_gqa::SequenceRows> rows(static_cast<size_t>(B));
  const bool writes = paged.gqa.kv_sequence_length > 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t q_len = 0;
    ATTNRT_RETURN_IF_ERROR(
        RunLength(starts, "query_start_loc", b, p.num_tokens, "num_tokens", "", &q_len));
    const int64_t t_b = ReadInt32(lens, b);
    int64_t k_len = q_len;
    if (key_starts != nullptr) {
      ATTNRT_RETURN_IF_ERROR(RunLength(key_starts, "key_start_loc", b, p.num_key_tokens,
                                       "num_key_tokens", " (key's rows)", &k_len));
    }
    if (key_starts != nullptr && t_b < std::max<int64_t>(1, k_len)) {
      return InvalidArgument(
          StrCat("seq_lens[", b, "] = ", t_b, " must be at least ", std::max<int64_t>(1, k_len),
                 " (the context includes the sequence's ", k_len, " new key rows, key_start_loc[",
                 b + 1, "] - key_start_loc[", b, "])"));
    }
    // Causal rows sit at the end of the context (FlashAttention's bottom-right alignment: with
    // fewer keys than rows, ABI 1.11, the first rows see none); non-causal ones see all of it
    // whatever their number (cross-attention). Either way the rows written are part of it.
    const int64_t least =
        std::max<int64_t>(1, writes && key_starts == nullptr ? q_len : int64_t{0});
    if (t_b < least) {
      return InvalidArgument(StrCat("seq_lens[", b, "] = ", t_b, " must be at least ", least,
                                    " (the context includes the sequence's ", q_len,
                                    " new tokens, query_start_loc[", b + 1, "] - query_start_loc[",
                                    b, "])"));
    }
    if (t_b > capacity) {
      return InvalidArgument(StrCat("block_table: too short for seq_lens[", b, "] = ", t_b, ": ",
                                    (t_b + block_size - 1) / block_size, " blocks of ", block_size,
                                    " needed, a row has max_blocks_per_seq ", slots, " slots"));
    }
    if (rotary) {
      const int64_t q_begin = ReadInt32(starts, b);
      const int64_t k_begin = key_starts != nullptr ? ReadInt32(key_starts, b) : q_begin;
      ATTNRT_RETURN_IF_ERROR(CheckRotaryPositions(position_ids, "position_ids", "query", q_begin,
                                                  q_len, t_b - q_len, b, rotary_len));
      if (writes) {
        ATTNRT_RETURN_IF_ERROR(CheckRotaryPositions(key_position_ids, "key_position_ids", "key",
                                                    k_begin, k_len, t_b - k_len, b, rotary_len));
      }
    }
    (*seqlens_k)[static_cast<size_t>(b)] = static_cast<int32_t>(t_b - 1);
    rows[static_cast<size_t>(b)] = {t_b, writes ? t_b - k_len : t_b};
    max_total = std::max(max_total, t_b);
    max_query_len = std::max(max_query_len, q_len);
    // Keys sit at [0, T_b), query rows at [T_b - q_len_b, T_b) (before the first key when they
    // outnumber it): |j - p| reaches max(T_b, q_len_b) - 1.
    max_distance = std::max(max_distance, std::max(t_b, q_len) - 1);
  }
  // ALiBi's bias, slope * (key position - query position), must be a float32 number: an overflow
  // to +Inf would make its rows NaN (Inf - Inf in the softmax). A finite bias can still overflow
  // when added to a score near FLT_MAX, as any float32 sum can.
  if (p.has_alibi_slopes && slopes->device.device_type == ATTNRT_DEVICE_CPU) {
    const auto* values = static_cast<const float*>(DataOf(slopes));
    for (int64_t n = 0; n < slopes->shape[0]; ++n) {
      if (std::fabs(static_cast<double>(values[n])) * static_cast<double>(max_distance) >
          static_cast<double>(FLT_MAX)) {
        return InvalidArgument(StrCat("alibi_slopes[", n, "] = ", values[n],
                                      " times the largest key distance of this call (",
                                      max_distance,
                                      ") overflows float32: slope * (key position - query "
                                      "position) must stay finite"));
      }
    }
  }
  if (key_starts != nullptr && ReadInt32(key_starts, B) != p.num_key_tokens) {
    return InvalidArgument(StrCat("key_start_loc[", B, "] = ", ReadInt32(key_starts, B),
                                  " must equal num_key_tokens = ", p.num_key_tokens,
                                  " (key's rows: every row belongs to a sequence)"));
  }
  if (key_starts != nullptr && writes && max_query_len == 0) {
    return InvalidArgument(StrCat("key_start_loc places ", p.num_key_tokens,
                                  " key rows but no sequence has a query row (query_start_loc[", B,
                                  "] = 0): a call that writes rows attends"));
  }
  ATTNRT_RETURN_IF_ERROR(
      paged_gqa::CheckBlockTable(table, slots, block_size, paged.num_blocks, rows, "seq_lens"));
  const void* slot_mapping = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING));
  if (slot_mapping != nullptr) {
    // Each new row's slot is -1 or the slot the table gives its position.
    const void* row_starts = key_starts != nullptr ? key_starts : starts;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t begin = ReadInt32(row_starts, b);
      const int64_t k_len = ReadInt32(row_starts, b + 1) - begin;
      const int64_t past = rows[static_cast<size_t>(b)].length - k_len;
      for (int64_t i = 0; i < k_len; ++i) {
        const int64_t slot = ReadInt64(slot_mapping, begin + i);
        if (slot == -1) continue;
        const int64_t position = past + i;
        const int64_t expected =
            int64_t{table[b * slots + position / block_size]} * block_size + position % block_size;
        if (slot != expected) {
          return InvalidArgument(
              StrCat("slot_mapping[", begin + i, "] = ", slot, " but that row is token ", position,
                     " of sequence ", b, ", which block_table places in slot ", expected,
                     " (block_table[", b, "][", position / block_size, "] * block_size + ",
                     position % block_size, "); expected ", expected, " or -1"));
        }
      }
    }
  }
  // Every tensor but the pools, for the pools' aliasing check; the output against the inputs.
  std::vector<paged_gqa::LabelledTensor> others;
  for (size_t i = 0; i < ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS; ++i) {
    if (inputs[i] == nullptr || i == ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE ||
        i == ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE) {
      continue;
    }
    others.push_back({inputs[i], StrCat("Input '", kInputNames[i], "'")});
  }
  const attnrt_tensor& output = *outputs[ATTNRT_PAGED_GQA_VARLEN_OUTPUT_OUTPUT];
  ByteRange output_range;
  ATTNRT_RETURN_IF_ERROR(ResolveRange(output, "output", &output_range));
  for (const auto& other : others) {
    ByteRange r;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*other.tensor, other.label, &r));
    if (other.tensor->device.device_type == output.device.device_type &&
        Overlaps(output_range, r)) {
      return InvalidArgument(StrCat("Output 'output' overlaps ", other.label,
                                    " in memory, expected disjoint buffers"));
    }
  }
  others.push_back({&output, "Output 'output'"});
  ATTNRT_RETURN_IF_ERROR(
      paged_gqa::CheckPoolAliasing(*In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE),
                                   *In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE), others,
                                   In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY) != nullptr));

  attnrt_paged_gqa_varlen_args args{};
  args.struct_size = sizeof(args);
  args.problem = &p;
  attnrt_paged_gqa_args& pa = args.paged;
  pa.struct_size = sizeof(pa);
  pa.problem = &p.paged;
  pa.key_cache = const_cast<void*>(DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE)));
  pa.value_cache = const_cast<void*>(DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE)));
  pa.block_table = table;
  attnrt_gqa_args& g = pa.gqa;
  g.struct_size = sizeof(g);
  g.problem = &p.paged.gqa;
  g.total_sequence_length = static_cast<int32_t>(max_total);
  g.phase = ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT;
  g.present_shares_past = true;
  g.query = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY));
  g.key = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY));
  g.value = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE));
  g.seqlens_k = seqlens_k->data();
  g.head_sink = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK));
  g.k_scale = static_cast<const float*>(DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE)));
  g.v_scale = static_cast<const float*>(DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE)));
  g.output = const_cast<void*>(DataOf(&output));
  args.query_start_loc = static_cast<const int32_t*>(starts);
  args.seq_lens = static_cast<const int32_t*>(lens);
  args.slot_mapping = static_cast<const int64_t*>(slot_mapping);
  args.max_query_len = max_query_len;
  args.key_start_loc = static_cast<const int32_t*>(key_starts);
  args.alibi_slopes = static_cast<const float*>(p.has_alibi_slopes ? DataOf(slopes) : nullptr);
  if (rotary) {
    g.cos_cache = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE));
    g.sin_cache = DataOf(In(inputs, ATTNRT_PAGED_GQA_VARLEN_INPUT_SIN_CACHE));
  }
  args.position_ids = static_cast<const int64_t*>(position_ids);
  args.key_position_ids = static_cast<const int64_t*>(key_position_ids);
  *out = args;
  return Status::Ok();
}

}  // namespace

Status ValidateAttributes(const void* attributes, attnrt_paged_gqa_attributes* out) {
  attnrt_paged_gqa_attributes a{};
  ATTNRT_RETURN_IF_ERROR(paged_gqa::ValidateAttributes(attributes, &a, /*varlen=*/true));
  if (a.gqa.qk_output != 0) {
    return InvalidArgument(
        StrCat("gqa.qk_output must be 0 for ", kOp, " (no output_qk), got ", a.gqa.qk_output));
  }
  *out = a;
  return Status::Ok();
}

Status ValidateShapes(const attnrt_paged_gqa_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_paged_gqa_varlen_problem* out) {
  return GuardValidation(kOp, "ValidateShapes", [&] {
    return ValidateShapesImpl(attributes, inputs, num_inputs, outputs, num_outputs, out);
  });
}

Status ValidateRun(const attnrt_paged_gqa_varlen_problem& problem,
                   const attnrt_tensor* const* inputs, size_t num_inputs,
                   const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_paged_gqa_varlen_args* out, std::vector<int32_t>* seqlens_k) {
  return GuardValidation(kOp, "ValidateRun", [&] {
    return ValidateRunImpl(problem, inputs, num_inputs, outputs, num_outputs, out, seqlens_k);
  });
}

const char* InputName(size_t index) {
  return index < ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) { return index == 0 ? "output" : "?"; }

}  // namespace attnrt::core::paged_gqa_varlen
