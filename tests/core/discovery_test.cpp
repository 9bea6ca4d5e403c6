// Discovery robustness: broken plugin files are skipped with one diagnostic each (naming the file
// and the reason), files not named libattnrt_*.so are ignored, duplicate plugin and kernel names
// keep the first in search order, and the real cpu_x86 plugin loads regardless.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

namespace fs = std::filesystem;

const std::string kBroken = ATTNRT_TEST_PLUGINS_BROKEN;
const std::string kDup = ATTNRT_TEST_PLUGINS_DUP;
const std::string kFake = ATTNRT_TEST_PLUGINS_FAKE;

std::string FileName(const std::string& path) { return fs::path(path).filename().string(); }

// True when `path` names `file` inside `folder` (the runtime may canonicalize either).
bool IsFileIn(const std::string& path, const std::string& folder, const std::string& file) {
  if (FileName(path) != file) return false;
  std::error_code ec;
  return fs::equivalent(fs::path(path).parent_path(), fs::path(folder), ec);
}

RuntimePtr RuntimeWithPaths(const std::vector<std::string>& paths, bool search_default_paths) {
  std::vector<const char*> raw;
  for (const auto& p : paths) raw.push_back(p.c_str());
  attnrt_runtime_options options = DefaultOptions();
  options.plugin_paths = raw.data();
  options.num_plugin_paths = raw.size();
  options.search_default_paths = search_default_paths ? 1 : 0;
  return CreateRuntime(options);
}

