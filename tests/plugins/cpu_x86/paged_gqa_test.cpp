// Paged GroupQueryAttention (attnrt/ops/paged_gqa.h) on the CPU plugin (cpu_x86 or cpu_arm),
// black-box:
//  - bitwise equality with GroupQueryAttention over a contiguous cache holding the same tokens,
//    same algorithm (<plugin>.paged_gqa.flash.<isa> vs <plugin>.gqa.flash.<isa>), for block sizes
//    1, 7, 16, 33, 64, 256 and 1024 and blocks placed in random order in the pools, over decode
//    (with split-KV), first and chunked prompts, rotary, a local window, attention_bias,
//    int8/int4 caches and bfloat16 ops (cpu_x86.*.flash.amx too; int8 PER_TENSOR caches on
//    cpu_arm.*.flash.dotprod_approx too); the new rows in the pools equal the present rows byte
//    for byte;
//  - paged float32 outputs against the float64 reference of tests/common (1e-5);
//  - fork then divergent appends through the block pool, with its copy-on-write copies;
//  - bad inputs: each error message, and neither the pools nor the output touched.
// Fresh N(0,1) data from a printed seed; outputs poisoned with NaN, and so are the unused pool
// rows of float caches, so a read of a row the table does not name shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "cpu_isas.h"

namespace attnrt_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kBFloat16 = ATTNRT_DTYPE_BFLOAT16;

// kBF16: the whole op in bfloat16 (query, key, value, cache, output). kQ8_0Block, kQ4_0Block:
// PER_BLOCK_32 caches (ggml Q8_0 / Q4_0 blocks of 32 elements with a float16 scale each).
enum class Cache {
  kF32,
  kInt8PerChannel,
  kInt4PerTensor,
  kBF16,
  kInt8PerTensor,
  kQ8_0Block,
  kQ4_0Block
};
bool IsBlockCache(Cache cache) { return cache == Cache::kQ8_0Block || cache == Cache::kQ4_0Block; }

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 8, Nkv = 2, H = 64;
  std::vector<int32_t> seqlens;  // T_b - 1
  int32_t block_size = 16;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Cache cache = Cache::kF32;
  bool rotary = false;
  int32_t window = -1;
  bool bias = false;
  int32_t threads = 4;  // B * Nkv < threads: split-KV decoding
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

int64_t TotalLength(const Case& c) {
  return *std::max_element(c.seqlens.begin(), c.seqlens.end()) + 1;
}
bool FirstPrompt(const Case& c) { return c.S == TotalLength(c); }
int64_t RowBytes(const Case& c) {
  switch (c.cache) {
    case Cache::kF32:
      return c.H * 4;
    case Cache::kBF16:
      return c.H * 2;
    case Cache::kInt8PerChannel:
    case Cache::kInt8PerTensor:
      return c.H;
    case Cache::kQ8_0Block:
      return c.H / 32 * 34;
    case Cache::kQ4_0Block:
      return c.H / 32 * 18;
    case Cache::kInt4PerTensor:
      break;
  }
  return c.H / 2;
}
// Elements of the cache's dtype per row: the row's bytes for the byte caches.
int64_t LastDim(const Case& c) {
  return c.cache == Cache::kF32 || c.cache == Cache::kBF16 ? c.H : RowBytes(c);
}
attnrt_dtype CacheDtype(const Case& c) {
  switch (c.cache) {
    case Cache::kF32:
      return kF32;
    case Cache::kBF16:
      return kBFloat16;
    case Cache::kInt8PerChannel:
    case Cache::kInt8PerTensor:
      return kI8;
    case Cache::kInt4PerTensor:
    case Cache::kQ8_0Block:
    case Cache::kQ4_0Block:
      break;
  }
  return kU8;
}
// A tensor of the op's float type T (bfloat16 for kBF16, else float32).
Tensor FloatT(const Case& c, std::vector<int64_t> shape) {
  return c.cache == Cache::kBF16 ? Tensor(kBFloat16, std::move(shape)) : F32(std::move(shape));
}
// N(0,1) values of T.
void FillNormalT(Tensor& t, const Case& c, std::mt19937_64& rng) {
  if (c.cache != Cache::kBF16) return t.FillNormal(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto* bits = static_cast<uint16_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = BFloat16Bits(normal(rng));
}
// NaN of T everywhere.
void FillNaNT(Tensor& t, const Case& c) {
  if (c.cache != Cache::kBF16) return t.Fill(kNaN);
  auto* bits = static_cast<uint16_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = 0x7FC0;
}
// Element i of a T tensor.
float ValueT(const Tensor& t, const Case& c, int64_t i) {
  if (c.cache != Cache::kBF16) return t.f32()[i];
  return BFloat16Value(static_cast<const uint16_t*>(const_cast<Tensor&>(t).data())[i]);
}

attnrt_gqa_attributes Attributes(const Case& c) {
  attnrt_gqa_attributes a = GqaAttributes(static_cast<int32_t>(c.N), static_cast<int32_t>(c.Nkv));
  a.do_rotary = c.rotary ? 1 : 0;
  a.local_window_size = c.window;
  if (c.cache == Cache::kInt8PerChannel) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    a.kv_cache_bit_width = 8;
  } else if (c.cache == Cache::kInt8PerTensor) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 8;
  } else if (c.cache == Cache::kInt4PerTensor) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 4;
  } else if (IsBlockCache(c.cache)) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    a.kv_cache_bit_width = c.cache == Cache::kQ8_0Block ? 8 : 4;
  }
  return a;
}

// Fills a cache tensor's bytes: N(0,1) floats, or random bytes for the quantized types (with a
// finite float16 d of either sign starting each block of a PER_BLOCK_32 cache, elements of order
// 1).
void FillCache(Tensor& t, Cache cache, std::mt19937_64& rng) {
  if (cache == Cache::kF32 || cache == Cache::kBF16) {
    Case c;
    c.cache = cache;
    FillNormalT(t, c, rng);
    return;
  }
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  if (!IsBlockCache(cache)) return;
  const size_t block = cache == Cache::kQ8_0Block ? 34 : 18;
  std::uniform_real_distribution<float> d(cache == Cache::kQ8_0Block ? 0.004f : 0.08f,
                                          cache == Cache::kQ8_0Block ? 0.03f : 0.5f);
  for (size_t i = 0; i + 1 < t.bytes(); i += block) {
    const uint16_t bits = Float16Bits(rng() & 1 ? d(rng) : -d(rng));
    p[i] = static_cast<unsigned char>(bits & 0xFF);
    p[i + 1] = static_cast<unsigned char>(bits >> 8);
  }
}

