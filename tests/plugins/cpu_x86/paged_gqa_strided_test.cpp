// Paged GroupQueryAttention over strided block pools (attnrt/ops/paged_gqa.h, ABI 1.2): the K and V
// pools as views of one cache tensor in the layouts serving engines keep (vLLM's CPU cache,
// vLLM's / FlashAttention's [2, ...] cache, FlashInfer's NHD and HND pages), against the same call
// over two compact pools holding the same rows:
//  - every paged kernel (each pinned in turn) gives bitwise the output it gives over compact
//    pools, for decode, a prompt chunk and a first prompt, float32 and bfloat16;
//  - the new K/V rows land in the views exactly where the compact pools receive them, and no other
//    byte of the cache tensor changes (it is poisoned with NaN beforehand);
//  - views that share an element (with each other or with themselves), a non-contiguous head_size
//    dimension and negative strides are refused by name before anything is written, while views
//    that interleave without sharing an element are accepted.
// Fresh N(0,1) data from a printed seed; outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadSize = 64;
constexpr attnrt_dtype kBf16 = ATTNRT_DTYPE_BFLOAT16;

// How the K and V pools sit in one cache tensor: the tensor's element count, and per view its
// element offset and strides (in kv_layout's dimension order [num_blocks, d1, d2, head_size]).
struct Layout {
  std::string name;
  int32_t kv_layout;
  int64_t elements;
  int64_t key_offset, value_offset;
  std::vector<int64_t> strides;  // shared by both views
};

Layout MakeLayout(const std::string& name, int64_t nb, int64_t bs) {
  const int64_t h = kHeadSize;
  const int64_t nkv = kKvHeads;
  if (name == "vllm_cpu") {  // [nb, Nkv, bs, 2H]: K = [..., :H], V = [..., H:]
    return {name,
            ATTNRT_PAGED_KV_LAYOUT_BNSH,
            nb * nkv * bs * 2 * h,
            0,
            h,
            {nkv * bs * 2 * h, bs * 2 * h, 2 * h, 1}};
  }
  if (name == "vllm_cpu_blocked") {  // [nb, Nkv, 2, bs, H]: K = [:, :, 0], V = [:, :, 1]
    return {name,   ATTNRT_PAGED_KV_LAYOUT_BNSH,         nb * nkv * 2 * bs * h, 0,
            bs * h, {nkv * 2 * bs * h, 2 * bs * h, h, 1}};
  }
  if (name == "flash_attention") {  // [2, nb, bs, Nkv, H]: K = kv[0], V = kv[1]
    return {name, ATTNRT_PAGED_KV_LAYOUT_BSNH, 2 * nb * bs * nkv * h,
            0,    nb * bs * nkv * h,           {bs * nkv * h, nkv * h, h, 1}};
  }
  if (name == "flashinfer_nhd") {  // [nb, 2, bs, Nkv, H]: K = pages[:, 0], V = pages[:, 1]
    return {name,         ATTNRT_PAGED_KV_LAYOUT_BSNH,      nb * 2 * bs * nkv * h, 0,
            bs * nkv * h, {2 * bs * nkv * h, nkv * h, h, 1}};
  }
  // flashinfer_hnd: [nb, 2, Nkv, bs, H]
  return {name,         ATTNRT_PAGED_KV_LAYOUT_BNSH,     nb * 2 * nkv * bs * h, 0,
          nkv * bs * h, {2 * nkv * bs * h, bs * h, h, 1}};
}

struct Step {
  std::string name;
  int64_t S;
  std::vector<int32_t> seqlens;  // T_b - 1
};

std::vector<Step> Steps() {
  return {{"decode", 1, {40, 16, 70}}, {"chunk", 4, {35}}, {"first_prompt", 12, {11}}};
}

size_t ElementBytes(attnrt_dtype dtype) { return dtype.bits / 8; }

// A host buffer of raw elements with an attnrt_tensor describing (a view of) it.
struct View {
  std::vector<int64_t> shape, strides;
  attnrt_tensor t{};
  void Set(void* data, attnrt_dtype dtype, std::vector<int64_t> s, std::vector<int64_t> st,
           uint64_t byte_offset) {
    shape = std::move(s);
    strides = std::move(st);
    t = attnrt_tensor{};
    t.data = data;
    t.device = {ATTNRT_DEVICE_CPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
  }
};

// Writes float `x` as `dtype` (float32 or bfloat16, rounded to nearest even).
void Store(attnrt_dtype dtype, float x, unsigned char* dst) {
  if (dtype.bits == 32) {
    std::memcpy(dst, &x, 4);
    return;
  }
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint16_t bf = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
  std::memcpy(dst, &bf, 2);
}

std::vector<unsigned char> RandomElements(attnrt_dtype dtype, int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * ElementBytes(dtype));
  for (int64_t i = 0; i < count; ++i) Store(dtype, normal(rng), &bytes[i * ElementBytes(dtype)]);
  return bytes;
}

