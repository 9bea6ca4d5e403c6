// libFuzzer target for paged GroupQueryAttention over packed variable-length batches
// (attnrt/ops/paged_gqa_varlen.h) through the public C ABI.
//
// Each input is decoded with FuzzedDataProvider into one mostly consistent call: attributes
// (num_heads, kv_num_heads, head_size 8 to 128, block_size, kv_layout, scale, softcap,
// local_window_size, causal (0 now and then: non-causal), smooth_softmax, head_sink, p_precision;
// float32, float16 or bfloat16 queries over caches of that dtype, int8, float8_e4m3fn/e5m2 or int4,
// per tensor or per channel, or Q8_0/Q4_0 blocks; ABI 1.9: now and then a value_cache of a type of
// its own, float32, float16, bfloat16, Q8_0 or Q4_0, beside a key_cache of T, Q8_0 or Q4_0, valid
// or not, and key and value head sizes that are no multiple of 8, Hv != H among them), 0 to 8
// sequences of 0 to 40 new rows over a context of up to 48 earlier tokens (query_start_loc,
// seq_lens), padding rows past query_start_loc[B], a block table of shuffled physical blocks with
// -1 in unused slots, optional key/value (the new rows) and slot_mapping (consistent, with -1 rows,
// or with one wrong slot), and pools that are two compact tensors or, for pools of one type and
// row, the K and V halves of one tensor in any order of its (block, K/V, kv head, slot) axes
// (vLLM's CPU cache, kv[2, ...], FlashInfer's pages). Then at most one mutation (a table slot -1,
// out of range, negative or naming another slot's block; seq_lens below q_len or beyond the table;
// query_start_loc not starting at 0, decreasing or past num_tokens; slot_mapping without key/value;
// key without value; value_cache the same view as key_cache; a pool of the wrong block size; a
// workspace one byte short), and now and then an attribute that is refused (block_size 0 or 1025,
// kv_layout 2, num_heads not a multiple of kv_num_heads, head_size 12 but over unquantized caches,
// p_precision 2), and now and then key_start_loc (ABI 1.10): query_start_loc's values (the same
// rows) or malformed, alibi_slopes, valid or not, and local_window_right (a window of non-causal
// attention; refused with causal attention or below -1), and now and then (ABI 1.12) rotary
// embedding (cos_cache/sin_cache [M, R/2] with R up to head_size, half-split or interleaved, at the
// rows' token positions or at position_ids / key_position_ids; refused: positions past M, cos of
// another dtype, position_ids without rotary) and alibi_form SYMMETRIC (refused: 2, and SYMMETRIC
// without alibi_slopes). Tensor
// contents come from a hash of the input. The call runs attnrt_op_create
// -> attnrt_op_explain -> attnrt_op_plan -> attnrt_plan_run on the runtime's choice of kernel and
// again, from the same pool bytes, on a runtime pinned to the scalar kernels. Every tensor is a
// heap buffer of exactly the bytes it describes (the two halves of a shared pool: the one tensor's
// bytes; aliased pools of two sizes: the larger's), so any access outside them is reported by
// AddressSanitizer.
//
// Invariants checked (a violation aborts with a description, which libFuzzer records as a crash):
//   - a failing call returns a non-OK status other than ATTNRT_ERROR_INTERNAL and a non-empty
//     attnrt_last_error_message(); explain selects exactly the kernel plan picks;
//   - both runtimes give the same run status when both plan (validation precedes the kernel);
//   - a failing run leaves the pools and every output byte untouched;
//   - a call with two cache types whose attributes do not describe its pools (or whose key_cache
//     is int8, float8 or int4 with scales) does not run, nor one with a malformed key_start_loc,
//     alibi_slopes or rotary input;
//   - a successful run writes every element of the output rows before query_start_loc[B] (the
//     poison, all bits set, is gone), leaves the padding rows after them untouched, changes no pool
//     byte but the rows of the new tokens (slot_mapping -1 rows excepted; each pool with its own
//     element size and row), and, over unquantized caches, those rows hold the key and value rows
//     bit for bit (a value_cache of a float type of its own: rounded to it to nearest even; key
//     rows rotated with rotary embedding: any content);
//   - when both runtimes succeed, the pools are bitwise equal and the outputs agree within a bound
//     of float32 rounding derived from the inputs (Tolerance below), plus one rounding of a 16-bit
//     output.
// PAGED_GQA_VARLEN_FUZZER_STATS=1 prints at exit how many calls each stage refused, what ran and
// how many results were compared, in all and for the calls with two cache types, a head size that
// is no multiple of 8, or an invalid pair of cache types; GQA_FUZZER_VERBOSE=1 describes each case.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "fuzz_agreement.h"
#include "fuzz_rng.h"

namespace {

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kF8E4M3 = ATTNRT_DTYPE_FLOAT8_E4M3FN;
constexpr attnrt_dtype kF8E5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;
constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
constexpr attnrt_dtype kI64 = ATTNRT_DTYPE_INT64;

attnrt_runtime* g_runtimes[2] = {nullptr, nullptr};  // the runtime's choice; the scalar kernels
bool g_verbose = false;

// Per runtime: calls refused at each stage, runs per kernel; per case: what both runs compared.
// The ABI 1.9 cases (v_cache_own_type = 1 with two cache types that differ, or with one type for
// both pools; a key or value head size that is no multiple of 8; cache types that the attributes
// do not describe) get these counts of their own too (Tally).
struct Tally {
  int64_t op_refused = 0, plan_refused = 0, run_refused = 0, compared = 0;
  std::map<std::string, int64_t> ran;
};
struct Stats {
  int64_t op_refused = 0, plan_refused = 0, run_refused = 0, compared = 0, empty_steps = 0,
          decode_steps = 0, mixed_steps = 0, shared_pools = 0, slot_mappings = 0;
  std::map<std::string, int64_t> ran;
  Tally two_types, own_one_type, odd_heads, invalid_types, rotary, symmetric_alibi;
};
Stats g_stats;

void PrintTally(const char* what, const Tally& t) {
  std::fprintf(stderr,
               "paged_gqa_varlen_fuzzer: %s: op refused %lld, plan refused %lld, run refused "
               "%lld; compared %lld\n",
               what, static_cast<long long>(t.op_refused), static_cast<long long>(t.plan_refused),
               static_cast<long long>(t.run_refused), static_cast<long long>(t.compared));
  for (const auto& [name, count] : t.ran) {
    std::fprintf(stderr, "paged_gqa_varlen_fuzzer: %s: ran %s %lld\n", what, name.c_str(),
                 static_cast<long long>(count));
  }
}

void PrintStats() {
  const Stats& s = g_stats;
  std::fprintf(stderr,
               "paged_gqa_varlen_fuzzer: op refused %lld, plan refused %lld, run refused %lld; "
               "compared %lld (no rows %lld, all-decode %lld, mixed %lld; shared pools %lld, "
               "slot_mapping %lld)\n",
               static_cast<long long>(s.op_refused), static_cast<long long>(s.plan_refused),
               static_cast<long long>(s.run_refused), static_cast<long long>(s.compared),
               static_cast<long long>(s.empty_steps), static_cast<long long>(s.decode_steps),
               static_cast<long long>(s.mixed_steps), static_cast<long long>(s.shared_pools),
               static_cast<long long>(s.slot_mappings));
  for (const auto& [name, count] : s.ran) {
    std::fprintf(stderr, "paged_gqa_varlen_fuzzer: ran %s %lld\n", name.c_str(),
                 static_cast<long long>(count));
  }
  PrintTally("two cache types", s.two_types);
  PrintTally("v_cache_own_type 1, one type", s.own_one_type);
  PrintTally("head size no multiple of 8", s.odd_heads);
  PrintTally("rotary embedding (ABI 1.12)", s.rotary);
  PrintTally("alibi_form SYMMETRIC with slopes", s.symmetric_alibi);
  PrintTally("invalid value cache type", s.invalid_types);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "paged_gqa_varlen_fuzzer: invariant violated: %s\n", what.c_str());
  std::abort();
}

