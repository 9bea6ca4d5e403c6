// plugin-inspect on hostile input: FIFOs and devices where files are expected, malformed .npy
// headers, sizes that overflow or exceed the machine, narrowing attributes.json values, unknown
// input names, --json error reporting and run's small contracts (verdict, --seed, reference
// text). Every case runs the real binary (under `timeout`, so a hang fails instead of blocking)
// on files written here byte by byte.
#include <string>
#include <string_view>
#include <vector>

#include "plugin_inspect_fixture.h"

namespace plugin_inspect_test {
namespace {

class PluginInspectRobustness : public PluginInspectFixture {};

// ---- positive control
// -----------------------------------------------------------------------------

TEST_F(PluginInspectRobustness, ValidInputsRunAndPass) {
  WriteValidInputs();
  const Result r = RunFiles();
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(Contains(r.out, "passed")) << r.out;
  EXPECT_TRUE(fs::is_regular_file(out_ / "output.npy"));
}

TEST_F(PluginInspectRobustness, NpyFormatVersion2IsRead) {
  WriteValidInputs(/*major=*/2);
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 0) << r.all();
}

// ---- 1: every input must be a regular file
// ----------------------------------------------------------

TEST_F(PluginInspectRobustness, FifoInputIsRejectedWithoutBlocking) {
  WriteValidInputs();
  fs::remove(in_ / "query.npy");
  ASSERT_EQ(mkfifo((in_ / "query.npy").c_str(), 0600), 0);
  const Result r = RunFiles();
  EXPECT_NE(r.exit_code, 124) << "plugin-inspect blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "query.npy: not a regular file")) << r.err;
}

TEST_F(PluginInspectRobustness, DirectoryInputIsRejected) {
  WriteValidInputs();
  fs::remove(in_ / "key.npy");
  fs::create_directory(in_ / "key.npy");
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "key.npy: not a regular file")) << r.err;
}

TEST_F(PluginInspectRobustness, SymlinkToDeviceIsRejected) {
  WriteValidInputs();
  fs::remove(in_ / "query.npy");
  fs::create_symlink("/dev/zero", in_ / "query.npy");
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "query.npy: not a regular file")) << r.err;
}

TEST_F(PluginInspectRobustness, FifoAttributesJsonIsRejectedWithoutBlocking) {
  WriteValidInputs();
  ASSERT_EQ(mkfifo((in_ / "attributes.json").c_str(), 0600), 0);
  const Result r = RunFiles();
  EXPECT_NE(r.exit_code, 124) << "plugin-inspect blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "attributes.json: not a regular file")) << r.err;
}

TEST_F(PluginInspectRobustness, FifoOutputFileIsRejectedWithoutBlocking) {
  WriteValidInputs();
  fs::create_directories(out_);
  ASSERT_EQ(mkfifo((out_ / "output.npy").c_str(), 0600), 0);
  const Result r = RunFiles();
  EXPECT_NE(r.exit_code, 124) << "plugin-inspect blocked on a FIFO";
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "output.npy: exists and is not a regular file")) << r.err;
}

TEST_F(PluginInspectRobustness, OutputsFolderThatIsAFileIsRejected) {
  WriteValidInputs();
  WriteBytes(out_, "not a folder");
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "not a folder")) << r.err;
}

// ---- 2: .npy headers validated before anything is allocated
// ----------------------------------------

TEST_F(PluginInspectRobustness, NpyNegativeDimension) {
  ExpectQueryRejected(Npy("<f4", "(5, -1, 64)", ""), "dimension 1 of 'shape' is -1");
}

TEST_F(PluginInspectRobustness, NpyHugeDimensionIsTruncatedNotOutOfMemory) {
  const Result r = ExpectQueryRejected(Npy("<f4", "(5, 99999999999, 64)", Floats(16)), "truncated");
  EXPECT_TRUE(Contains(r.err, "127999999998720")) << r.err;  // expected bytes
  EXPECT_TRUE(Contains(r.err, "has 64")) << r.err;           // actual bytes
}

TEST_F(PluginInspectRobustness, NpyOverflowingShape) {
  ExpectQueryRejected(Npy("<f4", "(4294967296, 4294967296, 4294967296)", ""), "overflows");
}

TEST_F(PluginInspectRobustness, NpyNonIntegerDimension) {
  ExpectQueryRejected(Npy("<f4", "('a', 1, 64)", Floats(64)), "dimension 0 of 'shape' is 'a'");
  ExpectQueryRejected(Npy("<f4", "(1, 1, 16.0)", Floats(16)), "dimension 2 of 'shape' is 16.0");
}

