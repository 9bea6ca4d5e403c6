// libFuzzer target for the block pool (attnrt/block_pool.h) and paged GroupQueryAttention
// (attnrt/ops/paged_gqa.h) through the public C ABI.
//
// Each input is decoded with FuzzedDataProvider into two phases:
//   1. a block pool of fuzzed options, then up to 32 pool operations (add_sequence, fork, append,
//      truncate, remove, block_table, get_stats) on live and unknown sequence ids with fuzzed
//      arguments, valid or not;
//   2. one paged GroupQueryAttention call (the runtime's choice of kernel, or the scalar kernels
//      pinned): a mostly consistent problem (phase, shapes, attributes: softcap, smooth_softmax,
//      head_sink, qk_output, window, rotary, bias; float32, float16, bfloat16, int8 or int4
//      caches; both block layouts; ABI 1.9: now and then a value_cache of a type of its own,
//      float32, float16, bfloat16, Q8_0 or Q4_0, beside a key_cache of T, Q8_0 or Q4_0, valid or
//      not, and key and value head sizes that are no multiple of 8, Hv != H among them) whose
//      block table comes from the pool of phase 1 (forked sequences included) or is laid out
//      directly, then a few mutations (a -1 or out-of-range slot, a block named twice, a
//      total_sequence_length or seqlens_k beyond the table, a pool of the wrong block size, a too
//      small workspace). It runs attnrt_op_create -> attnrt_op_explain -> attnrt_op_plan ->
//      attnrt_plan_run.
// Every tensor is a heap buffer of exactly the bytes its shape and dtype describe (int4: two
// elements per byte), so any access outside them is reported by AddressSanitizer.
//
// Invariants checked (a violation aborts with a description, which libFuzzer records as a crash):
//   - a failing call returns a non-OK status other than ATTNRT_ERROR_INTERNAL and a non-empty
//     attnrt_last_error_message();
//   - after every pool operation: blocks_used + blocks_free == num_blocks, tokens_stored <=
//     blocks_used * block_size, and every live sequence holds ceil(length / block_size) blocks;
//     a failing operation leaves the statistics as they were;
//   - explain selects exactly the kernel that plan picks;
//   - a failing run leaves the pools and every output byte untouched; a successful one writes
//     every output element (the poison, all bits set, is gone);
//   - a call with two cache types whose attributes do not describe its pools (or whose key_cache
//     is int8/int4 with scales) does not run.
// GQA_FUZZER_VERBOSE=1 describes each paged call, the refusal or the kernel that ran.
// PAGED_GQA_FUZZER_STATS=1 prints at exit how many calls each stage refused and which kernels ran,
// in all and for the calls with two cache types, a head size that is no multiple of 8, or an
// invalid pair of cache types.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"
#include "fuzz_rng.h"

namespace {

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;

attnrt_runtime* g_runtime = nullptr;         // the runtime's own choice
attnrt_runtime* g_scalar_runtime = nullptr;  // pinned to the scalar kernels
bool g_verbose = false;

// Outcomes of the paged calls, printed at exit with PAGED_GQA_FUZZER_STATS=1 (to see what a corpus
// reaches): op refused, plan refused, run refused, and successful runs per kernel; the same for the
// ABI 1.9 calls: with two cache types (v_cache_own_type = 1, types that differ), with
// v_cache_own_type = 1 and one type for both pools, of a head size (key or value) that is no
// multiple of 8, and of a pair of cache types that the attributes do not describe.
struct Tally {
  int64_t op_refused = 0, plan_refused = 0, run_refused = 0;
  std::vector<std::pair<std::string, int64_t>> runs;
  void Ran(const std::string& kernel) {
    for (auto& [name, count] : runs) {
      if (name == kernel) {
        ++count;
        return;
      }
    }
    runs.emplace_back(kernel, 1);
  }
};
struct Outcomes {
  Tally all, two_types, own_one_type, odd_heads, invalid_types;
  int64_t from_pool = 0;
};
Outcomes g_outcomes;

void PrintTally(const char* what, const Tally& t) {
  std::fprintf(stderr,
               "paged_gqa_fuzzer: %s: op refused %lld, plan refused %lld, run refused %lld\n", what,
               static_cast<long long>(t.op_refused), static_cast<long long>(t.plan_refused),
               static_cast<long long>(t.run_refused));
  for (const auto& [name, count] : t.runs) {
    std::fprintf(stderr, "paged_gqa_fuzzer: %s: ran %s %lld\n", what, name.c_str(),
                 static_cast<long long>(count));
  }
}

void PrintOutcomes() {
  const Tally& all = g_outcomes.all;
  std::fprintf(stderr,
               "paged_gqa_fuzzer: op refused %lld, plan refused %lld, run refused %lld, tables "
               "from the pool %lld\n",
               static_cast<long long>(all.op_refused), static_cast<long long>(all.plan_refused),
               static_cast<long long>(all.run_refused),
               static_cast<long long>(g_outcomes.from_pool));
  for (const auto& [name, count] : all.runs) {
    std::fprintf(stderr, "paged_gqa_fuzzer: ran %s %lld\n", name.c_str(),
                 static_cast<long long>(count));
  }
  PrintTally("two cache types", g_outcomes.two_types);
  PrintTally("v_cache_own_type 1, one type", g_outcomes.own_one_type);
  PrintTally("head size no multiple of 8", g_outcomes.odd_heads);
  PrintTally("invalid value cache type", g_outcomes.invalid_types);
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "paged_gqa_fuzzer: invariant violated: %s\n", what.c_str());
  std::abort();
}

