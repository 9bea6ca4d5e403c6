// Paged GroupQueryAttention with the paged naive kernels of the CPU plugin
// (<plugin>.paged_gqa.naive.<isa>, cpu_x86 or cpu_arm), black-box:
//  - bitwise equality with GroupQueryAttention over a contiguous cache holding the same tokens,
//    same algorithm (paged_gqa.naive.<isa> vs gqa.naive.<isa>), outputs and output_qk, for what
//    the paged flash kernels decline (softcap, smooth_softmax, head_sink, qk_output 1 and 2,
//    float16 and bfloat16 caches, int4/int8/float8 e4m3fn/float8 e5m2 caches with softcap), both
//    block layouts, block sizes 1, 7, 16, 33, 256 and 1024, blocks in random order, decode, prompts
//    and a ragged batch; the new rows in the pools equal the present rows byte for byte;
//  - one case against the float64 reference of tests/common;
//  - the runtime's own choice: paged flash where it accepts, paged naive otherwise, with reasons;
//  - a workspace smaller than the plan's: an error, pools and outputs untouched.
// Fresh N(0,1) data from a printed seed; outputs poisoned with NaN, and so are the unused pool
// rows of float caches, so a read of a row the table does not name shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "cpu_isas.h"

namespace attnrt_test {
namespace {

constexpr attnrt_dtype kF16Dtype = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16Dtype = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kE4M3 = ATTNRT_DTYPE_FLOAT8_E4M3FN;
constexpr attnrt_dtype kE5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;

// T, the element type of query, key, value, the float caches and the outputs.
enum class Type { kF32, kF16, kBF16 };
// The cache: T itself, or quantized.
enum class Quant {
  kNone,
  kInt8PerChannel,
  kInt4PerTensor,
  kE4M3PerTensor,
  kE5M2PerTensor,
  kE5M2PerChannel
};
bool IsE5M2(Quant q) { return q == Quant::kE5M2PerTensor || q == Quant::kE5M2PerChannel; }
bool PerChannel(Quant q) { return q == Quant::kInt8PerChannel || q == Quant::kE5M2PerChannel; }

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 8, Nkv = 2, H = 64;
  std::vector<int32_t> seqlens;  // T_b - 1
  int32_t block_size = 16;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Type type = Type::kF32;
  Quant quant = Quant::kNone;
  float softcap = 0.0f;
  int32_t smooth_softmax = -1;
  bool head_sink = false;
  int32_t qk_output = ATTNRT_GQA_QK_OUTPUT_NONE;
  bool rotary = false;
  int32_t window = -1;
  bool bias = false;
  int32_t threads = 3;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

int64_t TotalLength(const Case& c) {
  return *std::max_element(c.seqlens.begin(), c.seqlens.end()) + 1;
}
bool FirstPrompt(const Case& c) { return c.S == TotalLength(c); }
size_t TypeBytes(Type t) { return t == Type::kF32 ? 4 : 2; }
attnrt_dtype Dtype(Type t) {
  return t == Type::kF32 ? kF32 : t == Type::kF16 ? kF16Dtype : kBF16Dtype;
}
int64_t RowBytes(const Case& c) {
  switch (c.quant) {
    case Quant::kNone:
      return c.H * static_cast<int64_t>(TypeBytes(c.type));
    case Quant::kInt8PerChannel:
    case Quant::kE4M3PerTensor:
    case Quant::kE5M2PerTensor:
    case Quant::kE5M2PerChannel:
      return c.H;
    case Quant::kInt4PerTensor:
      break;
  }
  return c.H / 2;
}
int64_t LastDim(const Case& c) { return c.quant == Quant::kInt4PerTensor ? c.H / 2 : c.H; }
attnrt_dtype CacheDtype(const Case& c) {
  switch (c.quant) {
    case Quant::kNone:
      return Dtype(c.type);
    case Quant::kInt8PerChannel:
      return kI8;
    case Quant::kE4M3PerTensor:
      return kE4M3;
    case Quant::kE5M2PerTensor:
    case Quant::kE5M2PerChannel:
      return kE5M2;
    case Quant::kInt4PerTensor:
      break;
  }
  return kU8;
}

attnrt_gqa_attributes Attributes(const Case& c) {
  attnrt_gqa_attributes a = GqaAttributes(static_cast<int32_t>(c.N), static_cast<int32_t>(c.Nkv));
  a.do_rotary = c.rotary ? 1 : 0;
  a.local_window_size = c.window;
  a.softcap = c.softcap;
  a.smooth_softmax = c.smooth_softmax;
  a.qk_output = c.qk_output;
  if (c.quant == Quant::kInt8PerChannel) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    a.kv_cache_bit_width = 8;
  } else if (c.quant == Quant::kInt4PerTensor) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 4;
  } else if (c.quant == Quant::kE4M3PerTensor || c.quant == Quant::kE5M2PerTensor) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 8;
  } else if (c.quant == Quant::kE5M2PerChannel) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    a.kv_cache_bit_width = 8;
  }
  return a;
}