// One call in both forms: contiguous GQA (past = present, B x Nkv x P rows) and paged.
struct PagedCall {
  Case c;
  int64_t slots = 0;     // max_blocks_per_seq
  int64_t capacity = 0;  // slots * block_size = P
  int64_t num_blocks = 0;
  GqaTensors gqa;
  std::vector<Tensor> paged_in;   // ATTNRT_PAGED_GQA_NUM_INPUTS
  std::vector<Tensor> paged_out;  // output
  std::vector<int32_t> table;
  std::vector<const attnrt_tensor*> in_ptrs, out_ptrs;
  Tensor past_key_before, past_value_before;

  const attnrt_tensor* const* PagedInputs() {
    in_ptrs.clear();
    for (auto& t : paged_in) in_ptrs.push_back(t.empty() ? nullptr : t.get());
    return in_ptrs.data();
  }
  const attnrt_tensor* const* PagedOutputs() {
    out_ptrs.clear();
    for (auto& t : paged_out) out_ptrs.push_back(t.empty() ? nullptr : t.get());
    return out_ptrs.data();
  }
  unsigned char* PoolRow(int which, int64_t b, int64_t kvh, int64_t j) {
    const int64_t block = table[static_cast<size_t>(b * slots + j / c.block_size)];
    const int64_t row = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
                            ? (block * c.Nkv + kvh) * c.block_size + j % c.block_size
                            : (block * c.block_size + j % c.block_size) * c.Nkv + kvh;
    return static_cast<unsigned char*>(paged_in[static_cast<size_t>(which)].data()) +
           row * RowBytes(c);
  }
  unsigned char* PresentRow(attnrt_gqa_input which, int64_t b, int64_t kvh, int64_t j) {
    return static_cast<unsigned char*>(gqa[which].data()) +
           ((b * c.Nkv + kvh) * capacity + j) * RowBytes(c);
  }
};

PagedCall MakePagedCall(const Case& c, std::mt19937_64& rng, int64_t spare_blocks = 3) {
  PagedCall s;
  s.c = c;
  const int64_t T = TotalLength(c);
  int64_t needed_total = 0;
  for (int32_t v : c.seqlens) needed_total += (v + c.block_size) / c.block_size;
  s.slots = (T + c.block_size - 1) / c.block_size + 1;  // one spare slot of -1
  s.capacity = s.slots * c.block_size;
  s.num_blocks = needed_total + spare_blocks;

  // Contiguous call.
  GqaTensors& g = s.gqa;
  g[ATTNRT_GQA_INPUT_QUERY] = FloatT(c, {c.B, c.S, c.N * c.H});
  g[ATTNRT_GQA_INPUT_KEY] = FloatT(c, {c.B, c.S, c.Nkv * c.H});
  g[ATTNRT_GQA_INPUT_VALUE] = FloatT(c, {c.B, c.S, c.Nkv * c.H});
  for (auto i : {ATTNRT_GQA_INPUT_QUERY, ATTNRT_GQA_INPUT_KEY, ATTNRT_GQA_INPUT_VALUE}) {
    FillNormalT(g[i], c, rng);
  }
  g[ATTNRT_GQA_INPUT_PAST_KEY] = Tensor(CacheDtype(c), {c.B, c.Nkv, s.capacity, LastDim(c)});
  g[ATTNRT_GQA_INPUT_PAST_VALUE] = Tensor(CacheDtype(c), {c.B, c.Nkv, s.capacity, LastDim(c)});
  FillCache(g[ATTNRT_GQA_INPUT_PAST_KEY], c.cache, rng);
  FillCache(g[ATTNRT_GQA_INPUT_PAST_VALUE], c.cache, rng);
  g[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(c.seqlens, {c.B});
  g[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});
  if (c.rotary) {
    const int64_t M = s.capacity + 4;
    g[ATTNRT_GQA_INPUT_COS_CACHE] = F32({M, c.H / 2});
    g[ATTNRT_GQA_INPUT_SIN_CACHE] = F32({M, c.H / 2});
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (auto i : {ATTNRT_GQA_INPUT_COS_CACHE, ATTNRT_GQA_INPUT_SIN_CACHE}) {
      float* p = g[i].f32();
      for (int64_t k = 0; k < g[i].numel(); ++k) p[k] = unit(rng);
    }
  }
  if (c.bias) {
    g[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({c.B, c.N, c.S, T});
    g[ATTNRT_GQA_INPUT_ATTENTION_BIAS].FillNormal(rng);
  }
  if (c.cache != Cache::kF32 && c.cache != Cache::kBF16 && !IsBlockCache(c.cache)) {
    const int64_t count = c.cache == Cache::kInt8PerChannel ? c.Nkv * c.H : 1;
    std::uniform_real_distribution<float> scale(0.01f, 0.05f);
    for (auto i : {ATTNRT_GQA_INPUT_K_SCALE, ATTNRT_GQA_INPUT_V_SCALE}) {
      g[i] = F32({count});
      for (int64_t k = 0; k < count; ++k) g[i].f32()[k] = scale(rng);
    }
  }
  g[ATTNRT_GQA_OUTPUT_OUTPUT] = FloatT(c, {c.B, c.S, c.N * c.H});
  FillNaNT(g[ATTNRT_GQA_OUTPUT_OUTPUT], c);
  g[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g[ATTNRT_GQA_INPUT_PAST_KEY];  // shared buffer
  g[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g[ATTNRT_GQA_INPUT_PAST_VALUE];
  s.past_key_before = g[ATTNRT_GQA_INPUT_PAST_KEY].Clone();
  s.past_value_before = g[ATTNRT_GQA_INPUT_PAST_VALUE].Clone();

  // Paged call: blocks in random order, unused slots -1, unused pool rows poisoned.
  std::vector<int32_t> ids(static_cast<size_t>(s.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.table.assign(static_cast<size_t>(c.B * s.slots), -1);
  size_t next = 0;
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t needed = (c.seqlens[static_cast<size_t>(b)] + c.block_size) / c.block_size;
    for (int64_t i = 0; i < needed; ++i)
      s.table[static_cast<size_t>(b * s.slots + i)] = ids[next++];
  }
  s.paged_in.resize(ATTNRT_PAGED_GQA_NUM_INPUTS);
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    if (i == ATTNRT_GQA_INPUT_PAST_KEY || i == ATTNRT_GQA_INPUT_PAST_VALUE) continue;
    s.paged_in[static_cast<size_t>(i)] = g.in[static_cast<size_t>(i)];
  }
  for (int k : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
    s.paged_in[static_cast<size_t>(k)] =
        c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
            ? Tensor(CacheDtype(c), {s.num_blocks, c.Nkv, c.block_size, LastDim(c)})
            : Tensor(CacheDtype(c), {s.num_blocks, c.block_size, c.Nkv, LastDim(c)});
    if (c.cache == Cache::kF32 || c.cache == Cache::kBF16) {
      FillNaNT(s.paged_in[static_cast<size_t>(k)], c);
    } else {
      FillCache(s.paged_in[static_cast<size_t>(k)], c.cache, rng);
    }
  }
  s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {c.B, s.slots});
  // The past tokens (T_b - S of them outside a first prompt) go to the blocks the table names.
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t past = FirstPrompt(c) ? 0 : c.seqlens[static_cast<size_t>(b)] + 1 - c.S;
    for (int64_t kvh = 0; kvh < c.Nkv; ++kvh) {
      for (int64_t j = 0; j < past; ++j) {
        std::memcpy(s.PoolRow(ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, b, kvh, j),
                    s.PresentRow(ATTNRT_GQA_INPUT_PAST_KEY, b, kvh, j),
                    static_cast<size_t>(RowBytes(c)));
        std::memcpy(s.PoolRow(ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, b, kvh, j),
                    s.PresentRow(ATTNRT_GQA_INPUT_PAST_VALUE, b, kvh, j),
                    static_cast<size_t>(RowBytes(c)));
      }
    }
  }
  s.paged_out.push_back(FloatT(c, {c.B, c.S, c.N * c.H}));
  FillNaNT(s.paged_out[0], c);
  return s;
}

RuntimePtr PinnedRuntime(const std::string& kernels, int32_t threads) {
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = kernels.c_str();
  options.num_threads = threads;
  return CreateRuntime(options);
}

OpPtr PagedOp(attnrt_runtime* runtime, const Case& c) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = Attributes(c);
  a.block_size = c.block_size;
  a.kv_layout = c.layout;
  attnrt_op* op = nullptr;
  const attnrt_status status = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &a, &op);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return OpPtr(op);
}

