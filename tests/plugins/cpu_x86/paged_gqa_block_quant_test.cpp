// Paged GroupQueryAttention (attnrt/ops/paged_gqa.h) over block-quantized pools, k_quant_type =
// v_quant_type = PER_BLOCK_32 (ggml Q8_0 / Q4_0, ABI 1.7), on every paged kernel the CPU plugin
// registers and the runtime's own choice, with float32, float16 and bfloat16 queries: BSNH and BNSH
// pools, compact and as strided views of one cache tensor (vLLM's CPU layout
// [num_blocks, Nkv, block_size, 2 · row bytes], K the first half of each row, V the second);
// decode (split-KV and shared KV too), a chunked prompt with rotary and a right-padded first
// prompt; head sizes 32, 64, 128 and 256.
//
// Method (tests/common/dtype_reference.h, independent of the kernels): the past tokens are random
// blocks placed where the block table says; every other pool row has a NaN float16 d in each block
// (a read of a row the table does not name shows as NaN); the new K rows are rotated in float and
// rounded to T, then quantized by the test's own Q8_0/Q4_0 quantizer, and must land in the pools
// byte for byte at their tokens' rows (a first prompt's padding rows not stored), with no other
// pool byte changed; the output is compared with the float64 reference on the dequantized values
// (float32 1e-5; float16/bfloat16 0.5 ulp of T + 1e-5 relative). Seeds as in the other tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace {

using namespace block_quant;  // NOLINT(google-build-using-namespace)

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 8, Nkv = 2, H = 64;
  std::vector<int32_t> seqlens;  // T_b - 1
  int64_t block_size = 16;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  bool rotary = false;
  bool strided = false;    // both pools views of one [num_blocks, Nkv, block_size, 2 Hc] tensor
  bool shared_kv = false;  // key/value with kv_sequence_length 0: the pools hold every token
  int32_t threads = 4;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> v;
  Case decode;
  decode.name = "decode_bsnh_bs16";
  decode.B = 3;
  decode.seqlens = {100, 37, 64};
  v.push_back(decode);
  Case bnsh = decode;
  bnsh.name = "decode_bnsh_bs16_h128";
  bnsh.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  bnsh.H = 128;
  v.push_back(bnsh);
  Case chunk;
  chunk.name = "chunked_prompt_rotary_bsnh_bs7_h128";
  chunk.S = 19;
  chunk.seqlens = {90};
  chunk.block_size = 7;
  chunk.H = 128;
  chunk.rotary = true;
  v.push_back(chunk);
  Case prompt;
  prompt.name = "first_prompt_padded_bnsh_bs16_ratio4";
  prompt.B = 2;
  prompt.S = 20;
  prompt.seqlens = {19, 11};
  prompt.N = 4;
  prompt.Nkv = 1;
  prompt.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  v.push_back(prompt);
  Case split;  // one (b, kv head): the key range is split across the threads
  split.name = "decode_split_kv_bnsh_bs32_h256";
  split.N = 4;
  split.Nkv = 1;
  split.H = 256;
  split.seqlens = {700};
  split.block_size = 32;
  split.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  v.push_back(split);
  Case strided;
  strided.name = "decode_strided_vllm_cpu_bs16";
  strided.B = 2;
  strided.seqlens = {50, 17};
  strided.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  strided.strided = true;
  v.push_back(strided);
  Case strided_chunk;
  strided_chunk.name = "chunked_prompt_strided_vllm_cpu_bs8_h32";
  strided_chunk.S = 6;
  strided_chunk.seqlens = {29};
  strided_chunk.H = 32;
  strided_chunk.block_size = 8;
  strided_chunk.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  strided_chunk.strided = true;
  v.push_back(strided_chunk);
  Case shared_kv;
  shared_kv.name = "decode_shared_kv_bnsh_bs16";
  shared_kv.B = 2;
  shared_kv.seqlens = {44, 16};
  shared_kv.layout = ATTNRT_PAGED_KV_LAYOUT_BNSH;
  shared_kv.shared_kv = true;
  v.push_back(shared_kv);
  return v;
}

// One paged call: the pools are raw bytes described by descriptors of their own (so that they
// can be views with strides); everything else is a Tensor.
struct Built {
  Case c;
  int64_t T = 0, Hc = 0, slots = 0, num_blocks = 0, capacity = 0;
  std::vector<int32_t> table;
  std::vector<Tensor> in;  // ATTNRT_PAGED_GQA_NUM_INPUTS; the pools' entries stay empty
  Tensor output;
  std::vector<uint8_t> storage;  // the pools' memory (one buffer; two halves when compact)
  int64_t key_offset = 0, value_offset = 0;  // bytes
  std::vector<int64_t> pool_shape, pool_strides;
  attnrt_tensor key_desc{}, value_desc{};
  std::vector<uint8_t> expected_storage;  // the pools after the run
  std::vector<const attnrt_tensor*> in_ptrs;
  const attnrt_tensor* out_ptrs[1] = {nullptr};
  attnrt_paged_gqa_attributes attributes{};
  GqaRefProblem problem;
  std::vector<float> q, k, v, past_k, past_v;