// Element i of a T tensor.
float Load(const Tensor& t, Type type, int64_t i) {
  auto& m = const_cast<Tensor&>(t);
  switch (type) {
    case Type::kF32:
      return m.f32()[i];
    case Type::kF16:
      return Float16Value(static_cast<const uint16_t*>(m.data())[i]);
    case Type::kBF16:
      break;
  }
  return BFloat16Value(static_cast<const uint16_t*>(m.data())[i]);
}

void Store(Tensor& t, Type type, int64_t i, float x) {
  switch (type) {
    case Type::kF32:
      t.f32()[i] = x;
      return;
    case Type::kF16:
      static_cast<uint16_t*>(t.data())[i] = Float16Bits(x);
      return;
    case Type::kBF16:
      static_cast<uint16_t*>(t.data())[i] = BFloat16Bits(x);
      return;
  }
}

// A T tensor of N(0,1) values (rounded to T), or of `value` for every element.
Tensor MakeT(Type type, std::vector<int64_t> shape, std::mt19937_64& rng) {
  Tensor t(Dtype(type), std::move(shape));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) Store(t, type, i, normal(rng));
  return t;
}
Tensor FilledT(Type type, std::vector<int64_t> shape, float value) {
  Tensor t(Dtype(type), std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) Store(t, type, i, value);
  return t;
}

// Fills a cache tensor: N(0,1) values of T, or random bytes for the quantized types (float8 e4m3fn
// codes 0x7F and 0xFF, its NaNs, avoided; float8 e5m2 codes 0x7C..0x7F and 0xFC..0xFF, its
// infinities and NaNs, avoided).
void FillCache(Tensor& t, const Case& c, std::mt19937_64& rng) {
  if (c.quant == Quant::kNone) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) Store(t, c.type, i, normal(rng));
    return;
  }
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i) {
    p[i] = static_cast<unsigned char>(rng());
    if (c.quant == Quant::kE4M3PerTensor && (p[i] & 0x7F) == 0x7F) p[i] &= 0x7E;
    if (IsE5M2(c.quant) && (p[i] & 0x7F) >= 0x7C) p[i] &= 0xFB;  // 0x7C..0x7F -> 0x78..0x7B
  }
}

// Elements of a T tensor that are NaN (the poison left unwritten).
int64_t CountNaN(const Tensor& t, Type type) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += std::isnan(Load(t, type, i)) ? 1 : 0;
  return n;
}

// One call in both forms: contiguous GQA (past = present, B x Nkv x P rows) and paged.
struct PagedCall {
  Case c;
  int64_t slots = 0;     // max_blocks_per_seq
  int64_t capacity = 0;  // slots * block_size = P
  int64_t num_blocks = 0;
  GqaTensors gqa;
  std::vector<Tensor> paged_in;   // ATTNRT_PAGED_GQA_NUM_INPUTS
  std::vector<Tensor> paged_out;  // output, output_qk
  std::vector<int32_t> table;
  std::vector<const attnrt_tensor*> in_ptrs, out_ptrs;
  Tensor past_key_before, past_value_before;