OpPtr ContiguousOp(attnrt_runtime* runtime, const Case& c) {
  const attnrt_gqa_attributes a = Attributes(c);
  attnrt_op* op = nullptr;
  const attnrt_status status = attnrt_op_create(runtime, ATTNRT_OP_GQA, &a, &op);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return OpPtr(op);
}

// Plans and runs the paged call; returns the status (the plan's, or the run's).
attnrt_status RunPaged(attnrt_op* op, PagedCall& s, std::string* kernel = nullptr) {
  attnrt_plan* raw = nullptr;
  attnrt_status status = attnrt_op_plan(op, s.PagedInputs(), ATTNRT_PAGED_GQA_NUM_INPUTS,
                                        s.PagedOutputs(), s.paged_out.size(), &raw);
  if (status != ATTNRT_OK) return status;
  PlanPtr plan(raw);
  if (kernel != nullptr) *kernel = PlanKernel(plan.get());
  return attnrt_plan_run(plan.get(), s.PagedInputs(), ATTNRT_PAGED_GQA_NUM_INPUTS, s.PagedOutputs(),
                         s.paged_out.size(), nullptr, 0, nullptr);
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  for (int32_t bs : {1, 7, 16, 33, 64, 256}) {
    Case c;
    c.name = "decode_bs" + std::to_string(bs);
    c.B = 3;
    c.seqlens = {700, 37, 260};
    c.block_size = bs;
    v.push_back(c);
  }
  Case split;  // one (b, kv head) tile: the key range is split across the threads
  split.name = "decode_split_kv_bs16";
  split.Nkv = 1;
  split.N = 4;
  split.seqlens = {1500};
  v.push_back(split);
  Case prompt;
  prompt.name = "first_prompt_padded_bs16";
  prompt.B = 2;
  prompt.S = 70;
  prompt.seqlens = {69, 40};
  v.push_back(prompt);
  Case chunk;
  chunk.name = "chunked_prompt_rotary_bs7";
  chunk.S = 19;
  chunk.seqlens = {90};
  chunk.block_size = 7;
  chunk.rotary = true;
  v.push_back(chunk);
  Case window = v[2];
  window.name = "decode_window_bias_bs16";
  window.window = 100;
  window.bias = true;
  v.push_back(window);
  Case int8 = v[2];
  int8.name = "decode_int8_per_channel_rotary_bs16";
  int8.cache = Cache::kInt8PerChannel;
  int8.rotary = true;
  v.push_back(int8);
  Case int4 = chunk;
  int4.name = "chunked_prompt_int4_per_tensor_bs33";
  int4.cache = Cache::kInt4PerTensor;
  int4.block_size = 33;
  int4.S = 40;
  int4.seqlens = {150};
  v.push_back(int4);
  Case largest;  // the largest block size: a sequence spans three blocks, another a part of one
  largest.name = "decode_bs1024";
  largest.B = 2;
  largest.seqlens = {2100, 37};
  largest.block_size = ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE;
  v.push_back(largest);
  // A short decode of many kv heads: too few keys to split, so each task of the paged kernel
  // takes a part of the kv heads (2 of 8 with 4 threads).
  Case head_groups;
  head_groups.name = "decode_kv_head_groups_bs16";
  head_groups.N = 16;
  head_groups.Nkv = 8;
  head_groups.seqlens = {300};
  v.push_back(head_groups);
  // The head-major (BNSH) block layout: block sizes 1, 16, 33, 256, 1024, split-KV, first and
  // chunked prompts, int8 and int4, kv head groups.
  for (size_t i : {0, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13}) {
    Case bnsh = v[i];
    bnsh.name += "_bnsh";
    bnsh.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
    v.push_back(bnsh);
  }
  // bfloat16 ops: the prompts take the AMX kernels' tile scores (over float32 copies of the paged
  // K blocks, over the cache itself when contiguous), the decode their AVX-512 operations.
  for (size_t i : {2, 8, 7}) {
    Case bf16 = v[i];
    const size_t rotary = bf16.name.find("_rotary");
    if (rotary != std::string::npos) bf16.name.erase(rotary, 7);
    bf16.name += "_bf16";
    bf16.cache = Cache::kBF16;
    bf16.rotary = false;
    v.push_back(bf16);
  }
  Case bf16_bnsh = v.back();
  bf16_bnsh.name += "_bnsh";
  bf16_bnsh.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  v.push_back(bf16_bnsh);
  // BNSH blocks of 32 rows or more, which prompts read in place with block operations that give
  // one call's bits a call per cache block (float32 here), and copy with AMX's: key blocks that
  // span cache blocks of 33 and 48 rows, and one that starts inside a cache block of 64 (past the
  // first key block of a long chunk).
  for (const Cache cache : {Cache::kF32, Cache::kBF16}) {
    for (const int32_t bs : {33, 48}) {
      Case in_place;
      in_place.name = "first_prompt_padded_bs" + std::to_string(bs) + "_bnsh" +
                      (cache == Cache::kBF16 ? "_bf16" : "");
      in_place.B = 2;
      in_place.S = 200;
      in_place.seqlens = {199, 120};
      in_place.block_size = bs;
      in_place.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
      in_place.cache = cache;
      v.push_back(in_place);
    }
  }
  // Decodes of 16 query heads per kv head: tiles taller than a decode's usual 8 rows, which
  // AMX's operations score and accumulate on tiles (and so read per kv head, a call per key
  // block), the others grouped over BSNH blocks and short BNSH ones.
  for (const int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
    Case tall;
    tall.name = std::string("decode_group16_bs48_bf16") +
                (layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "_bnsh" : "");
    tall.B = 6;
    tall.N = 32;
    tall.Nkv = 2;
    tall.seqlens = {1999, 700, 1500, 333, 2400, 999};
    tall.block_size = 48;
    tall.layout = layout;
    tall.cache = Cache::kBF16;
    v.push_back(tall);
  }
  Case long_chunk;
  long_chunk.name = "chunked_prompt_bs64_bnsh_bf16";
  long_chunk.S = 100;
  long_chunk.seqlens = {2999};
  long_chunk.block_size = 64;
  long_chunk.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  long_chunk.cache = Cache::kBF16;
  v.push_back(long_chunk);
  // Head size 128: key blocks of 1024 keys with a 2 MiB L2, so that AMX reads these blocks of 64
  // in place too (every call split on a whole chunk of 32 keys).
  Case aligned = long_chunk;
  aligned.name = "chunked_prompt_h128_bs64_bnsh_bf16";
  aligned.H = 128;
  aligned.seqlens = {1399};
  v.push_back(aligned);
  // int8 PER_TENSOR caches (the scope of cpu_arm.gqa.flash.dotprod_approx): a decode with split-KV
  // and a chunked prompt with rotary.
  for (size_t i : {2, 8}) {
    Case int8_tensor = v[i];
    int8_tensor.name += "_int8_per_tensor";
    int8_tensor.cache = Cache::kInt8PerTensor;
    v.push_back(int8_tensor);
  }
  // PER_BLOCK_32 caches: a decode with rotary over three sequences, a chunked prompt over blocks
  // of 33, split-KV over BNSH blocks, a padded first prompt over BNSH blocks of 48 (head size 128).
  const std::tuple<size_t, Cache, const char*> block_quant[] = {
      {2, Cache::kQ8_0Block, "decode_rotary_bs16_q8_0"},
      {11, Cache::kQ4_0Block, "chunked_prompt_rotary_bs33_q4_0"},
      {6, Cache::kQ4_0Block, "decode_split_kv_bs16_bnsh_q4_0"}};
  for (const auto& [i, cache, name] : block_quant) {
    Case block = v[i];
    block.name = name;
    block.cache = cache;
    block.rotary = block.rotary || i == 2;
    if (i == 6) block.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
    v.push_back(block);
  }
  Case block_prompt = v[7];
  block_prompt.name = "first_prompt_padded_bs48_bnsh_h128_q8_0";
  block_prompt.block_size = 48;
  block_prompt.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  block_prompt.H = 128;
  block_prompt.cache = Cache::kQ8_0Block;
  v.push_back(block_prompt);
#if defined(ATTNRT_TEST_REDUCED_MATRIX)
  // Emulated builds leave out the bfloat16 cases over blocks of 32 rows or more (prompts read in
  // place, long chunks, tall decodes: sized for AMX's tiles), which take most of the suite's time
  // there; the float32 prompts over such blocks stay.
  std::erase_if(v, [](const Case& c) { return c.cache == Cache::kBF16 && c.block_size >= 32; });
#endif
  return v;
}