  // Byte offset in storage of the pool row of token j of batch b, kv head h, in pool `which`
  // (0 key, 1 value).
  size_t RowOffset(int which, int64_t b, int64_t h, int64_t j) const {
    const int64_t x = table[static_cast<size_t>(b * slots + j / c.block_size)];
    const int64_t r = j % c.block_size;
    const bool bnsh = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
    const int64_t i1 = bnsh ? h : r, i2 = bnsh ? r : h;
    return static_cast<size_t>((which == 0 ? key_offset : value_offset) + x * pool_strides[0] +
                               i1 * pool_strides[1] + i2 * pool_strides[2]);
  }

  const attnrt_tensor* const* Inputs() {
    in_ptrs.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      if (i == ATTNRT_PAGED_GQA_INPUT_KEY_CACHE) {
        in_ptrs.push_back(&key_desc);
      } else if (i == ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE) {
        in_ptrs.push_back(&value_desc);
      } else {
        in_ptrs.push_back(in[i].empty() ? nullptr : in[i].get());
      }
    }
    return in_ptrs.data();
  }
  const attnrt_tensor* const* Outputs() {
    out_ptrs[0] = output.get();
    return out_ptrs;
  }
};

void Build(Built& s, const Case& c, const Dtypes& d, std::mt19937_64& rng) {
  s.c = c;
  const FloatFormat Tq = d.query;
  const attnrt_dtype dq = QueryDtype(Tq);
  const int64_t B = c.B, S = c.S, N = c.N, Nkv = c.Nkv, H = c.H, bs = c.block_size;
  s.T = *std::max_element(c.seqlens.begin(), c.seqlens.end()) + 1;
  const bool first_prompt = S == s.T;
  s.Hc = BlockRowBytes(d.cache, H);
  const int64_t Hc = s.Hc;
  int64_t needed_total = 0;
  for (int32_t v : c.seqlens) needed_total += (v + bs) / bs;
  s.slots = (s.T + bs - 1) / bs + 1;  // one spare slot of -1
  s.capacity = s.slots * bs;
  s.num_blocks = needed_total + 2;

  // Block table: blocks in random order, unused slots -1.
  std::vector<int32_t> ids(static_cast<size_t>(s.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.table.assign(static_cast<size_t>(B * s.slots), -1);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t needed = (c.seqlens[static_cast<size_t>(b)] + bs) / bs;
    for (int64_t i = 0; i < needed; ++i)
      s.table[static_cast<size_t>(b * s.slots + i)] = ids[next++];
  }

  // Pools: [num_blocks, d1, d2, Hc] compact, back to back, or interleaved views.
  const int64_t d1 = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? Nkv : bs;
  const int64_t d2 = c.layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? bs : Nkv;
  const int64_t pool_bytes = s.num_blocks * d1 * d2 * Hc;
  s.pool_shape = {s.num_blocks, d1, d2, Hc};
  s.storage.resize(static_cast<size_t>(2 * pool_bytes));
  if (c.strided) {
    s.pool_strides = {d1 * d2 * 2 * Hc, d2 * 2 * Hc, 2 * Hc, 1};
    s.key_offset = 0;
    s.value_offset = Hc;
  } else {
    s.pool_strides = {d1 * d2 * Hc, d2 * Hc, Hc, 1};
    s.key_offset = 0;
    s.value_offset = pool_bytes;
  }
  for (int which = 0; which < 2; ++which) {
    attnrt_tensor& t = which == 0 ? s.key_desc : s.value_desc;
    t = attnrt_tensor{};
    t.data = s.storage.data();
    t.device = {ATTNRT_DEVICE_CPU, 0};
    t.ndim = 4;
    t.dtype = kU8;
    t.shape = s.pool_shape.data();
    t.strides = c.strided ? s.pool_strides.data() : nullptr;
    t.byte_offset = static_cast<uint64_t>(which == 0 ? s.key_offset : s.value_offset);
  }
  // Every row poisoned, then the past tokens' rows: random blocks (reference past (B, Nkv,
  // capacity, H), NaN where no token is).
  for (int64_t row = 0; row < 2 * pool_bytes / Hc; ++row) {
    PoisonBlockRow(d.cache, H, rng, s.storage.data() + row * Hc);
  }
  s.past_k.assign(static_cast<size_t>(B * Nkv * s.capacity * H), kNaN);
  s.past_v.assign(s.past_k.size(), kNaN);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = c.seqlens[static_cast<size_t>(b)] + 1;
    const int64_t past = c.shared_kv ? tb : first_prompt ? 0 : tb - S;
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < past; ++j) {
        for (int which = 0; which < 2; ++which) {
          uint8_t* row = s.storage.data() + s.RowOffset(which, b, h, j);
          RandomBlockRow(d.cache, H, rng, row);
          std::vector<float>& values = which == 0 ? s.past_k : s.past_v;
          DequantizeBlockRow(d.cache, row, H, values.data() + ((b * Nkv + h) * s.capacity + j) * H);
        }
      }
    }
  }
  s.expected_storage = s.storage;

  // Query, key, value of T; RoPE in float, rounded to T; new rows quantized.
  s.in.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, Tensor());
  std::vector<float> query = RoundedNormal(Tq, B * S * N * H, rng);
  const int64_t L = c.shared_kv ? 0 : S;
  std::vector<float> key = RoundedNormal(Tq, B * L * Nkv * H, rng);
  std::vector<float> value = RoundedNormal(Tq, B * L * Nkv * H, rng);
  s.in[ATTNRT_PAGED_GQA_INPUT_QUERY] = Tensor(dq, {B, S, N * H});
  s.in[ATTNRT_PAGED_GQA_INPUT_KEY] = Tensor(dq, {B, L, Nkv * H});
  s.in[ATTNRT_PAGED_GQA_INPUT_VALUE] = Tensor(dq, {B, L, Nkv * H});
  Store(s.in[ATTNRT_PAGED_GQA_INPUT_QUERY], Tq, query);
  Store(s.in[ATTNRT_PAGED_GQA_INPUT_KEY], Tq, key);
  Store(s.in[ATTNRT_PAGED_GQA_INPUT_VALUE], Tq, value);
  s.in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = I32(c.seqlens, {B});
  s.in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(s.T)}, {1});
  s.in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = I32(s.table, {B, s.slots});
  std::vector<float> cos_cache, sin_cache;
  const int64_t half = H / 2;
  if (c.rotary) {
    const int64_t M = s.T + 4;
    std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
    for (int64_t i = 0; i < M * half; ++i) {
      const double a = angle(rng);
      cos_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::cos(a))));
      sin_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::sin(a))));
    }
    s.in[ATTNRT_PAGED_GQA_INPUT_COS_CACHE] = Tensor(dq, {M, half});
    s.in[ATTNRT_PAGED_GQA_INPUT_SIN_CACHE] = Tensor(dq, {M, half});
    Store(s.in[ATTNRT_PAGED_GQA_INPUT_COS_CACHE], Tq, cos_cache);
    Store(s.in[ATTNRT_PAGED_GQA_INPUT_SIN_CACHE], Tq, sin_cache);
  }
  s.q = query;
  std::vector<float> k_rot = key;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t past = first_prompt ? 0 : c.seqlens[static_cast<size_t>(b)] + 1 - S;
    for (int64_t t = 0; t < S; ++t) {
      const int64_t pos = past + t;  // first prompt: t; else T_b - S + t
      if (c.shared_kv) {
        for (int64_t n = 0; n < N; ++n) {
          RotateAndRound(Tq, s.q.data() + ((b * S + t) * N + n) * H, H, nullptr, nullptr, 0, false);
        }
        continue;
      }
      const float* cr = c.rotary ? cos_cache.data() + pos * half : nullptr;
      const float* sr = c.rotary ? sin_cache.data() + pos * half : nullptr;
      for (int64_t n = 0; n < N; ++n) {
        RotateAndRound(Tq, s.q.data() + ((b * S + t) * N + n) * H, H, cr, sr, half, false);
      }
      for (int64_t h = 0; h < Nkv; ++h) {
        RotateAndRound(Tq, k_rot.data() + ((b * S + t) * Nkv + h) * H, H, cr, sr, half, false);
      }
    }
  }
  s.k.resize(k_rot.size());
  s.v.resize(value.size());
  std::vector<uint8_t> kb(static_cast<size_t>(Hc)), vb(static_cast<size_t>(Hc));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tb = c.seqlens[static_cast<size_t>(b)] + 1;
    const int64_t past = first_prompt ? 0 : tb - S;
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t h = 0; h < Nkv; ++h) {
        const int64_t r = (b * S + t) * Nkv + h;
        QuantizeBlockRow(d.cache, k_rot.data() + r * H, H, kb.data());
        QuantizeBlockRow(d.cache, value.data() + r * H, H, vb.data());
        DequantizeBlockRow(d.cache, kb.data(), H, s.k.data() + r * H);
        DequantizeBlockRow(d.cache, vb.data(), H, s.v.data() + r * H);
        if (past + t >= tb) continue;  // a first prompt's padding: not stored
        std::memcpy(s.expected_storage.data() + s.RowOffset(0, b, h, past + t), kb.data(),
                    kb.size());
        std::memcpy(s.expected_storage.data() + s.RowOffset(1, b, h, past + t), vb.data(),
                    vb.size());
      }
    }
  }
  s.output = Filled(Tq, {B, S, N * H}, kNaN);

  attnrt_paged_gqa_attributes_init(&s.attributes);
  attnrt_gqa_attributes& a = s.attributes.gqa;
  a = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.do_rotary = c.rotary ? 1 : 0;
  a.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.kv_cache_bit_width = BitWidth(d.cache);
  s.attributes.block_size = static_cast<int32_t>(bs);
  s.attributes.kv_layout = c.layout;

  GqaRefProblem& p = s.problem;
  p.batch_size = B;
  p.sequence_length = S;
  p.kv_sequence_length = L;
  p.num_heads = N;
  p.kv_num_heads = Nkv;
  p.head_size = H;
  p.has_past = true;
  p.past_length = s.capacity;
  p.has_present = false;
  p.total_sequence_length = static_cast<int32_t>(s.T);
  p.seqlens_k = c.seqlens;
}