std::vector<unsigned char> Poisoned(attnrt_dtype dtype, int64_t count) {
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * ElementBytes(dtype));
  for (int64_t i = 0; i < count; ++i) {
    Store(dtype, std::numeric_limits<float>::quiet_NaN(), &bytes[i * ElementBytes(dtype)]);
  }
  return bytes;
}

// Byte offset of element [x, i1, i2, d] of a view with element strides `st` (from its base).
size_t ViewOffset(const std::vector<int64_t>& st, int64_t x, int64_t i1, int64_t i2, int64_t d,
                  size_t element_bytes) {
  return static_cast<size_t>(x * st[0] + i1 * st[1] + i2 * st[2] + d * st[3]) * element_bytes;
}

// One paged call: its inputs except the pools, its output, and the block geometry.
struct Call {
  attnrt_dtype dtype;
  Step step;
  int64_t block_size, slots, num_blocks, B, T;
  std::vector<unsigned char> query, key, value;
  std::vector<int32_t> seqlens, total, table;
  std::vector<unsigned char> output;
  View v_query, v_key, v_value, v_seqlens, v_total, v_table, v_output;

  Call(attnrt_dtype dt, const Step& s, int64_t bs, std::mt19937_64& rng)
      : dtype(dt), step(s), block_size(bs) {
    B = static_cast<int64_t>(step.seqlens.size());
    T = *std::max_element(step.seqlens.begin(), step.seqlens.end()) + 1;
    slots = (T + bs - 1) / bs;
    num_blocks = B * slots + 3;  // spare blocks, never named
    query = RandomElements(dtype, B * step.S * kHeads * kHeadSize, rng);
    key = RandomElements(dtype, B * step.S * kKvHeads * kHeadSize, rng);
    value = RandomElements(dtype, B * step.S * kKvHeads * kHeadSize, rng);
    seqlens = step.seqlens;
    total = {static_cast<int32_t>(T)};
    std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    table.assign(blocks.begin(), blocks.begin() + B * slots);
  }