class PagedEqualsContiguous : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

// Whether the contiguous and the paged kernel cut a run of `c` on `threads` threads into the same
// tasks. Prompts are tiled alike, and so are decodes over BNSH blocks whose runs of one kv head's
// rows are 64 KiB or longer. Other decodes are tiled by sequence, all kv heads in one task (a cache
// block is read once for all of them), where the contiguous kernel's tile is one (b, kv head);
// each splits the key range across threads (flash decoding) when its tiles are fewer than the
// threads, so the two agree with one thread, when neither splits, or with one kv head.
bool SameTasks(const Case& c, int32_t threads) {
  const bool by_sequence =
      c.layout == ATTNRT_PAGED_KV_LAYOUT_BSNH || c.block_size * RowBytes(c) < (64 << 10);
  if (c.S > 1 || !by_sequence || threads == 1 || c.Nkv == 1) return true;
  return c.B >= threads;  // then B * Nkv >= threads too: neither splits
}

// Paged and contiguous flash over the same tokens on `threads` threads: outputs bitwise equal when
// the kernels make the same tasks (the same algorithm), else equal up to the float32 rounding of a
// different split (1e-5, the conformance tolerance; bfloat16 outputs: plus one bfloat16 step, as
// the two float32 results may round to neighbours); pools and present caches always byte-equal.
void ExpectPagedEqualsContiguous(const std::string& isa, const Case& c, int32_t threads) {
  SCOPED_TRACE("threads " + std::to_string(threads));
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = PinnedRuntime(
      CpuKernel("gqa.flash." + isa) + "," + CpuKernel("paged_gqa.flash." + isa), threads);
  ASSERT_TRUE(runtime);
  PagedCall s = MakePagedCall(c, rng);

  OpPtr contiguous = ContiguousOp(runtime.get(), c);
  attnrt_plan* raw = nullptr;
  attnrt_status status = attnrt_op_plan(contiguous.get(), s.gqa.Inputs(), ATTNRT_GQA_NUM_INPUTS,
                                        s.gqa.Outputs(), 3, &raw);
  if (status == ATTNRT_ERROR_UNSUPPORTED && isa != "scalar") {
    GTEST_SKIP() << isa << " kernels decline on this CPU: " << attnrt_last_error_message();
  }
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
  PlanPtr plan(raw);
  ASSERT_EQ(PlanKernel(plan.get()), CpuKernel("gqa.flash." + isa));
  status = attnrt_plan_run(plan.get(), s.gqa.Inputs(), ATTNRT_GQA_NUM_INPUTS, s.gqa.Outputs(), 3,
                           nullptr, 0, nullptr);
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);

  OpPtr paged = PagedOp(runtime.get(), c);
  std::string kernel;
  status = RunPaged(paged.get(), s, &kernel);
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
  EXPECT_EQ(kernel, CpuKernel("paged_gqa.flash." + isa));

  const Tensor& expected = s.gqa[ATTNRT_GQA_OUTPUT_OUTPUT];
  const Tensor& actual = s.paged_out[0];
  const bool bitwise = SameTasks(c, threads);
  int64_t unwritten = 0, different = 0, beyond = 0;
  double max_error = 0.0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const float e = ValueT(expected, c, i);
    const float a = ValueT(actual, c, i);
    if (std::isnan(a)) ++unwritten;
    if (std::memcmp(&e, &a, sizeof(float)) != 0) ++different;
    const double error = std::fabs(static_cast<double>(e) - a);
    max_error = std::max(max_error, error);
    const double step = c.cache == Cache::kBF16 ? std::ldexp(std::fabs(e), -7) : 0.0;
    if (!(error <= 1e-5 + step)) ++beyond;
  }
  EXPECT_EQ(unwritten, 0);
  if (bitwise) {
    EXPECT_EQ(different, 0) << "of " << actual.numel() << " output elements";
  } else {
    EXPECT_EQ(beyond, 0) << different << " of " << actual.numel() << " elements differ, max error "
                         << max_error;
  }

  // Every token of every sequence, past and new, is the same bytes in the pools.
  int64_t rows_different = 0;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t kvh = 0; kvh < c.Nkv; ++kvh) {
      for (int64_t j = 0; j <= c.seqlens[static_cast<size_t>(b)]; ++j) {
        for (auto [pool, present] :
             {std::pair{ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_GQA_INPUT_PAST_KEY},
              std::pair{ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE, ATTNRT_GQA_INPUT_PAST_VALUE}}) {
          if (std::memcmp(s.PoolRow(pool, b, kvh, j), s.PresentRow(present, b, kvh, j),
                          static_cast<size_t>(RowBytes(c))) != 0) {
            ++rows_different;
          }
        }
      }
    }
  }
  EXPECT_EQ(rows_different, 0);
}