const PluginInfo* FindPlugin(const std::vector<PluginInfo>& plugins, const std::string& name) {
  for (const auto& p : plugins) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string Describe(const std::vector<Diagnostic>& diagnostics) {
  std::string s;
  for (const auto& d : diagnostics) s += "\n  " + d.path + ": " + d.message;
  return s.empty() ? " (none)" : s;
}

// The reason words each broken file's diagnostic must contain (any one of each group).
struct Expectation {
  std::string file;
  std::vector<std::vector<std::string>> all_of_any_of;
};

const std::vector<Expectation>& BrokenFiles() {
  static const std::vector<Expectation> files = {
      {"libattnrt_notalib.so", {}},
      {"libattnrt_dir.so", {{"directory"}}},
      {"libattnrt_noentry.so", {{"attnrt_plugin_query"}}},
      {"libattnrt_badabi.so", {{"abi"}, {"99"}}},
      {"libattnrt_initfail.so", {{"init"}, {"simulated init failure"}}},
      {"libattnrt_probefail.so", {{"probe"}}},
      {"libattnrt_nullquery.so", {{"null", "attnrt_plugin_query"}}},
      {"libattnrt_smallstruct.so", {{"struct_size", "size"}}},
  };
  return files;
}

void ExpectCpuPluginLoaded(const std::vector<PluginInfo>& plugins) {
  const PluginInfo* cpu = FindPlugin(plugins, ATTNRT_TEST_CPU_PLUGIN);
  ASSERT_NE(cpu, nullptr) << ATTNRT_TEST_CPU_PLUGIN " is not among the loaded plugins";
  EXPECT_TRUE(IsFileIn(cpu->path, DefaultPluginDir(), "libattnrt_" ATTNRT_TEST_CPU_PLUGIN ".so"))
      << cpu->path;
  EXPECT_EQ(cpu->abi_major, static_cast<uint32_t>(ATTNRT_ABI_VERSION_MAJOR));
  std::map<std::string, int32_t> kernels;
  for (const auto& k : cpu->kernels) {
    kernels[k.name] = k.priority;
    EXPECT_EQ(k.plugin, ATTNRT_TEST_CPU_PLUGIN) << k.name;
  }
  ASSERT_TRUE(kernels.count(ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"))
      << ATTNRT_TEST_CPU_PLUGIN " lacks its scalar kernel";
  ASSERT_TRUE(kernels.count(ATTNRT_TEST_CPU_PLUGIN ".gqa.naive." ATTNRT_TEST_CPU_SIMD))
      << ATTNRT_TEST_CPU_PLUGIN " lacks its " ATTNRT_TEST_CPU_SIMD " kernel";
  EXPECT_EQ(kernels[ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"], 100);
  EXPECT_EQ(kernels[ATTNRT_TEST_CPU_PLUGIN ".gqa.naive." ATTNRT_TEST_CPU_SIMD], 120);
  for (const auto& k : cpu->kernels) {
    if (k.name.rfind(ATTNRT_TEST_CPU_PLUGIN ".gqa.", 0) == 0) {
      EXPECT_EQ(k.op_kind, ATTNRT_OP_GQA) << k.name;
      EXPECT_EQ(k.device_type, ATTNRT_DEVICE_CPU) << k.name;
    }
  }
}

// No kernel name is registered twice, whichever plugins were loaded.
void ExpectUniqueKernelNames(const std::vector<PluginInfo>& plugins) {
  std::multiset<std::string> names;
  for (const auto& p : plugins) {
    for (const auto& k : p.kernels) names.insert(k.name);
  }
  for (const auto& n : names) EXPECT_EQ(names.count(n), 1u) << "kernel registered twice: " << n;
}

class DiscoveryTest : public testing::Test {
 protected:
  CleanAttnrtEnv env_;
};

TEST_F(DiscoveryTest, BrokenFilesAreDiagnosedOnceEachAndCpuPluginStillLoads) {
  RuntimePtr runtime = RuntimeWithPaths({kBroken}, /*search_default_paths=*/true);
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  const auto diagnostics = ListDiagnostics(runtime.get());
  ExpectCpuPluginLoaded(plugins);
  ExpectUniqueKernelNames(plugins);

  for (const auto& p : plugins) {
    EXPECT_FALSE(IsFileIn(p.path, kBroken, FileName(p.path)))
        << "a plugin from the broken folder was loaded: " << p.name << " (" << p.path << ")";
  }
  for (const auto& expected : BrokenFiles()) {
    SCOPED_TRACE(expected.file);
    std::vector<Diagnostic> mine;
    for (const auto& d : diagnostics) {
      if (IsFileIn(d.path, kBroken, expected.file)) mine.push_back(d);
    }
    ASSERT_EQ(mine.size(), 1u) << "diagnostics:" << Describe(diagnostics);
    EXPECT_FALSE(mine[0].message.empty());
    for (const auto& any_of : expected.all_of_any_of) {
      bool found = false;
      for (const auto& word : any_of) found = found || ContainsI(mine[0].message, word);
      EXPECT_TRUE(found) << "message \"" << mine[0].message << "\" lacks \"" << any_of.front()
                         << "\"";
    }
  }
  // Nothing else is diagnosed: not the ignored files, not the default folder.
  for (const auto& d : diagnostics) {
    const bool expected = std::any_of(BrokenFiles().begin(), BrokenFiles().end(),
                                      [&](auto& e) { return IsFileIn(d.path, kBroken, e.file); });
    EXPECT_TRUE(expected) << "unexpected diagnostic " << d.path << ": " << d.message;
  }
}

TEST_F(DiscoveryTest, FilesNotNamedLibattnrtAreIgnored) {
  RuntimePtr runtime = RuntimeWithPaths({kBroken}, /*search_default_paths=*/false);
  ASSERT_TRUE(runtime);
  for (const auto& p : ListPlugins(runtime.get())) {
    EXPECT_NE(p.name, "notattnrt_ignored") << p.path;
  }
  for (const auto& d : ListDiagnostics(runtime.get())) {
    EXPECT_EQ(d.path.find("notattnrt_ignored"), std::string::npos) << d.path << ": " << d.message;
    EXPECT_EQ(d.path.find("README.txt"), std::string::npos) << d.path << ": " << d.message;
  }
}

TEST_F(DiscoveryTest, SearchDefaultPathsOffSearchesOnlyPluginPaths) {
  ScopedEnv plugin_path("ATTNRT_PLUGIN_PATH", kFake);
  RuntimePtr runtime = RuntimeWithPaths({kBroken}, /*search_default_paths=*/false);
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  EXPECT_TRUE(plugins.empty()) << "first plugin: " << (plugins.empty() ? "" : plugins[0].path);
  EXPECT_EQ(ListDiagnostics(runtime.get()).size(), BrokenFiles().size())
      << Describe(ListDiagnostics(runtime.get()));
}

TEST_F(DiscoveryTest, EnvironmentPluginPathIsColonSeparated) {
  ScopedEnv plugin_path("ATTNRT_PLUGIN_PATH", kBroken + ":" + kFake);
  RuntimePtr runtime = CreateRuntime();
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  ExpectCpuPluginLoaded(plugins);
  const PluginInfo* fake = FindPlugin(plugins, "fake");
  ASSERT_NE(fake, nullptr) << "the fake plugin from ATTNRT_PLUGIN_PATH was not loaded";
  EXPECT_TRUE(IsFileIn(fake->path, kFake, "libattnrt_fake.so")) << fake->path;
  EXPECT_EQ(ListDiagnostics(runtime.get()).size(), BrokenFiles().size())
      << Describe(ListDiagnostics(runtime.get()));
}

TEST_F(DiscoveryTest, PluginInfoReportsWhatThePluginDeclares) {
  RuntimePtr runtime = RuntimeWithPaths({kFake}, /*search_default_paths=*/false);
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  ASSERT_EQ(plugins.size(), 1u);
  const PluginInfo& fake = plugins[0];
  EXPECT_EQ(fake.name, "fake");
  EXPECT_EQ(fake.version, "1.2.3");
  EXPECT_TRUE(IsFileIn(fake.path, kFake, "libattnrt_fake.so")) << fake.path;
  EXPECT_EQ(fake.abi_major, static_cast<uint32_t>(ATTNRT_ABI_VERSION_MAJOR));
  EXPECT_EQ(fake.abi_minor, static_cast<uint32_t>(ATTNRT_ABI_VERSION_MINOR));
  EXPECT_EQ(fake.available, 1);
  ASSERT_EQ(fake.facts.size(), 1u);
  EXPECT_EQ(fake.facts[0].first, "isa");
  EXPECT_EQ(fake.facts[0].second, "fake");
  std::map<std::string, int32_t> kernels;
  for (const auto& k : fake.kernels) {
    kernels[k.name] = k.priority;
    EXPECT_EQ(k.plugin, "fake");
    EXPECT_EQ(k.op_kind, ATTNRT_OP_GQA);
    EXPECT_EQ(k.device_type, ATTNRT_DEVICE_CPU);
  }
  const std::map<std::string, int32_t> expected = {{"fake.gqa.top.x", 500},
                                                   {"fake.gqa.mid.a", 300},
                                                   {"fake.gqa.mid.b", 300},
                                                   {"fake.gqa.low.x", 50}};
  EXPECT_EQ(kernels, expected);
  EXPECT_TRUE(ListDiagnostics(runtime.get()).empty()) << Describe(ListDiagnostics(runtime.get()));
}

TEST_F(DiscoveryTest, DuplicatesLaterInSearchOrderAreDiagnosed) {
  RuntimePtr runtime = RuntimeWithPaths({DefaultPluginDir(), kDup}, /*search_default_paths=*/false);
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  const auto diagnostics = ListDiagnostics(runtime.get());
  ExpectCpuPluginLoaded(plugins);
  ExpectUniqueKernelNames(plugins);
  const PluginInfo* cpu = FindPlugin(plugins, ATTNRT_TEST_CPU_PLUGIN);
  ASSERT_NE(cpu, nullptr);
  for (const auto& k : cpu->kernels) {
    EXPECT_EQ(k.name.find("impostor"), std::string::npos) << "kernel of the impostor: " << k.name;
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"libattnrt_dupname.so", {"duplicate"}},
      {"libattnrt_dupkernel.so", {"duplicate", "dupkernel.gqa.same.scalar"}},
      // A kernel named outside its own plugin's prefix is refused as such, whatever the order.
      {"libattnrt_dupforeign.so", {"prefix"}},
  };
  for (const auto& [file, any_of] : expected) {
    SCOPED_TRACE(file);
    std::vector<Diagnostic> mine;
    for (const auto& d : diagnostics) {
      if (IsFileIn(d.path, kDup, file)) mine.push_back(d);
    }
    ASSERT_EQ(mine.size(), 1u) << "diagnostics:" << Describe(diagnostics);
    bool found = false;
    for (const auto& word : any_of) found = found || ContainsI(mine[0].message, word);
    EXPECT_TRUE(found) << "message \"" << mine[0].message << "\" lacks \"" << any_of.front()
                       << "\"";
  }
  EXPECT_EQ(diagnostics.size(), expected.size()) << Describe(diagnostics);
}

TEST_F(DiscoveryTest, FirstPluginNameInSearchOrderWins) {
  RuntimePtr runtime = RuntimeWithPaths({kDup, DefaultPluginDir()}, /*search_default_paths=*/false);
  ASSERT_TRUE(runtime);
  const auto plugins = ListPlugins(runtime.get());
  const auto diagnostics = ListDiagnostics(runtime.get());
  ExpectUniqueKernelNames(plugins);
  const PluginInfo* cpu = FindPlugin(plugins, ATTNRT_TEST_CPU_PLUGIN);
  ASSERT_NE(cpu, nullptr);
  EXPECT_TRUE(IsFileIn(cpu->path, kDup, "libattnrt_dupname.so")) << cpu->path;
  const bool real_diagnosed = std::any_of(diagnostics.begin(), diagnostics.end(), [](auto& d) {
    return IsFileIn(d.path, DefaultPluginDir(), "libattnrt_" ATTNRT_TEST_CPU_PLUGIN ".so") &&
           ContainsI(d.message, "duplicate");
  });
  EXPECT_TRUE(real_diagnosed) << "diagnostics:" << Describe(diagnostics);
}

TEST_F(DiscoveryTest, MissingFolderDoesNotFailCreation) {
  RuntimePtr runtime =
      RuntimeWithPaths({kBroken + "/does-not-exist"}, /*search_default_paths=*/true);
  ASSERT_TRUE(runtime);
  ExpectCpuPluginLoaded(ListPlugins(runtime.get()));
}

TEST_F(DiscoveryTest, RepeatedCreationGivesTheSameResult) {
  std::vector<std::string> first;
  for (int round = 0; round < 3; ++round) {
    RuntimePtr runtime = RuntimeWithPaths({kBroken, kDup, kFake}, /*search_default_paths=*/true);
    ASSERT_TRUE(runtime);
    std::vector<std::string> summary;
    for (const auto& p : ListPlugins(runtime.get())) {
      summary.push_back(p.name + "@" + p.path + "#" + std::to_string(p.kernels.size()));
    }
    for (const auto& d : ListDiagnostics(runtime.get()))
      summary.push_back(d.path + ":" + d.message);
    if (round == 0) {
      first = summary;
    } else {
      EXPECT_EQ(summary, first) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace attnrt_test
