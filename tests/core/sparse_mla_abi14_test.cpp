// A sparse MLA kernel of a plugin built against the ABI 1.4 headers (tests/core/plugins/
// abi14_sparse_mla_plugin.c, compiled against copies of them) beside the real sparse_mla plugin.
// ABI 1.6 appended PA_BBND block strides and global slot ids (topk_value_mode 3, with
// ori_sparse_indices) to the sparse MLA problem and args (abi/attnrt/ops/sparse_mla.h): the old
// kernel would read every cache as compact and every index as a logical position, so the runtime
// must not offer it a problem that uses either feature (docs/plugins.md, "The plugin ABI"). It is
// offered every other problem: the fixture outranks the real kernels and accepts all it sees.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"
#include "common/test_support.h"
#include "core/plugins/abi14_sparse_mla_plugin.h"
#include "sparse_mla_case.h"

namespace {

using namespace attnrt_test;

constexpr const char* kFixture = ABI14_SPARSE_MLA_KERNEL;
constexpr const char* kRealPrefix = "sparse_mla.sparse_mla.flash.";
constexpr int kInputs = ATTNRT_SPARSE_MLA_NUM_INPUTS;
constexpr int kOutputs = ATTNRT_SPARSE_MLA_NUM_OUTPUTS;

// The fixture's folder and the build's plugin folder (the real sparse_mla plugin), nothing else.
// `disable`: kernel globs excluded ("" = none).
RuntimePtr FixtureRuntime(const char* disable = "") {
  const char* paths[] = {ATTNRT_TEST_PLUGINS_ABI14_SPARSE, ATTNRT_TEST_DEFAULT_PLUGIN_DIR};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 2;
  options.search_default_paths = 0;
  options.disable = disable;
  return CreateRuntime(options);
}

// One call's input pointers, which a test may point elsewhere (a strided cache).
std::vector<const attnrt_tensor*> InputsOf(SparseMlaCase& c) {
  const attnrt_tensor* const* in = c.Inputs();
  return std::vector<const attnrt_tensor*>(in, in + kInputs);
}

struct Outcome {
  attnrt_status status = ATTNRT_OK;
  std::string error;
  std::string kernel;                // the planned kernel
  std::vector<Candidate> explained;  // the main op's explanation
};

// The metadata op, then the main op's explain, plan and run, all on `runtime`.
Outcome RunCall(attnrt_runtime* runtime, SparseMlaCase& c, std::vector<const attnrt_tensor*> in) {
  Outcome r;
  const attnrt_sparse_mla_attributes a = c.Attributes();
  auto fail = [&](attnrt_status s) {
    r.status = s;
    r.error = attnrt_last_error_message();
    return r;
  };
  {
    attnrt_op* raw = nullptr;
    attnrt_status s = attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &raw);
    OpPtr op(raw);
    if (s != ATTNRT_OK) return fail(s);
    const attnrt_tensor* metadata = in[ATTNRT_SPARSE_MLA_INPUT_METADATA];
    in[ATTNRT_SPARSE_MLA_INPUT_METADATA] = nullptr;
    attnrt_plan* plan_raw = nullptr;
    s = attnrt_op_plan(op.get(), in.data(), kInputs, &metadata, 1, &plan_raw);
    PlanPtr plan(plan_raw);
    if (s == ATTNRT_OK)
      s = attnrt_plan_run(plan.get(), in.data(), kInputs, &metadata, 1, nullptr, 0, nullptr);
    if (s != ATTNRT_OK) return fail(s);
    in[ATTNRT_SPARSE_MLA_INPUT_METADATA] = metadata;
  }
  attnrt_op* raw = nullptr;
  attnrt_status s = attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA, &a, &raw);
  OpPtr op(raw);
  if (s != ATTNRT_OK) return fail(s);
  r.explained = Explain(op.get(), in.data(), kInputs, c.Outputs(), kOutputs);
  attnrt_plan* plan_raw = nullptr;
  s = attnrt_op_plan(op.get(), in.data(), kInputs, c.Outputs(), kOutputs, &plan_raw);
  PlanPtr plan(plan_raw);
  if (s != ATTNRT_OK) return fail(s);
  r.kernel = PlanKernel(plan.get());
  s = attnrt_plan_run(plan.get(), in.data(), kInputs, c.Outputs(), kOutputs, nullptr, 0, nullptr);
  if (s != ATTNRT_OK) return fail(s);
  return r;
}