TEST_F(PluginInspectRobustness, NpyTrailingData) {
  ExpectQueryRejected(Npy("<f4", "(1, 1, 16)", Floats(16) + std::string(100, 'x')),
                      "100 bytes of trailing data");
}

TEST_F(PluginInspectRobustness, NpyTruncatedData) {
  ExpectQueryRejected(Npy("<f4", "(1, 1, 16)", Floats(15)), "truncated");
}

TEST_F(PluginInspectRobustness, NpyDescrSmallerThanData) {
  // float16 header over float32 data: the size no longer matches.
  ExpectQueryRejected(Npy("<f2", "(1, 1, 16)", Floats(16)), "trailing data");
}

TEST_F(PluginInspectRobustness, NpyHeaderLengthBeyondFile) {
  std::string bytes = "\x93NUMPY\x02";
  bytes += '\0';
  bytes += std::string("\x80\x96\x98\x00", 4);  // 10^7
  bytes += std::string(100, ' ');
  ExpectQueryRejected(bytes, "exceeds the file");
}

TEST_F(PluginInspectRobustness, NpyBadMagicAndEmptyFile) {
  ExpectQueryRejected("", "not a .npy file");
  ExpectQueryRejected("\x93NUMPX" + Npy("<f4", "(1, 1, 16)", Floats(16)).substr(6), "magic");
}

TEST_F(PluginInspectRobustness, NpyMalformedDicts) {
  const std::string data = Floats(16);
  ExpectQueryRejected(NpyWithHeader("{'descr': '<f4', 'shape': (1, 1, 16), }", data),
                      "missing key 'fortran_order'");
  ExpectQueryRejected(
      NpyWithHeader(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 16), 'shape': (16,), }", data),
      "'shape' appears twice");
  ExpectQueryRejected(
      NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 16), 'x': 1, }",
                    data),
      "unexpected key 'x'");
  ExpectQueryRejected(Npy("<f4", "(16)", data), "is not a tuple");
  ExpectQueryRejected(
      NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 16), } junk", data),
      "unexpected text after the header dict");
}

// ---- 3: sizes computed and checked before allocating
// -----------------------------------------------

TEST_F(PluginInspectRobustness, HugeContextIsRejectedWithTheSizeNeeded) {
  const Result r =
      Run({"run", "--model", "llama-3.2-1b", "--context", "2147483647", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(Contains(r.err, "--context 2147483647")) << r.err;
  EXPECT_TRUE(Contains(r.err, "KV cache of")) << r.err;
  EXPECT_TRUE(Contains(r.err, "this machine has")) << r.err;
  EXPECT_FALSE(Contains(r.err, "bad_alloc")) << r.err;
}

TEST_F(PluginInspectRobustness, HugeStepsAreRejectedWithTheSizeNeeded) {
  const Result r =
      Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "2147483647"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(Contains(r.err, "--steps 2147483647")) << r.err;
  EXPECT_TRUE(Contains(r.err, "this machine has")) << r.err;
  EXPECT_FALSE(Contains(r.err, "bad_alloc")) << r.err;
}

TEST_F(PluginInspectRobustness, HugeBatchTimesContextIsRejected) {
  const Result r = Run({"run", "--model", "llama-3.2-1b", "--batch", "100000", "--context",
                        "100000000", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(Contains(r.err, "--batch 100000")) << r.err;
  EXPECT_TRUE(Contains(r.err, "this machine has")) << r.err;
  EXPECT_FALSE(Contains(r.err, "bad_alloc")) << r.err;
}

TEST_F(PluginInspectRobustness, ContextBeyondInt32IsRejected) {
  const Result r = Run({"run", "--model", "llama-3.2-1b", "--context", "4294967296"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(Contains(r.err, "--context must be in [1, 2147483647]")) << r.err;
}

TEST_F(PluginInspectRobustness, HugeTotalSequenceLengthFileIsRejected) {
  WriteValidInputs();
  WriteBytes(in_ / "total_sequence_length.npy", Npy("<i4", "(1,)", Int32(2147483647)));
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "total_sequence_length 2147483647")) << r.err;
  EXPECT_TRUE(Contains(r.err, "this machine has")) << r.err;
  EXPECT_FALSE(Contains(r.err, "bad_alloc")) << r.err;
}

// ---- 4: attributes.json values checked for type and range
// ------------------------------------------

TEST_F(PluginInspectRobustness, AttributesIntegerOutOfInt32Range) {
  ExpectAttributesRejected(R"({"num_heads": 4294967300, "kv_num_heads": 1})",
                           "attribute 'num_heads': expected an integer");
}

TEST_F(PluginInspectRobustness, AttributesFloatForInteger) {
  ExpectAttributesRejected(R"({"num_heads": 4.7, "kv_num_heads": 1})", "got float 4.7");
  ExpectAttributesRejected(R"({"num_heads": 2.0, "kv_num_heads": 1})", "attribute 'num_heads'");
}

TEST_F(PluginInspectRobustness, AttributesHugeFloatForInteger) {
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "local_window_size": 1e30})",
                           "attribute 'local_window_size': expected an integer");
}

TEST_F(PluginInspectRobustness, AttributesBooleanForInteger) {
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "causal": true})",
                           "booleans are not accepted");
}

