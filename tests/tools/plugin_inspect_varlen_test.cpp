// plugin-inspect --op paged_gqa_varlen, black-box: list shows the varlen kernels only; explain
// ranks them for a packed batch given by --q-lens and --seq-lens (the tensors' shapes follow from
// them: num_tokens = sum of q_lens, one block table row of ceil(T_b / block_size) blocks per
// sequence); run times the op and checks it against the scalar kernel of the same algorithm; bad
// lengths and options of other ops are usage errors naming them.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "plugin_inspect_fixture.h"

namespace plugin_inspect_test {
namespace {

using nlohmann::json;

class PluginInspectVarlen : public PluginInspectFixture {
 protected:
  void ExpectUsageError(const std::vector<std::string>& args, const std::string& message) const {
    const Result r = Run(args);
    std::string command;
    for (const std::string& arg : args) command += arg + " ";
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.all();
    EXPECT_TRUE(Contains(r.err, message)) << command << "\n" << r.err;
  }

  // One prefill chunk of 37 rows among three decodes; blocks of 8 tokens.
  static std::vector<std::string> Problem(const char* command) {
    return {command,
            "--op",
            "paged_gqa_varlen",
            "--q-lens",
            "1,1,37,1",
            "--seq-lens",
            "20,5,64,100",
            "--block-size",
            "8",
            "--num-heads",
            "4",
            "--kv-num-heads",
            "2",
            "--head-size",
            "64"};
  }