attnrt_status Checked(const char* call, attnrt_status status) {
  if (status == ATTNRT_OK) return status;
  if (status == ATTNRT_ERROR_INTERNAL) {
    Fail(std::string(call) + " returned INTERNAL: " + attnrt_last_error_message());
  }
  if (g_verbose) std::fprintf(stderr, "  %s: %s\n", call, attnrt_last_error_message());
  if (attnrt_last_error_message()[0] == '\0') {
    Fail(std::string(call) + " failed with status " + std::to_string(status) + " and no message");
  }
  return status;
}

using fuzz_rng::Rng;

using Bytes = std::vector<unsigned char>;

// A heap buffer of exactly `bytes` (at least one byte allocated, so data is never NULL).
struct Buffer {
  std::unique_ptr<unsigned char[]> data;
  size_t bytes = 0;
  explicit Buffer(size_t n) : data(new unsigned char[std::max<size_t>(n, 1)]), bytes(n) {}
  Bytes Copy() const { return Bytes(data.get(), data.get() + bytes); }
  void Restore(const Bytes& b) {
    if (!b.empty()) std::memcpy(data.get(), b.data(), b.size());  // b.data() may be NULL
  }
};

// A tensor over a buffer of its own or over part of a shared one.
struct Tensor {
  std::shared_ptr<Buffer> buffer;
  std::vector<int64_t> shape, strides;
  attnrt_tensor desc{};
  void Describe(attnrt_dtype dtype, uint64_t element_offset, bool use_byte_offset) {
    desc.device = {ATTNRT_DEVICE_CPU, 0};
    desc.dtype = dtype;
    desc.ndim = static_cast<int32_t>(shape.size());
    desc.shape = shape.data();
    desc.strides = strides.empty() ? nullptr : strides.data();
    const uint64_t bytes = element_offset * dtype.bits / 8;
    desc.data = buffer->data.get() + (use_byte_offset ? 0 : bytes);
    desc.byte_offset = use_byte_offset ? bytes : 0;
  }
};

std::unique_ptr<Tensor> Compact(attnrt_dtype dtype, std::vector<int64_t> shape) {
  auto t = std::make_unique<Tensor>();
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  t->buffer = std::make_shared<Buffer>(static_cast<size_t>(n * dtype.bits / 8));
  t->shape = std::move(shape);
  t->Describe(dtype, 0, false);
  return t;
}

// float32 value of element i of a float32, float16 or bfloat16 buffer.
float ValueAt(const void* data, int64_t i, attnrt_dtype dtype) {
  fuzz_agreement::Output o{"",     data, i + 1, dtype.bits, dtype.code == ATTNRT_DTYPE_CODE_BFLOAT,
                           nullptr};
  return fuzz_agreement::ToFloat(o, i);
}

// The bytes of x rounded to nearest even in a float32, float16 or bfloat16 element (x finite): what
// a value row of T becomes in a value_cache of a float type of its own (ABI 1.9).
void StoreRounded(float x, attnrt_dtype dtype, unsigned char* to) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (dtype.bits == 32) {
    std::memcpy(to, &u, 4);
    return;
  }
  uint16_t h;
  if (dtype.code == ATTNRT_DTYPE_CODE_BFLOAT) {
    h = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  } else {
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t magnitude = u & 0x7FFFFFFFu;
    if (magnitude >= 0x477FF000u) {  // 65520 and above round to infinity
      h = static_cast<uint16_t>(sign | 0x7C00u);
    } else if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal, in units of 2^-24
      h = static_cast<uint16_t>(sign |
                                static_cast<uint16_t>(std::nearbyint(std::fabs(x) * 16777216.0f)));
    } else {
      const uint32_t rebased = magnitude - 0x38000000u;
      h = static_cast<uint16_t>(sign | ((rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13));
    }
  }
  std::memcpy(to, &h, 2);
}

// Random values in [-1, 1): float32, bfloat16 (float32 truncated) or float16 of magnitude in
// [2^-7, 2^-1).
void FillFloat(Buffer& b, attnrt_dtype dtype, Rng& rng) {
  const size_t size = dtype.bits / 8;
  for (size_t i = 0; i + size <= b.bytes; i += size) {
    const float x = rng.Unit();
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (size == 4) {
      std::memcpy(b.data.get() + i, &u, 4);
      continue;
    }
    uint16_t h = static_cast<uint16_t>(u >> 16);
    if (dtype.code == ATTNRT_DTYPE_CODE_FLOAT) {
      h = static_cast<uint16_t>((h & 0x8000u) | ((8 + rng.Next() % 7) << 10) |
                                (rng.Next() & 0x3FF));
    }
    std::memcpy(b.data.get() + i, &h, 2);
  }
}

// Random codes; float8_e4m3fn without its NaN (0x7F, 0xFF), float8_e5m2 without its infinities and
// NaNs (exponent 31).
// Q8_0/Q4_0 pools: every byte below 0x3C, so that any two bytes read as a block's float16 scale are
// a finite value in [0, 1) (and codes stay within 0..59).
void FillBlockBytes(Buffer& b, Rng& rng) {
  for (size_t i = 0; i < b.bytes; ++i) b.data[i] = static_cast<unsigned char>(rng.Next() % 0x3C);
}

void FillCodes(Buffer& b, attnrt_dtype dtype, Rng& rng) {
  const bool e4m3 = dtype.code == ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN;
  const bool e5m2 = dtype.code == ATTNRT_DTYPE_CODE_FLOAT8_E5M2;
  for (size_t i = 0; i < b.bytes; ++i) {
    auto c = static_cast<unsigned char>(rng.Next());
    if ((e4m3 && (c & 0x7F) == 0x7F) || (e5m2 && (c & 0x7C) == 0x7C)) {
      c = static_cast<unsigned char>(c & 0xF0);
    }
    b.data[i] = c;
  }
}

// The last dimension of a pool row of head_size elements for each Case::quant (or v_quant).
int64_t CacheRow(int quant, int64_t head_size) {
  if (quant >= 4) return head_size / 32 * (quant == 5 ? 18 : 34);
  return quant == 3 ? head_size / 2 : head_size;
}

float MaxAbs(const Tensor* t) {
  float m = 0.0f;
  if (t == nullptr) return m;
  const int64_t n = static_cast<int64_t>(t->buffer->bytes * 8 / t->desc.dtype.bits);
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(ValueAt(t->buffer->data.get(), i, t->desc.dtype)));
  return m;
}

struct Deleters {
  void operator()(attnrt_op* p) const { attnrt_op_destroy(p); }
  void operator()(attnrt_plan* p) const { attnrt_plan_release(p); }
  void operator()(attnrt_explanation* p) const { attnrt_explanation_destroy(p); }
};

// The decoded call.
struct Case {
  attnrt_paged_gqa_attributes attributes;
  int64_t heads = 1, kv_heads = 1, head_size = 8, block_size = 4, cache_row = 8;
  attnrt_dtype t_dtype = kF32, cache_dtype = kF32;
  int quant = 0;  // 0 none, 1 int8, 2 float8 (e4m3fn or e5m2), 3 int4, 4 Q8_0, 5 Q4_0 blocks
  // value_cache: its head size Hv, row and type, key_cache's unless two_types (ABI 1.9:
  // v_cache_own_type = 1; v_quant 0 is then a float type of its own, v_cache_dtype) or Hv != H.
  int64_t v_head_size = 8, v_cache_row = 8;
  attnrt_dtype v_cache_dtype = kF32;
  int v_quant = 0;
  bool two_types = false, invalid_type = false, stray_scale = false, odd_heads = false;
  bool byte_offset = false;
  bool has_kv = true, rank3 = false, head_sink = false;
  int64_t batch = 0, num_tokens = 0, slots = 1, num_blocks = 1;
  std::vector<int32_t> starts, lens, table;
  std::vector<int64_t> slot_mapping;  // empty: absent
  int axes[4] = {0, 1, 2, 3};         // physical order of (block, K/V, kv head, slot); shared pool
  bool shared_pool = false;
  int mutation = 0, workspace_mode = 0;
  // key_start_loc (ABI 1.10): 0 absent; 1 equal to query_start_loc (the same rows, so the same
  // writes, refused where query_start_loc[B] leaves key rows unplaced or key is absent); refused:
  // 2 starting at 1, 3 ending past key's rows, 4 int64.
  int key_rows = 0;
  // alibi_slopes (ABI 1.10): 0 absent; 1 float32 [N] in [-1, 1); refused: 2 [N + 1], 3 float16.
  int alibi = 0;
  // Rotary embedding (ABI 1.12): 0 none; 1 cos/sin of M = 96 rows (every default position fits);
  // 2 with position_ids and key_position_ids in [0, 96); refused: 3 M = 4 (positions past it,
  // unless every sequence is short), 4 cos_cache of another dtype, 5 position_ids without rotary.
  int rotary = 0;
  int64_t rotary_half = 1;
  bool rotary_interleaved = false;
};

