// plugin-inspect explain/run --op sparse_mla, black-box: the JSON lists both kernels in rank order,
// a run of every scenario agrees with the scalar kernel, and invalid attribute combinations are
// reported with the attnrt message and exit code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
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

}  // namespace
