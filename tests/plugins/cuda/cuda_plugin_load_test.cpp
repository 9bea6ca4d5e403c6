// The CUDA plugins load, probe and explain on any machine: without a GPU or driver (CI) they are
// listed as unavailable with the CUDA runtime's reason and every CUDA kernel is explained with it;
// on a GPU machine the documented dispatch order picks XQA for shared-buffer decode. Tensors are
// descriptors only (data NULL): nothing here dereferences device memory.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;

// Descriptors of a GQA call whose tensors live on cuda:0 (seqlens_k and total_sequence_length
// stay in host memory, as the ABI requires).
struct CudaDescriptors {
  std::vector<std::vector<int64_t>> shapes;
  std::array<attnrt_tensor, ATTNRT_GQA_NUM_INPUTS> in{};
  std::array<attnrt_tensor, ATTNRT_GQA_NUM_OUTPUTS> out{};
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_INPUTS> in_ptrs{};
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_OUTPUTS> out_ptrs{};

  attnrt_tensor Make(attnrt_dtype dtype, std::vector<int64_t> shape, bool host) {
    shapes.push_back(std::move(shape));
    attnrt_tensor t{};
    t.device = {host ? ATTNRT_DEVICE_CPU : ATTNRT_DEVICE_CUDA, 0};
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shapes.back().size());
    t.shape = shapes.back().data();
    return t;
  }
};

// Decode, B=1, N=32, Nkv=8, H=128, past and present of P rows (float16).
void DecodeDescriptors(CudaDescriptors* d, int64_t P, int64_t head_size) {
  d->shapes.reserve(16);
  const int64_t N = 32, Nkv = 8, H = head_size;
  d->in[ATTNRT_GQA_INPUT_QUERY] = d->Make(kF16, {1, 1, N * H}, false);
  d->in[ATTNRT_GQA_INPUT_KEY] = d->Make(kF16, {1, 1, Nkv * H}, false);
  d->in[ATTNRT_GQA_INPUT_VALUE] = d->Make(kF16, {1, 1, Nkv * H}, false);
  d->in[ATTNRT_GQA_INPUT_PAST_KEY] = d->Make(kF16, {1, Nkv, P, H}, false);
  d->in[ATTNRT_GQA_INPUT_PAST_VALUE] = d->Make(kF16, {1, Nkv, P, H}, false);
  d->in[ATTNRT_GQA_INPUT_SEQLENS_K] = d->Make(kI32, {1}, true);
  d->in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = d->Make(kI32, {1}, true);
  d->out[ATTNRT_GQA_OUTPUT_OUTPUT] = d->Make(kF16, {1, 1, N * H}, false);
  d->out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = d->Make(kF16, {1, Nkv, P, H}, false);
  d->out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = d->Make(kF16, {1, Nkv, P, H}, false);
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    d->in_ptrs[i] = d->in[i].shape != nullptr ? &d->in[i] : nullptr;
  }
  for (int o = 0; o < ATTNRT_GQA_NUM_OUTPUTS; ++o) {
    d->out_ptrs[o] = d->out[o].shape != nullptr ? &d->out[o] : nullptr;
  }
}

RuntimePtr PluginFolderRuntime() {
  const std::string folder = DefaultPluginDir();
  const char* paths[] = {folder.c_str()};
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = paths;
  options.num_plugin_paths = 1;
  options.search_default_paths = 0;
  return CreateRuntime(options);
}

const PluginInfo* Find(const std::vector<PluginInfo>& plugins, const std::string& name) {
  for (const auto& p : plugins) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

TEST(CudaPluginLoad, BothPluginsLoadAndProbe) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = PluginFolderRuntime();
  ASSERT_TRUE(runtime);
  for (const auto& d : ListDiagnostics(runtime.get())) {
    EXPECT_EQ(d.path.find("cuda"), std::string::npos) << d.path << ": " << d.message;
  }
  const auto plugins = ListPlugins(runtime.get());
  const PluginInfo* xqa = Find(plugins, "cuda_xqa");
  const PluginInfo* flash = Find(plugins, "cuda_flash");
  ASSERT_NE(xqa, nullptr);
  ASSERT_NE(flash, nullptr);
  for (const PluginInfo* p : {xqa, flash}) {
    bool has_runtime_version = false, has_architectures = false;
    for (const auto& [key, value] : p->facts) {
      if (key == "cuda_runtime_version") has_runtime_version = !value.empty();
      if (key == "cuda_architectures") has_architectures = value == "sm_80,sm_90";
    }
    EXPECT_TRUE(has_runtime_version) << p->name;
    EXPECT_TRUE(has_architectures) << p->name;
    if (p->available == 0) {
      // The machine has no usable GPU: the reason carries the CUDA runtime's error text.
      EXPECT_TRUE(ContainsI(p->reason, "no CUDA device") || ContainsI(p->reason, "below 8.0"))
          << p->reason;
      if (ContainsI(p->reason, "no CUDA device")) {
        EXPECT_TRUE(ContainsI(p->reason, "cudaError") || ContainsI(p->reason, "returned 0"))
            << p->reason;
      }
    }
  }
  ASSERT_EQ(xqa->kernels.size(), 1u);
  EXPECT_EQ(xqa->kernels[0].name, "cuda_xqa.gqa.xqa.sm80");
  EXPECT_EQ(xqa->kernels[0].priority, 400);
  EXPECT_EQ(xqa->kernels[0].device_type, ATTNRT_DEVICE_CUDA);
  EXPECT_EQ(xqa->kernels[0].op_kind, ATTNRT_OP_GQA);
  ASSERT_EQ(flash->kernels.size(), 3u);
  EXPECT_EQ(flash->kernels[0].name, "cuda_flash.gqa.flash_decode.sm80");
  EXPECT_EQ(flash->kernels[0].priority, 310);
  EXPECT_EQ(flash->kernels[1].name, "cuda_flash.gqa.flash.sm80");
  EXPECT_EQ(flash->kernels[1].priority, 300);
  EXPECT_EQ(flash->kernels[2].name, "cuda_flash.gqa.unfused.sm80");
  EXPECT_EQ(flash->kernels[2].priority, 100);
  for (const auto& k : flash->kernels) EXPECT_EQ(k.device_type, ATTNRT_DEVICE_CUDA);
}