TEST_F(PluginInspectRobustness, AttributesFloatOutOfRangeAndWrongTypes) {
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "scale": 1e39})",
                           "attribute 'scale': expected a finite number");
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "softcap": "x"})",
                           "attribute 'softcap'");
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "k_quant_type": 1})",
                           "attribute 'k_quant_type': expected a string");
}

TEST_F(PluginInspectRobustness, AttributesRepeatedKey) {
  ExpectAttributesRejected(R"({"num_heads": 2, "kv_num_heads": 1, "num_heads": 4})",
                           "attribute 'num_heads' appears twice");
}

TEST_F(PluginInspectRobustness, AttributesValidFileIsUsed) {
  WriteValidInputs();
  WriteBytes(in_ / "attributes.json", R"({"num_heads": 2, "kv_num_heads": 1, "scale": 0.5})");
  const Result r = Run({"run", "--inputs", in_.string(), "--outputs", out_.string()});
  EXPECT_EQ(r.exit_code, 0) << r.all();
}

// ---- 5: unknown .npy names
// ---------------------------------------------------------------------------

TEST_F(PluginInspectRobustness, UnknownNpyNameIsRejectedWithTheAcceptedNames) {
  WriteValidInputs();
  WriteBytes(in_ / "attention_bais.npy", Npy("<f4", "(1, 2, 1, 4)", Floats(8)));
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_TRUE(Contains(r.err, "attention_bais.npy: unknown input name")) << r.err;
  EXPECT_TRUE(Contains(r.err, "attention_bias.npy")) << r.err;
}

TEST_F(PluginInspectRobustness, OutputNamesInTheInputsFolderAreIgnored) {
  WriteValidInputs();
  WriteBytes(in_ / "output.npy", Npy("<f4", "(1, 1, 16)", Floats(16)));
  const Result r = RunFiles();
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(Contains(r.out, "ignored (output names): output.npy")) << r.out;
}

// ---- 6: --json errors
// ----------------------------------------------------------------------------------

TEST_F(PluginInspectRobustness, JsonErrorsGoToStdoutAsJson) {
  WriteValidInputs();
  WriteBytes(in_ / "query.npy", Npy("<f4", "(5, -1, 64)", ""));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "--json", "--model", "nonexistent"}, "USAGE_ERROR"},
      {{"run", "--json", "--model", "llama-3.2-1b", "--seed", "-1"}, "USAGE_ERROR"},
      {{"explain", "--json", "--bogus-flag"}, "USAGE_ERROR"},
      {{"run", "--json", "--inputs", (root_ / "missing").string(), "--outputs", out_.string(),
        "--num-heads", "2", "--kv-num-heads", "1"},
       "TOOL_ERROR"},
      {{"run", "--json", "--inputs", in_.string(), "--outputs", out_.string(), "--num-heads", "2",
        "--kv-num-heads", "1"},
       "TOOL_ERROR"},
      {{"explain", "--json", "--head-size", "12", "--num-heads", "4", "--kv-num-heads", "2"},
       "ATTNRT_ERROR_INVALID_ARGUMENT"},
  };
  for (const auto& [args, status] : cases) {
    const Result r = Run(args);
    EXPECT_NE(r.exit_code, 0) << args[0] << " " << args[2];
    const nlohmann::json doc = ParseJson(r);
    ASSERT_TRUE(doc.is_object() && doc.contains("error")) << r.out;
    EXPECT_EQ(doc["error"].value("status", ""), status) << r.out;
    const std::string message = doc["error"].value("message", "");
    EXPECT_FALSE(message.empty()) << r.out;
    EXPECT_TRUE(Contains(r.err, message)) << "stderr and JSON disagree:\n" << r.err << r.out;
  }
}

