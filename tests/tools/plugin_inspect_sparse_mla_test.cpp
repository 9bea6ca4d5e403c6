// plugin-inspect explain/run --op sparse_mla, black-box: the JSON lists both kernels in rank order,
// a run of every scenario agrees with the scalar kernel, and invalid attribute combinations are
// reported with the attnrt message and exit code 1. Global slot ids (--topk-value-mode 3) and
// strided caches (--block-stride) address the same keys as the block tables of the same workload:
// the outputs are bitwise those of the compact topk_value_mode 1 run.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

using nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
};

Result RunTool(const std::string& arguments) {
  Result r;
  const std::string command =
      std::string(ATTNRT_TEST_EMULATOR) + ATTNRT_TEST_PLUGIN_INSPECT + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(PluginInspectSparseMla, ExplainRanksEveryKernel) {
  const Result r = RunTool("explain --op sparse_mla --kv-len 512 --topk 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["op"], "sparse_mla");
#if defined(__aarch64__)
  ASSERT_EQ(j["candidates"].size(), 2u) << r.out;
  EXPECT_EQ(j["candidates"][0]["kernel"], "sparse_mla.sparse_mla.flash.neon");
  EXPECT_EQ(j["candidates"][1]["kernel"], "sparse_mla.sparse_mla.flash.scalar");
#else
  ASSERT_EQ(j["candidates"].size(), 5u) << r.out;
  EXPECT_EQ(j["candidates"][0]["kernel"], "sparse_mla.sparse_mla.flash.amx_bf16");
  EXPECT_EQ(j["candidates"][1]["kernel"], "sparse_mla.sparse_mla.flash.avx512");
  EXPECT_EQ(j["candidates"][2]["kernel"], "sparse_mla.sparse_mla.flash.avx512_bf16");
  EXPECT_EQ(j["candidates"][3]["kernel"], "sparse_mla.sparse_mla.flash.avx2");
  EXPECT_EQ(j["candidates"][4]["kernel"], "sparse_mla.sparse_mla.flash.scalar");
#endif
}

TEST(PluginInspectSparseMla, RunEveryScenarioAgreesWithTheScalarKernel) {
  for (const std::string& flags :
       {std::string("--scenario csa --quant-mode 1 --kv-len 700 --topk 96 --num-heads 8 --q-len 2"),
        std::string("--scenario hca --quant-mode 2 --kv-len 900 --cmp-ratio 8 --num-heads 4"),
        std::string("--scenario swa --quant-mode 3 --dtype f16 --layout-q bsnd --layout-kv bsnd "
                    "--kv-len 200 --q-len 3 --num-heads 4 --lse")}) {
    const Result r = RunTool("run --op sparse_mla " + flags + " --steps 1 --json");
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
    const json j = json::parse(r.out);
    EXPECT_TRUE(j["check"]["pass"].get<bool>()) << r.out;
    EXPECT_GT(j["kv_gb_per_s"].get<double>(), 0.0) << r.out;
  }
}

TEST(PluginInspectSparseMla, InvalidCombinationsAreReported) {
  Result r = RunTool("run --op sparse_mla --quant-mode 2 --layout-q bsnd --layout-kv bsnd");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("PA_BBND"), std::string::npos) << r.out;
  r = RunTool("explain --op sparse_mla --scenario xyz");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--scenario"), std::string::npos) << r.out;
}

// The workload of one seed in four forms: block tables over compact caches (topk_value_mode 1),
// global slot ids, caches whose blocks lie a stride apart in a bigger buffer, and both. The keys
// and their order are the same, so attn_out is bitwise the same (its digest), and each run agrees
// with the scalar kernel.
TEST(PluginInspectSparseMla, GlobalSlotIdsAndBlockStridesGiveTheBlockTablesAnswer) {
  for (const std::string& base :
       {std::string("--scenario csa --quant-mode 2 --kv-len 700 --topk 96 --num-heads 8 --q-len 2 "
                    "--batch 2"),
        std::string("--scenario swa --quant-mode 1 --layout-q bsnd --window 0 --kv-len 300 "
                    "--q-len 3 --num-heads 4 --lse"),
        std::string("--scenario csa --quant-mode 3 --dtype f16 --kv-len 500 --topk 40 --q-len 2 "
                    "--num-heads 4 --block-size 16")}) {
    std::string digest;
    // 40002 bytes: above every cache's block (64 x 608 bytes at most), an even number for the
    // float16 ori_kv of quant_mode 3, and not a multiple of any token size.
    for (const std::string& variant : {std::string(""), std::string(" --topk-value-mode 3"),
                                       std::string(" --block-stride 40002"),
                                       std::string(" --topk-value-mode 3 --block-stride 40002")}) {
      const std::string flags = base + variant;
      const Result r = RunTool("run --op sparse_mla " + flags + " --steps 1 --json");
      ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.out;
      const json j = json::parse(r.out);
      EXPECT_TRUE(j["check"]["pass"].get<bool>()) << flags << "\n" << r.out;
      EXPECT_EQ(j["problem"]["topk_value_mode"],
                variant.find("--topk-value-mode 3") != std::string::npos ? 3 : 1);
      const std::string d = j["attn_out_digest"].get<std::string>();
      if (digest.empty()) digest = d;
      EXPECT_EQ(d, digest) << flags;
    }
  }
}

// explain describes what the op gets: ori_sparse_indices (one row of window slots per query row),
// no block tables or kv lengths, and caches with their strides.
TEST(PluginInspectSparseMla, ExplainShowsSlotListsAndStridedCaches) {
  const Result r = RunTool(
      "explain --op sparse_mla --kv-len 512 --topk 64 --q-len 3 --batch 2 --window 100 "
      "--topk-value-mode 3 --block-stride 40000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["problem"]["block_stride"], 40000);
  EXPECT_NE(
      j["problem"]["description"].get<std::string>().find("block_stride=40000 topk_value_mode=3"),
      std::string::npos)
      << r.out;
  std::map<std::string, json> tensors;
  for (const json& t : j["problem"]["tensors"]) tensors[t["name"].get<std::string>()] = t;
  ASSERT_TRUE(tensors.count("ori_sparse_indices")) << r.out;
  EXPECT_EQ(tensors["ori_sparse_indices"]["shape"], json::array({6, 1, 100}));
  EXPECT_EQ(tensors["cmp_sparse_indices"]["shape"], json::array({6, 1, 64}));
  for (const char* absent :
       {"ori_block_table", "cmp_block_table", "seqused_ori_kv", "cmp_residual_kv"}) {
    EXPECT_FALSE(tensors.count(absent)) << absent;
  }
  // 512 rows of 64-token blocks per batch: 8 ori blocks per batch; 128 cmp rows: 2 blocks.
  EXPECT_EQ(tensors["ori_kv"]["shape"], json::array({16, 64, 1, 608}));
  EXPECT_EQ(tensors["ori_kv"]["strides"], json::array({40000, 608, 608, 1}));
  EXPECT_EQ(tensors["cmp_kv"]["strides"], json::array({40000, 608, 608, 1}));
  bool selected = false;
  for (const json& c : j["candidates"]) selected = selected || c["status"] == "selected";
  EXPECT_TRUE(selected) << r.out;
}

TEST(PluginInspectSparseMla, InvalidSlotAndStrideFlagsAreReported) {
  // The runtime refuses a stride below the block's bytes, naming the input and the strides.
  Result r = RunTool("explain --op sparse_mla --kv-len 512 --topk 64 --block-stride 100");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("ori_kv: a PA_BBND cache may be strided in its block dimension only"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("got [100, 608, 608, 1]"), std::string::npos) << r.out;
  // The tool refuses what it cannot lay out.
  for (const std::string& flags :
       {std::string("--topk-value-mode 3 --scenario hca"),
        std::string("--topk-value-mode 3 --layout-kv tnd"), std::string("--topk-value-mode 2"),
        std::string("--block-stride 40000 --layout-q bsnd --layout-kv bsnd"),
        std::string("--block-stride 40001 --quant-mode 3 --block-size 16")}) {
    r = RunTool("run --op sparse_mla --kv-len 512 --topk 64 " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find(flags.find("stride") != std::string::npos ? "--block-stride"
                                                                   : "--topk-value-mode"),
              std::string::npos)
        << flags << "\n"
        << r.out;
  }
}

}  // namespace