// The status of an ABI call, after the error invariants.
attnrt_status Checked(const char* call, attnrt_status status) {
  if (status == ATTNRT_OK) return status;
  if (status == ATTNRT_ERROR_INTERNAL) {
    Fail(std::string(call) + " returned INTERNAL: " + attnrt_last_error_message());
  }
  if (attnrt_last_error_message()[0] == '\0') {
    Fail(std::string(call) + " failed with status " + std::to_string(status) + " and no message");
  }
  return status;
}

using fuzz_rng::Rng;

// ---- phase 1: the block pool
// ---------------------------------------------------------------------

struct PoolDeleter {
  void operator()(attnrt_block_pool* p) const { attnrt_block_pool_destroy(p); }
};
using PoolPtr = std::unique_ptr<attnrt_block_pool, PoolDeleter>;

struct Pool {
  PoolPtr pool;
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  std::vector<int64_t> live;  // sequence ids
};

attnrt_block_pool_stats Stats(const Pool& p) {
  attnrt_block_pool_stats s;
  std::memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  Checked("attnrt_block_pool_get_stats", attnrt_block_pool_get_stats(p.pool.get(), &s));
  return s;
}

void CheckPool(const Pool& p) {
  const attnrt_block_pool_stats s = Stats(p);
  if (s.blocks_used + s.blocks_free != p.num_blocks || s.blocks_used < 0 ||
      s.tokens_stored > s.blocks_used * p.block_size ||
      s.num_sequences != static_cast<int64_t>(p.live.size())) {
    Fail("pool statistics inconsistent: used " + std::to_string(s.blocks_used) + " free " +
         std::to_string(s.blocks_free) + " of " + std::to_string(p.num_blocks) + ", stored " +
         std::to_string(s.tokens_stored) + ", sequences " + std::to_string(s.num_sequences) +
         " (expected " + std::to_string(p.live.size()) + ")");
  }
  for (int64_t seq : p.live) {
    int64_t length = -1, blocks = -1;
    Checked("attnrt_block_pool_sequence_info",
            attnrt_block_pool_sequence_info(p.pool.get(), seq, &length, &blocks));
    if (blocks != (length + p.block_size - 1) / p.block_size) {
      Fail("sequence " + std::to_string(seq) + " of length " + std::to_string(length) + " holds " +
           std::to_string(blocks) + " blocks");
    }
  }
}

int64_t PickSequence(FuzzedDataProvider& fdp, const Pool& p) {
  if (p.live.empty() || fdp.ConsumeIntegralInRange<int>(0, 15) == 15) {
    return fdp.ConsumeIntegralInRange<int64_t>(-2, 40);  // likely unknown
  }
  return p.live[fdp.ConsumeIntegralInRange<size_t>(0, p.live.size() - 1)];
}