TEST_P(PagedEqualsContiguous, BitwiseForTheSameAlgorithm) {
  const auto& [isa, c] = GetParam();
  SCOPED_TRACE(SeedTrace());
  ExpectPagedEqualsContiguous(isa, c, 1);
  if (HasFatalFailure() || IsSkipped()) return;
  ExpectPagedEqualsContiguous(isa, c, c.threads);
}

std::string IsaCaseName(const ::testing::TestParamInfo<std::tuple<std::string, Case>>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
}

ATTNRT_TEST_INSTANTIATE_SUITE_P(ATTNRT_TEST_CPU_SUITE, PagedEqualsContiguous,
                                ::testing::Combine(::testing::ValuesIn(CpuFlashIsas()),
                                                   ::testing::ValuesIn(Cases())),
                                IsaCaseName);

#if defined(__aarch64__)
// The opt-in approximate kernel, on the int8 PER_TENSOR caches it serves (it skips where the CPU
// lacks FEAT_DotProd): paged and contiguous are the same approximation, so the same bits.
std::vector<Case> Int8PerTensorCases() {
  std::vector<Case> v;
  for (const Case& c : Cases()) {
    if (c.cache == Cache::kInt8PerTensor) v.push_back(c);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(CpuArmApprox, PagedEqualsContiguous,
                         ::testing::Combine(::testing::Values("dotprod_approx"),
                                            ::testing::ValuesIn(Int8PerTensorCases())),
                         IsaCaseName);
#endif

// ---- against the float64 reference --------------------------------------------------------------

TEST(PagedGqa, MatchesTheFloat64Reference) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  for (const Case& c : Cases()) {
    if (c.cache != Cache::kF32) continue;  // the bfloat16 ones: gqa_dtype_conformance_test
    SCOPED_TRACE(c.name);
    PagedCall s = MakePagedCall(c, rng);
    OpPtr paged = PagedOp(runtime.get(), c);
    const attnrt_status status = RunPaged(paged.get(), s);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);

    GqaRefProblem p;
    p.batch_size = c.B;
    p.sequence_length = c.S;
    p.kv_sequence_length = c.S;
    p.num_heads = c.N;
    p.kv_num_heads = c.Nkv;
    p.head_size = c.H;
    p.has_past = true;
    p.past_length = s.capacity;
    p.has_present = true;
    p.present_length = s.capacity;
    p.present_shares_past = true;
    p.total_sequence_length = static_cast<int32_t>(TotalLength(c));
    p.seqlens_k = c.seqlens;
    p.local_window_size = c.window;
    p.do_rotary = c.rotary ? 1 : 0;
    p.flash_padded_window = true;
    GqaRefInputs in;
    in.query = s.gqa[ATTNRT_GQA_INPUT_QUERY].f32();
    in.key = s.gqa[ATTNRT_GQA_INPUT_KEY].f32();
    in.value = s.gqa[ATTNRT_GQA_INPUT_VALUE].f32();
    in.past_key = s.past_key_before.f32();
    in.past_value = s.past_value_before.f32();
    if (c.rotary) {
      p.rotary_cache_length = s.gqa[ATTNRT_GQA_INPUT_COS_CACHE].shape()[0];
      p.rotary_half_dim = c.H / 2;
      in.cos_cache = s.gqa[ATTNRT_GQA_INPUT_COS_CACHE].f32();
      in.sin_cache = s.gqa[ATTNRT_GQA_INPUT_SIN_CACHE].f32();
    }
    if (c.bias) {
      p.bias_batch = c.B;
      p.bias_heads = c.N;
      in.attention_bias = s.gqa[ATTNRT_GQA_INPUT_ATTENTION_BIAS].f32();
    }
    const GqaRefOutputs ref = ComputeGqaReference(p, in);
    double worst = 0.0;
    for (int64_t i = 0; i < s.paged_out[0].numel(); ++i) {
      worst =
          std::max(worst, std::abs(s.paged_out[0].f32()[i] - ref.output[static_cast<size_t>(i)]));
    }
    EXPECT_LE(worst, 1e-5);
  }
}