// Lays out the two pools: compact tensors, or the halves of one tensor whose axes (block, K/V,
// kv head, slot, then the row) come in the order `axes` (pools of one type and row only). Returns
// each pool's element strides of (block, slot, kv head) and element offset, for the writes check.
// Aliased compact pools (one buffer) get a buffer of the larger pool's bytes.
struct PoolLayout {
  int64_t block[2] = {0, 0}, slot[2] = {0, 0}, head[2] = {0, 0};
  uint64_t offset[2] = {0, 0};
};

PoolLayout MakePools(const Case& c, int64_t pool_block_size, bool alias, bool byte_offset,
                     std::unique_ptr<Tensor>* key, std::unique_ptr<Tensor>* value) {
  const bool bnsh = c.attributes.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t extent[4] = {c.num_blocks, 2, c.kv_heads, pool_block_size};
  const int64_t rows[2] = {c.cache_row, c.v_cache_row};
  const attnrt_dtype dtypes[2] = {c.cache_dtype, c.v_cache_dtype};
  PoolLayout l;
  int64_t stride[2][4];
  size_t bytes[2];
  for (int k = 0; k < 2; ++k) {
    int64_t s = rows[k];
    if (!c.shared_pool) {
      const int order[3] = {0, bnsh ? 2 : 3, bnsh ? 3 : 2};  // block, then the layout's order
      for (int i = 2; i >= 0; --i) {
        stride[k][order[i]] = s;
        s *= extent[order[i]];
      }
      stride[k][1] = 0;
    } else {
      for (int i = 3; i >= 0; --i) {
        stride[k][c.axes[i]] = s;
        s *= extent[c.axes[i]];
      }
    }
    bytes[k] = static_cast<size_t>(s) * dtypes[k].bits / 8;
    l.block[k] = stride[k][0];
    l.head[k] = stride[k][2];
    l.slot[k] = stride[k][3];
  }
  for (int k = 0; k < 2; ++k) {
    auto& t = k == 0 ? *key : *value;
    t = std::make_unique<Tensor>();
    t->shape = bnsh ? std::vector<int64_t>{c.num_blocks, c.kv_heads, pool_block_size, rows[k]}
                    : std::vector<int64_t>{c.num_blocks, pool_block_size, c.kv_heads, rows[k]};
    const std::vector<int64_t> strides =
        bnsh ? std::vector<int64_t>{stride[k][0], stride[k][2], stride[k][3], 1}
             : std::vector<int64_t>{stride[k][0], stride[k][3], stride[k][2], 1};
    if (c.shared_pool) {
      t->buffer = k == 0 ? std::make_shared<Buffer>(bytes[0]) : (*key)->buffer;
      t->strides = strides;
      l.offset[k] = alias ? 0 : static_cast<uint64_t>(k * stride[k][1]);
    } else {
      t->buffer = k == 1 && alias
                      ? (*key)->buffer
                      : std::make_shared<Buffer>(alias ? std::max(bytes[0], bytes[1]) : bytes[k]);
      if (byte_offset) t->strides = strides;  // the compact strides, given explicitly
    }
    t->Describe(dtypes[k], l.offset[k], byte_offset);
  }
  return l;
}

// ABI 1.9, decoded after every other choice so that the corpus keeps its meaning (an exhausted
// input decodes to one cache type and the head size decoded before):
//   - value_cache of a type of its own (v_cache_own_type = 1), 4 calls in 16: key_cache T, Q8_0 or
//     Q4_0 blocks, or the quant choice's type (int8, float8 or int4 with scales: refused);
//     value_cache float32, float16, bfloat16, T, Q8_0 or Q4_0 blocks (refused where Hv is no
//     multiple of 32), or, 1 in 4, a type its attributes do not describe (refused);
//   - head sizes that are no multiple of 8, 3 calls in 16: key and value, the value only
//     (Hv != H), or both, each its own (only unquantized caches take them: 3 in 4 of these calls
//     have no quantized cache of one type).
// Sets the value pool's fields (key_cache's type and head size without these choices); returns
// whether the head size choice was taken.
bool DecodeAbi19(FuzzedDataProvider& fdp, Rng& rng, Case* c) {
  attnrt_gqa_attributes& a = c->attributes.gqa;
  c->v_head_size = c->head_size;
  c->v_quant = c->quant;
  c->v_cache_dtype = c->cache_dtype;
  if (fdp.ConsumeIntegralInRange<int>(0, 15) >= 12) {
    c->two_types = true;
    c->attributes.v_cache_own_type = 1;
    const int key_choice = fdp.ConsumeIntegralInRange<int>(0, 3);  // quant's, T, Q8_0, Q4_0
    if (key_choice == 1) {
      c->quant = 0;
      c->cache_dtype = c->t_dtype;
      a.k_quant_type = ATTNRT_GQA_QUANT_NONE;
      a.kv_cache_bit_width = 0;
    } else if (key_choice > 1) {
      c->quant = key_choice == 2 ? 4 : 5;
      c->cache_dtype = kU8;
      a.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
      a.kv_cache_bit_width = key_choice == 2 ? 8 : 4;
    }
    // float32, float16, bfloat16, Q8_0, Q4_0, T; 6 and 7: one of them with attributes that do not
    // describe it.
    const int value_choice = fdp.ConsumeIntegralInRange<int>(0, 7);
    c->invalid_type = value_choice >= 6;
    const int v = c->invalid_type ? static_cast<int>(rng.Next() % 6) : value_choice;
    c->v_quant = v == 3 ? 4 : v == 4 ? 5 : 0;
    c->v_cache_dtype = v == 0 ? kF32 : v == 1 ? kF16 : v == 2 ? kBF16 : v == 5 ? c->t_dtype : kU8;
    a.v_quant_type = c->v_quant != 0 ? ATTNRT_GQA_QUANT_PER_BLOCK_32 : ATTNRT_GQA_QUANT_NONE;
    c->attributes.v_cache_bit_width = c->v_quant == 4 ? 8 : c->v_quant == 5 ? 4 : 0;
    if (c->invalid_type) {
      int32_t& width = c->attributes.v_cache_bit_width;
      switch (rng.Next() % 6) {
        case 0:  // a quantized type for a float pool, or the reverse
          a.v_quant_type = a.v_quant_type == ATTNRT_GQA_QUANT_NONE ? ATTNRT_GQA_QUANT_PER_BLOCK_32
                                                                   : ATTNRT_GQA_QUANT_NONE;
          break;
        case 1:  // the bit width of a block type for a float pool, or none for blocks
          width = width == 0 ? 8 : 0;
          break;
        case 2:  // the other block type, or no type at all
          width = width == 8 ? 4 : 5;
          break;
        case 3:
          a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
          break;
        case 4:
          c->attributes.v_cache_own_type = 2;
          break;
        default:
          c->stray_scale = true;  // a v_scale beside two types
          break;
      }
    }
    // The quant choice's int8/float8/int4 key (with its scales) is no type of an independent pair.
    c->invalid_type = c->invalid_type || (c->quant >= 1 && c->quant <= 3);
  }
  const int odd = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (odd < 13) return false;
  static constexpr int64_t kOddHeadSizes[] = {5, 12, 65, 1, 3, 20, 36, 67};
  const auto pick = [&] {
    return kOddHeadSizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kOddHeadSizes) - 1)];
  };
  if (odd != 14) c->head_size = pick();
  c->v_head_size = odd == 13 ? c->head_size : pick();
  // 3 in 4 of them over caches that take them: quantized caches of one type become T.
  if (fdp.ConsumeIntegralInRange<int>(0, 3) != 0 && !c->two_types && c->quant != 0) {
    c->quant = c->v_quant = 0;
    c->cache_dtype = c->v_cache_dtype = c->t_dtype;
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_NONE;
    a.kv_cache_bit_width = 0;
  }
  return true;
}