  // Inputs with the given pools; the output poisoned.
  std::vector<const attnrt_tensor*> Inputs(const attnrt_tensor* k_cache,
                                           const attnrt_tensor* v_cache) {
    v_query.Set(query.data(), dtype, {B, step.S, kHeads * kHeadSize}, {}, 0);
    v_key.Set(key.data(), dtype, {B, step.S, kKvHeads * kHeadSize}, {}, 0);
    v_value.Set(value.data(), dtype, {B, step.S, kKvHeads * kHeadSize}, {}, 0);
    v_seqlens.Set(seqlens.data(), ATTNRT_DTYPE_INT32, {B}, {}, 0);
    v_total.Set(total.data(), ATTNRT_DTYPE_INT32, {1}, {}, 0);
    v_table.Set(table.data(), ATTNRT_DTYPE_INT32, {B, slots}, {}, 0);
    std::vector<const attnrt_tensor*> in(ATTNRT_PAGED_GQA_NUM_INPUTS, nullptr);
    in[ATTNRT_PAGED_GQA_INPUT_QUERY] = &v_query.t;
    in[ATTNRT_PAGED_GQA_INPUT_KEY] = &v_key.t;
    in[ATTNRT_PAGED_GQA_INPUT_VALUE] = &v_value.t;
    in[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = k_cache;
    in[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = v_cache;
    in[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = &v_seqlens.t;
    in[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &v_total.t;
    in[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = &v_table.t;
    return in;
  }
  const attnrt_tensor* Output() {
    output = Poisoned(dtype, B * step.S * kHeads * kHeadSize);
    v_output.Set(output.data(), dtype, {B, step.S, kHeads * kHeadSize}, {}, 0);
    return &v_output.t;
  }
};

attnrt_paged_gqa_attributes Attributes(int32_t block_size, int32_t kv_layout) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(kHeads, kKvHeads);
  a.block_size = block_size;
  a.kv_layout = kv_layout;
  return a;
}

// Runs the call on `runtime`; returns the status and fills *kernel with the plan's kernel.
attnrt_status RunCall(attnrt_runtime* runtime, const attnrt_paged_gqa_attributes& attributes,
                      const std::vector<const attnrt_tensor*>& in, const attnrt_tensor* out,
                      std::string* kernel) {
  attnrt_op* op = nullptr;
  attnrt_status s = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &attributes, &op);
  if (s != ATTNRT_OK) return s;
  OpPtr op_holder(op);
  attnrt_plan* plan = nullptr;
  s = attnrt_op_plan(op, in.data(), in.size(), &out, 1, &plan);
  if (s != ATTNRT_OK) return s;
  PlanPtr plan_holder(plan);
  if (kernel != nullptr) *kernel = PlanKernel(plan);
  return attnrt_plan_run(plan, in.data(), in.size(), &out, 1, nullptr, 0, nullptr);
}

std::vector<std::string> PagedKernels() {
  RuntimePtr runtime = CreateRuntime();
  std::vector<std::string> names;
  if (!runtime) return names;
  for (const PluginInfo& plugin : ListPlugins(runtime.get())) {
    for (const KernelInfo& k : plugin.kernels) {
      if (k.op_kind == ATTNRT_OP_PAGED_GQA && k.device_type == ATTNRT_DEVICE_CPU) {
        names.push_back(k.name);
      }
    }
  }
  return names;
}

struct Param {
  std::string layout;
  std::string kernel;
  bool bf16;
  int64_t block_size;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.layout << "/" << p.kernel << "/" << (p.bf16 ? "bf16" : "f32") << "/bs" << p.block_size;
}

class StridedPools : public ::testing::TestWithParam<Param> {};

TEST_P(StridedPools, BitwiseEqualToCompactPools) {
  const Param& param = GetParam();
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = param.kernel.c_str();
  options.num_threads = 3;
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  const attnrt_dtype dtype = param.bf16 ? kBf16 : kF32;
  const size_t eb = ElementBytes(dtype);
  int ran = 0;
  for (const Step& step : Steps()) {
    SCOPED_TRACE(step.name + " " + SeedTrace());
    std::mt19937_64 rng(TestSeed());
    Call call(dtype, step, param.block_size, rng);
    const Layout layout = MakeLayout(param.layout, call.num_blocks, param.block_size);
    const bool bnsh = layout.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
    const int64_t d1 = bnsh ? kKvHeads : param.block_size;
    const int64_t d2 = bnsh ? param.block_size : kKvHeads;
    const std::vector<int64_t> pool_shape = {call.num_blocks, d1, d2, kHeadSize};
    const int64_t pool_elements = call.num_blocks * d1 * d2 * kHeadSize;

    // Compact pools with random rows, and the cache tensor holding the same rows in its views.
    std::vector<unsigned char> k_compact = RandomElements(dtype, pool_elements, rng);
    std::vector<unsigned char> v_compact = RandomElements(dtype, pool_elements, rng);
    std::vector<unsigned char> cache = Poisoned(dtype, layout.elements);
    const std::vector<int64_t> compact_strides = {d1 * d2 * kHeadSize, d2 * kHeadSize, kHeadSize,
                                                  1};
    auto for_each_row = [&](auto&& f) {
      for (int64_t x = 0; x < call.num_blocks; ++x)
        for (int64_t i1 = 0; i1 < d1; ++i1)
          for (int64_t i2 = 0; i2 < d2; ++i2) f(x, i1, i2);
    };
    for_each_row([&](int64_t x, int64_t i1, int64_t i2) {
      const size_t from = ViewOffset(compact_strides, x, i1, i2, 0, eb);
      std::memcpy(&cache[layout.key_offset * eb + ViewOffset(layout.strides, x, i1, i2, 0, eb)],
                  &k_compact[from], kHeadSize * eb);
      std::memcpy(&cache[layout.value_offset * eb + ViewOffset(layout.strides, x, i1, i2, 0, eb)],
                  &v_compact[from], kHeadSize * eb);
    });
    const std::vector<unsigned char> cache_before = cache;

    const attnrt_paged_gqa_attributes attributes =
        Attributes(static_cast<int32_t>(param.block_size), layout.kv_layout);
    View kc, vc;
    kc.Set(k_compact.data(), dtype, pool_shape, {}, 0);
    vc.Set(v_compact.data(), dtype, pool_shape, {}, 0);
    std::string compact_kernel;
    const attnrt_status compact_status = RunCall(
        runtime.get(), attributes, call.Inputs(&kc.t, &vc.t), call.Output(), &compact_kernel);
    if (compact_status == ATTNRT_ERROR_UNSUPPORTED) continue;  // the pinned kernel declines
    ASSERT_EQ(compact_status, ATTNRT_OK) << LastError(compact_status);
    const std::vector<unsigned char> expected = call.output;

    View ks, vs;
    ks.Set(cache.data(), dtype, pool_shape, layout.strides,
           static_cast<uint64_t>(layout.key_offset) * eb);
    vs.Set(cache.data(), dtype, pool_shape, layout.strides,
           static_cast<uint64_t>(layout.value_offset) * eb);
    std::string strided_kernel;
    const attnrt_status s = RunCall(runtime.get(), attributes, call.Inputs(&ks.t, &vs.t),
                                    call.Output(), &strided_kernel);
    ASSERT_EQ(s, ATTNRT_OK) << LastError(s);
    EXPECT_EQ(strided_kernel, compact_kernel);
    EXPECT_EQ(std::memcmp(call.output.data(), expected.data(), expected.size()), 0)
        << "output differs from the compact pools' with kernel " << strided_kernel;

    // Every row of the views equals the compact pools' row; nothing else changed.
    std::vector<unsigned char> cache_expected = cache_before;
    int64_t mismatched_rows = 0;
    for_each_row([&](int64_t x, int64_t i1, int64_t i2) {
      const size_t from = ViewOffset(compact_strides, x, i1, i2, 0, eb);
      const size_t k_at = layout.key_offset * eb + ViewOffset(layout.strides, x, i1, i2, 0, eb);
      const size_t v_at = layout.value_offset * eb + ViewOffset(layout.strides, x, i1, i2, 0, eb);
      std::memcpy(&cache_expected[k_at], &k_compact[from], kHeadSize * eb);
      std::memcpy(&cache_expected[v_at], &v_compact[from], kHeadSize * eb);
    });
    for (size_t i = 0; i < cache.size(); i += kHeadSize * eb) {
      if (std::memcmp(&cache[i], &cache_expected[i], std::min(kHeadSize * eb, cache.size() - i)) !=
          0) {
        ++mismatched_rows;
      }
    }
    EXPECT_EQ(mismatched_rows, 0) << "cache rows differ from the compact pools' after the run";
    EXPECT_NE(cache, cache_before) << "the run wrote no new row";
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << param.kernel << " declines every step here";
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (const std::string& kernel : PagedKernels()) {
    for (const char* layout :
         {"vllm_cpu", "vllm_cpu_blocked", "flash_attention", "flashinfer_nhd", "flashinfer_hnd"}) {
      for (bool bf16 : {false, true}) {
        for (int64_t bs : {16, 5}) params.push_back({layout, kernel, bf16, bs});
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  std::string name = info.param.layout + "_" + info.param.kernel + "_" +
                     (info.param.bf16 ? "bf16" : "f32") + "_bs" +
                     std::to_string(info.param.block_size);
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Layouts, StridedPools, ::testing::ValuesIn(Params()), ParamName);

// ---- refused views
// ---------------------------------------------------------------------------------

class StridedPoolErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = CreateRuntime();
    ASSERT_TRUE(runtime_);
  }

  // Runs a decode step with the pools given as (offset, strides) views of one float32 tensor of
  // `elements` elements; returns the status, and whether any byte of the tensor or the output
  // changed.
  attnrt_status Try(int32_t kv_layout, int64_t elements, int64_t k_offset,
                    std::vector<int64_t> k_strides, int64_t v_offset,
                    std::vector<int64_t> v_strides, bool* changed) {
    std::mt19937_64 rng(TestSeed());
    Call call(kF32, Steps()[0], kBlockSize, rng);
    const bool bnsh = kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
    const std::vector<int64_t> shape = {call.num_blocks, bnsh ? kKvHeads : kBlockSize,
                                        bnsh ? kBlockSize : kKvHeads, kHeadSize};
    std::vector<unsigned char> cache = RandomElements(kF32, elements, rng);
    const std::vector<unsigned char> before = cache;
    View k, v;
    k.Set(cache.data(), kF32, shape, std::move(k_strides), static_cast<uint64_t>(k_offset) * 4);
    v.Set(cache.data(), kF32, shape, std::move(v_strides), static_cast<uint64_t>(v_offset) * 4);
    const attnrt_tensor* out = call.Output();
    const std::vector<unsigned char> output_before = call.output;
    const attnrt_status s = RunCall(runtime_.get(), Attributes(kBlockSize, kv_layout),
                                    call.Inputs(&k.t, &v.t), out, nullptr);
    message_ = attnrt_last_error_message();
    *changed = cache != before ||
               std::memcmp(call.output.data(), output_before.data(), output_before.size()) != 0;
    return s;
  }

  static constexpr int64_t kBlockSize = 16;
  // Blocks of the decode step's call (Call: B * slots + 3).
  static constexpr int64_t kBlocks = 3 * 5 + 3;
  RuntimePtr runtime_;
  std::string message_;
};

TEST_F(StridedPoolErrors, BlockCountMatchesTheCall) {
  std::mt19937_64 rng(TestSeed());
  Call call(kF32, Steps()[0], kBlockSize, rng);
  EXPECT_EQ(call.num_blocks, kBlocks);
}

TEST_F(StridedPoolErrors, SameViewTwiceIsRefused) {
  const Layout l = MakeLayout("vllm_cpu", kBlocks, kBlockSize);
  bool changed = true;
  EXPECT_EQ(Try(l.kv_layout, l.elements, 0, l.strides, 0, l.strides, &changed),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("value_cache shares memory with key_cache"), std::string::npos)
      << message_;
  EXPECT_FALSE(changed);
}

TEST_F(StridedPoolErrors, ViewsSharingSomeElementsAreRefused) {
  // vLLM's CPU layout with V starting half a row early: V's first 32 elements of every row are K's
  // last 32, although neither view overlaps itself.
  const Layout l = MakeLayout("vllm_cpu", kBlocks, kBlockSize);
  bool changed = true;
  EXPECT_EQ(Try(l.kv_layout, l.elements, 0, l.strides, kHeadSize / 2, l.strides, &changed),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("value_cache shares memory with key_cache"), std::string::npos)
      << message_;
  EXPECT_FALSE(changed);
}

TEST_F(StridedPoolErrors, SelfOverlappingViewIsRefused) {
  // Every block of K at the same address (block stride 0).
  const Layout l = MakeLayout("flash_attention", kBlocks, kBlockSize);
  std::vector<int64_t> k_strides = l.strides;
  k_strides[0] = 0;
  bool changed = true;
  EXPECT_EQ(Try(l.kv_layout, l.elements, 0, k_strides, l.value_offset, l.strides, &changed),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("key_cache: two elements share memory"), std::string::npos) << message_;
  EXPECT_FALSE(changed);
}

TEST_F(StridedPoolErrors, NonContiguousHeadSizeIsRefused) {
  const Layout l = MakeLayout("vllm_cpu", kBlocks, kBlockSize);
  std::vector<int64_t> v_strides = l.strides;
  v_strides[3] = 2;
  bool changed = true;
  EXPECT_EQ(Try(l.kv_layout, l.elements, 0, l.strides, 1, v_strides, &changed),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("value_cache: dimension 3 (head_size) must be contiguous (stride 1)"),
            std::string::npos)
      << message_;
  EXPECT_FALSE(changed);
}

TEST_F(StridedPoolErrors, NegativeStrideIsRefused) {
  const Layout l = MakeLayout("flash_attention", kBlocks, kBlockSize);
  std::vector<int64_t> k_strides = l.strides;
  k_strides[0] = -k_strides[0];
  bool changed = true;
  EXPECT_EQ(Try(l.kv_layout, l.elements, (kBlocks - 1) * l.strides[0], k_strides, l.value_offset,
                l.strides, &changed),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message_.find("key_cache: dimension 0 has stride -"), std::string::npos) << message_;
  EXPECT_FALSE(changed);
}

TEST_F(StridedPoolErrors, InterleavedDisjointViewsAreAccepted) {
  // The K and V rows alternate (vLLM's CPU layout): the address ranges overlap, no element does.
  const Layout l = MakeLayout("vllm_cpu", kBlocks, kBlockSize);
  bool changed = false;
  EXPECT_EQ(Try(l.kv_layout, l.elements, 0, l.strides, l.value_offset, l.strides, &changed),
            ATTNRT_OK)
      << message_;
  EXPECT_TRUE(changed);
}

}  // namespace
}  // namespace attnrt_test