TEST_F(PluginInspectRobustness, JsonAndTextModesReportTheSameError) {
  const std::string missing = (root_ / "missing").string();
  const std::vector<std::string> base{"run",       "--inputs",       missing,
                                      "--outputs", out_.string(),    "--num-heads",
                                      "2",         "--kv-num-heads", "1"};
  std::vector<std::string> with_json = base;
  with_json.push_back("--json");
  const Result text = Run(base);
  const Result json = Run(with_json);
  EXPECT_EQ(text.exit_code, json.exit_code);
  EXPECT_TRUE(Contains(text.err, missing + ": no such folder")) << text.err;
  const nlohmann::json doc = ParseJson(json);
  ASSERT_TRUE(doc.is_object()) << json.out;
  EXPECT_EQ(doc["error"].value("message", ""), missing + ": no such folder");

  // An existing empty folder: missing query.npy, in both modes.
  fs::create_directories(root_ / "empty");
  std::vector<std::string> empty = base;
  empty[2] = (root_ / "empty").string();
  const Result text2 = Run(empty);
  empty.push_back("--json");
  const Result json2 = Run(empty);
  EXPECT_TRUE(Contains(text2.err, "missing required input")) << text2.err;
  EXPECT_TRUE(Contains(ParseJson(json2)["error"].value("message", ""), "missing required input"));
}

// ---- 7: verdict, --seed, reference text
// -----------------------------------------------------------

TEST_F(PluginInspectRobustness, StepsZeroPrintsAVerdict) {
  const Result r = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(Contains(r.out, "check passed")) << r.out;
  EXPECT_TRUE(Contains(r.out, "no decode steps")) << r.out;
  const Result unchecked =
      Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "0", "--no-check"});
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.all();
  EXPECT_TRUE(Contains(unchecked.out, "check skipped")) << unchecked.out;
}

TEST_F(PluginInspectRobustness, NegativeOrTooLargeSeedIsRejected) {
  for (const char* seed : {"-1", "18446744073709551616", "12abc"}) {
    const Result r = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--seed", seed});
    EXPECT_EQ(r.exit_code, 2) << seed << ": " << r.all();
    EXPECT_TRUE(Contains(r.err, "--seed must be an integer")) << r.err;
  }
  const Result ok = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "1",
                         "--seed", "18446744073709551615"});
  EXPECT_EQ(ok.exit_code, 0) << ok.all();
  EXPECT_TRUE(Contains(ok.out, "seed " + std::to_string(UINT64_MAX))) << ok.out;
}

TEST_F(PluginInspectRobustness, ReferenceTextNamesTheKernelAndWhy) {
  const Result flash = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "1",
                            "--kernel", ATTNRT_TEST_CPU_PLUGIN ".gqa.flash.*"});
  ASSERT_EQ(flash.exit_code, 0) << flash.all();
  EXPECT_TRUE(Contains(flash.out, "reference: " ATTNRT_TEST_CPU_PLUGIN ".gqa.flash.scalar ("))
      << flash.out;
  EXPECT_TRUE(Contains(flash.out, "(the scalar kernel of the same algorithm)") ||
              Contains(flash.out, "(the kernel under test is itself the scalar kernel)"))
      << flash.out;
  // A kernel of another algorithm is checked against the scalar kernel of its own algorithm.
  const Result naive = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--steps", "1",
                            "--kernel", ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.*"});
  ASSERT_EQ(naive.exit_code, 0) << naive.all();
  EXPECT_TRUE(Contains(naive.out, "reference: " ATTNRT_TEST_CPU_PLUGIN
                                  ".gqa.naive.scalar (the scalar kernel of the same algorithm)"))
      << naive.out;
  // The paged naive kernels (cpu_x86 only): the contiguous naive scalar kernel.
  if (std::string_view(ATTNRT_TEST_CPU_PLUGIN) != "cpu_x86") return;
  const Result paged = Run({"run", "--op", "paged_gqa", "--model", "llama-3.2-1b", "--context", "8",
                            "--steps", "1", "--kernel", ATTNRT_TEST_CPU_PLUGIN ".*.naive.*"});
  ASSERT_EQ(paged.exit_code, 0) << paged.all();
  EXPECT_TRUE(Contains(paged.out, "reference: " ATTNRT_TEST_CPU_PLUGIN
                                  ".gqa.naive.scalar (the scalar kernel of the same algorithm)"))
      << paged.out;
}

TEST_F(PluginInspectRobustness, NonFiniteFloatFlagsAreRejected) {
  const Result r = Run({"run", "--model", "llama-3.2-1b", "--context", "8", "--softcap", "nan"});
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_TRUE(Contains(r.err, "--softcap must be a finite number")) << r.err;
}

}  // namespace
}  // namespace plugin_inspect_test