const Candidate* Find(const std::vector<Candidate>& explained, const std::string& kernel) {
  for (const Candidate& c : explained) {
    if (c.kernel == kernel) return &c;
  }
  return nullptr;
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const uint16_t* AttnOut(SparseMlaCase& c) {
  return static_cast<const uint16_t*>(c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].data());
}

// Whether attn_out carries the fixture's marker (what its run() writes first).
bool FixtureRan(SparseMlaCase& c) {
  return Bf16ToFloat(AttnOut(c)[kMlaOutMarker]) == ABI14_SPARSE_MLA_MARKER &&
         Bf16ToFloat(AttnOut(c)[kMlaOutCount]) == 0.0f;
}

// A PA_BBND case as the real conformance suite builds it (block tables over shuffled blocks).
SparseMlaSpec PagedSpec(int32_t quant_mode, int32_t scenario, int32_t layout_q) {
  SparseMlaSpec s;
  s.quant_mode = quant_mode;
  s.scenario = scenario;
  s.layout_q = layout_q;
  s.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  s.num_heads = 4;
  return s;
}

// The cache `compact` (num_blocks, block_size, 1, kv_d) of bytes, copied block by block into a
// bigger buffer: blocks `gap` bytes apart beyond their own size, the first at `byte_offset`; the
// gaps hold 0xFF (NaN in e4m3 and in the quant_mode 1 scales), which no kernel may read.
struct StridedCache {
  Tensor storage;
  std::vector<int64_t> shape, strides;
  attnrt_tensor desc{};

  StridedCache(Tensor& compact, int64_t gap, int64_t byte_offset) : shape(compact.shape()) {
    const int64_t block_bytes = shape[1] * shape[2] * shape[3];
    const int64_t stride = block_bytes + gap;
    storage = Tensor(kU8, {byte_offset + shape[0] * stride});
    std::memset(storage.data(), 0xFF, storage.bytes());
    auto* dst = static_cast<uint8_t*>(storage.data()) + byte_offset;
    const auto* src = static_cast<const uint8_t*>(compact.data());
    for (int64_t b = 0; b < shape[0]; ++b)
      std::memcpy(dst + b * stride, src + b * block_bytes, block_bytes);
    strides = {stride, shape[3], shape[3], 1};
    desc = attnrt_tensor{storage.data(),
                         {ATTNRT_DEVICE_CPU, 0},
                         4,
                         kU8,
                         shape.data(),
                         strides.data(),
                         static_cast<uint64_t>(byte_offset)};
  }
};

std::string Describe(const SparseMlaSpec& s) {
  return "quant_mode " + std::to_string(s.quant_mode) + ", scenario " + std::to_string(s.scenario) +
         ", layout_q " + std::to_string(s.layout_q);
}