// ---- fork then divergent appends through the block pool ----------------------------------------

TEST(PagedGqa, ForkThenDivergentAppendsMatchContiguousCaches) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  Case c;
  c.block_size = 4;
  c.N = 4;
  c.Nkv = 2;
  c.H = 32;
  c.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t prompt = 13, steps = 6, slots = 8, num_blocks = 12;
  const int64_t row_bytes = RowBytes(c);

  attnrt_block_pool_options options{sizeof(attnrt_block_pool_options), num_blocks, 4};
  attnrt_block_pool* raw_pool = nullptr;
  ASSERT_EQ(attnrt_block_pool_create(&options, &raw_pool), ATTNRT_OK);
  std::unique_ptr<attnrt_block_pool, void (*)(attnrt_block_pool*)> pool(raw_pool,
                                                                        attnrt_block_pool_destroy);
  Tensor key_pool(kF32, {num_blocks, c.Nkv, c.block_size, c.H});  // BNSH
  Tensor value_pool(kF32, {num_blocks, c.Nkv, c.block_size, c.H});
  key_pool.Fill(kNaN);
  value_pool.Fill(kNaN);
  OpPtr paged = PagedOp(runtime.get(), c);
  OpPtr contiguous = ContiguousOp(runtime.get(), c);

  // Runs the paged op on `sequences`, whose new tokens are already appended to the pool.
  const auto run_paged = [&](const std::vector<int64_t>& sequences, Tensor& q, Tensor& k, Tensor& v,
                             Tensor& out) {
    const auto B = static_cast<int64_t>(sequences.size());
    std::vector<int32_t> table(static_cast<size_t>(B * slots));
    std::vector<int32_t> seqlens(static_cast<size_t>(B));
    ASSERT_EQ(attnrt_block_pool_block_table(pool.get(), sequences.data(), sequences.size(), slots,
                                            table.data(), seqlens.data()),
              ATTNRT_OK)
        << attnrt_last_error_message();
    const int32_t T = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
    Tensor seqlens_t = I32(seqlens, {B});
    Tensor total = I32({T}, {1});
    Tensor table_t = I32(table, {B, slots});
    std::vector<const attnrt_tensor*> in(ATTNRT_PAGED_GQA_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = q.get();
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = k.get();
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = v.get();
    in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = key_pool.get();
    in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = value_pool.get();
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = seqlens_t.get();
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = total.get();
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = table_t.get();
    const attnrt_tensor* outs[1] = {out.get()};
    attnrt_plan* raw = nullptr;
    attnrt_status status = attnrt_op_plan(paged.get(), in.data(), in.size(), outs, 1, &raw);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    PlanPtr plan(raw);
    status = attnrt_plan_run(plan.get(), in.data(), in.size(), outs, 1, nullptr, 0, nullptr);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
  };
  const auto append = [&](int64_t seq, int64_t n) -> int64_t {
    attnrt_block_copy copy{sizeof(attnrt_block_copy), -1, -1, 0};
    EXPECT_EQ(attnrt_block_pool_append(pool.get(), seq, n, &copy), ATTNRT_OK)
        << attnrt_last_error_message();
    // BNSH: rows [0, n) of each kv head.
    const size_t block_bytes = static_cast<size_t>(c.block_size * c.Nkv) * row_bytes;
    for (Tensor* t : {&key_pool, &value_pool}) {
      auto* base = static_cast<unsigned char*>(t->data());
      for (int64_t h = 0; h < c.Nkv && copy.num_tokens > 0; ++h) {
        const size_t head = static_cast<size_t>(h * c.block_size) * row_bytes;
        std::memcpy(base + copy.dst_block * block_bytes + head,
                    base + copy.src_block * block_bytes + head,
                    static_cast<size_t>(copy.num_tokens) * row_bytes);
      }
    }
    return copy.num_tokens;
  };

  // The shared prompt.
  int64_t a = -1, b = -1;
  ASSERT_EQ(attnrt_block_pool_add_sequence(pool.get(), &a), ATTNRT_OK);
  append(a, prompt);
  Tensor q = F32({1, prompt, c.N * c.H}), k = F32({1, prompt, c.Nkv * c.H}),
         v = F32({1, prompt, c.Nkv * c.H}), out = F32({1, prompt, c.N * c.H});
  q.FillNormal(rng);
  k.FillNormal(rng);
  v.FillNormal(rng);
  ASSERT_NO_FATAL_FAILURE(run_paged({a}, q, k, v, out));
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), a, &b), ATTNRT_OK);

  // Contiguous caches of both sequences, seeded with the prompt rows from the pool.
  const int64_t P = slots * c.block_size;
  Tensor past_k(kF32, {2, c.Nkv, P, c.H}), past_v(kF32, {2, c.Nkv, P, c.H});
  past_k.Fill(kNaN);
  past_v.Fill(kNaN);
  {
    std::vector<int32_t> row(static_cast<size_t>(slots));
    ASSERT_EQ(attnrt_block_pool_block_table(pool.get(), &a, 1, slots, row.data(), nullptr),
              ATTNRT_OK);
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t h = 0; h < c.Nkv; ++h) {
        for (int64_t j = 0; j < prompt; ++j) {
          const int64_t pool_row =
              (row[static_cast<size_t>(j / c.block_size)] * c.Nkv + h) * c.block_size +
              j % c.block_size;
          const int64_t cont_row = (s * c.Nkv + h) * P + j;
          std::memcpy(past_k.f32() + cont_row * c.H, key_pool.f32() + pool_row * c.H,
                      static_cast<size_t>(row_bytes));
          std::memcpy(past_v.f32() + cont_row * c.H, value_pool.f32() + pool_row * c.H,
                      static_cast<size_t>(row_bytes));
        }
      }
    }
  }

  int64_t copies = 0;
  for (int64_t step = 0; step < steps; ++step) {
    copies += append(a, 1);
    copies += append(b, 1);
    Tensor dq = F32({2, 1, c.N * c.H}), dk = F32({2, 1, c.Nkv * c.H}),
           dv = F32({2, 1, c.Nkv * c.H}), paged_out = F32({2, 1, c.N * c.H});
    dq.FillNormal(rng);
    dk.FillNormal(rng);
    dv.FillNormal(rng);
    paged_out.Fill(kNaN);
    ASSERT_NO_FATAL_FAILURE(run_paged({a, b}, dq, dk, dv, paged_out));

    GqaTensors g;
    g[ATTNRT_GQA_INPUT_QUERY] = dq;
    g[ATTNRT_GQA_INPUT_KEY] = dk;
    g[ATTNRT_GQA_INPUT_VALUE] = dv;
    g[ATTNRT_GQA_INPUT_PAST_KEY] = past_k;
    g[ATTNRT_GQA_INPUT_PAST_VALUE] = past_v;
    const int32_t len = static_cast<int32_t>(prompt + step);
    g[ATTNRT_GQA_INPUT_SEQLENS_K] = I32({len, len}, {2});
    g[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({len + 1}, {1});
    g[ATTNRT_GQA_OUTPUT_OUTPUT] = F32({2, 1, c.N * c.H});
    g[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(kNaN);
    g[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = past_k;
    g[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = past_v;
    PlanPtr plan = Plan(contiguous.get(), g);
    ASSERT_TRUE(plan);
    ASSERT_EQ(RunPlan(plan.get(), g), ATTNRT_OK);
    // Same kernel family (gqa.flash vs paged_gqa.flash, same ISA), same tokens: same bits.
    EXPECT_EQ(std::memcmp(paged_out.data(), g[ATTNRT_GQA_OUTPUT_OUTPUT].data(), paged_out.bytes()),
              0)
        << "step " << step;
  }
  // The first append of each forked sequence into the shared partial block copied it once
  // (a, while b still shared it); b then owned the original.
  EXPECT_EQ(copies, 1);
}

// ---- bad inputs ---------------------------------------------------------------------------------

struct Snapshot {
  std::vector<unsigned char> key, value, output;
};

Snapshot Take(PagedCall& s) {
  auto bytes = [](Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    return std::vector<unsigned char>(p, p + t.bytes());
  };
  return {bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]),
          bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]), bytes(s.paged_out[0])};
}

