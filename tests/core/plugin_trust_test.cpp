// Plugins in places another user could write are refused (docs/plugins.md, "Security"): a relative
// plugin folder (never searched), a world-writable folder without the sticky bit or file, a file or
// folder owned by another user than root and the runtime's; each with a diagnostic naming the path
// and the reason, the rest of the search unaffected. A file or folder writable by a group other
// than the runtime's loads with a diagnostic. options.allow_insecure_plugins = 1 or
// ATTNRT_PLUGIN_ALLOW_INSECURE=1 loads them (the option wins over the variable). The fake test
// plugin is copied into folders made here.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFakeFile = "libattnrt_fake.so";
// An id no account on a test machine has.
constexpr uid_t kForeignId = 54321;

class PluginTrustTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/attnrt_plugin_trust_XXXXXX";  // mode 0700, in /tmp (sticky)
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override {
    if (!old_cwd_.empty()) fs::current_path(old_cwd_);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // `folder` (made with `mode`) holding a copy of the fake plugin; returns the copy's path.
  fs::path PlantFake(const fs::path& folder, fs::perms mode = fs::perms(0755)) {
    fs::create_directories(folder);
    fs::permissions(folder, mode);
    const fs::path copy = folder / kFakeFile;
    fs::copy_file(fs::path(ATTNRT_TEST_PLUGINS_FAKE) / kFakeFile, copy,
                  fs::copy_options::overwrite_existing);
    fs::permissions(copy, fs::perms(0755));
    return copy;
  }

  struct Outcome {
    bool fake_loaded = false;
    std::vector<Diagnostic> diagnostics;
  };

  // A runtime over `folder` alone (allow: options.allow_insecure_plugins, -1 = the default).
  Outcome Discover(const std::string& folder, int32_t allow = -1) {
    const char* paths[] = {folder.c_str()};
    attnrt_runtime_options options = DefaultOptions();
    options.plugin_paths = paths;
    options.num_plugin_paths = 1;
    options.search_default_paths = 0;
    options.allow_insecure_plugins = allow;
    RuntimePtr runtime = CreateRuntime(options);
    Outcome outcome;
    if (!runtime) return outcome;
    for (const auto& p : ListPlugins(runtime.get())) {
      outcome.fake_loaded = outcome.fake_loaded || p.name == "fake";
    }
    outcome.diagnostics = ListDiagnostics(runtime.get());
    return outcome;
  }

  // The fake plugin in `folder` is refused with one diagnostic holding every one of `words`, and
  // loads when options.allow_insecure_plugins or ATTNRT_PLUGIN_ALLOW_INSECURE allows it.
  void ExpectRefusedUnlessAllowed(const fs::path& folder, const std::vector<std::string>& words) {
    const Outcome refused = Discover(folder.string());
    EXPECT_FALSE(refused.fake_loaded) << "loaded from " << folder;
    ASSERT_EQ(refused.diagnostics.size(), 1u) << folder;
    const Diagnostic& d = refused.diagnostics[0];
    EXPECT_EQ(d.path, (folder / kFakeFile).string());
    for (const auto& word : words) {
      EXPECT_TRUE(ContainsI(d.message, word)) << "\"" << d.message << "\" lacks \"" << word << "\"";
    }
    EXPECT_TRUE(ContainsI(d.message, "ATTNRT_PLUGIN_ALLOW_INSECURE")) << d.message;

    const Outcome by_option = Discover(folder.string(), 1);
    EXPECT_TRUE(by_option.fake_loaded);
    EXPECT_TRUE(by_option.diagnostics.empty()) << by_option.diagnostics[0].message;
    {
      ScopedEnv allow("ATTNRT_PLUGIN_ALLOW_INSECURE", "1");
      EXPECT_TRUE(Discover(folder.string()).fake_loaded);
      EXPECT_FALSE(Discover(folder.string(), 0).fake_loaded) << "the option wins";
    }
  }

  void ExpectLoaded(const fs::path& folder) {
    const Outcome outcome = Discover(folder.string());
    EXPECT_TRUE(outcome.fake_loaded) << folder;
    for (const auto& d : outcome.diagnostics) ADD_FAILURE() << d.path << ": " << d.message;
  }

  static bool IsRoot() { return geteuid() == 0; }

  CleanAttnrtEnv env_;
  fs::path root_;
  fs::path old_cwd_;
};

TEST_F(PluginTrustTest, PrivateFolderLoads) {
  PlantFake(root_ / "plugins");
  ExpectLoaded(root_ / "plugins");
}