// (a) A compact PA_BBND problem with logical top-k positions needs nothing of ABI 1.6: the ABI 1.4
// kernel is offered it, outranks the real kernels and runs, reading the fields at their 1.4
// offsets.
TEST(SparseMlaAbi14, CompactPagedProblemGoesToTheOldKernel) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = FixtureRuntime();
  ASSERT_TRUE(runtime);
  std::mt19937_64 rng(TestSeed());
  for (int32_t quant_mode : {1, 2}) {
    for (int32_t scenario : {ATTNRT_SPARSE_MLA_SWA, ATTNRT_SPARSE_MLA_CSA}) {
      for (int32_t layout_q : {ATTNRT_SPARSE_MLA_LAYOUT_BSND, ATTNRT_SPARSE_MLA_LAYOUT_TND}) {
        const SparseMlaSpec spec = PagedSpec(quant_mode, scenario, layout_q);
        SCOPED_TRACE(Describe(spec));
        SparseMlaCase c(spec, rng);
        const Outcome r = RunCall(runtime.get(), c, InputsOf(c));
        ASSERT_EQ(r.status, ATTNRT_OK) << r.error;
        const Candidate* fixture = Find(r.explained, kFixture);
        ASSERT_NE(fixture, nullptr);
        EXPECT_EQ(fixture->status, ATTNRT_CANDIDATE_SELECTED) << fixture->reason;
        EXPECT_EQ(fixture->reason, "");
        EXPECT_EQ(r.kernel, kFixture);
        ASSERT_TRUE(FixtureRan(c));
        const uint16_t* out = AttnOut(c);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutQuantMode]), quant_mode);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutTopkValueMode]), 1);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutLayoutKv]), ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutScenario]), scenario);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutNumHeads]), spec.num_heads);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutOriBlockSize]), spec.block_size);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutOriRows]),
                  c.in()[ATTNRT_SPARSE_MLA_INPUT_ORI_KV].shape()[0]);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutCmpBlockSize]),
                  scenario == ATTNRT_SPARSE_MLA_CSA ? spec.block_size : 0);
        EXPECT_EQ(Bf16ToFloat(out[kMlaOutTopk]), scenario == ATTNRT_SPARSE_MLA_CSA ? spec.topk : 0);
      }
    }
  }
}

// The explanation of a problem the old kernel must not get: the fixture is declined with the exact
// reason, a real kernel is selected, planned and runs (attn_out fully written, no fixture marker).
void ExpectServedByTheRealKernel(const Outcome& r, SparseMlaCase& c, const std::string& feature) {
  ASSERT_EQ(r.status, ATTNRT_OK) << r.error;
  const Candidate* fixture = Find(r.explained, kFixture);
  ASSERT_NE(fixture, nullptr);
  EXPECT_EQ(fixture->status, ATTNRT_CANDIDATE_DECLINED);
  EXPECT_EQ(fixture->reason,
            "plugin 'abi14sparse' was built for ABI 1.4, and " + feature + " needs ABI 1.6");
  std::string selected;
  for (const Candidate& k : r.explained) {
    if (k.status == ATTNRT_CANDIDATE_SELECTED) selected = k.kernel;
  }
  EXPECT_EQ(selected.rfind(kRealPrefix, 0), 0u) << selected;
  EXPECT_EQ(r.kernel, selected);
  EXPECT_FALSE(FixtureRan(c));
  const Tensor& o = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  for (int64_t i = 0; i < o.numel(); ++i) {
    ASSERT_FALSE(std::isnan(Bf16ToFloat(AttnOut(c)[i]))) << "attn_out[" << i << "] unwritten";
  }
}