void Decode(FuzzedDataProvider& fdp, Rng& rng, Case* c) {
  c->mutation = fdp.ConsumeIntegralInRange<int>(0, 31);  // 1-13, else none
  c->workspace_mode = fdp.ConsumeIntegralInRange<int>(0, 7);
  attnrt_paged_gqa_attributes_init(&c->attributes);
  attnrt_gqa_attributes& a = c->attributes.gqa;
  c->kv_heads = fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  c->heads = c->kv_heads * fdp.ConsumeIntegralInRange<int64_t>(1, 4);
  if (fdp.ConsumeIntegralInRange<int>(0, 31) == 0) c->heads += 1;  // num_heads % kv_num_heads
  static constexpr int64_t kHeadSizes[] = {8, 16, 40, 64, 128, 24, 32, 12};
  c->head_size = kHeadSizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kHeadSizes) - 1)];
  static constexpr int64_t kBlockSizes[] = {4, 1, 2, 3, 16, 5, 8, 32, 64, 7, 4, 16, 0, 1025};
  c->block_size = kBlockSizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kBlockSizes) - 1)];
  c->attributes.block_size = static_cast<int32_t>(c->block_size);
  c->attributes.kv_layout = fdp.ConsumeIntegralInRange<int32_t>(0, 16) == 16 ? 2
                            : fdp.ConsumeBool() ? ATTNRT_PAGED_KV_LAYOUT_BNSH
                                                : ATTNRT_PAGED_KV_LAYOUT_BSNH;
  static constexpr float kScales[] = {0.0f, 0.0f, 0.5f, 0.125f, 1.0f, -0.25f};
  a.scale = kScales[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kScales) - 1)];
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0)
    a.softcap = fdp.ConsumeIntegralInRange<int>(1, 50);
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    a.local_window_size = fdp.ConsumeIntegralInRange<int32_t>(0, 24);
  }
  a.smooth_softmax = fdp.ConsumeIntegralInRange<int32_t>(-1, 1);
  const bool head_sink = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int type = fdp.ConsumeIntegralInRange<int>(0, 2);
  c->t_dtype = type == 0 ? kF32 : type == 1 ? kF16 : kBF16;
  c->cache_dtype = c->t_dtype;
  c->quant = fdp.ConsumeIntegralInRange<int>(0, 7);
  if (c->quant > 5) c->quant = 0;  // unquantized caches 3 times in 8
  if (c->quant >= 4) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    a.kv_cache_bit_width = c->quant == 5 ? 4 : 8;
    c->cache_dtype = kU8;
  } else if (c->quant != 0) {
    a.k_quant_type = a.v_quant_type =
        fdp.ConsumeBool() ? ATTNRT_GQA_QUANT_PER_CHANNEL : ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = c->quant == 3 ? 4 : 8;
    c->cache_dtype = c->quant == 1   ? kI8
                     : c->quant == 2 ? (fdp.ConsumeBool() ? kF8E5M2 : kF8E4M3)
                                     : kU8;
  }
  c->cache_row = CacheRow(c->quant, c->head_size);
  c->has_kv = fdp.ConsumeIntegralInRange<int>(0, 7) != 0;
  c->rank3 = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  c->shared_pool = fdp.ConsumeBool();
  if (c->shared_pool) {
    int axes[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(axes[i], axes[fdp.ConsumeIntegralInRange<int>(0, i)]);
    std::copy(axes, axes + 4, c->axes);
  }

  // The batch: each sequence's new rows (0 to 40, mostly a decode's 1) and earlier context.
  // Exhausted input decodes to one-row sequences (a decode step).
  const int slot_mode = fdp.ConsumeIntegralInRange<int>(0, 3);
  c->batch = fdp.ConsumeIntegralInRange<int>(0, 15) == 15 ? 0 : fdp.ConsumeIntegralInRange(1, 8);
  const bool decode_step = fdp.ConsumeBool();
  const int64_t bs = std::max<int64_t>(c->block_size, 1);
  c->starts.assign(1, 0);
  int64_t needed = 0, longest = 1;
  for (int64_t b = 0; b < c->batch; ++b) {
    int64_t q = 1;
    if (!decode_step) {
      switch (fdp.ConsumeIntegralInRange<int>(0, 5)) {
        case 1:
          q = fdp.ConsumeIntegralInRange<int64_t>(2, 4);
          break;
        case 2:
          q = 0;
          break;
        case 3:
          q = fdp.ConsumeIntegralInRange<int64_t>(5, 40);
          break;
        default:
          break;
      }
    }
    const int64_t past = fdp.ConsumeIntegralInRange<int64_t>(0, 48);
    const int64_t total = std::max<int64_t>(q + past, 1);
    c->starts.push_back(static_cast<int32_t>(c->starts.back() + q));
    c->lens.push_back(static_cast<int32_t>(total));
    needed += (total + bs - 1) / bs;
    longest = std::max(longest, total);
  }
  c->num_tokens = c->starts.back() + fdp.ConsumeIntegralInRange<int64_t>(0, 3);
  c->slots = (longest + bs - 1) / bs + fdp.ConsumeIntegralInRange<int64_t>(0, 2);
  c->num_blocks = std::max<int64_t>(needed + fdp.ConsumeIntegralInRange<int64_t>(0, 3), 1);
  std::vector<int32_t> ids(static_cast<size_t>(c->num_blocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.Next() % i]);
  c->table.assign(static_cast<size_t>(c->batch * c->slots), -1);
  size_t next = 0;
  for (int64_t b = 0; b < c->batch; ++b) {
    for (int64_t i = 0; i < (c->lens[static_cast<size_t>(b)] + bs - 1) / bs; ++i) {
      c->table[static_cast<size_t>(b * c->slots + i)] = ids[next++];
    }
  }
  if (slot_mode != 0 && c->has_kv) {
    c->slot_mapping.assign(static_cast<size_t>(c->num_tokens), -1);
    for (int64_t b = 0; b < c->batch; ++b) {
      const int64_t q = c->starts[static_cast<size_t>(b + 1)] - c->starts[static_cast<size_t>(b)];
      for (int64_t i = 0; i < q; ++i) {
        const int64_t pos = c->lens[static_cast<size_t>(b)] - q + i;
        const int64_t block = c->table[static_cast<size_t>(b * c->slots + pos / bs)];
        const bool skip = slot_mode == 2 && rng.Next() % 3 == 0;
        c->slot_mapping[static_cast<size_t>(c->starts[static_cast<size_t>(b)] + i)] =
            skip ? -1 : block * bs + pos % bs;
      }
    }
    if (slot_mode == 3 && c->starts.back() > 0) {
      c->slot_mapping[rng.Next() % static_cast<size_t>(c->starts.back())] += 1;
    }
  }
  a.num_heads = static_cast<int32_t>(c->heads);
  a.kv_num_heads = static_cast<int32_t>(c->kv_heads);
  c->head_sink = head_sink;
  // Decoded last, so that the inputs of the corpus keep the meaning of every earlier field (an
  // exhausted input decodes to EXACT); now and then a value that is refused.
  const int precision = fdp.ConsumeIntegralInRange<int>(0, 16);
  c->attributes.p_precision = precision == 16      ? 2
                              : precision % 2 == 0 ? ATTNRT_P_PRECISION_EXACT
                                                   : ATTNRT_P_PRECISION_INPUT;
  // Build's choice of byte offsets, decoded here so that the ABI 1.9 choices come after it.
  c->byte_offset = fdp.ConsumeBool();
  const bool odd_choice = DecodeAbi19(fdp, rng, c);
  // Bounded work per input (two runs under the sanitizers): a large step gets head_size 8 (32 for a
  // block cache; 5 for a head size of the ABI 1.9 choice that is no multiple of 8), key and value.
  int64_t work = 0;
  for (int64_t b = 0; b < c->batch; ++b) {
    work += int64_t{c->starts[static_cast<size_t>(b + 1)] - c->starts[static_cast<size_t>(b)]} *
            c->lens[static_cast<size_t>(b)];
  }
  if (work * c->heads * std::max(c->head_size, c->v_head_size) > (int64_t{1} << 21)) {
    const auto smaller = [&](int64_t size, int quant) -> int64_t {
      if (odd_choice && size % 8 != 0) return 5;
      return quant >= 4 ? 32 : 8;  // the smallest head size of a block cache
    };
    c->head_size = smaller(c->head_size, c->quant);
    c->v_head_size = smaller(c->v_head_size, c->v_quant);
  }
  c->cache_row = CacheRow(c->quant, c->head_size);
  c->v_cache_row = CacheRow(c->v_quant, c->v_head_size);
  c->odd_heads = c->head_size % 8 != 0 || c->v_head_size % 8 != 0;
  // One tensor's K and V halves hold pools of one type and row only.
  if (c->v_cache_dtype.code != c->cache_dtype.code ||
      c->v_cache_dtype.bits != c->cache_dtype.bits || c->v_cache_row != c->cache_row) {
    c->shared_pool = false;
  }
  // Non-causal attention (causal = 0: every row sees its whole sequence), decoded last too (an
  // exhausted input stays causal); now and then with its local window kept (ABI 1.10: the keys up
  // to the row; 0 is refused).
  if (fdp.ConsumeIntegralInRange<int>(0, 4) == 4) {
    c->attributes.gqa.causal = 0;
    if (fdp.ConsumeIntegralInRange<int>(0, 7) != 0) c->attributes.gqa.local_window_size = -1;
  }
  // key_start_loc, decoded last (an exhausted input gives none).
  const int key_rows = fdp.ConsumeIntegralInRange<int>(0, 15);
  c->key_rows = key_rows < 12 ? 0 : key_rows - 11;
  // alibi_slopes, decoded after it.
  const int alibi = fdp.ConsumeIntegralInRange<int>(0, 7);
  c->alibi = alibi < 5 ? 0 : alibi - 4;
  // A window of non-causal attention (ABI 1.10): the local window kept above now and then, and
  // local_window_right -1 to 8 (now and then -2, refused); with causal attention now and then 3
  // (refused). Decoded last.
  const int right = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (c->attributes.gqa.causal == 0) {
    c->attributes.local_window_right = right < 6 ? -1 : right == 15 ? -2 : right - 7;
  } else if (right == 15) {
    c->attributes.local_window_right = 3;
  }
  // Rotary embedding and alibi_form (ABI 1.12), decoded last.
  const int rotary = fdp.ConsumeIntegralInRange<int>(0, 15);
  c->rotary = rotary < 9 ? 0 : rotary < 12 ? rotary - 8 : rotary == 12 ? 1 : rotary - 10;
  if (c->rotary > 5) c->rotary = 0;
  c->rotary_half = fdp.ConsumeIntegralInRange<int64_t>(1, std::max<int64_t>(1, c->head_size / 2));
  c->rotary_interleaved = fdp.ConsumeBool();
  if (c->rotary >= 1 && c->rotary <= 4) {
    c->attributes.gqa.do_rotary = 1;
    c->attributes.gqa.rotary_interleaved = c->rotary_interleaved ? 1 : 0;
  }
  const int form = fdp.ConsumeIntegralInRange<int>(0, 7);
  c->attributes.alibi_form = form < 4 ? 0 : form < 7 ? 1 : 2;
}