Pool RunPool(FuzzedDataProvider& fdp) {
  Pool p;
  static constexpr int32_t kBlockSizes[] = {4, 1, 2, 3, 16, 7, 1024, 0, 1025, -3};
  attnrt_block_pool_options o;
  o.struct_size = sizeof(o);
  o.num_blocks = fdp.ConsumeIntegralInRange<int64_t>(1, 48);
  if (fdp.ConsumeIntegralInRange<int>(0, 31) == 31) o.num_blocks = -o.num_blocks + 1;
  o.block_size = kBlockSizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kBlockSizes) - 1)];
  attnrt_block_pool* raw = nullptr;
  if (Checked("attnrt_block_pool_create", attnrt_block_pool_create(&o, &raw)) != ATTNRT_OK) {
    if (raw != nullptr) Fail("a failing attnrt_block_pool_create returned a pool");
    return p;
  }
  p.pool.reset(raw);
  p.num_blocks = o.num_blocks;
  p.block_size = o.block_size;
  const int ops = fdp.ConsumeIntegralInRange<int>(0, 32);
  for (int i = 0; i < ops && fdp.remaining_bytes() > 0; ++i) {
    const attnrt_block_pool_stats before = Stats(p);
    attnrt_status status = ATTNRT_OK;
    switch (fdp.ConsumeIntegralInRange<int>(0, 6)) {
      case 0: {
        int64_t seq = -1;
        status = Checked("add_sequence", attnrt_block_pool_add_sequence(p.pool.get(), &seq));
        if (status == ATTNRT_OK) p.live.push_back(seq);
        break;
      }
      case 1: {
        int64_t seq = -1;
        status = Checked("fork", attnrt_block_pool_fork(p.pool.get(), PickSequence(fdp, p), &seq));
        if (status == ATTNRT_OK) p.live.push_back(seq);
        break;
      }
      case 2: {
        attnrt_block_copy copy{sizeof(attnrt_block_copy), -1, -1, 0};
        const int64_t seq = PickSequence(fdp, p);
        const int64_t n = fdp.ConsumeIntegralInRange<int64_t>(-1, 3 * p.block_size + 1);
        status = Checked("append", attnrt_block_pool_append(p.pool.get(), seq, n, &copy));
        if (status == ATTNRT_OK && copy.num_tokens > 0 &&
            (copy.src_block < 0 || copy.src_block >= p.num_blocks || copy.dst_block < 0 ||
             copy.dst_block >= p.num_blocks || copy.num_tokens > p.block_size)) {
          Fail("append asked for a copy outside the pool");
        }
        break;
      }
      case 3: {
        const int64_t seq = PickSequence(fdp, p);
        int64_t length = 0;
        attnrt_block_pool_sequence_info(p.pool.get(), seq, &length, nullptr);
        status = Checked("truncate", attnrt_block_pool_truncate(
                                         p.pool.get(), seq,
                                         fdp.ConsumeIntegralInRange<int64_t>(-1, length + 1)));
        break;
      }
      case 4: {
        const int64_t seq = PickSequence(fdp, p);
        status = Checked("remove", attnrt_block_pool_remove(p.pool.get(), seq));
        if (status == ATTNRT_OK) p.live.erase(std::find(p.live.begin(), p.live.end(), seq));
        break;
      }
      case 5: {
        std::vector<int64_t> seqs(fdp.ConsumeIntegralInRange<size_t>(0, 4));
        for (int64_t& s : seqs) s = PickSequence(fdp, p);
        const int64_t slots = fdp.ConsumeIntegralInRange<int64_t>(0, 12);
        std::vector<int32_t> table(seqs.size() * static_cast<size_t>(slots), 7);
        std::vector<int32_t> seqlens(seqs.size(), 7);
        status =
            Checked("block_table", attnrt_block_pool_block_table(
                                       p.pool.get(), seqs.data(), seqs.size(), slots, table.data(),
                                       fdp.ConsumeBool() ? seqlens.data() : nullptr));
        for (int32_t id : table) {
          if (status == ATTNRT_OK && (id < -1 || id >= p.num_blocks)) {
            Fail("block_table wrote block id " + std::to_string(id));
          }
        }
        break;
      }
      default:
        break;  // get_stats below
    }
    if (status != ATTNRT_OK) {
      const attnrt_block_pool_stats after = Stats(p);
      if (std::memcmp(&before, &after, sizeof(before)) != 0) {
        Fail("a failing pool operation changed the statistics");
      }
    }
    CheckPool(p);
  }
  return p;
}

// ---- phase 2: one paged GroupQueryAttention call
// ---------------------------------------------------

struct Buffer {
  std::unique_ptr<unsigned char[]> data;
  size_t bytes = 0;
};

// One tensor: its buffer (exactly `bytes`), shape and descriptor.
struct Tensor {
  Buffer buffer;
  std::vector<int64_t> shape;
  attnrt_tensor desc{};

  Tensor(attnrt_dtype dtype, std::vector<int64_t> dims, size_t element_bits) : shape(dims) {
    uint64_t elements = 1;
    for (int64_t d : shape) elements *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    buffer.bytes = static_cast<size_t>((elements * element_bits + 7) / 8);
    buffer.data.reset(new unsigned char[std::max<size_t>(buffer.bytes, 1)]);
    desc.data = buffer.data.get();
    desc.device = {ATTNRT_DEVICE_CPU, 0};
    desc.ndim = static_cast<int32_t>(shape.size());
    desc.dtype = dtype;
    desc.shape = shape.data();
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(buffer.data.get()); }
};

// Random T values in [-1, 1): float32, float16 or bfloat16 bit patterns (float16 by a float32
// value scaled into its normal range and truncated: any finite value will do).
void FillFloat(Tensor& t, int bits, bool bfloat, Rng& rng) {
  for (size_t i = 0; i < t.buffer.bytes * 8 / static_cast<size_t>(bits); ++i) {
    float x = rng.Unit();
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (bits == 32) {
      std::memcpy(t.buffer.data.get() + 4 * i, &u, 4);
      continue;
    }
    uint16_t h;
    if (bfloat) {
      h = static_cast<uint16_t>(u >> 16);
    } else {
      const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
      const uint16_t mantissa = static_cast<uint16_t>(rng.Next() & 0x3FFu);
      const uint16_t exponent = static_cast<uint16_t>(8 + rng.Next() % 7);  // [2^-7, 2^-1)
      h = static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
    }
    std::memcpy(t.buffer.data.get() + 2 * i, &h, 2);
  }
}

void FillBytes(Tensor& t, Rng& rng) {
  for (size_t i = 0; i < t.buffer.bytes; ++i) {
    t.buffer.data[i] = static_cast<unsigned char>(rng.Next());
  }
}

// Q8_0/Q4_0 pools: every byte below 0x3C, so that any two bytes read as a block's float16 scale are
// a finite value in [0, 1) (a NaN scale could make an output element all ones, the poison).
void FillBlockBytes(Tensor& t, Rng& rng) {
  for (size_t i = 0; i < t.buffer.bytes; ++i) {
    t.buffer.data[i] = static_cast<unsigned char>(rng.Next() % 0x3C);
  }
}