// (b) Global slot ids (topk_value_mode 3): ori_sparse_indices and cmp_sparse_indices list each
// row's keys as block_id * block_size + offset, -1 skipped; no block table.
TEST(SparseMlaAbi14, GlobalSlotIdsAreNotOfferedToTheOldKernel) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = FixtureRuntime();
  ASSERT_TRUE(runtime);
  std::mt19937_64 rng(TestSeed());
  for (int32_t quant_mode : {1, 2}) {
    for (int32_t scenario : {ATTNRT_SPARSE_MLA_SWA, ATTNRT_SPARSE_MLA_CSA}) {
      SparseMlaSpec spec = PagedSpec(quant_mode, scenario, ATTNRT_SPARSE_MLA_LAYOUT_TND);
      spec.topk_value_mode = 3;
      spec.ori_mask_mode = 0;
      spec.cmp_mask_mode = 0;
      SCOPED_TRACE(Describe(spec));
      SparseMlaCase c(spec, rng);
      auto& in = c.in();
      for (int i :
           {ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
            ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV,
            ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
        in[i] = Tensor();
      }
      const int64_t rows = in[ATTNRT_SPARSE_MLA_INPUT_Q].shape()[0];
      // Slot lists with -1 anywhere (skipped, the scan goes on) and repeated slots.
      auto slots = [&](int input, int64_t width) {
        const int64_t n = in[input].shape()[0] * spec.block_size;
        std::uniform_int_distribution<int32_t> slot(-1, static_cast<int32_t>(n - 1));
        std::vector<int32_t> v(rows * width);
        for (int32_t& x : v) x = slot(rng);
        return I32(v, {rows, 1, width});
      };
      in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES] = slots(ATTNRT_SPARSE_MLA_INPUT_ORI_KV, 24);
      if (scenario == ATTNRT_SPARSE_MLA_CSA) {
        in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] =
            slots(ATTNRT_SPARSE_MLA_INPUT_CMP_KV, spec.topk);
      }
      const Outcome r = RunCall(runtime.get(), c, InputsOf(c));
      ExpectServedByTheRealKernel(r, c, "topk_value_mode 3 (global slot ids)");
    }
  }
}

// (c) A compact-mode problem (logical top-k positions, block tables) whose PA_BBND cache is one
// layer's view of a bigger buffer: blocks a stride apart. The real kernel reads it in place and
// gives the bytes it gives for the compact cache.
TEST(SparseMlaAbi14, BlockStrideIsNotOfferedToTheOldKernel) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = FixtureRuntime();
  RuntimePtr real_only = FixtureRuntime("abi14sparse.*");
  ASSERT_TRUE(runtime && real_only);
  std::mt19937_64 rng(TestSeed());
  for (int32_t quant_mode : {1, 2}) {
    for (int input : {ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_KV}) {
      const int32_t scenario =
          input == ATTNRT_SPARSE_MLA_INPUT_ORI_KV ? ATTNRT_SPARSE_MLA_SWA : ATTNRT_SPARSE_MLA_CSA;
      const SparseMlaSpec spec = PagedSpec(quant_mode, scenario, ATTNRT_SPARSE_MLA_LAYOUT_BSND);
      SCOPED_TRACE(Describe(spec) + (input == ATTNRT_SPARSE_MLA_INPUT_ORI_KV ? ", strided ori_kv"
                                                                             : ", strided cmp_kv"));
      SparseMlaCase c(spec, rng);
      const Outcome compact = RunCall(real_only.get(), c, InputsOf(c));
      ASSERT_EQ(compact.status, ATTNRT_OK) << compact.error;
      const Tensor expected_out = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].Clone();
      const Tensor expected_lse = c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].Clone();

      // A gap of 3 tokens' bytes after each block (vLLM pads pages shared by layers), 40 bytes in.
      const int64_t kv_d = c.in()[input].shape()[3];
      StridedCache strided(c.in()[input], 3 * kv_d, 40);
      std::vector<const attnrt_tensor*> in = InputsOf(c);
      in[input] = &strided.desc;
      c.Poison();
      const Outcome r = RunCall(runtime.get(), c, in);
      ExpectServedByTheRealKernel(r, c, "a PA_BBND cache with a block stride");
      EXPECT_EQ(r.kernel, compact.kernel);
      EXPECT_EQ(std::memcmp(c.out()[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT].data(),
                            const_cast<Tensor&>(expected_out).data(), expected_out.bytes()),
                0)
          << "attn_out differs from the compact cache's";
      EXPECT_EQ(std::memcmp(c.out()[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE].data(),
                            const_cast<Tensor&>(expected_lse).data(), expected_lse.bytes()),
                0)
          << "softmax_lse differs from the compact cache's";
    }
  }
}

}  // namespace