void Describe(const Case& c) {
  std::string s =
      "case: N " + std::to_string(c.heads) + " Nkv " + std::to_string(c.kv_heads) + " H " +
      std::to_string(c.head_size) + " Hv " + std::to_string(c.v_head_size) + " block_size " +
      std::to_string(c.block_size) + " layout " + std::to_string(c.attributes.kv_layout) +
      " p_precision " + std::to_string(c.attributes.p_precision) + " causal " +
      std::to_string(c.attributes.gqa.causal) + " window " +
      std::to_string(c.attributes.gqa.local_window_size) + " cache " +
      attnrt_dtype_name(c.cache_dtype) + " value cache " + attnrt_dtype_name(c.v_cache_dtype) +
      " own type " + std::to_string(c.attributes.v_cache_own_type) + " (k_quant_type " +
      std::to_string(c.attributes.gqa.k_quant_type) + " width " +
      std::to_string(c.attributes.gqa.kv_cache_bit_width) + ", v_quant_type " +
      std::to_string(c.attributes.gqa.v_quant_type) + " width " +
      std::to_string(c.attributes.v_cache_bit_width) + (c.invalid_type ? ", invalid" : "") +
      ") T " + attnrt_dtype_name(c.t_dtype) + " mutation " + std::to_string(c.mutation) +
      " shared " + std::to_string(c.shared_pool) + " kv " + std::to_string(c.has_kv) + " tokens " +
      std::to_string(c.num_tokens) + " blocks " + std::to_string(c.num_blocks) + " slots " +
      std::to_string(c.slots) + "\n  starts/lens:";
  for (size_t b = 0; b < c.lens.size(); ++b) {
    s += " [" + std::to_string(c.starts[b]) + "," + std::to_string(c.starts[b + 1]) + ")/" +
         std::to_string(c.lens[b]);
  }
  std::fprintf(stderr, "paged_gqa_varlen_fuzzer: %s\n", s.c_str());
}

// The tensors of one call, mutation applied.
struct Call {
  Case c;
  PoolLayout layout;
  int64_t pool_block_size = 1;
  std::vector<std::unique_ptr<Tensor>> in;
  std::unique_ptr<Tensor> out;
  std::vector<const attnrt_tensor*> inputs, outputs;
  Bytes pools_initial[2];
  bool same_pool_buffer = false;
};

// A needed slot of the table (one that names a block), or -1 when there is none.
int64_t NeededSlot(const Case& c, Rng& rng) {
  std::vector<int64_t> needed;
  for (size_t i = 0; i < c.table.size(); ++i) {
    if (c.table[i] >= 0) needed.push_back(static_cast<int64_t>(i));
  }
  return needed.empty() ? -1 : needed[rng.Next() % needed.size()];
}

void Mutate(Case& c, Rng& rng, bool* alias, bool* value_only_absent) {
  const int64_t slot = NeededSlot(c, rng), other = NeededSlot(c, rng);
  const size_t b = c.batch > 0 ? static_cast<size_t>(rng.Next() % c.batch) : 0;
  switch (c.mutation) {
    case 1:
    case 2:
    case 3:
    case 4:
      if (slot >= 0) {
        const int32_t ids[] = {-1, static_cast<int32_t>(c.num_blocks), -7,
                               c.table[static_cast<size_t>(other)]};
        c.table[static_cast<size_t>(slot)] = ids[c.mutation - 1];
      }
      break;
    case 5:
      if (c.batch > 0) c.lens[b] = c.starts[b + 1] - c.starts[b] - 1;
      break;
    case 6:
      if (c.batch > 0) c.lens[b] = static_cast<int32_t>(c.slots * c.block_size + 1);
      break;
    case 7:
      c.starts[0] = 1;
      break;
    case 8:
      if (c.batch > 0) c.starts[b + 1] = c.starts[b] - 1;
      break;
    case 9:
      c.starts.back() = static_cast<int32_t>(c.num_tokens + 1);
      break;
    case 10:
      c.has_kv = false;
      if (c.slot_mapping.empty()) c.slot_mapping.assign(static_cast<size_t>(c.num_tokens), -1);
      break;
    case 11:
      *value_only_absent = c.has_kv;
      break;
    case 12:
      *alias = true;
      break;
    default:
      break;
  }
}