  static json Tensor(const json& problem, const std::string& name) {
    for (const json& tensor : problem["tensors"]) {
      if (tensor["name"] == name) return tensor;
    }
    return json();
  }
};

TEST_F(PluginInspectVarlen, ListShowsTheVarlenKernelsOnly) {
  const Result r = Run({"list", "--op", "paged_gqa_varlen", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json doc = ParseJson(r);
  EXPECT_EQ(doc["op"], "paged_gqa_varlen");
  std::vector<std::string> names;
  for (const auto& plugin : doc["plugins"]) {
    for (const auto& kernel : plugin["kernels"]) {
      EXPECT_EQ(kernel["op"], "paged_gqa_varlen") << kernel.dump();
      names.push_back(kernel["name"]);
    }
  }
  EXPECT_NE(std::find(names.begin(), names.end(),
                      ATTNRT_TEST_CPU_PLUGIN ".paged_gqa_varlen.naive.scalar"),
            names.end())
      << r.out;
  EXPECT_NE(std::find(names.begin(), names.end(),
                      ATTNRT_TEST_CPU_PLUGIN ".paged_gqa_varlen.flash.scalar"),
            names.end())
      << r.out;
}

// The paged ops' p_precision (ABI 1.5) is an attribute of the explained problem: in the JSON
// problem and the headline, "exact" unless --p-precision says input; other values are refused.
TEST_F(PluginInspectVarlen, ExplainShowsPPrecision) {
  std::vector<std::string> args = Problem("explain");
  args.push_back("--json");
  const json exact = ParseJson(Run(args));
  EXPECT_EQ(exact["problem"]["p_precision"], "exact") << exact["problem"].dump();
  args.insert(args.end(), {"--p-precision", "input"});
  const json input = ParseJson(Run(args));
  EXPECT_EQ(input["problem"]["p_precision"], "input") << input["problem"].dump();
  int selected = 0;
  for (const json& candidate : input["candidates"]) selected += candidate["status"] == "selected";
  EXPECT_EQ(selected, 1) << input["candidates"].dump();
  std::vector<std::string> text_args = Problem("explain");
  text_args.insert(text_args.end(), {"--p-precision", "input"});
  const Result text = Run(text_args);
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_TRUE(Contains(text.out, "p_precision input")) << text.out;
  std::vector<std::string> paged = {"explain", "--op",          "paged_gqa", "--block-size",
                                    "16",      "--p-precision", "input",     "--json"};
  const Result paged_result = Run(paged);
  ASSERT_EQ(paged_result.exit_code, 0) << paged_result.all();
  EXPECT_EQ(ParseJson(paged_result)["problem"]["p_precision"], "input") << paged_result.out;
  std::vector<std::string> bad = Problem("explain");
  bad.insert(bad.end(), {"--p-precision", "half"});
  ExpectUsageError(bad, "--p-precision must be exact or input, got 'half'");
}

TEST_F(PluginInspectVarlen, ExplainRanksTheKernelsForThePackedBatch) {
  std::vector<std::string> args = Problem("explain");
  args.push_back("--json");
  const Result r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json doc = ParseJson(r);
  EXPECT_EQ(doc["op"], "paged_gqa_varlen");
  const json& problem = doc["problem"];
  EXPECT_EQ(problem["q_lens"], json::parse("[1, 1, 37, 1]"));
  EXPECT_EQ(problem["seq_lens"], json::parse("[20, 5, 64, 100]"));
  EXPECT_EQ(problem["num_tokens"], 40);
  // 40 rows of N*H = 256 and Nkv*H = 128; blocks 3 + 1 + 8 + 13 = 25 of [8, 2, 64] (BSNH).
  EXPECT_EQ(Tensor(problem, "query")["shape"], json::parse("[40, 256]")) << problem.dump();
  EXPECT_EQ(Tensor(problem, "key")["shape"], json::parse("[40, 128]")) << problem.dump();
  EXPECT_EQ(Tensor(problem, "key_cache")["shape"], json::parse("[25, 8, 2, 64]")) << problem.dump();
  EXPECT_EQ(Tensor(problem, "query_start_loc")["shape"], json::parse("[5]")) << problem.dump();
  EXPECT_EQ(Tensor(problem, "block_table")["shape"], json::parse("[4, 13]")) << problem.dump();
  EXPECT_EQ(Tensor(problem, "output")["shape"], json::parse("[40, 256]")) << problem.dump();
  int selected = 0, previous = 1 << 30;
  for (const json& candidate : doc["candidates"]) {
    EXPECT_TRUE(Contains(candidate["kernel"], ".paged_gqa_varlen.")) << candidate.dump();
    EXPECT_LE(candidate["priority"].get<int>(), previous) << doc["candidates"].dump();
    previous = candidate["priority"];
    selected += candidate["status"] == "selected";
  }
  EXPECT_EQ(selected, 1) << doc["candidates"].dump();
  // Both algorithms, scalar and SIMD, of the CPU plugin (cpu_x86 lists 7, cpu_arm 5).
  EXPECT_GE(doc["candidates"].size(), 4u);

  // BNSH pools: [blocks, Nkv, block_size, H].
  args.insert(args.end(), {"--paged-layout", "bnsh"});
  const json bnsh = ParseJson(Run(args));
  EXPECT_EQ(Tensor(bnsh["problem"], "value_cache")["shape"], json::parse("[25, 2, 8, 64]"));
  // Text: the headline names the op and the lengths.
  const Result text = Run(Problem("explain"));
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_TRUE(Contains(text.out, "paged_gqa_varlen: B=4 q_lens=1,1,37,1 seq_lens=20,5,64,100"))
      << text.out;
}

// Context lengths up to int32's largest: the block count is computed in 64 bits (2147483647 + 15
// had wrapped to a negative block count, refused as 'key_cache: dimension 0 must be >= 0'), and
// a row of more token slots than int32 counts is a usage error naming --seq-lens.
TEST_F(PluginInspectVarlen, SeqLensNearInt32MaxAreCountedOrRefusedByName) {
  // 2147482800 + 999 is past int32; 2147483 blocks of 1000 are 2147483000 token slots (the table
  // is allocated whole, so the cases keep it small).
  for (const auto& [seq_len, block_size, blocks] :
       {std::tuple{"2147482800", "1000", 2147483}, {"2147483000", "1000", 2147483}}) {
    const Result r = Run({"explain", "--op", "paged_gqa_varlen", "--json", "--q-lens", "1",
                          "--seq-lens", seq_len, "--block-size", block_size, "--num-heads", "2",
                          "--kv-num-heads", "1", "--head-size", "8"});
    ASSERT_EQ(r.exit_code, 0) << seq_len << " " << block_size << "\n" << r.all();
    const json doc = ParseJson(r);
    EXPECT_EQ(Tensor(doc["problem"], "block_table")["shape"],
              json::array({1, static_cast<int64_t>(blocks)}))
        << r.out;
  }
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "1", "--seq-lens",
                    "2147483647", "--block-size", "16"},
                   "--seq-lens: the longest sequence needs 134217728 blocks of --block-size 16, "
                   "2147483648 token slots");
  // Two such sequences need more blocks than block_table (int32) numbers.
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "1,1", "--seq-lens",
                    "2147483647,2147483647", "--block-size", "1"},
                   "--seq-lens: the sequences need 4294967294 blocks");
}

// Every numeric option of the common set is range-checked with a usage error naming it.
TEST_F(PluginInspectVarlen, ThreadsOutsideTheRuntimesRangeIsAUsageError) {
  for (const char* threads : {"0", "1025", "2147483647"}) {
    ExpectUsageError({"list", "--threads", threads},
                     std::string("--threads must be in [1, 1024], got ") + threads);
  }
  ExpectUsageError({"list", "--threads", "2147483648"}, "--threads");
}