TEST(PagedGqa, BadInputsAreRejectedBeforeAnythingIsWritten) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  Case c;
  c.B = 2;
  c.seqlens = {40, 20};
  c.block_size = 16;
  OpPtr op = PagedOp(runtime.get(), c);

  struct Bad {
    std::string name;
    void (*change)(PagedCall&);
    attnrt_status status;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {"unallocated slot", [](PagedCall& s) { s.table[static_cast<size_t>(s.slots + 1)] = -1; },
       ATTNRT_ERROR_INVALID_ARGUMENT,
       "block_table[1][1] is -1 (unallocated), but seqlens_k[1] = 20 needs blocks [0, 2) of "
       "block_size 16"},
      {"block id out of range",
       [](PagedCall& s) { s.table[2] = static_cast<int32_t>(s.num_blocks); },
       ATTNRT_ERROR_INVALID_ARGUMENT, "is out of range [0, "},
      {"negative block id", [](PagedCall& s) { s.table[0] = -5; }, ATTNRT_ERROR_INVALID_ARGUMENT,
       "block_table[0][0] = -5 is out of range"},
      {"block written by two batches",
       [](PagedCall& s) { s.table[static_cast<size_t>(s.slots + 1)] = s.table[2]; },
       ATTNRT_ERROR_INVALID_ARGUMENT, "a block being written must belong to one sequence"},
      {"written block named twice in one sequence", [](PagedCall& s) { s.table[2] = s.table[0]; },
       ATTNRT_ERROR_INVALID_ARGUMENT, "block_table[0][2] = "},
      {"table too short",
       [](PagedCall& s) {
         s.gqa[ATTNRT_GQA_INPUT_SEQLENS_K].i32()[0] = static_cast<int32_t>(s.capacity);
         s.gqa[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH].i32()[0] = static_cast<int32_t>(s.capacity);
       },
       ATTNRT_ERROR_INVALID_ARGUMENT, "block_table: too short for seqlens_k[0]"},
      {"total beyond the table",
       [](PagedCall& s) {
         s.gqa[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH].i32()[0] =
             static_cast<int32_t>(s.capacity + 1);
       },
       ATTNRT_ERROR_INVALID_ARGUMENT, "exceeds the block table's capacity"},
      {"output inside the key pool",
       [](PagedCall& s) {
         Tensor& pool = s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE];
         Tensor alias = pool.View({s.c.B, s.c.S, s.c.N * s.c.H});
         s.paged_out[0] = alias;
       },
       ATTNRT_ERROR_INVALID_ARGUMENT, "Output 'output' shares memory with key_cache"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    PagedCall s = MakePagedCall(c, rng);
    b.change(s);
    s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {c.B, s.slots});
    const Snapshot before = Take(s);
    const attnrt_status status = RunPaged(op.get(), s);
    EXPECT_EQ(status, b.status) << LastError(status);
    EXPECT_NE(std::string(attnrt_last_error_message()).find(b.message), std::string::npos)
        << attnrt_last_error_message();
    const Snapshot after = Take(s);
    EXPECT_TRUE(after.key == before.key && after.value == before.value &&
                after.output == before.output);
  }

  // Plan-time errors.
  struct PlanBad {
    std::string name;
    void (*change)(PagedCall&);
    std::string message;
  };
  const std::vector<PlanBad> plan_bad = {
      {"pool block size differs from the attribute",
       [](PagedCall& s) {
         s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] =
             s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE].View({s.num_blocks * 2, 8, 2, 64});
         s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
             s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE].View({s.num_blocks * 2, 8, 2, 64});
       },
       "key_cache: dimension 1 (block_size) must equal the block_size attribute 16, got 8"},
      {"value pool shape differs",
       [](PagedCall& s) {
         s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] =
             s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE].View({s.num_blocks - 1, 16, 2, 64});
       },
       "value_cache: expected the shape of key_cache"},
      {"head size differs from key",
       [](PagedCall& s) {
         for (int k : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
           s.paged_in[static_cast<size_t>(k)] =
               s.paged_in[static_cast<size_t>(k)].View({s.num_blocks * 2, 16, 2, 32});
         }
       },
       "key_cache"},
      {"block table of int64",
       [](PagedCall& s) {
         s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] =
             I64(std::vector<int64_t>(s.table.begin(), s.table.end()), {s.c.B, s.slots});
       },
       "block_table: expected dtype int32, got int64"},
      {"block table rows differ from the batch",
       [](PagedCall& s) {
         s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {s.c.B * s.slots, 1});
       },
       "block_table: dimension 0 must be batch_size 2, got"},
      {"missing block table",
       [](PagedCall& s) { s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = Tensor(); },
       "Input 'block_table' is required but absent"},
  };
  for (const PlanBad& b : plan_bad) {
    SCOPED_TRACE(b.name);
    PagedCall s = MakePagedCall(c, rng);
    b.change(s);
    const Snapshot before = Take(s);
    const attnrt_status status = RunPaged(op.get(), s);
    EXPECT_EQ(status, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(status);
    EXPECT_NE(std::string(attnrt_last_error_message()).find(b.message), std::string::npos)
        << attnrt_last_error_message();
    const Snapshot after = Take(s);
    EXPECT_TRUE(after.key == before.key && after.output == before.output);
  }
}