void Build(Call& k, Rng& rng) {
  Case& c = k.c;
  bool alias = false, value_absent = false;
  Mutate(c, rng, &alias, &value_absent);
  k.pool_block_size = std::max<int64_t>(c.block_size, 1) + (c.mutation == 13 ? 1 : 0);
  const bool byte_offset = c.byte_offset;
  const int64_t n = c.num_tokens, heads = c.heads, kv = c.kv_heads, h = c.head_size,
                hv = c.v_head_size;
  const auto packed = [&](int64_t rows, int64_t nh, int64_t size) {
    return c.rank3 ? std::vector<int64_t>{rows, nh, size} : std::vector<int64_t>{rows, nh * size};
  };
  k.in.resize(ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS);
  k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY] = Compact(c.t_dtype, packed(n, heads, h));
  if (c.has_kv) {
    k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] = Compact(c.t_dtype, packed(n, kv, h));
    if (!value_absent)
      k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE] = Compact(c.t_dtype, packed(n, kv, hv));
  }
  k.layout = MakePools(c, k.pool_block_size, alias, byte_offset,
                       &k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE],
                       &k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE]);
  k.same_pool_buffer = k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE]->buffer ==
                       k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE]->buffer;
  const auto ints = [&](attnrt_dtype d, std::vector<int64_t> shape, const void* src) {
    auto t = Compact(d, std::move(shape));
    if (t->buffer->bytes > 0) std::memcpy(t->buffer->data.get(), src, t->buffer->bytes);
    return t;
  };
  k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC] = ints(kI32, {c.batch + 1}, c.starts.data());
  k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS] = ints(kI32, {c.batch}, c.lens.data());
  k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE] = ints(kI32, {c.batch, c.slots}, c.table.data());
  if (!c.slot_mapping.empty()) {
    k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING] = ints(kI64, {n}, c.slot_mapping.data());
  }
  if (c.key_rows != 0) {
    std::vector<int32_t> key_starts = c.starts;
    if (c.key_rows == 2) key_starts.front() = 1;
    if (c.key_rows == 3) key_starts.back() = static_cast<int32_t>(n + 1);
    const std::vector<int64_t> wide(key_starts.begin(), key_starts.end());
    k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC] =
        c.key_rows == 4 ? ints(kI64, {c.batch + 1}, wide.data())
                        : ints(kI32, {c.batch + 1}, key_starts.data());
  }
  if (c.head_sink) k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK] = Compact(c.t_dtype, {heads});
  // The scales of an int8, float8 or int4 cache (kept beside two types: they are refused), or a
  // stray v_scale.
  const bool scaled = c.quant != 0 && c.quant < 4;
  if (scaled || c.stray_scale) {
    const bool per_channel = c.attributes.gqa.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL;
    for (int i : {ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE, ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE}) {
      if (!scaled && i == ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE) continue;
      const int64_t scales = !per_channel                                 ? 1
                             : i == ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE ? kv * h
                                                                          : kv * hv;
      k.in[static_cast<size_t>(i)] = Compact(kF32, {scales});
      auto* s = reinterpret_cast<float*>(k.in[static_cast<size_t>(i)]->buffer->data.get());
      for (int64_t j = 0; j < scales; ++j) s[j] = 0.01f + 0.02f * (rng.Unit() + 1.0f);
    }
  }
  for (int i : {ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY, ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY,
                ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE, ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK}) {
    if (k.in[static_cast<size_t>(i)])
      FillFloat(*k.in[static_cast<size_t>(i)]->buffer, c.t_dtype, rng);
  }
  if (c.rotary != 0) {
    // cos_cache/sin_cache (4: of another dtype than query's), values in [-1, 1).
    const attnrt_dtype rotary_dtype =
        c.rotary == 4 ? (c.t_dtype.bits == 32 ? kF16 : kF32) : c.t_dtype;
    const int64_t rows = c.rotary == 3 ? 4 : 96;
    for (int i :
         {ATTNRT_PAGED_GQA_VARLEN_INPUT_COS_CACHE, ATTNRT_PAGED_GQA_VARLEN_INPUT_SIN_CACHE}) {
      if (c.rotary == 5) break;
      k.in[static_cast<size_t>(i)] = Compact(rotary_dtype, {rows, c.rotary_half});
      FillFloat(*k.in[static_cast<size_t>(i)]->buffer, rotary_dtype, rng);
    }
    if (c.rotary == 2 || c.rotary == 5) {
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (auto& id : ids) id = static_cast<int64_t>((rng.Unit() + 1.0f) * 47.9f);
      k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_POSITION_IDS] = ints(kI64, {n}, ids.data());
      if (k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY] && c.rotary == 2) {
        k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_POSITION_IDS] = ints(kI64, {n}, ids.data());
      }
    }
  }
  if (c.alibi != 0) {
    const attnrt_dtype slope_dtype = c.alibi == 3 ? kF16 : kF32;
    k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES] =
        Compact(slope_dtype, {c.alibi == 2 ? heads + 1 : heads});
    FillFloat(*k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES]->buffer, slope_dtype, rng);
  }
  // One buffer holding pools of two types (aliased): bytes that are finite values of any type.
  const bool mixed_buffer =
      k.same_pool_buffer && (c.v_quant != c.quant || c.v_cache_dtype.code != c.cache_dtype.code ||
                             c.v_cache_dtype.bits != c.cache_dtype.bits);
  for (int i :
       {ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE}) {
    Buffer& b = *k.in[static_cast<size_t>(i)]->buffer;
    const bool key_pool = i == ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE;
    const int quant = key_pool ? c.quant : c.v_quant;
    if (mixed_buffer || quant >= 4)
      FillBlockBytes(b, rng);
    else if (quant == 0)
      FillFloat(b, key_pool ? c.cache_dtype : c.v_cache_dtype, rng);
    else
      FillCodes(b, key_pool ? c.cache_dtype : c.v_cache_dtype, rng);
  }
  k.pools_initial[0] = k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE]->buffer->Copy();
  k.pools_initial[1] = k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE]->buffer->Copy();
  k.out = Compact(c.t_dtype, packed(n, heads, hv));
  for (auto& t : k.in) k.inputs.push_back(t ? &t->desc : nullptr);
  k.outputs.push_back(&k.out->desc);
}

Buffer& Pool(Call& k, int which) {
  return *k.in[which == 0 ? ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE
                          : ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE]
              ->buffer;
}

// After a successful run: the output rows of the sequences are written, the padding rows are not,
// and the pools changed only in the rows of the new tokens (to the key/value rows over an
// unquantized pool: bit for bit where it has the type T, rounded to nearest even where a value
// pool has a float type of its own), each pool with its own element size and row.
void CheckSuccess(Call& k, const std::string& kernel) {
  const Case& c = k.c;
  const size_t element = c.t_dtype.bits / 8;
  const size_t row_bytes = static_cast<size_t>(c.heads * c.v_head_size) * element;
  const std::vector<int32_t>& starts = c.starts;
  const size_t used = static_cast<size_t>(starts[c.batch]) * row_bytes;
  const unsigned char* out = k.out->buffer->data.get();
  for (size_t i = 0; i < k.out->buffer->bytes; i += element) {
    bool poison = true;
    for (size_t j = 0; j < element; ++j) poison = poison && out[i + j] == 0xFF;
    if (i < used && poison) {
      Fail("a successful run left output row " + std::to_string(i / row_bytes) + " element " +
           std::to_string(i % row_bytes / element) + " unwritten (" + kernel + ")");
    }
    if (i >= used && !poison) {
      Fail("a successful run wrote padding row " + std::to_string(i / row_bytes) + " past " +
           "query_start_loc[B] = " + std::to_string(starts[c.batch]) + " (" + kernel + ")");
    }
  }
  // The bytes each pool buffer should hold: the initial ones with the new rows written. writes
  // counts the writes of each byte, 2 for any content (written twice, or a quantized row).
  const int buffers = k.same_pool_buffer ? 1 : 2;
  std::vector<unsigned char> writes[2];
  Bytes expected[2];
  for (int p = 0; p < buffers; ++p) {
    expected[p] = k.pools_initial[p];
    writes[p].assign(expected[p].size(), 0);
  }
  const auto* key = k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY].get();
  const auto* value = k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE].get();
  const attnrt_dtype pool_dtype[2] = {c.cache_dtype, c.v_cache_dtype};
  const int pool_quant[2] = {c.quant, c.v_quant};
  const int64_t head_size[2] = {c.head_size, c.v_head_size};
  const int64_t pool_row[2] = {c.cache_row, c.v_cache_row};
  const int64_t bs = c.block_size;
  for (int64_t b = 0; key != nullptr && value != nullptr && b < c.batch; ++b) {
    const int64_t q = starts[b + 1] - starts[b];
    const int64_t past = c.lens[static_cast<size_t>(b)] - q;
    for (int64_t i = 0; i < q; ++i) {
      const int64_t row = starts[b] + i;
      if (!c.slot_mapping.empty() && c.slot_mapping[static_cast<size_t>(row)] == -1) continue;
      const int64_t pos = past + i;
      const int64_t block = c.table[static_cast<size_t>(b * c.slots + pos / bs)];
      for (int64_t n = 0; n < c.kv_heads; ++n) {
        for (int p = 0; p < 2; ++p) {
          const int buffer = k.same_pool_buffer ? 0 : p;
          const size_t cache_element = pool_dtype[p].bits / 8;
          const size_t cache_row = static_cast<size_t>(pool_row[p]) * cache_element;
          const size_t at =
              static_cast<size_t>(k.layout.offset[p] + block * k.layout.block[p] +
                                  pos % bs * k.layout.slot[p] + n * k.layout.head[p]) *
              cache_element;
          const unsigned char* src =
              (p == 0 ? key : value)->buffer->data.get() +
              static_cast<size_t>((row * c.kv_heads + n) * head_size[p]) * element;
          const bool same_type =
              pool_dtype[p].code == c.t_dtype.code && pool_dtype[p].bits == c.t_dtype.bits;
          // Rotated key rows: any content (the two runtimes' pools are compared bitwise).
          const bool any_content = pool_quant[p] != 0 || (p == 0 && c.rotary != 0);
          for (size_t j = 0; j < cache_row; ++j) {
            if (any_content) {
              writes[buffer][at + j] = 2;
              continue;
            }
            if (writes[buffer][at + j] < 2) ++writes[buffer][at + j];
            if (same_type) expected[buffer][at + j] = src[j];
          }
          if (!any_content && !same_type) {
            for (int64_t j = 0; j < head_size[p]; ++j) {
              StoreRounded(ValueAt(src, j, c.t_dtype), pool_dtype[p],
                           expected[buffer].data() + at + static_cast<size_t>(j) * cache_element);
            }
          }
        }
      }
    }
  }
  for (int p = 0; p < buffers; ++p) {
    const unsigned char* now = Pool(k, p).data.get();
    for (size_t j = 0; j < expected[p].size(); ++j) {
      // Rows written twice (a block named twice) or quantized rows: any content.
      if (writes[p][j] > 1) continue;
      if (now[j] != expected[p][j]) {
        Fail(std::string(writes[p][j] == 0
                             ? "a successful run changed pool byte "
                             : "a successful run wrote a wrong new row at pool byte ") +
             std::to_string(j) + " of the " + (p == 0 ? "key" : "value") + " pool buffer (" +
             kernel + ")");
      }
    }
  }
}