  size_t NumOutputs() const { return c.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE ? 2 : 1; }
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

PagedCall MakePagedCall(const Case& c, std::mt19937_64& rng) {
  PagedCall s;
  s.c = c;
  const int64_t T = TotalLength(c);
  int64_t needed_total = 0;
  for (int32_t v : c.seqlens) needed_total += (v + c.block_size) / c.block_size;
  s.slots = (T + c.block_size - 1) / c.block_size + 1;  // one spare slot of -1
  s.capacity = s.slots * c.block_size;
  s.num_blocks = needed_total + 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();

  GqaTensors& g = s.gqa;
  g[ATTNRT_GQA_INPUT_QUERY] = MakeT(c.type, {c.B, c.S, c.N * c.H}, rng);
  g[ATTNRT_GQA_INPUT_KEY] = MakeT(c.type, {c.B, c.S, c.Nkv * c.H}, rng);
  g[ATTNRT_GQA_INPUT_VALUE] = MakeT(c.type, {c.B, c.S, c.Nkv * c.H}, rng);
  g[ATTNRT_GQA_INPUT_PAST_KEY] = Tensor(CacheDtype(c), {c.B, c.Nkv, s.capacity, LastDim(c)});
  g[ATTNRT_GQA_INPUT_PAST_VALUE] = Tensor(CacheDtype(c), {c.B, c.Nkv, s.capacity, LastDim(c)});
  FillCache(g[ATTNRT_GQA_INPUT_PAST_KEY], c, rng);
  FillCache(g[ATTNRT_GQA_INPUT_PAST_VALUE], c, rng);
  g[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(c.seqlens, {c.B});
  g[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});
  if (c.rotary) {
    const int64_t M = s.capacity + 4;
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (auto i : {ATTNRT_GQA_INPUT_COS_CACHE, ATTNRT_GQA_INPUT_SIN_CACHE}) {
      g[i] = Tensor(Dtype(c.type), {M, c.H / 2});
      for (int64_t k = 0; k < g[i].numel(); ++k) Store(g[i], c.type, k, unit(rng));
    }
  }
  if (c.bias) g[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = MakeT(c.type, {c.B, c.N, c.S, T}, rng);
  if (c.head_sink) g[ATTNRT_GQA_INPUT_HEAD_SINK] = MakeT(c.type, {c.N}, rng);
  if (c.quant != Quant::kNone) {
    const int64_t count = PerChannel(c.quant) ? c.Nkv * c.H : 1;
    std::uniform_real_distribution<float> scale(0.01f, 0.05f);
    for (auto i : {ATTNRT_GQA_INPUT_K_SCALE, ATTNRT_GQA_INPUT_V_SCALE}) {
      g[i] = F32({count});
      for (int64_t k = 0; k < count; ++k) g[i].f32()[k] = scale(rng);
    }
  }
  g[ATTNRT_GQA_OUTPUT_OUTPUT] = FilledT(c.type, {c.B, c.S, c.N * c.H}, nan);
  g[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = g[ATTNRT_GQA_INPUT_PAST_KEY];  // shared buffer
  g[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = g[ATTNRT_GQA_INPUT_PAST_VALUE];
  if (c.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    g[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = FilledT(c.type, {c.B, c.N, c.S, T}, nan);
  }
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
    Tensor& pool = s.paged_in[static_cast<size_t>(k)];
    pool = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
               ? Tensor(CacheDtype(c), {s.num_blocks, c.Nkv, c.block_size, LastDim(c)})
               : Tensor(CacheDtype(c), {s.num_blocks, c.block_size, c.Nkv, LastDim(c)});
    if (c.quant == Quant::kNone) {
      for (int64_t i = 0; i < pool.numel(); ++i) Store(pool, c.type, i, nan);
    } else {
      FillCache(pool, c, rng);
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
  s.paged_out.push_back(FilledT(c.type, {c.B, c.S, c.N * c.H}, nan));
  if (c.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    s.paged_out.push_back(FilledT(c.type, {c.B, c.N, c.S, T}, nan));
  }
  return s;
}

RuntimePtr PinnedRuntime(const std::string& kernels, int32_t threads) {
  attnrt_runtime_options options = DefaultOptions();
  if (!kernels.empty()) options.kernel = kernels.c_str();
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

// Plans the paged call; returns the status and, on success, the plan.
attnrt_status PlanPaged(attnrt_op* op, PagedCall& s, PlanPtr* plan) {
  attnrt_plan* raw = nullptr;
  const attnrt_status status = attnrt_op_plan(op, s.PagedInputs(), ATTNRT_PAGED_GQA_NUM_INPUTS,
                                              s.PagedOutputs(), s.NumOutputs(), &raw);
  plan->reset(raw);
  return status;
}

attnrt_status RunPaged(attnrt_plan* plan, PagedCall& s, void* workspace = nullptr,
                       size_t workspace_size = 0) {
  return attnrt_plan_run(plan, s.PagedInputs(), ATTNRT_PAGED_GQA_NUM_INPUTS, s.PagedOutputs(),
                         s.NumOutputs(), workspace, workspace_size, nullptr);
}

// ---- bitwise equality with the contiguous naive kernel ------------------------------------------

std::vector<Case> Cases() {
  std::vector<Case> v;
  Case decode;  // a batch of three sequences of different lengths
  decode.B = 3;
  decode.seqlens = {700, 37, 260};
  {
    Case c = decode;
    c.name = "decode_softcap_bs16";
    c.softcap = 30.0f;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_smooth_softmax_bs7";
    c.smooth_softmax = 1;
    c.block_size = 7;
    v.push_back(c);
  }
  {
    Case c;  // a ragged first prompt: right padding beyond T_b of the shorter sequences
    c.name = "ragged_first_prompt_head_sink_bs16";
    c.B = 3;
    c.S = 70;
    c.seqlens = {69, 40, 5};
    c.head_sink = true;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "chunked_prompt_qk_before_softmax_bias_bs1";
    c.S = 19;
    c.seqlens = {90};
    c.block_size = 1;
    c.qk_output = ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX;
    c.softcap = 20.0f;
    c.bias = true;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_qk_after_softmax_window_bs256";
    c.block_size = 256;
    c.qk_output = ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX;
    c.window = 100;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_f16_cache_rotary_bs16";
    c.type = Type::kF16;
    c.rotary = true;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "chunked_prompt_bf16_cache_softcap_bias_bs7";
    c.S = 23;
    c.seqlens = {120};
    c.block_size = 7;
    c.type = Type::kBF16;
    c.softcap = 15.0f;
    c.bias = true;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_int8_per_channel_softcap_rotary_bs16";
    c.quant = Quant::kInt8PerChannel;
    c.softcap = 30.0f;
    c.rotary = true;
    v.push_back(c);
  }
  {
    Case c;
    c.name = "chunked_prompt_int4_per_tensor_softcap_bs33";
    c.S = 40;
    c.seqlens = {150};
    c.block_size = 33;
    c.quant = Quant::kInt4PerTensor;
    c.softcap = 30.0f;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_bf16_query_e4m3_cache_smooth_softmax_bs16";
    c.type = Type::kBF16;
    c.quant = Quant::kE4M3PerTensor;
    c.smooth_softmax = 1;
    v.push_back(c);
  }
  {
    Case c = decode;
    c.name = "decode_bf16_query_e5m2_cache_smooth_softmax_bs16";
    c.type = Type::kBF16;
    c.quant = Quant::kE5M2PerTensor;
    c.smooth_softmax = 1;
    v.push_back(c);
  }
  {
    Case c;  // quantize-on-write of rotated K rows into an e5m2 cache, per-channel scales
    c.name = "chunked_prompt_f16_query_e5m2_per_channel_softcap_rotary_bs7";
    c.S = 21;
    c.seqlens = {110};
    c.block_size = 7;
    c.type = Type::kF16;
    c.quant = Quant::kE5M2PerChannel;
    c.softcap = 20.0f;
    c.rotary = true;
    v.push_back(c);
  }
  {
    Case c;  // the largest block size: a sequence spans three blocks, another a part of one
    c.name = "decode_softcap_head_sink_bs1024";
    c.B = 2;
    c.seqlens = {2100, 37};
    c.block_size = ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE;
    c.softcap = 50.0f;
    c.head_sink = true;
    v.push_back(c);
  }
  {
    Case c;  // first prompt with a local window and qk_output over padded rows
    c.name = "ragged_first_prompt_f16_qk_before_softmax_window_bs16";
    c.B = 2;
    c.S = 33;
    c.seqlens = {32, 20};
    c.type = Type::kF16;
    c.qk_output = ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX;
    c.window = 8;
    v.push_back(c);
  }
  // The head-major (BNSH) block layout: block sizes 1, 7, 16, 33, 256 and 1024, float16,
  // bfloat16 and quantized caches, decode and prompts.
  const size_t count = v.size();
  for (size_t i = 0; i < count; ++i) {
    Case c = v[i];
    c.name += "_bnsh";
    c.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
    v.push_back(c);
  }
  return v;
}

// Float16/bfloat16 caches that the flash kernels take (no softcap, sinks, qk_output; decodes and
// prompts without a local window), at one thread, where paged_gqa.flash and gqa.flash hand the
// same key blocks to the same block operations in the same order.
std::vector<Case> FlashCases() {
  std::vector<Case> v;
  Case decode;
  decode.B = 3;
  decode.seqlens = {700, 37, 260};
  decode.threads = 1;
#if defined(ATTNRT_TEST_REDUCED_MATRIX)
  const std::vector<int32_t> block_sizes = {1,
                                            64};  // emulated builds: the smallest and a large one
#else
  const std::vector<int32_t> block_sizes = {1, 16, 64};
#endif
  for (int32_t block_size : block_sizes) {
    for (Type type : {Type::kF16, Type::kBF16}) {
      for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
        Case c = decode;
        c.type = type;
        c.block_size = block_size;
        c.layout = layout;
        c.rotary = block_size == 16;
        c.window = block_size == 64 ? 100 : -1;
        c.name = std::string("decode_") + (type == Type::kF16 ? "f16" : "bf16") + "_cache_" +
                 (layout == ATTNRT_PAGED_KV_LAYOUT_BSNH ? "bsnh" : "bnsh") + "_bs" +
                 std::to_string(block_size);
        v.push_back(c);
      }
    }
  }
  {
    Case c;
    c.name = "chunked_prompt_f16_cache_bias_bs16";
    c.type = Type::kF16;
    c.S = 40;
    c.seqlens = {300};
    c.bias = true;
    c.threads = 1;
    v.push_back(c);
  }
  {
    Case c;  // right padding without a window: both window rules agree
    c.name = "ragged_first_prompt_bf16_cache_bs16";
    c.type = Type::kBF16;
    c.B = 2;
    c.S = 50;
    c.seqlens = {49, 12};
    c.threads = 1;
    v.push_back(c);
  }
  return v;
}

// Plans `c` on gqa.<algorithm>.<isa> and paged_gqa.<algorithm>.<isa> and checks that the outputs
// (and output_qk) are the same bits and that the pools hold the present rows.
void ExpectPagedEqualsContiguous(const std::string& algorithm, const std::string& isa,
                                 const Case& c) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  const std::string contiguous_kernel = CpuKernel("gqa." + algorithm + "." + isa);
  const std::string paged_kernel = CpuKernel("paged_gqa." + algorithm + "." + isa);
  RuntimePtr runtime = PinnedRuntime(contiguous_kernel + "," + paged_kernel, c.threads);
  ASSERT_TRUE(runtime);
  PagedCall s = MakePagedCall(c, rng);

  OpPtr contiguous = ContiguousOp(runtime.get(), c);
  attnrt_plan* raw = nullptr;
  attnrt_status status = attnrt_op_plan(contiguous.get(), s.gqa.Inputs(), ATTNRT_GQA_NUM_INPUTS,
                                        s.gqa.Outputs(), ATTNRT_GQA_NUM_OUTPUTS, &raw);
  if (status == ATTNRT_ERROR_UNSUPPORTED && isa != "scalar") {
    GTEST_SKIP() << isa << " kernels decline on this CPU: " << attnrt_last_error_message();
  }
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
  PlanPtr plan(raw);
  ASSERT_EQ(PlanKernel(plan.get()), contiguous_kernel);
  status = attnrt_plan_run(plan.get(), s.gqa.Inputs(), ATTNRT_GQA_NUM_INPUTS, s.gqa.Outputs(),
                           ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr);
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);

  OpPtr paged = PagedOp(runtime.get(), c);
  PlanPtr paged_plan;
  status = PlanPaged(paged.get(), s, &paged_plan);
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
  EXPECT_EQ(PlanKernel(paged_plan.get()), paged_kernel);
  status = RunPaged(paged_plan.get(), s);
  ASSERT_EQ(status, ATTNRT_OK) << LastError(status);

  const std::pair<attnrt_gqa_output, size_t> outputs[] = {{ATTNRT_GQA_OUTPUT_OUTPUT, 0},
                                                          {ATTNRT_GQA_OUTPUT_OUTPUT_QK, 1}};
  for (const auto& [contiguous_index, paged_index] : outputs) {
    if (paged_index >= s.NumOutputs()) continue;
    SCOPED_TRACE(paged_index == 0 ? "output" : "output_qk");
    const Tensor& expected = s.gqa[contiguous_index];
    Tensor& actual = s.paged_out[paged_index];
    EXPECT_EQ(CountNaN(actual, c.type), 0);
    ASSERT_EQ(actual.bytes(), expected.bytes());
    int64_t different = 0;
    const size_t bytes = TypeBytes(c.type);
    for (int64_t i = 0; i < actual.numel(); ++i) {
      different +=
          std::memcmp(
              static_cast<const unsigned char*>(actual.data()) + i * bytes,
              static_cast<const unsigned char*>(const_cast<Tensor&>(expected).data()) + i * bytes,
              bytes) != 0
              ? 1
              : 0;
    }
    EXPECT_EQ(different, 0) << "of " << actual.numel() << " elements";
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

// "<isa>_<case>" test names for the (isa, case) suites below.
std::string IsaCaseName(const ::testing::TestParamInfo<std::tuple<std::string, Case>>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
}

class PagedNaiveEqualsContiguous : public ::testing::TestWithParam<std::tuple<std::string, Case>> {
};

TEST_P(PagedNaiveEqualsContiguous, Bitwise) {
  const auto& [isa, c] = GetParam();
  ExpectPagedEqualsContiguous("naive", isa, c);
}

ATTNRT_TEST_INSTANTIATE_SUITE_P(ATTNRT_TEST_CPU_SUITE, PagedNaiveEqualsContiguous,
                                ::testing::Combine(::testing::ValuesIn(CpuNaiveIsas()),
                                                   ::testing::ValuesIn(Cases())),
                                IsaCaseName);

class PagedFlashEqualsContiguousNarrowCache
    : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(PagedFlashEqualsContiguousNarrowCache, Bitwise) {
  const auto& [isa, c] = GetParam();
  ExpectPagedEqualsContiguous("flash", isa, c);
}

ATTNRT_TEST_INSTANTIATE_SUITE_P(ATTNRT_TEST_CPU_SUITE, PagedFlashEqualsContiguousNarrowCache,
                                ::testing::Combine(::testing::ValuesIn(CpuNaiveIsas()),
                                                   ::testing::ValuesIn(FlashCases())),
                                IsaCaseName);

// ---- against the float64 reference --------------------------------------------------------------

// softcap, head_sink, attention_bias, rotary and output_qk (probabilities), float32, a chunked
// prompt, both block layouts, through the runtime's own choice (a paged naive kernel).
TEST(PagedGqaNaive, MatchesTheFloat64Reference) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  for (int32_t layout : {ATTNRT_PAGED_KV_LAYOUT_BSNH, ATTNRT_PAGED_KV_LAYOUT_BNSH}) {
    Case c;
    c.name = "reference";
    c.S = 9;
    c.seqlens = {80};
    c.block_size = 7;
    c.layout = layout;
    c.softcap = 5.0f;
    c.head_sink = true;
    c.bias = true;
    c.rotary = true;
    c.qk_output = ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX;
    SCOPED_TRACE(layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? "BNSH" : "BSNH");
    PagedCall s = MakePagedCall(c, rng);
    OpPtr paged = PagedOp(runtime.get(), c);
    PlanPtr plan;
    attnrt_status status = PlanPaged(paged.get(), s, &plan);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    EXPECT_NE(PlanKernel(plan.get()).find(CpuKernel("paged_gqa.naive.")), std::string::npos);
    status = RunPaged(plan.get(), s);
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
    p.softcap = c.softcap;
    p.qk_output = c.qk_output;
    p.has_head_sink = true;
    p.do_rotary = 1;
    p.rotary_cache_length = s.gqa[ATTNRT_GQA_INPUT_COS_CACHE].shape()[0];
    p.rotary_half_dim = c.H / 2;
    p.bias_batch = c.B;
    p.bias_heads = c.N;
    GqaRefInputs in;
    in.query = s.gqa[ATTNRT_GQA_INPUT_QUERY].f32();
    in.key = s.gqa[ATTNRT_GQA_INPUT_KEY].f32();
    in.value = s.gqa[ATTNRT_GQA_INPUT_VALUE].f32();
    in.past_key = s.past_key_before.f32();
    in.past_value = s.past_value_before.f32();
    in.cos_cache = s.gqa[ATTNRT_GQA_INPUT_COS_CACHE].f32();
    in.sin_cache = s.gqa[ATTNRT_GQA_INPUT_SIN_CACHE].f32();
    in.attention_bias = s.gqa[ATTNRT_GQA_INPUT_ATTENTION_BIAS].f32();
    in.head_sink = s.gqa[ATTNRT_GQA_INPUT_HEAD_SINK].f32();
    const GqaRefOutputs ref = ComputeGqaReference(p, in);
    double worst = 0.0, worst_qk = 0.0;
    for (int64_t i = 0; i < s.paged_out[0].numel(); ++i) {
      worst =
          std::max(worst, std::abs(s.paged_out[0].f32()[i] - ref.output[static_cast<size_t>(i)]));
    }
    ASSERT_EQ(static_cast<size_t>(s.paged_out[1].numel()), ref.output_qk.size());
    for (int64_t i = 0; i < s.paged_out[1].numel(); ++i) {
      worst_qk = std::max(
          worst_qk, std::abs(s.paged_out[1].f32()[i] - ref.output_qk[static_cast<size_t>(i)]));
    }
    EXPECT_LE(worst, 1e-5);
    EXPECT_LE(worst_qk, 1e-6);
  }
}

// ---- the runtime's choice -----------------------------------------------------------------------

TEST(PagedGqaNaive, RuntimeChoosesPagedFlashWhereItAcceptsAndPagedNaiveOtherwise) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  Case plain;
  plain.B = 2;
  plain.seqlens = {50, 20};
  struct Choice {
    std::string name;
    void (*change)(Case&);
    std::string family;  // expected prefix of the chosen kernel
    std::string flash_reason;
  };
  const std::vector<Choice> choices = {
      {"plain decode", [](Case&) {}, CpuKernel("paged_gqa.flash."), ""},
      {"softcap", [](Case& c) { c.softcap = 30.0f; }, CpuKernel("paged_gqa.naive."), "softcap"},
      {"smooth_softmax", [](Case& c) { c.smooth_softmax = 1; }, CpuKernel("paged_gqa.naive."),
       "smooth_softmax"},
      {"head_sink", [](Case& c) { c.head_sink = true; }, CpuKernel("paged_gqa.naive."),
       "head_sink"},
      {"qk_output", [](Case& c) { c.qk_output = ATTNRT_GQA_QK_OUTPUT_BEFORE_SOFTMAX; },
       CpuKernel("paged_gqa.naive."), "qk_output"},
      {"float16 cache", [](Case& c) { c.type = Type::kF16; }, CpuKernel("paged_gqa.flash."), ""},
      {"bfloat16 cache", [](Case& c) { c.type = Type::kBF16; }, CpuKernel("paged_gqa.flash."), ""},
      // A right-padded first prompt with a local window: ONNX Runtime's naive window rule for the
      // padded rows, hence its naive path.
      {"float16 prompt with a local window",
       [](Case& c) {
         c.type = Type::kF16;
         c.S = 51;
         c.window = 8;
       },
       CpuKernel("paged_gqa.naive."), "local_window_size=8 in a prompt of 51 tokens"},
  };
  for (const Choice& choice : choices) {
    SCOPED_TRACE(choice.name);
    Case c = plain;
    choice.change(c);
    PagedCall s = MakePagedCall(c, rng);
    OpPtr op = PagedOp(runtime.get(), c);
    PlanPtr plan;
    attnrt_status status = PlanPaged(op.get(), s, &plan);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    EXPECT_EQ(PlanKernel(plan.get()).rfind(choice.family, 0), 0u) << PlanKernel(plan.get());
    status = RunPaged(plan.get(), s);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    EXPECT_EQ(CountNaN(s.paged_out[0], c.type), 0);

    // Every paged kernel is explained; a declining paged flash kernel says why.
    attnrt_explanation* raw = nullptr;
    status = attnrt_op_explain(op.get(), s.PagedInputs(), ATTNRT_PAGED_GQA_NUM_INPUTS,
                               s.PagedOutputs(), s.NumOutputs(), &raw);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    ExplanationPtr explanation(raw);
    size_t count = 0;
    ASSERT_EQ(attnrt_explanation_count(explanation.get(), &count), ATTNRT_OK);
    int naive_accepting = 0;
    for (size_t i = 0; i < count; ++i) {
      attnrt_candidate cand;
      std::memset(&cand, 0, sizeof(cand));
      cand.struct_size = sizeof(cand);
      ASSERT_EQ(attnrt_explanation_candidate(explanation.get(), i, &cand), ATTNRT_OK);
      const std::string kernel = cand.kernel != nullptr ? cand.kernel : "";
      const std::string reason = cand.reason != nullptr ? cand.reason : "";
      const bool accepts =
          cand.status == ATTNRT_CANDIDATE_SELECTED || cand.status == ATTNRT_CANDIDATE_ELIGIBLE;
      if (kernel == CpuKernel("paged_gqa.naive.scalar")) {
        EXPECT_TRUE(accepts) << attnrt_candidate_status_name(cand.status) << ": " << reason;
        naive_accepting += accepts ? 1 : 0;
      }
      if (kernel == CpuKernel("paged_gqa.flash.scalar") && !choice.flash_reason.empty()) {
        EXPECT_EQ(cand.status, ATTNRT_CANDIDATE_DECLINED);
        EXPECT_NE(reason.find(choice.flash_reason), std::string::npos) << reason;
        EXPECT_NE(reason.find("paged_gqa.naive runs such problems"), std::string::npos) << reason;
      }
    }
    EXPECT_EQ(naive_accepting, 1);
  }
}

// ---- workspace
// ------------------------------------------------------------------------------------

TEST(PagedGqaNaive, TooSmallWorkspaceIsRejectedBeforeAnythingIsWritten) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  for (const std::string& isa : CpuNaiveIsas()) {
    SCOPED_TRACE(isa);
    RuntimePtr runtime = PinnedRuntime(CpuKernel("paged_gqa.naive." + isa), 2);
    ASSERT_TRUE(runtime);
    Case c;
    c.B = 2;
    c.seqlens = {70, 30};
    c.softcap = 30.0f;
    c.qk_output = ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX;
    PagedCall s = MakePagedCall(c, rng);
    OpPtr op = PagedOp(runtime.get(), c);
    PlanPtr plan;
    attnrt_status status = PlanPaged(op.get(), s, &plan);
    if (status == ATTNRT_ERROR_UNSUPPORTED && isa != "scalar") {
      std::printf("[ SKIPPED  ] %s: kernels decline on this CPU: %s\n", isa.c_str(),
                  attnrt_last_error_message());
      continue;  // the other ISAs still run
    }
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    attnrt_plan_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    ASSERT_EQ(attnrt_plan_get_info(plan.get(), &info), ATTNRT_OK);
    ASSERT_GT(info.workspace_size, 0u);
    Tensor workspace(kU8, {static_cast<int64_t>(info.workspace_size)});

    const auto bytes = [](Tensor& t) {
      const auto* p = static_cast<const unsigned char*>(t.data());
      return std::vector<unsigned char>(p, p + t.bytes());
    };
    const auto key = bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]);
    const auto value = bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]);
    const auto out = bytes(s.paged_out[0]);
    const auto qk = bytes(s.paged_out[1]);
    status = RunPaged(plan.get(), s, workspace.data(), info.workspace_size - 1);
    EXPECT_EQ(status, ATTNRT_ERROR_INVALID_ARGUMENT) << LastError(status);
    EXPECT_NE(std::string(attnrt_last_error_message()).find("workspace_size: expected at least"),
              std::string::npos)
        << attnrt_last_error_message();
    EXPECT_TRUE(bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE]) == key);
    EXPECT_TRUE(bytes(s.paged_in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE]) == value);
    EXPECT_TRUE(bytes(s.paged_out[0]) == out);
    EXPECT_TRUE(bytes(s.paged_out[1]) == qk);

    // The workspace the plan asks for is enough.
    status = RunPaged(plan.get(), s, workspace.data(), info.workspace_size);
    ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
    EXPECT_EQ(CountNaN(s.paged_out[0], c.type), 0);
    EXPECT_EQ(CountNaN(s.paged_out[1], c.type), 0);
  }
}

}  // namespace
}  // namespace attnrt_test