// Only a block this step writes rows into, named by another needed slot, is a conflict: slots past
// a batch's needed ones are never read, and a shared-KV step (kv_sequence_length 0) writes nothing,
// so forked sequences may name the same blocks.
TEST(PagedGqa, OnlyWrittenBlocksNamedByAnotherNeededSlotAreRejected) {
  SCOPED_TRACE(SeedTrace());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  Case c;
  c.B = 2;
  c.seqlens = {40, 20};  // block_size 16: batch 0 needs slots [0, 3), batch 1 [0, 2)
  c.block_size = 16;
  OpPtr op = PagedOp(runtime.get(), c);

  {
    SCOPED_TRACE("an unused slot names a block another batch writes");
    std::mt19937_64 rng(TestSeed()), same_rng(TestSeed());
    PagedCall plain = MakePagedCall(c, rng);
    PagedCall s = MakePagedCall(c, same_rng);
    ASSERT_EQ(s.slots, 4);
    // Batch 0 writes token 40 into its slot 2; batch 1's slot 2 is past its needed ones.
    s.table[static_cast<size_t>(s.slots + 2)] = s.table[2];
    s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {c.B, s.slots});
    attnrt_status status = RunPaged(op.get(), plain);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    status = RunPaged(op.get(), s);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    EXPECT_EQ(
        std::memcmp(s.paged_out[0].data(), plain.paged_out[0].data(), plain.paged_out[0].bytes()),
        0);
  }
  {
    SCOPED_TRACE("shared KV: forked sequences name the same blocks");
    std::mt19937_64 rng(TestSeed());
    PagedCall s = MakePagedCall(c, rng);
    // Batch 1 (21 tokens) is a fork of batch 0's first 21 tokens: it names batch 0's blocks,
    // its last one partly filled.
    s.table[static_cast<size_t>(s.slots)] = s.table[0];
    s.table[static_cast<size_t>(s.slots + 1)] = s.table[1];
    s.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {c.B, s.slots});
    for (int k : {ATTNRT_PAGED_GQA_INPUT_KEY, ATTNRT_PAGED_GQA_INPUT_VALUE}) {
      s.paged_in[static_cast<size_t>(k)] = F32({c.B, 0, c.Nkv * c.H});
    }
    for (int k : {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE, ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE}) {
      s.paged_in[static_cast<size_t>(k)].FillNormal(rng);
    }
    const Snapshot before = Take(s);
    const attnrt_status status = RunPaged(op.get(), s);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    const Snapshot after = Take(s);
    EXPECT_TRUE(after.key == before.key && after.value == before.value);
    int64_t unwritten = 0;
    for (int64_t i = 0; i < s.paged_out[0].numel(); ++i) {
      if (std::isnan(s.paged_out[0].f32()[i])) ++unwritten;
    }
    EXPECT_EQ(unwritten, 0);
    // The same table is rejected when the step writes: batch 1's new token 20 goes into the
    // block batch 0 reads in its slot 1.
    PagedCall w = MakePagedCall(c, rng);
    w.table[static_cast<size_t>(w.slots)] = w.table[0];
    w.table[static_cast<size_t>(w.slots + 1)] = w.table[1];
    w.paged_in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(w.table, {c.B, w.slots});
    const attnrt_status rejected = RunPaged(op.get(), w);
    EXPECT_EQ(rejected, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(rejected);
    EXPECT_NE(std::string(attnrt_last_error_message())
                  .find("block_table[1][1] = " + std::to_string(w.table[1]) +
                        " is written by this step and also named by block_table[0][1]"),
              std::string::npos)
        << attnrt_last_error_message();
  }
}

TEST(PagedGqa, AttributesAreValidated) {
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(8, 2);
  attnrt_op* op = nullptr;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("block_size must be in [1, 1024], got 0"),
            std::string::npos);
  a.block_size = 16;
  a.gqa.local_window_size = 8;
  a.gqa.sliding_window_cache = 1;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message())
                .find("gqa.sliding_window_cache must be 0 with a paged KV cache"),
            std::string::npos);
  a.gqa.sliding_window_cache = 0;
  a.gqa.num_heads = 7;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("num_heads must be a multiple"),
            std::string::npos);
  // A hand-filled struct whose nested gqa member was left zeroed: the message names the member.
  a.gqa.num_heads = 8;
  a.gqa.struct_size = 0;
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op),
            ATTNRT_ERROR_ABI_MISMATCH);
  EXPECT_NE(std::string(attnrt_last_error_message()).find("attnrt_paged_gqa_attributes.gqa: "),
            std::string::npos)
      << attnrt_last_error_message();
  EXPECT_EQ(op, nullptr);
  a.gqa.struct_size = ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE;
  a.struct_size = sizeof(size_t);
  EXPECT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &a, &op),
            ATTNRT_ERROR_ABI_MISMATCH);
  EXPECT_EQ(op, nullptr);
  EXPECT_STREQ(attnrt_op_kind_name(ATTNRT_OP_PAGED_GQA), "paged_gqa");
  EXPECT_STREQ(attnrt_op_input_name(ATTNRT_OP_PAGED_GQA, ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE),
               "block_table");
  EXPECT_STREQ(attnrt_op_output_name(ATTNRT_OP_PAGED_GQA, ATTNRT_PAGED_GQA_OUTPUT_OUTPUT_QK),
               "output_qk");
  EXPECT_EQ(attnrt_op_input_name(ATTNRT_OP_PAGED_GQA, ATTNRT_PAGED_GQA_NUM_INPUTS), nullptr);
}

}  // namespace
}  // namespace attnrt_test