// The largest difference of two kernels' outputs that float32 rounding explains. Per output
// element o = sum_j p_j v_j with p the softmax of s_j = scale * q.k_j (then softcap): each kernel's
// score is within (H + 16) u D of the exact one (D = |scale| H max|q| max|k| bounds sum |q_i k_i|,
// u = 2^-24: the products, a sum of H terms in any order, the scale), softcap's tanh adds 8 u
// softcap; a score error e changes each p_j by a factor within exp(+-2e); exp, the softmax sum and
// the P.V sum over n keys add (n + 32) u relative. Two kernels differ by twice one's error, times
// max|v|; doubled again for margin. A 16-bit output adds one rounding of the output (relative
// 2^-11 float16, 2^-8 bfloat16, counted twice).
double Tolerance(const Call& k) {
  const Case& c = k.c;
  const double u = std::ldexp(1.0, -24);
  const double h = static_cast<double>(c.head_size);
  const double scale =
      c.attributes.gqa.scale != 0.0f ? std::fabs(c.attributes.gqa.scale) : 1.0 / std::sqrt(h);
  // The largest magnitude a pool's element can have, for each pool's own type (ABI 1.9: the value
  // pool's may differ from the key pool's).
  double kmax = 0, vmax = 0;
  for (int p = 0; p < 2; ++p) {
    const int quant = p == 0 ? c.quant : c.v_quant;
    double& max = p == 0 ? kmax : vmax;
    const auto* rows =
        k.in[p == 0 ? ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY : ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE]
            .get();
    if (quant == 0) {
      const auto* pool = k.in[p == 0 ? ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE
                                     : ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE]
                             .get();
      max = std::max(MaxAbs(pool), MaxAbs(rows));
    } else if (quant >= 4) {
      // Pool blocks: scales below 1, codes within 127 (Q8_0) or 8 (Q4_0); new rows: within the
      // new K/V rows' magnitude (a block's scale is its largest magnitude / 127 or / 8).
      const double code = quant == 4 ? 127 : 8;
      max = std::max(code, 1.01 * MaxAbs(rows));
    } else {
      const bool e5m2 =
          (p == 0 ? c.cache_dtype : c.v_cache_dtype).code == ATTNRT_DTYPE_CODE_FLOAT8_E5M2;
      const double code = quant == 1 ? 128 : quant == 2 ? (e5m2 ? 57344 : 448) : 8;
      max = code * MaxAbs(k.in[p == 0 ? ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE
                                      : ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE]
                              .get());
    }
  }
  // RoPE with |cos|, |sin| < 1 at most doubles a query or key element.
  const double rotated = c.rotary != 0 ? 4.0 : 1.0;
  const double d =
      rotated * scale * h * MaxAbs(k.in[ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY].get()) * kmax;
  int64_t keys = 1;
  for (int32_t t : c.lens) keys = std::max<int64_t>(keys, t + 1);
  const double score = (h + 16) * u * d + 8 * u * c.attributes.gqa.softcap;
  const double bound = 2 * vmax * (2 * 2 * score + 2 * (static_cast<double>(keys) + 32) * u);
  const double rounding = c.t_dtype.bits == 32                        ? 0.0
                          : c.t_dtype.code == ATTNRT_DTYPE_CODE_FLOAT ? std::ldexp(2.0, -11)
                                                                      : std::ldexp(2.0, -8);
  // p_precision INPUT rounds each p to T (relative u_T = rounding / 2): the two kernels' p may
  // round to neighbouring T values, u_T max|v| each (docs/gqa-semantics.md), doubled for margin.
  const double input =
      c.attributes.p_precision == ATTNRT_P_PRECISION_INPUT ? 2 * rounding * vmax : 0.0;
  return bound + rounding + input;
}

struct RunResult {
  bool planned = false;
  attnrt_status status = ATTNRT_ERROR_UNSUPPORTED;
  std::string kernel;
  Bytes output, pools[2];
};

// The ABI 1.9 tallies a case counts in.
std::vector<Tally*> Tallies(const Case& c) {
  std::vector<Tally*> tallies;
  if (c.two_types) {
    const bool differ = c.quant != c.v_quant || c.cache_dtype.code != c.v_cache_dtype.code ||
                        c.cache_dtype.bits != c.v_cache_dtype.bits;
    tallies.push_back(differ ? &g_stats.two_types : &g_stats.own_one_type);
  }
  if (c.odd_heads) tallies.push_back(&g_stats.odd_heads);
  if (c.invalid_type) tallies.push_back(&g_stats.invalid_types);
  if (c.rotary != 0) tallies.push_back(&g_stats.rotary);
  if (c.attributes.alibi_form == 1 && c.alibi != 0) tallies.push_back(&g_stats.symmetric_alibi);
  return tallies;
}

