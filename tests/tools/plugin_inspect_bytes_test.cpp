// plugin-inspect on names and texts that are not UTF-8: a file name, a folder name, a plugin's
// version and an error message quoting a path are bytes, not text. Every output (list, explain and
// run JSON, the text output, the JSON error) shows what is not UTF-8 escaped as \xNN and lists
// everything else as usual; nothing fails because a byte is not UTF-8.
#include <cstdlib>
#include <string>

#include "plugin_inspect_fixture.h"

namespace plugin_inspect_test {
namespace {

class PluginInspectBytes : public PluginInspectFixture {
 protected:
  void SetUp() override {
    PluginInspectFixture::SetUp();
    unsetenv("ATTNRT_PLUGIN_PATH");
    unsetenv("ATTNRT_TEST_HOSTILE_SPEC");
  }
  void TearDown() override {
    unsetenv("ATTNRT_TEST_HOSTILE_SPEC");
    PluginInspectFixture::TearDown();
  }

  // A folder under the test's root holding a file `name` that is not a library.
  fs::path FolderWithFile(const std::string& folder, const std::string& name) const {
    const fs::path dir = root_ / folder;
    fs::create_directories(dir);
    WriteBytes(dir / name, "not a library");
    return dir;
  }

  // The diagnostics of a `list --json` document whose path contains `part`.
  static int CountDiagnostics(const nlohmann::json& doc, const std::string& part) {
    int count = 0;
    for (const auto& d : doc["diagnostics"]) {
      if (Contains(d["path"].get<std::string>(), part)) ++count;
    }
    return count;
  }

  static bool ListsCpuPlugin(const nlohmann::json& doc) {
    for (const auto& p : doc["plugins"]) {
      if (p["name"] == ATTNRT_TEST_CPU_PLUGIN && !p["kernels"].empty()) return true;
    }
    return false;
  }
};

TEST_F(PluginInspectBytes, FileNameThatIsNotUtf8IsListedEscaped) {
  const fs::path dir = FolderWithFile("plugins", "libattnrt_\xff\xfe.so");
  const Result r = Run({"list", "--json", "--plugin-path", dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(CountDiagnostics(doc, "libattnrt_\\xFF\\xFE.so"), 1) << r.out;
  EXPECT_TRUE(ListsCpuPlugin(doc)) << r.out;

  const Result text = Run({"list", "--plugin-path", dir.string()});
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_TRUE(Contains(text.out, "libattnrt_\\xFF\\xFE.so: not a loadable shared library"))
      << text.out;
  EXPECT_FALSE(Contains(text.out, "\xff")) << text.out;
}

TEST_F(PluginInspectBytes, FolderNameThatIsNotUtf8IsListedEscaped) {
  // Latin-1 e-acute, as a folder made by a program in a Latin-1 locale would be named.
  const fs::path dir = FolderWithFile("caf\xe9", "libattnrt_x.so");
  const Result r = Run({"list", "--json", "--plugin-path", dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(CountDiagnostics(doc, "caf\\xE9/libattnrt_x.so"), 1) << r.out;
  EXPECT_TRUE(ListsCpuPlugin(doc)) << r.out;
}

TEST_F(PluginInspectBytes, ValidUtf8IsKeptAndOnlyInvalidSequencesAreEscaped) {
  // e-acute in UTF-8 (kept), an encoded surrogate and an overlong NUL (escaped byte by byte), and
  // a truncated sequence at the end of the name.
  const fs::path dir =
      FolderWithFile("plugins", "libattnrt_\xc3\xa9\xed\xa0\x80\xc0\x80\xe2\x82.so");
  const Result r = Run({"list", "--json", "--plugin-path", dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(CountDiagnostics(doc, "libattnrt_\xc3\xa9\\xED\\xA0\\x80\\xC0\\x80\\xE2\\x82.so"), 1)
      << r.out;
}

TEST_F(PluginInspectBytes, PluginVersionThatIsNotUtf8IsListedEscaped) {
  // A plugin's own strings: a version with a byte that is not UTF-8 and a terminal escape.
  const fs::path spec = root_ / "spec.txt";
  WriteBytes(spec, "name bytes\nversion 1.\xff\x1b[31m\n");
  setenv("ATTNRT_TEST_HOSTILE_SPEC", spec.c_str(), 1);
  const Result r = Run({"list", "--json", "--plugin-path", ATTNRT_TEST_PLUGINS_HOSTILE});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  bool found = false;
  for (const auto& p : doc["plugins"]) {
    if (p["name"] != "bytes") continue;
    found = true;
    EXPECT_EQ(p["version"], "1.\\xFF\\x1B[31m") << r.out;
  }
  EXPECT_TRUE(found) << r.out;

  const Result text = Run({"list", "--plugin-path", ATTNRT_TEST_PLUGINS_HOSTILE});
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_TRUE(Contains(text.out, "bytes 1.\\xFF\\x1B[31m")) << text.out;
  EXPECT_FALSE(Contains(text.out, "\x1b")) << text.out;
}

TEST_F(PluginInspectBytes, ErrorQuotingAPathThatIsNotUtf8IsEscaped) {
  const std::string missing = (root_ / "in\xff").string();
  const Result r = Run({"run", "--json", "--inputs", missing, "--outputs", out_.string()});
  EXPECT_EQ(r.exit_code, 1) << r.all();
  const nlohmann::json doc = ParseJson(r);
  ASSERT_TRUE(doc.is_object());
  const std::string message = doc["error"]["message"].get<std::string>();
  EXPECT_TRUE(Contains(message, "in\\xFF: no such folder")) << message;
  EXPECT_TRUE(Contains(r.err, "in\\xFF: no such folder")) << r.err;
}

TEST_F(PluginInspectBytes, ExplainAndRunJsonWithAFolderThatIsNotUtf8) {
  // The folder is searched and skipped with a diagnostic; explain and run still print JSON.
  const fs::path dir = FolderWithFile("plugins\xff", "libattnrt_\xff.so");
  const Result explain =
      Run({"explain", "--json", "--plugin-path", dir.string(), "--seq-len", "1"});
  ASSERT_EQ(explain.exit_code, 0) << explain.all();
  EXPECT_TRUE(ParseJson(explain).is_object());
  WriteValidInputs();
  const Result run =
      Run({"run", "--json", "--inputs", in_.string(), "--outputs", (root_ / "out\xfe").string(),
           "--num-heads", "2", "--kv-num-heads", "1", "--plugin-path", dir.string()});
  ASSERT_EQ(run.exit_code, 0) << run.all();
  const nlohmann::json doc = ParseJson(run);
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc["written"].is_array() && !doc["written"].empty()) << run.out;
  EXPECT_TRUE(Contains(doc["written"][0].get<std::string>(), "out\\xFE/")) << run.out;
}

}  // namespace
}  // namespace plugin_inspect_test