TEST_F(PluginTrustTest, RelativeFolderIsNeverSearched) {
  PlantFake(root_ / "plugins");
  old_cwd_ = fs::current_path();
  fs::current_path(root_ / "plugins");
  for (const std::string relative : {".", "./", "../plugins"}) {
    for (int32_t allow : {-1, 1}) {
      const Outcome outcome = Discover(relative, allow);
      EXPECT_FALSE(outcome.fake_loaded) << relative << " searched from the current directory";
      ASSERT_EQ(outcome.diagnostics.size(), 1u) << relative;
      EXPECT_EQ(outcome.diagnostics[0].path, relative);
      EXPECT_TRUE(ContainsI(outcome.diagnostics[0].message, "relative path"))
          << outcome.diagnostics[0].message;
      EXPECT_TRUE(ContainsI(outcome.diagnostics[0].message, "options.plugin_paths"))
          << outcome.diagnostics[0].message;
    }
  }
  // In ATTNRT_PLUGIN_PATH too, beside an absolute entry that is searched.
  ScopedEnv path("ATTNRT_PLUGIN_PATH", ".:" + std::string(ATTNRT_TEST_PLUGINS_FAKE));
  attnrt_runtime_options options = DefaultOptions();
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  int fakes = 0;
  for (const auto& p : ListPlugins(runtime.get())) {
    if (p.name != "fake") continue;
    ++fakes;
    EXPECT_EQ(fs::path(p.path).parent_path(), fs::path(ATTNRT_TEST_PLUGINS_FAKE));
  }
  EXPECT_EQ(fakes, 1);
  bool refused = false;
  for (const auto& d : ListDiagnostics(runtime.get())) {
    refused = refused || (d.path == "." && ContainsI(d.message, "ATTNRT_PLUGIN_PATH") &&
                          ContainsI(d.message, "relative path"));
  }
  EXPECT_TRUE(refused);
}

TEST_F(PluginTrustTest, WorldWritableFolderIsRefused) {
  const fs::path folder = root_ / "open";
  PlantFake(folder, fs::perms(0777));
  ExpectRefusedUnlessAllowed(
      folder, {folder.string(), "writable by every user", "0777", "without the sticky bit"});
}

TEST_F(PluginTrustTest, AllowInsecureVariableOtherThanTrueRefuses) {
  const fs::path folder = root_ / "open";
  PlantFake(folder, fs::perms(0777));
  for (const char* value : {"0", "no", "maybe", "11"}) {
    ScopedEnv allow("ATTNRT_PLUGIN_ALLOW_INSECURE", value);
    EXPECT_FALSE(Discover(folder.string()).fake_loaded) << "ATTNRT_PLUGIN_ALLOW_INSECURE=" << value;
  }
}

// The variable's yes-words are read in any case ("True" was refused while "TRUE" allowed).
TEST_F(PluginTrustTest, AllowInsecureVariableInAnyCaseAllows) {
  const fs::path folder = root_ / "open";
  PlantFake(folder, fs::perms(0777));
  for (const char* value : {"1", "true", "True", "YES", "On"}) {
    ScopedEnv allow("ATTNRT_PLUGIN_ALLOW_INSECURE", value);
    EXPECT_TRUE(Discover(folder.string()).fake_loaded) << "ATTNRT_PLUGIN_ALLOW_INSECURE=" << value;
  }
}

// A plugin folder that cannot be searched says why: missing, not a folder, or unreadable (a
// symbolic link loop was reported as missing).
TEST_F(PluginTrustTest, AnUnsearchableFolderSaysWhy) {
  const fs::path loop_a = root_ / "loop_a", loop_b = root_ / "loop_b", file = root_ / "a_file";
  fs::create_symlink(loop_b, loop_a);
  fs::create_symlink(loop_a, loop_b);
  { std::ofstream(file.string()) << "x"; }
  const std::pair<fs::path, const char*> cases[] = {{root_ / "missing", "does not exist"},
                                                    {file, "is not a folder"},
                                                    {loop_a, "cannot be read: "}};
  for (const auto& [folder, words] : cases) {
    const Outcome outcome = Discover(folder.string());
    ASSERT_EQ(outcome.diagnostics.size(), 1u) << folder;
    EXPECT_TRUE(ContainsI(outcome.diagnostics[0].message, words))
        << folder << ": " << outcome.diagnostics[0].message;
  }
}

TEST_F(PluginTrustTest, WorldWritableFolderWithTheStickyBitLoads) {
  const fs::path folder = root_ / "sticky";
  PlantFake(folder, fs::perms(01777));
  ExpectLoaded(folder);
}

TEST_F(PluginTrustTest, WorldWritableFolderHigherUpIsRefused) {
  // Every folder on the path counts, not only the plugin's own.
  const fs::path open = root_ / "open";
  PlantFake(open / "inner");
  fs::permissions(open, fs::perms(0777));
  ExpectRefusedUnlessAllowed(open / "inner", {open.string() + " is writable by every user"});
}