RunResult RunOn(Call& k, int r) {
  RunResult result;
  const std::vector<Tally*> tallies = Tallies(k.c);
  attnrt_runtime* runtime = g_runtimes[r];
  Pool(k, 0).Restore(k.pools_initial[0]);
  Pool(k, 1).Restore(k.pools_initial[1]);
  std::memset(k.out->buffer->data.get(), 0xFF, k.out->buffer->bytes);
  attnrt_op* raw_op = nullptr;
  if (Checked("attnrt_op_create", attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA_VARLEN,
                                                   &k.c.attributes, &raw_op)) != ATTNRT_OK) {
    if (raw_op != nullptr) Fail("a failing attnrt_op_create returned an op");
    ++g_stats.op_refused;
    for (Tally* t : tallies) ++t->op_refused;
    return result;
  }
  std::unique_ptr<attnrt_op, Deleters> op(raw_op);
  attnrt_explanation* raw_explanation = nullptr;
  const attnrt_status explained = Checked(
      "attnrt_op_explain", attnrt_op_explain(op.get(), k.inputs.data(), k.inputs.size(),
                                             k.outputs.data(), k.outputs.size(), &raw_explanation));
  std::unique_ptr<attnrt_explanation, Deleters> explanation(raw_explanation);
  std::string selected;
  if (explained == ATTNRT_OK) {
    size_t count = 0;
    Checked("attnrt_explanation_count", attnrt_explanation_count(explanation.get(), &count));
    for (size_t i = 0; i < count; ++i) {
      attnrt_candidate cand;
      std::memset(&cand, 0, sizeof(cand));
      cand.struct_size = sizeof(cand);
      Checked("attnrt_explanation_candidate",
              attnrt_explanation_candidate(explanation.get(), i, &cand));
      if (cand.status == ATTNRT_CANDIDATE_SELECTED) selected = cand.kernel;
    }
  }
  attnrt_plan* raw_plan = nullptr;
  const attnrt_status planned =
      Checked("attnrt_op_plan", attnrt_op_plan(op.get(), k.inputs.data(), k.inputs.size(),
                                               k.outputs.data(), k.outputs.size(), &raw_plan));
  std::unique_ptr<attnrt_plan, Deleters> plan(raw_plan);
  if ((planned == ATTNRT_OK) != !selected.empty()) {
    Fail("explain selected '" + selected + "' but plan returned status " + std::to_string(planned));
  }
  if (planned != ATTNRT_OK) {
    ++g_stats.plan_refused;
    for (Tally* t : tallies) ++t->plan_refused;
    return result;
  }
  result.planned = true;
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  Checked("attnrt_plan_get_info", attnrt_plan_get_info(plan.get(), &info));
  if (selected != info.kernel) Fail("explain selected " + selected + ", plan " + info.kernel);
  result.kernel = info.kernel;

  // Workspace: 0-5 the planned size, 6 none (the runtime's own), 7 one byte short.
  const int mode = k.c.workspace_mode;
  size_t size = mode == 6 ? 0 : info.workspace_size;
  if (mode == 7 && size > 0) size -= 1;
  const size_t alignment = std::max<size_t>(info.workspace_alignment, 64);
  std::unique_ptr<void, decltype(&std::free)> workspace(
      size > 0 ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
               : nullptr,
      &std::free);
  const Bytes pools_before[2] = {Pool(k, 0).Copy(), Pool(k, 1).Copy()};
  const Bytes out_before = k.out->buffer->Copy();
  result.status =
      Checked("attnrt_plan_run",
              attnrt_plan_run(plan.get(), k.inputs.data(), k.inputs.size(), k.outputs.data(),
                              k.outputs.size(), workspace.get(), size, nullptr));
  if (mode == 7 && info.workspace_size > 0 && result.status == ATTNRT_OK) {
    Fail("a run with a workspace one byte short of " + std::to_string(info.workspace_size) +
         " succeeded (" + info.kernel + ")");
  }
  if (result.status != ATTNRT_OK) {
    if (Pool(k, 0).Copy() != pools_before[0] || Pool(k, 1).Copy() != pools_before[1] ||
        k.out->buffer->Copy() != out_before) {
      Fail(std::string("a failing run wrote memory: ") + attnrt_last_error_message());
    }
    ++g_stats.run_refused;
    for (Tally* t : tallies) ++t->run_refused;
    return result;
  }
  ++g_stats.ran[info.kernel];
  for (Tally* t : tallies) ++t->ran[info.kernel];
  if (g_verbose) std::fprintf(stderr, "  ran %s\n", info.kernel);
  if (k.c.invalid_type) {
    const attnrt_paged_gqa_attributes& a = k.c.attributes;
    Fail(std::string("a call whose value_cache does not match its attributes (v_cache_own_type ") +
         std::to_string(a.v_cache_own_type) + ", v_quant_type " +
         std::to_string(a.gqa.v_quant_type) + ", v_cache_bit_width " +
         std::to_string(a.v_cache_bit_width) + ", k_quant_type " +
         std::to_string(a.gqa.k_quant_type) + ") ran on " + info.kernel);
  }
  const Case& c = k.c;
  if (c.key_rows >= 2 || (c.key_rows == 1 && (!c.has_kv || c.starts.back() != c.num_tokens))) {
    Fail("a call whose key_start_loc does not place key's rows (case " +
         std::to_string(c.key_rows) + ") ran on " + info.kernel);
  }
  if (c.alibi >= 2) {
    Fail("a call with malformed alibi_slopes (case " + std::to_string(c.alibi) + ") ran on " +
         info.kernel);
  }
  if (c.attributes.alibi_form == 1 && c.alibi == 0) {
    Fail(std::string("a call with alibi_form SYMMETRIC and no alibi_slopes ran on ") + info.kernel);
  }
  if (c.rotary >= 4 || c.attributes.alibi_form == 2) {
    Fail("a call with a malformed rotary input (case " + std::to_string(c.rotary) +
         ") or alibi_form " + std::to_string(c.attributes.alibi_form) + " ran on " + info.kernel);
  }
  CheckSuccess(k, info.kernel);
  result.output = k.out->buffer->Copy();
  result.pools[0] = Pool(k, 0).Copy();
  result.pools[1] = Pool(k, 1).Copy();
  return result;
}

// Tensor contents come from a hash of the input, so that every input byte decodes the call.
void RunCase(const uint8_t* data, size_t size) {
  uint64_t seed = 0xCBF29CE484222325ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001B3ull;
  Rng rng(seed);
  FuzzedDataProvider fdp(data, size);
  Call k;
  Decode(fdp, rng, &k.c);
  Build(k, rng);
  if (g_verbose) Describe(k.c);
  const RunResult first = RunOn(k, 0);
  const RunResult second = RunOn(k, 1);
  if (first.planned && second.planned && k.c.workspace_mode != 7 && first.status != second.status) {
    Fail("the run returned " + std::to_string(first.status) + " on " + first.kernel + " but " +
         std::to_string(second.status) + " on " + second.kernel);
  }
  if (first.status != ATTNRT_OK || second.status != ATTNRT_OK) return;
  const bool decode = k.c.starts.back() == k.c.batch;
  ++(k.c.starts.back() == 0 ? g_stats.empty_steps
     : decode               ? g_stats.decode_steps
                            : g_stats.mixed_steps);
  g_stats.shared_pools += k.c.shared_pool ? 1 : 0;
  g_stats.slot_mappings += k.c.slot_mapping.empty() ? 0 : 1;
  if (first.pools[0] != second.pools[0] || first.pools[1] != second.pools[1]) {
    Fail("the pools differ after " + first.kernel + " and " + second.kernel);
  }
  ++g_stats.compared;
  for (Tally* t : Tallies(k.c)) ++t->compared;
  const int64_t count = static_cast<int64_t>(k.c.starts.back()) * k.c.heads * k.c.v_head_size;
  const std::vector<fuzz_agreement::Output> compared = {
      {"output", k.out->buffer->data.get(), count, k.c.t_dtype.bits,
       k.c.t_dtype.code == ATTNRT_DTYPE_CODE_BFLOAT, nullptr}};
  const double tolerance = Tolerance(k);
  const std::string differs = fuzz_agreement::Compare(
      compared, {Bytes(first.output.begin(), first.output.begin() + count * k.c.t_dtype.bits / 8)},
      tolerance);
  if (!differs.empty()) {
    Fail(first.kernel + " and " + second.kernel + " disagree beyond " + std::to_string(tolerance) +
         ": " + differs);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = 2;
  attnrt_status status = attnrt_runtime_create(&options, &g_runtimes[0]);
  options.kernel = "*.scalar";
  if (status == ATTNRT_OK) status = attnrt_runtime_create(&options, &g_runtimes[1]);
  if (status != ATTNRT_OK) {
    std::fprintf(stderr, "paged_gqa_varlen_fuzzer: runtime: %s\n", attnrt_last_error_message());
    std::abort();
  }
  const char* stats = std::getenv("PAGED_GQA_VARLEN_FUZZER_STATS");
  if (stats != nullptr && stats[0] == '1') std::atexit(PrintStats);
  const char* verbose = std::getenv("GQA_FUZZER_VERBOSE");
  g_verbose = verbose != nullptr && verbose[0] == '1';
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunCase(data, size);
  return 0;
}
