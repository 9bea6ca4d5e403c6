// plugin-inspect's command-line grammar and checks, black-box: one --op
// gqa|paged_gqa|sparse_mla|paged_gqa_varlen
// on list, explain and run (--paged as a shorthand); an option of another op is an error naming
// it; --device for every op; --dtype errors list only valid dtypes; explain and run default to
// one preset; list/explain JSON carry the library version, ABI version, threads and the problem;
// a deeply nested attributes.json is refused, not a crash; in file mode each kernel is checked
// against the scalar kernel of its own algorithm (padded rows with a local window differ between
// algorithms); PER_BLOCK_32 (ggml Q8_0 / Q4_0) caches in explain, run and file mode.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "attnrt/attnrt.h"
#include "plugin_inspect_fixture.h"

namespace plugin_inspect_test {
namespace {

using nlohmann::json;

class PluginInspectCli : public PluginInspectFixture {
 protected:
  // Exit code 2 and `message` on stderr.
  void ExpectUsageError(const std::vector<std::string>& args, const std::string& message) const {
    const Result r = Run(args);
    std::string command;
    for (const std::string& arg : args) command += arg + " ";
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.all();
    EXPECT_TRUE(Contains(r.err, message)) << command << "\n" << r.err;
  }

  // Floats that vary (so that kernels of one algorithm are compared on more than a constant).
  static std::string Varied(std::size_t count, float phase) {
    std::string data;
    for (std::size_t i = 0; i < count; ++i) {
      const float value = std::sin(0.37f * static_cast<float>(i) + phase);
      data.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    return data;
  }

  // A first prompt right-padded in batch 1: B=2, S=4, N=2, Nkv=1, H=8, seqlens_k = {3, 1}, T=4,
  // local window 2. Query rows 2 and 3 of batch 1 are padded (s >= T_1 = 2): the naive window is
  // [0, 2), the flash one [max(0, s - 1), min(s + 1, 2)), empty for s = 3.
  void WritePaddedWindowInputs() const {
    WriteBytes(in_ / "query.npy", Npy("<f4", "(2, 4, 16)", Varied(128, 0.0f)));
    WriteBytes(in_ / "key.npy", Npy("<f4", "(2, 4, 8)", Varied(64, 1.0f)));
    WriteBytes(in_ / "value.npy", Npy("<f4", "(2, 4, 8)", Varied(64, 2.0f)));
    WriteBytes(in_ / "seqlens_k.npy", Npy("<i4", "(2,)", Int32(3) + Int32(1)));
    WriteBytes(in_ / "total_sequence_length.npy", Npy("<i4", "(1,)", Int32(4)));
    WriteBytes(in_ / "attributes.json",
               R"({"num_heads": 2, "kv_num_heads": 1, "local_window_size": 2})");
  }

  static std::string ReadFile(const fs::path& path) {
    std::ifstream stream(path, std::ios::binary);
    std::stringstream ss;
    ss << stream.rdbuf();
    return ss.str();
  }
};

// ---- one grammar
// -----------------------------------------------------------------------------------

TEST_F(PluginInspectCli, RunTakesEveryOp) {
  const std::vector<std::string> model{"--model", "llama-3.2-1b", "--context", "8", "--steps",
                                       "1",       "--json"};
  std::vector<std::string> args{"run", "--op", "gqa"};
  args.insert(args.end(), model.begin(), model.end());
  Result r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ParseJson(r)["op"], "gqa");

  args = {"run", "--op", "paged_gqa", "--block-size", "7"};
  args.insert(args.end(), model.begin(), model.end());
  r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  json doc = ParseJson(r);
  EXPECT_EQ(doc["op"], "paged_gqa");
  EXPECT_EQ(doc["paged"]["block_size"], 7) << r.out;
  EXPECT_TRUE(Contains(doc["phases"][0].value("kernel", ""), ".paged_gqa.")) << r.out;

  // --paged stays as the shorthand of --op paged_gqa --block-size.
  args = {"run", "--paged", "5"};
  args.insert(args.end(), model.begin(), model.end());
  r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ParseJson(r)["paged"]["block_size"], 5) << r.out;