TEST(CudaPluginLoad, ExplainRanksCudaKernelsWithTheirReasons) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = PluginFolderRuntime();
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  const PluginInfo* xqa = Find(plugins, "cuda_xqa");
  ASSERT_NE(xqa, nullptr);
  const bool gpu = xqa->available == 1;

  attnrt_gqa_attributes attributes = GqaAttributes(32, 8);
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &raw), ATTNRT_OK);
  OpPtr op(raw);
  for (int64_t head_size : {128, 96}) {
    SCOPED_TRACE("head_size " + std::to_string(head_size));
    CudaDescriptors d;
    DecodeDescriptors(&d, 4096, head_size);
    attnrt_explanation* e = nullptr;
    ASSERT_EQ(attnrt_op_explain(op.get(), d.in_ptrs.data(), d.in_ptrs.size(), d.out_ptrs.data(),
                                d.out_ptrs.size(), &e),
              ATTNRT_OK)
        << LastError(ATTNRT_ERROR_INTERNAL);
    ExplanationPtr explanation(e);
    size_t count = 0;
    ASSERT_EQ(attnrt_explanation_count(e, &count), ATTNRT_OK);
    std::vector<attnrt_candidate> candidates(count);
    for (size_t i = 0; i < count; ++i) {
      candidates[i].struct_size = sizeof(attnrt_candidate);
      ASSERT_EQ(attnrt_explanation_candidate(e, i, &candidates[i]), ATTNRT_OK);
    }
    ASSERT_GE(count, 4u);
    // Rank order: xqa (400) > flash_decode (310) > flash (300) > ... > unfused (100).
    EXPECT_STREQ(candidates[0].kernel, "cuda_xqa.gqa.xqa.sm80");
    EXPECT_STREQ(candidates[1].kernel, "cuda_flash.gqa.flash_decode.sm80");
    EXPECT_STREQ(candidates[2].kernel, "cuda_flash.gqa.flash.sm80");
    for (size_t i = 0; i < count; ++i) {
      const std::string name = candidates[i].kernel;
      const std::string reason = candidates[i].reason != nullptr ? candidates[i].reason : "";
      if (name.rfind("cuda_", 0) != 0) {
        EXPECT_EQ(candidates[i].status, ATTNRT_CANDIDATE_WRONG_DEVICE) << name;
        continue;
      }
      if (!gpu) {
        EXPECT_EQ(candidates[i].status, ATTNRT_CANDIDATE_UNAVAILABLE) << name;
        EXPECT_TRUE(ContainsI(reason, "unavailable")) << name << ": " << reason;
      }
    }
    if (gpu && head_size == 128) {
      EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_SELECTED);
    }
    if (gpu && head_size == 96) {
      EXPECT_EQ(candidates[0].status, ATTNRT_CANDIDATE_DECLINED);
      EXPECT_TRUE(ContainsI(candidates[0].reason, "head_size 96"));
    }
  }
}

TEST(CudaPluginLoad, PlanWithoutAUsableKernelSaysWhy) {
  CleanAttnrtEnv env;
  RuntimePtr runtime = PluginFolderRuntime();
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  const PluginInfo* flash = Find(plugins, "cuda_flash");
  ASSERT_NE(flash, nullptr);
  if (flash->available == 1) GTEST_SKIP() << "a CUDA device is present; covered by bench/gpu";
  attnrt_gqa_attributes attributes = GqaAttributes(32, 8);
  attnrt_op* raw = nullptr;
  ASSERT_EQ(attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &attributes, &raw), ATTNRT_OK);
  OpPtr op(raw);
  CudaDescriptors d;
  DecodeDescriptors(&d, 1024, 128);
  attnrt_plan* plan = nullptr;
  const attnrt_status status = attnrt_op_plan(op.get(), d.in_ptrs.data(), d.in_ptrs.size(),
                                              d.out_ptrs.data(), d.out_ptrs.size(), &plan);
  EXPECT_NE(status, ATTNRT_OK);
  const std::string error = LastError(status);
  EXPECT_TRUE(ContainsI(error, "cuda_xqa.gqa.xqa.sm80")) << error;
  EXPECT_TRUE(ContainsI(error, "no CUDA device")) << error;
  if (plan != nullptr) attnrt_plan_release(plan);
}

}  // namespace
}  // namespace attnrt_test