// The type of one pool: kCacheT (the query type T), kCacheI8 (int8 codes), kCacheI4 (int4 codes,
// two per byte), kCacheQ8_0 / kCacheQ4_0 (PER_BLOCK_32 blocks), or a float type of its own (ABI 1.9
// value caches: float32, float16, bfloat16 whatever T is).
enum CacheCode {
  kCacheT,
  kCacheI8,
  kCacheI4,
  kCacheQ8_0,
  kCacheQ4_0,
  kCacheF32,
  kCacheF16,
  kCacheBF16
};

struct CacheType {
  attnrt_dtype dtype;
  int64_t last;  // the last dimension of the pool for rows of `head` elements
  int bits;      // bits of one element of that last dimension
};

CacheType CacheFor(int code, int64_t head, attnrt_dtype t_dtype, int t_bits) {
  switch (code) {
    case kCacheI8:
      return {kI8, head, 8};
    case kCacheI4:
      return {kU8, head / 2, 8};
    case kCacheQ8_0:
      return {kU8, head / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS * ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES, 8};
    case kCacheQ4_0:
      return {kU8, head / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS * ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES, 8};
    case kCacheF32:
      return {kF32, head, 32};
    case kCacheF16:
      return {kF16, head, 16};
    case kCacheBF16:
      return {kBF16, head, 16};
    default:
      return {t_dtype, head, t_bits};
  }
}

struct OpDeleter {
  void operator()(attnrt_op* op) const { attnrt_op_destroy(op); }
};
struct PlanDeleter {
  void operator()(attnrt_plan* plan) const { attnrt_plan_release(plan); }
};
struct ExplanationDeleter {
  void operator()(attnrt_explanation* e) const { attnrt_explanation_destroy(e); }
};

std::vector<unsigned char> Bytes(const Tensor& t) {
  return std::vector<unsigned char>(t.buffer.data.get(), t.buffer.data.get() + t.buffer.bytes);
}