using Param = std::tuple<std::string, Dtypes, Case>;

class PagedGqaBlockQuant : public testing::TestWithParam<Param> {};

TEST_P(PagedGqaBlockQuant, MatchesReference) {
  const std::string& pinned = std::get<0>(GetParam());
  const Dtypes& d = std::get<1>(GetParam());
  const Case& c = std::get<2>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", dtypes " +
               d.name + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  Built s;
  Build(s, c, d, rng);
  ASSERT_FALSE(HasFatalFailure());

  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();
  options.disable = "";
  options.num_threads = c.threads;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_PAGED_GQA, &s.attributes, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);
  if (!pinned.empty()) {
    std::string skip;
    const bool runs = PinnedKernelRuns(
        Explain(op.get(), s.Inputs(), ATTNRT_PAGED_GQA_NUM_INPUTS, s.Outputs(), 1), pinned, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(runs);
  }
  attnrt_plan* raw_plan = nullptr;
  st = attnrt_op_plan(op.get(), s.Inputs(), ATTNRT_PAGED_GQA_NUM_INPUTS, s.Outputs(), 1, &raw_plan);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  PlanPtr plan(raw_plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  } else {
    ASSERT_FALSE(IsApproximate(kernel)) << "chosen without a pin: " << kernel;
  }
  RecordProperty("kernel", kernel);
  SCOPED_TRACE("ran " + kernel);
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());

  GqaRefInputs ri;
  ri.query = s.q.data();
  ri.key = s.k.data();
  ri.value = s.v.data();
  ri.past_key = s.past_k.data();
  ri.past_value = s.past_v.data();
  const GqaRefOutputs ref = ComputeGqaReference(s.problem, ri);

  st = attnrt_plan_run(plan.get(), s.Inputs(), ATTNRT_PAGED_GQA_NUM_INPUTS, s.Outputs(), 1, nullptr,
                       0, nullptr);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  ExpectClose("output", s.output, d.query, ref.output, [](int64_t) { return true; });
  // The pools: every row of every block byte for byte (the rows of the new tokens written, the
  // rest unchanged); with strided views the rows of both pools interleave in the one buffer.
  const int64_t rows = static_cast<int64_t>(s.storage.size()) / s.Hc;
  const int64_t row_stride = s.pool_strides[2];
  ExpectRowBytes(
      "pools", d.cache, rows, s.Hc, [&](int64_t r) { return s.storage.data() + r * s.Hc; },
      [&](int64_t r) { return s.expected_storage.data() + r * s.Hc; },
      [&](int64_t r) {
        const int64_t byte = r * s.Hc;
        const bool value = c.strided ? (byte % (2 * s.Hc)) != 0 : byte >= s.value_offset;
        const int64_t within =
            (c.strided ? byte - (value ? s.Hc : 0) : byte - (value ? s.value_offset : 0));
        const int64_t pool_row = within / row_stride;
        const int64_t per_block = s.pool_shape[1] * s.pool_shape[2];
        return std::string(value ? "value_cache" : "key_cache") + " block " +
               std::to_string(pool_row / per_block) + " [" +
               std::to_string(pool_row % per_block / s.pool_shape[2]) + "," +
               std::to_string(pool_row % s.pool_shape[2]) + "]";
      });
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name +
                     "__" + std::get<2>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, PagedGqaBlockQuant,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_PAGED_GQA)),
                                          testing::ValuesIn(AllDtypes()),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedGqaBlockQuant);

}  // namespace
}  // namespace attnrt_test