TEST_F(PluginTrustTest, WorldWritableFileIsRefused) {
  const fs::path file = PlantFake(root_ / "plugins");
  fs::permissions(file, fs::perms(0777));
  ExpectRefusedUnlessAllowed(root_ / "plugins",
                             {"file " + file.string(), "writable by every user"});
}

TEST_F(PluginTrustTest, FolderReachedThroughASymbolicLinkIsJudgedWhereItLies) {
  const fs::path open = root_ / "open";
  PlantFake(open, fs::perms(0777));
  fs::create_directory_symlink(open, root_ / "link");
  const Outcome outcome = Discover((root_ / "link").string());
  EXPECT_FALSE(outcome.fake_loaded);
  ASSERT_EQ(outcome.diagnostics.size(), 1u);
  EXPECT_TRUE(ContainsI(outcome.diagnostics[0].message, open.string() + " is writable"))
      << outcome.diagnostics[0].message;
}

TEST_F(PluginTrustTest, GroupWritableByTheRuntimesGroupLoads) {
  const fs::path file = PlantFake(root_ / "plugins", fs::perms(0775));
  fs::permissions(file, fs::perms(0775));
  ASSERT_EQ(chown(file.c_str(), static_cast<uid_t>(-1), getegid()), 0);
  ExpectLoaded(root_ / "plugins");
}

// Writable by another group: loaded, with a diagnostic naming the path (Debian's /usr/local is
// writable by group staff, and packages go there).
TEST_F(PluginTrustTest, GroupWritableByAnotherGroupLoadsWithADiagnostic) {
  if (!IsRoot()) GTEST_SKIP() << "giving a file to another group needs root";
  const fs::path folder = root_ / "plugins";
  const fs::path file = PlantFake(folder);
  ASSERT_EQ(chown(file.c_str(), static_cast<uid_t>(-1), kForeignId), 0);
  fs::permissions(file, fs::perms(0775));
  auto expect_warned = [&](const std::string& who) {
    const Outcome outcome = Discover(folder.string());
    EXPECT_TRUE(outcome.fake_loaded) << folder;
    ASSERT_EQ(outcome.diagnostics.size(), 1u) << folder;
    const Diagnostic& d = outcome.diagnostics[0];
    EXPECT_EQ(d.path, (folder / kFakeFile).string());
    for (const std::string& word :
         {std::string("loaded, but"), who, std::string("writable by group gid 54321")}) {
      EXPECT_TRUE(ContainsI(d.message, word)) << "\"" << d.message << "\" lacks \"" << word << "\"";
    }
    EXPECT_TRUE(Discover(folder.string(), 1).diagnostics.empty()) << "allowed: no diagnostic";
  };
  expect_warned("file " + file.string());

  fs::permissions(file, fs::perms(0755));
  ASSERT_EQ(chown(folder.c_str(), static_cast<uid_t>(-1), kForeignId), 0);
  fs::permissions(folder, fs::perms(0775));
  expect_warned("folder " + folder.string());
}

TEST_F(PluginTrustTest, FileOwnedByAnotherUserIsRefused) {
  if (!IsRoot()) GTEST_SKIP() << "giving a file to another user needs root";
  const fs::path folder = root_ / "plugins";
  const fs::path file = PlantFake(folder);
  ASSERT_EQ(chown(file.c_str(), kForeignId, static_cast<gid_t>(-1)), 0);
  ExpectRefusedUnlessAllowed(folder, {"file " + file.string(), "owned by uid 54321"});
}

TEST_F(PluginTrustTest, FolderOwnedByAnotherUserIsRefused) {
  if (!IsRoot()) GTEST_SKIP() << "giving a folder to another user needs root";
  const fs::path folder = root_ / "plugins";
  PlantFake(folder);
  ASSERT_EQ(chown(folder.c_str(), kForeignId, static_cast<gid_t>(-1)), 0);
  ExpectRefusedUnlessAllowed(folder, {"folder " + folder.string(), "owned by uid 54321"});
}

TEST_F(PluginTrustTest, AllowInsecurePluginsOutsideItsValuesIsRefusedByName) {
  for (int32_t value : {-2, 2}) {
    attnrt_runtime_options options = DefaultOptions();
    options.allow_insecure_plugins = value;
    attnrt_runtime* runtime = nullptr;
    EXPECT_EQ(attnrt_runtime_create(&options, &runtime), ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(runtime, nullptr);
    const std::string message = attnrt_last_error_message();
    EXPECT_TRUE(ContainsI(message, "options.allow_insecure_plugins")) << message;
    EXPECT_TRUE(ContainsI(message, "got " + std::to_string(value))) << message;
  }
}

TEST_F(PluginTrustTest, OptionsInitSetsTheDefault) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  EXPECT_EQ(options.allow_insecure_plugins, -1);
}

}  // namespace
}  // namespace attnrt_test