void RunPaged(FuzzedDataProvider& fdp, const Pool& pool) {
  // The mutation is chosen first, while the input still has bytes: an exhausted input decodes
  // to none.
  const int mutation = fdp.ConsumeIntegralInRange<int>(0, 15);
  attnrt_runtime* runtime = fdp.ConsumeBool() ? g_scalar_runtime : g_runtime;
  Rng rng(fdp.ConsumeIntegral<uint64_t>());
  // From the pool: a decode step of up to three of its non-empty sequences.
  std::vector<int64_t> pool_sequences;
  if (pool.pool && fdp.ConsumeBool()) {
    for (int64_t seq : pool.live) {
      int64_t length = 0;
      attnrt_block_pool_sequence_info(pool.pool.get(), seq, &length, nullptr);
      if (length > 0 && length <= 512 && pool_sequences.size() < 3) pool_sequences.push_back(seq);
    }
  }
  const bool from_pool = !pool_sequences.empty() && pool.block_size <= 64;

  attnrt_paged_gqa_attributes attributes;
  attnrt_paged_gqa_attributes_init(&attributes);
  attnrt_gqa_attributes& a = attributes.gqa;
  const int64_t kv_heads = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  const int64_t heads = kv_heads * fdp.ConsumeIntegralInRange<int64_t>(1, 3);
  static constexpr int64_t kHeadSizes[] = {8, 16, 32};
  int64_t h = kHeadSizes[fdp.ConsumeIntegralInRange<size_t>(0, 2)];
  a.num_heads = static_cast<int32_t>(heads);
  a.kv_num_heads = static_cast<int32_t>(kv_heads);
  if (fdp.ConsumeBool()) a.softcap = fdp.ConsumeIntegralInRange<int>(1, 50);
  if (fdp.ConsumeBool()) a.smooth_softmax = 1;
  a.qk_output = fdp.ConsumeIntegralInRange<int32_t>(0, 2);
  if (fdp.ConsumeBool()) a.local_window_size = fdp.ConsumeIntegralInRange<int32_t>(0, 20);
  a.do_rotary = fdp.ConsumeBool() ? 1 : 0;
  const bool head_sink = fdp.ConsumeBool();
  const bool bias = fdp.ConsumeBool();
  // T: float32, float16, bfloat16; the cache: T, int8 per channel or int4 per tensor.
  const int type = fdp.ConsumeIntegralInRange<int>(0, 2);
  const int quant = fdp.ConsumeIntegralInRange<int>(0, 2);
  const attnrt_dtype t_dtype = type == 0 ? kF32 : type == 1 ? kF16 : kBF16;
  const int t_bits = type == 0 ? 32 : 16;
  if (quant == 1) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    a.kv_cache_bit_width = 8;
  } else if (quant == 2) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 4;
  }
  attributes.kv_layout = fdp.ConsumeBool() ? ATTNRT_PAGED_KV_LAYOUT_BNSH : 0;

  // Batch, phase, lengths, block table.
  static constexpr int32_t kBlockSizes[] = {4, 1, 2, 3, 16, 5, 64};
  int64_t block_size = kBlockSizes[fdp.ConsumeIntegralInRange<size_t>(0, 6)];
  int64_t batch = 1, seq = 1, num_blocks = 0, slots = 0;
  std::vector<int32_t> seqlens, table;
  if (from_pool) {
    block_size = pool.block_size;
    batch = static_cast<int64_t>(pool_sequences.size());
    num_blocks = pool.num_blocks;
    slots = fdp.ConsumeIntegralInRange<int64_t>(0, 2);
    for (int64_t s : pool_sequences) {
      int64_t blocks = 0;
      attnrt_block_pool_sequence_info(pool.pool.get(), s, nullptr, &blocks);
      slots = std::max(slots, blocks);
    }
    seqlens.assign(static_cast<size_t>(batch), 0);
    table.assign(static_cast<size_t>(batch * slots), 0);
    Checked("block_table", attnrt_block_pool_block_table(pool.pool.get(), pool_sequences.data(),
                                                         pool_sequences.size(), slots, table.data(),
                                                         seqlens.data()));
  } else {
    batch = fdp.ConsumeIntegralInRange<int64_t>(1, 3);
    const int phase = fdp.ConsumeIntegralInRange<int>(0, 2);  // decode, first prompt, chunked
    if (phase == 2) batch = 1;
    seq = phase == 0 ? 1 : fdp.ConsumeIntegralInRange<int64_t>(1, 24);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t total = phase == 1 ? fdp.ConsumeIntegralInRange<int64_t>(1, seq)
                                       : seq + fdp.ConsumeIntegralInRange<int64_t>(0, 90);
      seqlens.push_back(static_cast<int32_t>(total - 1));
    }
    if (phase == 1) seqlens[0] = static_cast<int32_t>(seq - 1);  // T = S in a first prompt
    int64_t needed = 0, longest = 0;
    for (int32_t v : seqlens) {
      needed += (v + block_size) / block_size;
      longest = std::max<int64_t>(longest, v + 1);
    }
    slots = (longest + block_size - 1) / block_size + fdp.ConsumeIntegralInRange<int64_t>(0, 2);
    num_blocks = needed + fdp.ConsumeIntegralInRange<int64_t>(0, 3);
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.Next() % i]);
    table.assign(static_cast<size_t>(batch * slots), -1);
    size_t next = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t blocks = (seqlens[static_cast<size_t>(b)] + block_size) / block_size;
      for (int64_t i = 0; i < blocks; ++i) table[static_cast<size_t>(b * slots + i)] = ids[next++];
    }
  }
  attributes.block_size = static_cast<int32_t>(block_size);
  int64_t total = 1;
  for (int32_t v : seqlens) total = std::max<int64_t>(total, v + 1);

  // ABI 1.9, decoded after every other choice so that the corpus keeps its meaning (an exhausted
  // input decodes to one cache type and the head sizes above):
  //   - value_cache of a type of its own (v_cache_own_type = 1), 3 calls in 16: key_cache T,
  //     Q8_0 or Q4_0 blocks, or the quant choice's type (int8/int4 with scales: refused);
  //     value_cache float32, float16, bfloat16, T, Q8_0 or Q4_0 blocks (refused where its head size
  //     is no multiple of 32), or, 1 in 4, a type that does not match its attributes (refused);
  //   - head sizes that are no multiple of 8, 3 calls in 16: key and value, the value only
  //     (Hv != H), or both, each of its own (only unquantized caches take them: 3 in 4 of these
  //     calls have no int8/int4 cache of one type and no rotary).
  int key_code = quant, value_code = quant;
  bool two_types = false, invalid_type = false, stray_scale = false;
  if (fdp.ConsumeIntegralInRange<int>(0, 15) >= 13) {
    two_types = true;
    attributes.v_cache_own_type = 1;
    static constexpr int kKeyCodes[] = {kCacheT, kCacheQ8_0, kCacheQ4_0};
    const int key_choice = fdp.ConsumeIntegralInRange<int>(0, 3);
    if (key_choice > 0) key_code = kKeyCodes[key_choice - 1];
    static constexpr int kValueCodes[] = {kCacheF32,  kCacheF16,  kCacheBF16,
                                          kCacheQ8_0, kCacheQ4_0, kCacheT};
    const int value_choice = fdp.ConsumeIntegralInRange<int>(0, 7);
    invalid_type = value_choice >= 6;
    value_code = kValueCodes[invalid_type ? rng.Next() % 6 : static_cast<size_t>(value_choice)];
  }
  int64_t hv = h;
  const int odd = fdp.ConsumeIntegralInRange<int>(0, 15);
  static constexpr int64_t kOddHeadSizes[] = {5, 12, 65, 1, 3, 20, 36, 67};
  if (odd >= 13) {
    const auto pick = [&] {
      return kOddHeadSizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kOddHeadSizes) - 1)];
    };
    if (odd != 14) h = pick();
    hv = odd == 13 ? h : pick();
    // 3 in 4 of them over caches that take them: int8/int4 of one type become T, no rotary (which
    // takes multiples of 16).
    if (fdp.ConsumeIntegralInRange<int>(0, 3) != 0) {
      a.do_rotary = 0;
      if (!two_types && quant != 0) {
        key_code = value_code = kCacheT;
        a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_NONE;
        a.kv_cache_bit_width = 0;
      }
    }
  }
  const bool odd_heads = h % 8 != 0 || hv % 8 != 0;
  if (two_types) {
    const auto quant_type = [](int code) {
      return code == kCacheI8                           ? ATTNRT_GQA_QUANT_PER_CHANNEL
             : code == kCacheI4                         ? ATTNRT_GQA_QUANT_PER_TENSOR
             : code == kCacheQ8_0 || code == kCacheQ4_0 ? ATTNRT_GQA_QUANT_PER_BLOCK_32
                                                        : ATTNRT_GQA_QUANT_NONE;
    };
    const auto bit_width = [](int code) {
      return code == kCacheI8 || code == kCacheQ8_0   ? 8
             : code == kCacheI4 || code == kCacheQ4_0 ? 4
                                                      : 0;
    };
    a.k_quant_type = quant_type(key_code);
    a.kv_cache_bit_width = bit_width(key_code);
    a.v_quant_type = quant_type(value_code);
    attributes.v_cache_bit_width = bit_width(value_code);
    if (invalid_type) {
      // Attributes that do not describe value_cache (a quantized type for a float pool and the
      // reverse, a bit width of another type or none), or an undefined v_cache_own_type.
      switch (rng.Next() % 6) {
        case 0:
          a.v_quant_type = a.v_quant_type == ATTNRT_GQA_QUANT_NONE ? ATTNRT_GQA_QUANT_PER_BLOCK_32
                                                                   : ATTNRT_GQA_QUANT_NONE;
          break;
        case 1:
          attributes.v_cache_bit_width = attributes.v_cache_bit_width == 0 ? 8 : 0;
          break;
        case 2:
          attributes.v_cache_bit_width = attributes.v_cache_bit_width == 8 ? 4 : 5;
          break;
        case 3:
          a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
          break;
        case 4:
          attributes.v_cache_own_type = 2;
          break;
        default:
          stray_scale = true;  // a v_scale beside two types
          break;
      }
    }
    // The quant choice's int8/int4 key (with its scales) is no type of an independent pair.
    invalid_type = invalid_type || key_code == kCacheI8 || key_code == kCacheI4;
  }

  // Mutations.
  if (!table.empty()) {
    const size_t slot = static_cast<size_t>(rng.Next() % table.size());
    const size_t other = static_cast<size_t>(rng.Next() % table.size());
    if (mutation == 1) table[slot] = -1;
    if (mutation == 2) table[slot] = static_cast<int32_t>(num_blocks);
    if (mutation == 3) table[slot] = -7;
    if (mutation == 4) table[slot] = table[other];
  }
  if (mutation == 5) seqlens[0] = static_cast<int32_t>(slots * block_size);
  int64_t total_input = total;
  if (mutation == 6) total_input = total + 1;
  if (mutation == 7) total_input = slots * block_size + 1;
  int64_t pool_block_size = block_size;
  if (mutation == 8) pool_block_size = block_size + 1;
  const bool small_workspace = mutation == 9;

  // Tensors.
  const CacheType key_type = CacheFor(key_code, h, t_dtype, t_bits);
  const CacheType value_type = CacheFor(value_code, hv, t_dtype, t_bits);
  std::vector<std::unique_ptr<Tensor>> in(ATTNRT_PAGED_GQA_NUM_INPUTS);
  const auto make = [](attnrt_dtype d, std::vector<int64_t> shape, int bits) {
    return std::make_unique<Tensor>(d, std::move(shape), static_cast<size_t>(bits));
  };
  in[ATTNRT_PAGED_GQA_INPUT_QUERY] = make(t_dtype, {batch, seq, heads * h}, t_bits);
  in[ATTNRT_PAGED_GQA_INPUT_KEY] = make(t_dtype, {batch, seq, kv_heads * h}, t_bits);
  in[ATTNRT_PAGED_GQA_INPUT_VALUE] = make(t_dtype, {batch, seq, kv_heads * hv}, t_bits);
  const auto pool_shape = [&](int64_t last) {
    return attributes.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
               ? std::vector<int64_t>{num_blocks, kv_heads, pool_block_size, last}
               : std::vector<int64_t>{num_blocks, pool_block_size, kv_heads, last};
  };
  in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] =
      make(key_type.dtype, pool_shape(key_type.last), key_type.bits);
  in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
      make(value_type.dtype, pool_shape(value_type.last), value_type.bits);
  in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = make(kI32, {batch}, 32);
  std::memcpy(in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K]->i32(), seqlens.data(), seqlens.size() * 4);
  in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = make(kI32, {1}, 32);
  in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH]->i32()[0] = static_cast<int32_t>(total_input);
  in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = make(kI32, {batch, slots}, 32);
  std::memcpy(in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE]->i32(), table.data(), table.size() * 4);
  if (a.do_rotary == 1) {
    const int64_t rows = slots * block_size + 2;
    in[ATTNRT_PAGED_GQA_INPUT_COS_CACHE] = make(t_dtype, {rows, h / 2}, t_bits);
    in[ATTNRT_PAGED_GQA_INPUT_SIN_CACHE] = make(t_dtype, {rows, h / 2}, t_bits);
  }
  if (bias)
    in[ATTNRT_PAGED_GQA_INPUT_ATTENTION_BIAS] = make(t_dtype, {batch, 1, seq, total}, t_bits);
  if (head_sink) in[ATTNRT_PAGED_GQA_INPUT_HEAD_SINK] = make(t_dtype, {heads}, t_bits);
  // The scales of the quant choice's int8/int4 caches (kept with two types: they are refused).
  if (quant != 0 && (key_code == quant || value_code == quant)) {
    in[ATTNRT_PAGED_GQA_INPUT_K_SCALE] = make(kF32, {quant == 1 ? kv_heads * h : 1}, 32);
    in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = make(kF32, {quant == 1 ? kv_heads * hv : 1}, 32);
  }
  if (stray_scale) in[ATTNRT_PAGED_GQA_INPUT_V_SCALE] = make(kF32, {1}, 32);
  for (int i = 0; i < ATTNRT_PAGED_GQA_NUM_INPUTS; ++i) {
    Tensor* t = in[static_cast<size_t>(i)].get();
    if (t == nullptr || t->desc.dtype.code == ATTNRT_DTYPE_CODE_INT) continue;
    if (t->desc.dtype.code == ATTNRT_DTYPE_CODE_UINT) {
      FillBytes(*t, rng);
    } else {
      FillFloat(*t, t->desc.dtype.bits, t->desc.dtype.code == ATTNRT_DTYPE_CODE_BFLOAT, rng);
    }
  }
  for (int k : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
    const int code = k == ATTNRT_PAGED_GQA_INPUT_KEY_CACHE ? key_code : value_code;
    if (code == kCacheI8) FillBytes(*in[static_cast<size_t>(k)], rng);
    if (code == kCacheQ8_0 || code == kCacheQ4_0) FillBlockBytes(*in[static_cast<size_t>(k)], rng);
  }
  for (int k : {ATTNRT_PAGED_GQA_INPUT_K_SCALE, ATTNRT_PAGED_GQA_INPUT_V_SCALE}) {
    if (in[static_cast<size_t>(k)] != nullptr) {
      float* s = reinterpret_cast<float*>(in[static_cast<size_t>(k)]->buffer.data.get());
      const size_t n = in[static_cast<size_t>(k)]->buffer.bytes / 4;
      for (size_t i = 0; i < n; ++i) s[i] = 0.01f + 0.02f * (rng.Unit() + 1.0f);
    }
  }
  std::vector<std::unique_ptr<Tensor>> out;
  out.push_back(make(t_dtype, {batch, seq, heads * hv}, t_bits));
  if (a.qk_output != 0) out.push_back(make(t_dtype, {batch, heads, seq, total}, t_bits));
  for (auto& t : out) std::memset(t->buffer.data.get(), 0xFF, t->buffer.bytes);  // NaN poison

  std::vector<const attnrt_tensor*> inputs, outputs;
  for (auto& t : in) inputs.push_back(t ? &t->desc : nullptr);
  for (auto& t : out) outputs.push_back(&t->desc);

  if (g_verbose) {
    std::fprintf(
        stderr,
        "paged_gqa_fuzzer: case: N %lld Nkv %lld H %lld Hv %lld T %s key_cache %s (k_quant_type "
        "%d width %d) value_cache %s (v_cache_own_type %d, v_quant_type %d width %d)%s block_size "
        "%lld layout %d batch %lld seq %lld mutation %d %s\n",
        static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(h),
        static_cast<long long>(hv), attnrt_dtype_name(t_dtype), attnrt_dtype_name(key_type.dtype),
        a.k_quant_type, a.kv_cache_bit_width, attnrt_dtype_name(value_type.dtype),
        attributes.v_cache_own_type, a.v_quant_type, attributes.v_cache_bit_width,
        invalid_type ? " invalid" : "", static_cast<long long>(block_size), attributes.kv_layout,
        static_cast<long long>(batch), static_cast<long long>(seq), mutation,
        runtime == g_scalar_runtime ? "scalar" : "any kernel");
  }
  const auto refused = [](const char* stage) {
    if (g_verbose) std::fprintf(stderr, "  %s: %s\n", stage, attnrt_last_error_message());
  };
  // The calls, counted in every tally the call belongs to.
  std::vector<Tally*> tallies = {&g_outcomes.all};
  if (two_types) {
    // T is the key's float type or the value's where either is kCacheT.
    const auto resolved = [&](int code) {
      return code != kCacheT ? code : type == 0 ? kCacheF32 : type == 1 ? kCacheF16 : kCacheBF16;
    };
    tallies.push_back(resolved(key_code) != resolved(value_code) ? &g_outcomes.two_types
                                                                 : &g_outcomes.own_one_type);
  }
  if (odd_heads) tallies.push_back(&g_outcomes.odd_heads);
  if (invalid_type) tallies.push_back(&g_outcomes.invalid_types);
  const auto tally = [&](int64_t Tally::*stage) {
    for (Tally* t : tallies) ++(t->*stage);
  };
  attnrt_op* raw_op = nullptr;
  if (Checked("attnrt_op_create",
              attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &attributes, &raw_op)) != ATTNRT_OK) {
    refused("attnrt_op_create");
    tally(&Tally::op_refused);
    return;
  }
  g_outcomes.from_pool += from_pool ? 1 : 0;
  std::unique_ptr<attnrt_op, OpDeleter> op(raw_op);
  attnrt_explanation* raw_explanation = nullptr;
  const attnrt_status explained = Checked(
      "attnrt_op_explain", attnrt_op_explain(op.get(), inputs.data(), inputs.size(), outputs.data(),
                                             outputs.size(), &raw_explanation));
  std::unique_ptr<attnrt_explanation, ExplanationDeleter> explanation(raw_explanation);
  std::string selected;
  if (explained == ATTNRT_OK) {
    size_t count = 0;
    Checked("attnrt_explanation_count", attnrt_explanation_count(explanation.get(), &count));
    for (size_t i = 0; i < count; ++i) {
      attnrt_candidate c;
      std::memset(&c, 0, sizeof(c));
      c.struct_size = sizeof(c);
      Checked("attnrt_explanation_candidate",
              attnrt_explanation_candidate(explanation.get(), i, &c));
      if (c.status == ATTNRT_CANDIDATE_SELECTED) selected = c.kernel;
    }
  }
  attnrt_plan* raw_plan = nullptr;
  const attnrt_status planned =
      Checked("attnrt_op_plan", attnrt_op_plan(op.get(), inputs.data(), inputs.size(),
                                               outputs.data(), outputs.size(), &raw_plan));
  std::unique_ptr<attnrt_plan, PlanDeleter> plan(raw_plan);
  if ((planned == ATTNRT_OK) != !selected.empty()) {
    Fail("explain selected '" + selected + "' but plan returned status " + std::to_string(planned));
  }
  if (planned != ATTNRT_OK) {
    refused("attnrt_op_plan");
    tally(&Tally::plan_refused);
    return;
  }
  attnrt_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  Checked("attnrt_plan_get_info", attnrt_plan_get_info(plan.get(), &info));
  if (selected != info.kernel) Fail("explain selected " + selected + ", plan " + info.kernel);

  size_t workspace_size = info.workspace_size;
  if (small_workspace && workspace_size > 0) workspace_size -= 1;
  const size_t alignment = std::max<size_t>(info.workspace_alignment, 64);
  void* workspace =
      workspace_size > 0
          ? std::aligned_alloc(alignment, (workspace_size + alignment - 1) / alignment * alignment)
          : nullptr;
  const auto key_before = Bytes(*in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]);
  const auto value_before = Bytes(*in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]);
  std::vector<std::vector<unsigned char>> out_before;
  for (auto& t : out) out_before.push_back(Bytes(*t));
  const attnrt_status ran = Checked(
      "attnrt_plan_run", attnrt_plan_run(plan.get(), inputs.data(), inputs.size(), outputs.data(),
                                         outputs.size(), workspace, workspace_size, nullptr));
  std::free(workspace);
  if (ran != ATTNRT_OK) {
    bool same = Bytes(*in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]) == key_before &&
                Bytes(*in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]) == value_before;
    for (size_t i = 0; i < out.size(); ++i) same = same && Bytes(*out[i]) == out_before[i];
    if (!same) Fail(std::string("a failing run wrote memory: ") + attnrt_last_error_message());
    refused("attnrt_plan_run");
    tally(&Tally::run_refused);
    return;
  }
  for (Tally* t : tallies) t->Ran(info.kernel);
  if (g_verbose) std::fprintf(stderr, "  ran %s\n", info.kernel);
  if (invalid_type) {
    Fail(std::string("a call whose value_cache does not match its attributes (v_cache_own_type ") +
         std::to_string(attributes.v_cache_own_type) + ", v_quant_type " +
         std::to_string(a.v_quant_type) + ", v_cache_bit_width " +
         std::to_string(attributes.v_cache_bit_width) + ", k_quant_type " +
         std::to_string(a.k_quant_type) + ") ran on " + info.kernel);
  }
  // Every output element written: none keeps the all-ones poison.
  const size_t element = static_cast<size_t>(t_bits / 8);
  for (auto& t : out) {
    for (size_t i = 0; i + element <= t->buffer.bytes; i += element) {
      bool poison = true;
      for (size_t k = 0; k < element; ++k) poison = poison && t->buffer.data[i + k] == 0xFF;
      if (poison)
        Fail("a successful run left output element " + std::to_string(i / element) +
             " unwritten (" + info.kernel + ")");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = 2;
  attnrt_status status = attnrt_runtime_create(&options, &g_runtime);
  options.kernel = "*.scalar";
  if (status == ATTNRT_OK) status = attnrt_runtime_create(&options, &g_scalar_runtime);
  if (status != ATTNRT_OK) {
    std::fprintf(stderr, "paged_gqa_fuzzer: runtime: %s\n", attnrt_last_error_message());
    std::abort();
  }
  const char* stats = std::getenv("PAGED_GQA_FUZZER_STATS");
  if (stats != nullptr && stats[0] == '1') std::atexit(PrintOutcomes);
  const char* verbose = std::getenv("GQA_FUZZER_VERBOSE");
  g_verbose = verbose != nullptr && verbose[0] == '1';
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  const Pool pool = RunPool(fdp);
  RunPaged(fdp, pool);
  return 0;
}