  r = Run({"run", "--op", "sparse_mla", "--kv-len", "256", "--topk", "32", "--num-heads", "4",
           "--steps", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(ParseJson(r)["op"], "sparse_mla");
}

TEST_F(PluginInspectCli, ListTakesOp) {
  const Result r = Run({"list", "--op", "paged_gqa", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json doc = ParseJson(r);
  int kernels = 0;
  for (const auto& plugin : doc["plugins"]) {
    for (const auto& kernel : plugin["kernels"]) {
      EXPECT_EQ(kernel["op"], "paged_gqa") << kernel.dump();
      ++kernels;
    }
  }
  EXPECT_GT(kernels, 0) << r.out;
  ExpectUsageError({"list", "--op", "mla"},
                   "unknown --op 'mla' (known: gqa, paged_gqa, sparse_mla, paged_gqa_varlen)");
}

TEST_F(PluginInspectCli, EveryHelpListsEveryOp) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--help"},
                                               {"list", "--help"},
                                               {"explain", "--help"},
                                               {"run", "--help"},
                                               {"explain", "--op", "sparse_mla", "--help"},
                                               {"run", "--op", "paged_gqa_varlen", "--help"}}) {
    const Result r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << "\n" << r.all();
    for (const char* op : {"gqa", "paged_gqa", "sparse_mla", "paged_gqa_varlen"}) {
      EXPECT_TRUE(Contains(r.out, std::string(" ") + op) || Contains(r.out, std::string("|") + op))
          << args[0] << " --help lacks " << op << ":\n"
          << r.out;
    }
  }
  EXPECT_FALSE(Contains(Run({"explain", "--help"}).out, "--op gqa|paged_gqa ")) << "old usage";
}

TEST_F(PluginInspectCli, OptionsOfAnotherOpAreErrors) {
  ExpectUsageError({"run", "--paged-layout", "bnsh", "--context", "8"},
                   "--paged-layout does not apply to --op gqa");
  ExpectUsageError({"explain", "--block-size", "32"}, "--block-size does not apply to --op gqa");
  ExpectUsageError({"explain", "--op", "gqa", "--block-size", "32"},
                   "--block-size does not apply to --op gqa");
  ExpectUsageError({"explain", "--op", "sparse_mla", "--model", "llama-3-8b"},
                   "--model does not apply to --op sparse_mla");
  ExpectUsageError({"run", "--op", "sparse_mla", "--context", "8"},
                   "--context does not apply to --op sparse_mla");
  ExpectUsageError({"explain", "--op", "paged_gqa", "--scenario", "swa"},
                   "--scenario does not apply to --op paged_gqa");
  ExpectUsageError(
      {"run", "--op", "paged_gqa", "--inputs", in_.string(), "--outputs", out_.string()},
      "--inputs does not apply to --op paged_gqa");
  ExpectUsageError({"explain", "--op", "sparse_mla", "--steps", "2"}, "unrecognised option");
  ExpectUsageError({"run", "--op", "gqa", "--paged", "4"}, "does not apply to --op gqa");
  ExpectUsageError({"run", "--paged", "4", "--block-size", "4"}, "both give the block size");
  ExpectUsageError({"run", "--op", "paged_gqa", "--block-size", "0"},
                   "--block-size must be a block size in [1, 1024], got 0");
}

TEST_F(PluginInspectCli, DeviceIsHonouredForEveryOp) {
  for (const std::vector<std::string>& op :
       {std::vector<std::string>{"--op", "gqa"},
        {"--op", "paged_gqa", "--past-len", "64"},
        {"--op", "sparse_mla", "--kv-len", "256", "--topk", "32"}}) {
    std::vector<std::string> args{"explain", "--device", "cuda", "--json"};
    args.insert(args.end(), op.begin(), op.end());
    const Result r = Run(args);
    ASSERT_EQ(r.exit_code, 0) << op[1] << "\n" << r.all();
    const json doc = ParseJson(r);
    EXPECT_EQ(doc["device"], "cuda") << r.out;
    ASSERT_FALSE(doc["candidates"].empty()) << r.out;
    // This build's CPU kernels never run tensors that live on a CUDA device.
    for (const auto& candidate : doc["candidates"]) {
      const std::string kernel = candidate.value("kernel", "");
      if (kernel.rfind("cuda", 0) == 0) continue;
      EXPECT_EQ(candidate["status"], "wrong-device") << op[1] << ": " << candidate.dump();
    }
    bool host_tensor = false;
    for (const auto& tensor : doc["problem"]["tensors"]) {
      if (tensor["name"] == "query" || tensor["name"] == "q") {
        EXPECT_EQ(tensor["device"], "cuda") << tensor.dump();
      }
      host_tensor = host_tensor || tensor["device"] == "cpu";
    }
    // seqlens_k, total_sequence_length and block_table stay on the host (the gqa ops read them
    // there); sparse MLA wants every tensor on q's device.
    EXPECT_EQ(host_tensor, op[1] != "sparse_mla") << r.out;
  }
}

TEST_F(PluginInspectCli, DtypeErrorsListOnlyValidDtypes) {
  for (const char* command : {"explain", "run"}) {
    const Result r = Run({command, "--dtype", "int8"});
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_TRUE(Contains(r.err,
                         "--dtype: unknown query dtype 'int8' (expected float32, float16 "
                         "or bfloat16)"))
        << r.err;
    for (const char* invalid : {"uint8", "int32", "int64"}) {
      EXPECT_FALSE(Contains(r.err, invalid)) << r.err;
    }
  }
  const Result cache = Run({"explain", "--cache-dtype", "int32"});
  EXPECT_EQ(cache.exit_code, 2) << cache.all();
  EXPECT_TRUE(Contains(cache.err, "expected float32, float16, bfloat16, int8 or uint8"))
      << cache.err;
  const Result sparse = Run({"explain", "--op", "sparse_mla", "--dtype", "float32"});
  EXPECT_EQ(sparse.exit_code, 2) << sparse.all();
  EXPECT_TRUE(Contains(sparse.err, "expected bfloat16 or float16")) << sparse.err;
}

TEST_F(PluginInspectCli, ExplainAndRunDefaultToTheSamePreset) {
  const Result explain = Run({"explain", "--json"});
  ASSERT_EQ(explain.exit_code, 0) << explain.all();
  const Result run = Run({"run", "--context", "8", "--steps", "0", "--no-check", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.all();
  const json problem = ParseJson(explain)["problem"];
  EXPECT_EQ(problem["model"], ParseJson(run)["model"]) << explain.out << run.out;
  // Llama 3 8B: 32 query heads, 8 KV heads, head size 128.
  EXPECT_EQ(problem["model"], "llama-3-8b");
  EXPECT_EQ(problem["num_heads"], 32);
  EXPECT_EQ(problem["kv_num_heads"], 8);
  EXPECT_EQ(problem["head_size"], 128);
}

TEST_F(PluginInspectCli, JsonCarriesVersionsThreadsAndTheProblem) {
  const char* version = attnrt_version_string();
  uint32_t major = 0, minor = 0;
  attnrt_abi_version(&major, &minor);
  const std::string abi = std::to_string(major) + "." + std::to_string(minor);
  const Result list = Run({"list", "--json", "--threads", "3"});
  ASSERT_EQ(list.exit_code, 0) << list.all();
  json doc = ParseJson(list);
  EXPECT_EQ(doc["version"], version) << list.out;
  EXPECT_EQ(doc["abi_version"], abi) << list.out;
  EXPECT_EQ(doc["threads"], 3) << list.out;

  const Result explain =
      Run({"explain",     "--json",  "--threads",   "2", "--num-heads", "4", "--kv-num-heads", "2",
           "--head-size", "16",      "--batch",     "2", "--seq-len",   "3", "--past-len",     "5",
           "--dtype",     "float16", "--do-rotary", "0"});
  ASSERT_EQ(explain.exit_code, 0) << explain.all();
  doc = ParseJson(explain);
  EXPECT_EQ(doc["version"], version);
  EXPECT_EQ(doc["abi_version"], abi);
  EXPECT_EQ(doc["threads"], 2);
  const json& problem = doc["problem"];
  EXPECT_EQ(problem["dtype"], "float16");
  EXPECT_EQ(problem["cache_dtype"], "float16");
  EXPECT_EQ(problem["total_len"], 8);  // P + S
  // B=2, S=3, N=4, Nkv=2, H=16, P=5: present has max(T, P) = 8 rows.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"query", {2, 3, 64}},           {"key", {2, 3, 32}},
      {"value", {2, 3, 32}},           {"past_key", {2, 2, 5, 16}},
      {"past_value", {2, 2, 5, 16}},   {"seqlens_k", {2}},
      {"output", {2, 3, 64}},          {"present_key", {2, 2, 8, 16}},
      {"present_value", {2, 2, 8, 16}}};
  for (const auto& [name, shape] : expected) {
    bool found = false;
    for (const auto& tensor : problem["tensors"]) {
      if (tensor["name"] != name) continue;
      found = true;
      EXPECT_EQ(tensor["shape"].get<std::vector<int64_t>>(), shape) << tensor.dump();
      EXPECT_EQ(tensor["dtype"], name == "seqlens_k" ? "int32" : "float16") << tensor.dump();
    }
    EXPECT_TRUE(found) << name << " missing:\n" << problem.dump(2);
  }

  const Result sparse = Run({"explain", "--op", "sparse_mla", "--json", "--kv-len", "256", "--topk",
                             "32", "--num-heads", "8"});
  ASSERT_EQ(sparse.exit_code, 0) << sparse.all();
  doc = ParseJson(sparse);
  EXPECT_EQ(doc["version"], version);
  EXPECT_EQ(doc["problem"]["num_heads"], 8);
  // TND q: (T1, N, 512) bfloat16 with T1 = B * S1 = 1.
  EXPECT_EQ(doc["problem"]["tensors"][0]["name"], "q");
  EXPECT_EQ(doc["problem"]["tensors"][0]["shape"].get<std::vector<int64_t>>(),
            (std::vector<int64_t>{1, 8, 512}));
  EXPECT_EQ(doc["problem"]["tensors"][0]["dtype"], "bfloat16");
}

// ---- file mode
// -------------------------------------------------------------------------------------

TEST_F(PluginInspectCli, DeeplyNestedAttributesJsonIsAnErrorNotACrash) {
  for (const auto& [open, middle, close] :
       {std::tuple<std::string, std::string, std::string>{"[", "", "]"}, {"{\"a\": ", "1", "}"}}) {
    WriteValidInputs();
    std::string text;
    for (int i = 0; i < 100000; ++i) text += open;
    text += middle;
    for (int i = 0; i < 100000; ++i) text += close;
    WriteBytes(in_ / "attributes.json", text);
    const Result r = RunFiles();
    EXPECT_EQ(r.exit_code, 1) << open << ": " << r.all();
    EXPECT_TRUE(Contains(r.err, "attributes.json: JSON nested deeper than 64 levels")) << r.err;
  }
}

TEST_F(PluginInspectCli, EachKernelIsCheckedAgainstTheScalarKernelOfItsAlgorithm) {
  WritePaddedWindowInputs();
  const std::string cpu = ATTNRT_TEST_CPU_PLUGIN;
  // The case is one where the algorithms legitimately differ: flash and naive scalar outputs.
  const Result flash =
      Run({"run", "--inputs", in_.string(), "--outputs", (root_ / "flash").string(), "--kernel",
           cpu + ".gqa.flash.scalar", "--no-check"});
  const Result naive =
      Run({"run", "--inputs", in_.string(), "--outputs", (root_ / "naive").string(), "--kernel",
           cpu + ".gqa.naive.scalar", "--no-check"});
  ASSERT_EQ(flash.exit_code, 0) << flash.all();
  ASSERT_EQ(naive.exit_code, 0) << naive.all();
  EXPECT_NE(ReadFile(root_ / "flash" / "output.npy"), ReadFile(root_ / "naive" / "output.npy"));

  const Result list = Run({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.all();
  const json listing = ParseJson(list);
  std::vector<std::string> ran;
  for (const auto& plugin : listing["plugins"]) {
    for (const auto& kernel : plugin["kernels"]) {
      const std::string name = kernel["name"];
      if (name.rfind(cpu + ".gqa.", 0) != 0 || name.ends_with(".scalar")) continue;
      const Result r = Run({"run", "--inputs", in_.string(), "--outputs", out_.string(), "--kernel",
                            name, "--json"});
      const json doc = ParseJson(r);
      // A SIMD kernel this CPU lacks declines: no kernel accepts the pinned problem.
      if (r.exit_code == 1 && doc.contains("error") &&
          doc["error"]["status"] == "ATTNRT_ERROR_UNSUPPORTED") {
        continue;
      }
      ASSERT_EQ(r.exit_code, 0) << name << ": " << r.all();
      const std::string algorithm = name.substr(0, name.rfind('.'));
      EXPECT_EQ(doc["kernel"], name) << r.out;
      EXPECT_EQ(doc["reference_kernel"], algorithm + ".scalar") << r.out;
      EXPECT_TRUE(doc["passed"].get<bool>()) << r.out;
      ran.push_back(name);
    }
  }
  EXPECT_NE(std::find(ran.begin(), ran.end(), cpu + ".gqa.naive." ATTNRT_TEST_CPU_SIMD), ran.end())
      << "the naive " ATTNRT_TEST_CPU_SIMD " kernel did not run";
}

}  // namespace
}  // namespace plugin_inspect_test

namespace plugin_inspect_test {
namespace {

// The runtime never searches a relative folder (docs/plugins.md, Security); --plugin-path is typed
// on the command line, so the tool makes it absolute from the current directory itself.
TEST_F(PluginInspectCli, RelativePluginPathIsTakenFromTheCurrentDirectory) {
  const fs::path dir = root_ / "plugins";
  fs::create_directories(dir);
  WriteBytes(dir / "libattnrt_x.so", "not a library");
  const fs::path relative = fs::relative(dir, fs::current_path());
  ASSERT_TRUE(relative.is_relative()) << relative;
  const Result r =
      Run({"list", "--json", "--no-default-paths", "--plugin-path", relative.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  ASSERT_EQ(doc["diagnostics"].size(), 1u) << r.out;
  EXPECT_EQ(fs::path(doc["diagnostics"][0]["path"].get<std::string>()),
            fs::absolute(relative) / "libattnrt_x.so")
      << r.out;
  EXPECT_TRUE(Contains(doc["diagnostics"][0]["message"].get<std::string>(),
                       "not a loadable shared library"))
      << r.out;
}

}  // namespace
}  // namespace plugin_inspect_test

// ---- PER_BLOCK_32 (ggml Q8_0 / Q4_0) KV caches
// ---------------------------------------------------------

namespace plugin_inspect_test {
namespace {

// The cache row of a PER_BLOCK_32 cache (abi/attnrt/ops/gqa.h): head_size / 32 blocks of 34 bytes
// (Q8_0, --bits 8) or 18 bytes (Q4_0, --bits 4), each holding its own float16 scale.
int64_t BlockRowBytes(int bits, int64_t head_size) {
  return head_size / 32 * (bits == 8 ? 34 : 18);
}

const json* FindTensor(const json& problem, const std::string& name) {
  for (const auto& tensor : problem["tensors"]) {
    if (tensor["name"] == name) return &tensor;
  }
  return nullptr;
}

TEST_F(PluginInspectCli, ExplainRanksBlockQuantizedCaches) {
  const std::string cpu = ATTNRT_TEST_CPU_PLUGIN;
  for (const int bits : {8, 4}) {
    for (const std::string op : {"gqa", "paged_gqa"}) {
      // Both spellings of the quantization type.
      const std::string quant = op == "gqa" ? "per_block_32" : "PER_BLOCK_32";
      const Result r = Run({"explain", "--json", "--op", op, "--num-heads", "4", "--kv-num-heads",
                            "2", "--head-size", "64", "--past-len", "40", "--seq-len", "1",
                            "--quant", quant, "--bits", std::to_string(bits)});
      ASSERT_EQ(r.exit_code, 0) << op << " " << bits << "\n" << r.all();
      const json doc = ParseJson(r);
      const json& problem = doc["problem"];
      EXPECT_EQ(problem["attributes"]["k_quant_type"], "per_block_32") << r.out;
      EXPECT_EQ(problem["attributes"]["v_quant_type"], "per_block_32") << r.out;
      EXPECT_EQ(problem["attributes"]["kv_cache_bit_width"], bits) << r.out;
      EXPECT_EQ(problem["cache_dtype"], "uint8") << r.out;
      EXPECT_TRUE(Contains(problem["description"].get<std::string>(),
                           bits == 8 ? " per-block-q8_0" : " per-block-q4_0"))
          << r.out;
      // The blocks hold the scales: no k_scale/v_scale inputs; uint8 caches of whole blocks.
      EXPECT_EQ(FindTensor(problem, "k_scale"), nullptr) << r.out;
      EXPECT_EQ(FindTensor(problem, "v_scale"), nullptr) << r.out;
      for (const char* name : op == "gqa" ? std::vector<const char*>{"past_key", "past_value"}
                                          : std::vector<const char*>{"key_cache", "value_cache"}) {
        const json* cache = FindTensor(problem, name);
        ASSERT_NE(cache, nullptr) << name << " missing: " << r.out;
        EXPECT_EQ((*cache)["dtype"], "uint8") << cache->dump();
        EXPECT_EQ((*cache)["shape"].back(), BlockRowBytes(bits, 64)) << cache->dump();
      }
      std::string selected;
      for (const auto& candidate : doc["candidates"]) {
        if (candidate["status"] == "selected") selected = candidate["kernel"];
      }
      EXPECT_EQ(selected.rfind(cpu + "." + op + ".", 0), 0u) << r.out;
    }
  }
}

TEST_F(PluginInspectCli, RunChecksBlockQuantizedCachesAgainstTheScalarKernel) {
  const std::string cpu = ATTNRT_TEST_CPU_PLUGIN;
  for (const int bits : {8, 4}) {
    for (const std::vector<std::string>& op :
         {std::vector<std::string>{"--op", "gqa"}, {"--op", "paged_gqa", "--block-size", "7"}}) {
      std::vector<std::string> args{"run",       "--json",
                                    "--model",   "llama-3.2-1b",
                                    "--context", "37",
                                    "--steps",   "2",
                                    "--batch",   "2",
                                    "--seed",    "21",
                                    "--quant",   "per_block_32",
                                    "--bits",    std::to_string(bits)};
      args.insert(args.end(), op.begin(), op.end());
      const Result r = Run(args);
      ASSERT_EQ(r.exit_code, 0) << op[1] << " " << bits << "\n" << r.all();
      const json doc = ParseJson(r);
      EXPECT_EQ(doc["verdict"], "passed") << r.out;
      ASSERT_EQ(doc["phases"].size(), 2u) << r.out;
      for (const auto& phase : doc["phases"]) {
        EXPECT_EQ(phase["kernel"].get<std::string>().rfind(cpu + "." + op[1] + ".", 0), 0u)
            << r.out;
        EXPECT_TRUE(phase["checked"].get<bool>()) << r.out;
        // The new rows are quantized by one rule: the blocks agree byte for byte.
        EXPECT_EQ(phase["max_abs_error"]["present_key"], 0.0) << r.out;
        EXPECT_EQ(phase["max_abs_error"]["present_value"], 0.0) << r.out;
      }
    }
  }
}

TEST_F(PluginInspectCli, BlockQuantizedHeadSizeMustBeAMultipleOf32) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"explain", "--past-len", "16", "--bits", "8"},
        {"explain", "--op", "paged_gqa", "--past-len", "16", "--bits", "4"},
        {"run", "--context", "8", "--steps", "1", "--bits", "4"},
        {"run", "--paged", "4", "--context", "8", "--steps", "1", "--bits", "8"}}) {
    std::vector<std::string> command = args;
    for (const char* word : {"--num-heads", "4", "--kv-num-heads", "2", "--head-size", "48",
                             "--quant", "per_block_32"}) {
      command.push_back(word);
    }
    const Result r = Run(command);
    EXPECT_EQ(r.exit_code, 1) << args[0] << "\n" << r.all();
    const std::string block = args.back() == "8" ? "Q8_0" : "Q4_0";
    EXPECT_TRUE(Contains(r.err, "head_size must be a multiple of 32 for a PER_BLOCK_32 KV cache (" +
                                    block + " blocks of 32 elements), got 48"))
        << args[0] << "\n"
        << r.err;
  }
}

TEST_F(PluginInspectCli, UnknownQuantizationTypeListsPerBlock32) {
  ExpectUsageError({"explain", "--quant", "per_block_64"},
                   "unknown quantization type 'per_block_64' (expected none, per_tensor, "
                   "per_channel or per_block_32)");
}

// File mode: past caches of hand-written Q8_0 / Q4_0 blocks (B=1, S=1, N=2, Nkv=1, H=32, P=3),
// new key 0.5 and value -0.5 everywhere. The new present row is ggml's quantize_row_q8_0_ref /
// quantize_row_q4_0_ref of a constant row: Q8_0 d = 0.5/127 (float16 0x1C08), q = +-127; Q4_0
// d = -m/8 = -+0.0625 (float16 0xAC00 for the key, 0x2C00 for the value), every code 0.
TEST_F(PluginInspectCli, FileModeReadsAndWritesBlockQuantizedCaches) {
  for (const int bits : {8, 4}) {
    const int64_t row = BlockRowBytes(bits, 32);
    std::string past;
    for (int r = 0; r < 3; ++r) {
      past += std::string("\x00\x38", 2);  // d = 0.5
      for (int64_t j = 2; j < row; ++j) {
        // Q8_0: int8 codes in [-5, 5]; Q4_0: two 4-bit codes per byte.
        past += static_cast<char>(bits == 8 ? (j + r) % 11 - 5 : (j * 7 + r) % 256);
      }
    }
    const std::string shape = "(1, 1, 3, " + std::to_string(row) + ")";
    WriteBytes(in_ / "query.npy", Npy("<f4", "(1, 1, 64)", Varied(64, 0.5f)));
    WriteBytes(in_ / "key.npy", Npy("<f4", "(1, 1, 32)", Floats(32, 0.5f)));
    WriteBytes(in_ / "value.npy", Npy("<f4", "(1, 1, 32)", Floats(32, -0.5f)));
    WriteBytes(in_ / "past_key.npy", Npy("|u1", shape, past));
    WriteBytes(in_ / "past_value.npy", Npy("|u1", shape, past));
    WriteBytes(in_ / "seqlens_k.npy", Npy("<i4", "(1,)", Int32(3)));
    WriteBytes(in_ / "total_sequence_length.npy", Npy("<i4", "(1,)", Int32(4)));
    WriteBytes(in_ / "attributes.json",
               R"({"num_heads": 2, "kv_num_heads": 1, "k_quant_type": "PER_BLOCK_32",
                   "v_quant_type": "PER_BLOCK_32", "kv_cache_bit_width": )" +
                   std::to_string(bits) + "}");
    const Result r = Run({"run", "--inputs", in_.string(), "--outputs", out_.string(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << bits << "\n" << r.all();
    EXPECT_TRUE(ParseJson(r)["passed"].get<bool>()) << r.out;
    for (const auto& [name, d, code] :
         {std::tuple<std::string, std::string, char>{
              "present_key", std::string(bits == 8 ? "\x08\x1C" : "\x00\xAC", 2),
              bits == 8 ? '\x7F' : '\x00'},
          {"present_value", std::string(bits == 8 ? "\x08\x1C" : "\x00\x2C", 2),
           bits == 8 ? '\x81' : '\x00'}}) {
      const std::string bytes = ReadFile(out_ / (name + ".npy"));
      ASSERT_GE(bytes.size(), static_cast<std::size_t>(4 * row)) << name;
      EXPECT_TRUE(Contains(bytes.substr(0, bytes.size() - 4 * row),
                           "(1, 1, 4, " + std::to_string(row) + ")"))
          << name;
      const std::string data = bytes.substr(bytes.size() - 4 * row);
      EXPECT_EQ(data.substr(0, 3 * row), past) << name << ": the past rows are copied unchanged";
      const std::string expected = d + std::string(static_cast<std::size_t>(row - 2), code);
      EXPECT_EQ(data.substr(3 * row), expected) << name << " (" << bits << "-bit)";
    }

    // An int8 cache is not a block cache: the dtype error names the blocks expected.
    WriteBytes(in_ / "past_key.npy", Npy("|i1", shape, past));
    const Result wrong = Run({"run", "--inputs", in_.string(), "--outputs", out_.string()});
    EXPECT_EQ(wrong.exit_code, 1) << wrong.all();
    EXPECT_TRUE(Contains(wrong.err, std::string("past_key.npy: expected dtype uint8 (") +
                                        (bits == 8 ? "Q8_0" : "Q4_0") +
                                        " blocks of a PER_BLOCK_32 cache), got int8"))
        << wrong.err;
  }
}

}  // namespace
}  // namespace plugin_inspect_test