TEST_F(PluginInspectVarlen, DeviceDescribesTheTensorsButNotTheHostReadOnes) {
  std::vector<std::string> args = Problem("explain");
  args.insert(args.end(), {"--json", "--device", "cuda"});
  const Result r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json doc = ParseJson(r);
  EXPECT_EQ(doc["device"], "cuda");
  for (const char* name : {"query", "key", "value", "key_cache", "value_cache", "output"}) {
    EXPECT_EQ(Tensor(doc["problem"], name)["device"], "cuda") << name << "\n" << r.out;
  }
  for (const char* name : {"query_start_loc", "seq_lens", "block_table"}) {
    EXPECT_EQ(Tensor(doc["problem"], name)["device"], "cpu") << name << "\n" << r.out;
  }
}

TEST_F(PluginInspectVarlen, RunTimesTheOpAndChecksItAgainstTheScalarKernel) {
  std::vector<std::string> args = Problem("run");
  args.insert(args.end(), {"--json", "--steps", "3", "--seed", "5"});
  Result r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  json doc = ParseJson(r);
  EXPECT_EQ(doc["op"], "paged_gqa_varlen");
  EXPECT_TRUE(Contains(doc["kernel"], ".paged_gqa_varlen.")) << r.out;
  EXPECT_EQ(doc["steps"], 3);
  EXPECT_GT(doc["ms_per_run"].get<double>(), 0.0);
  EXPECT_TRUE(doc["check"]["pass"].get<bool>()) << r.out;
  EXPECT_LE(doc["check"]["max_abs_error"].get<double>(), 1e-4) << r.out;

  // A pinned naive kernel is checked against the naive scalar one, in bfloat16.
  args.insert(args.end(), {"--kernel", "*.paged_gqa_varlen.naive." ATTNRT_TEST_CPU_SIMD, "--dtype",
                           "bfloat16"});
  r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  doc = ParseJson(r);
  EXPECT_EQ(doc["kernel"], ATTNRT_TEST_CPU_PLUGIN ".paged_gqa_varlen.naive." ATTNRT_TEST_CPU_SIMD);
  EXPECT_EQ(doc["check"]["against"], ATTNRT_TEST_CPU_PLUGIN ".paged_gqa_varlen.naive.scalar");
  EXPECT_EQ(doc["problem"]["dtype"], "bfloat16");

  r = Run(Problem("run"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(Contains(r.out, "ms/run")) << r.out;
  EXPECT_TRUE(Contains(r.out, "PASS")) << r.out;
}

TEST_F(PluginInspectVarlen, BadLengthsAndOptionsOfOtherOpsAreUsageErrors) {
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "1,x"},
                   "--q-lens must be comma-separated integers >= 0, got '1,x'");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "5", "--seq-lens", "3"},
                   "--seq-lens: sequence 0 has context length 3, less than its query length 5");
  ExpectUsageError({"run", "--op", "paged_gqa_varlen", "--q-lens", "1,1", "--seq-lens", "4"},
                   "--seq-lens has 1 sequences, --q-lens 2");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--batch", "3", "--q-lens", "1,2"},
                   "--batch 3 but --q-lens has 2 sequences");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--block-size", "0"},
                   "--block-size must be a block size in [1, 1024], got 0");
  ExpectUsageError({"run", "--op", "paged_gqa_varlen", "--steps", "0"}, "--steps must be >= 1");
  ExpectUsageError({"run", "--op", "paged_gqa_varlen", "--context", "8"},
                   "--context does not apply to --op paged_gqa_varlen (an option of --op gqa, "
                   "paged_gqa)");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--scenario", "swa"},
                   "--scenario does not apply to --op paged_gqa_varlen");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--do-rotary"},
                   "--do-rotary does not apply to --op paged_gqa_varlen");
  ExpectUsageError({"explain", "--op", "paged_gqa", "--q-lens", "1,2"},
                   "--q-lens does not apply to --op paged_gqa (an option of --op "
                   "paged_gqa_varlen)");
  ExpectUsageError({"run", "--op", "gqa", "--seq-lens", "4"},
                   "--seq-lens does not apply to --op gqa (an option of --op paged_gqa_varlen)");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "2000000000,2000000000",
                    "--seq-lens", "2000000000,2000000000"},
                   "--q-lens: the query rows add up to 4000000000, more than query_start_loc");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--q-lens", "1,1", "--seq-lens",
                    "2000000000,2000000000", "--block-size", "1"},
                   "--seq-lens: the sequences need 4000000000 blocks of --block-size 1");
  ExpectUsageError({"explain", "--op", "paged_gqa_varlen", "--paged", "8"},
                   "does not apply to --op paged_gqa_varlen");
}

}  // namespace
}  // namespace plugin_inspect_test
