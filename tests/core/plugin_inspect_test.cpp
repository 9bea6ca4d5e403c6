// `plugin-inspect list --json` with ATTNRT_PLUGIN_PATH pointing at the broken-plugin folder (set by
// ctest's ENVIRONMENT; set here too when the binary runs alone): cpu_x86 and its kernels are
// listed, each broken file has exactly one diagnostic, and the JSON has the documented keys.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "common/test_support.h"

namespace attnrt_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  const fs::path err_file =
      fs::temp_directory_path() / ("attnrt_plugin_inspect_" + std::to_string(getpid()) + ".err");
  FILE* pipe = popen((command + " 2>" + err_file.string()).c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::error_code ec;
  fs::remove(err_file, ec);
  return r;
}

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

TEST(PluginInspectTest, ListJsonOverBrokenFolder) {
  const std::string broken = ATTNRT_TEST_PLUGINS_BROKEN;
  const char* env = std::getenv("ATTNRT_PLUGIN_PATH");
  std::optional<ScopedEnv> set_env;
  if (env == nullptr) set_env.emplace("ATTNRT_PLUGIN_PATH", broken);
  ScopedEnv no_pin("ATTNRT_KERNEL", std::nullopt);
  ScopedEnv no_disable("ATTNRT_DISABLE", std::nullopt);

  const std::string tool = ATTNRT_TEST_PLUGIN_INSPECT;
  ASSERT_TRUE(fs::exists(tool)) << tool << " is not built";
  const CommandResult r = RunCommand(ATTNRT_TEST_EMULATOR "'" + tool + "' list --json");
  ASSERT_EQ(r.exit_code, 0) << "stderr:\n" << r.err << "\nstdout:\n" << r.out;
  json doc;
  try {
    doc = json::parse(r.out);
  } catch (const json::exception& e) {
    FAIL() << "not JSON (" << e.what() << "):\n" << r.out;
  }
  ASSERT_TRUE(doc.is_object()) << r.out;
  ASSERT_TRUE(doc.contains("plugins") && doc["plugins"].is_array()) << r.out;
  ASSERT_TRUE(doc.contains("diagnostics") && doc["diagnostics"].is_array()) << r.out;

  // Every plugin has the documented keys; cpu_x86 is there with its kernels.
  const json* cpu = nullptr;
  for (const auto& p : doc["plugins"]) {
    for (const char* key :
         {"name", "path", "version", "abi_version", "available", "reason", "facts", "kernels"}) {
      EXPECT_TRUE(p.contains(key)) << "plugin lacks \"" << key << "\": " << p.dump();
    }
    EXPECT_TRUE(p.contains("facts") && p["facts"].is_object()) << p.dump();
    EXPECT_NE(fs::path(Str(p, "path")).parent_path(), fs::path(broken))
        << "a broken plugin was listed: " << p.dump();
    if (Str(p, "name") == ATTNRT_TEST_CPU_PLUGIN) cpu = &p;
  }
  ASSERT_NE(cpu, nullptr) << ATTNRT_TEST_CPU_PLUGIN " not listed:\n" << doc.dump(2);
  EXPECT_EQ(fs::path(Str(*cpu, "path")).filename(), "libattnrt_" ATTNRT_TEST_CPU_PLUGIN ".so");
  ASSERT_TRUE((*cpu)["kernels"].is_array());
  std::map<std::string, int64_t> priorities;
  for (const auto& k : (*cpu)["kernels"]) {
    for (const char* key : {"name", "op", "device", "priority"}) {
      EXPECT_TRUE(k.contains(key)) << "kernel lacks \"" << key << "\": " << k.dump();
    }
    if (k.contains("priority") && k["priority"].is_number_integer()) {
      priorities[Str(k, "name")] = k["priority"].get<int64_t>();
    }
    if (Str(k, "name").rfind(ATTNRT_TEST_CPU_PLUGIN ".gqa.", 0) == 0 && k.contains("op") &&
        k["op"].is_string()) {
      EXPECT_EQ(k["op"].get<std::string>(), "gqa") << k.dump();
    }
  }
  EXPECT_EQ(priorities[ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"], 100)
      << (*cpu)["kernels"].dump();
  EXPECT_EQ(priorities[ATTNRT_TEST_CPU_PLUGIN ".gqa.naive." ATTNRT_TEST_CPU_SIMD], 120)
      << (*cpu)["kernels"].dump();

  // One diagnostic per broken file, naming it.
  std::map<std::string, int> per_file;
  for (const auto& d : doc["diagnostics"]) {
    EXPECT_TRUE(d.contains("path") && d.contains("message")) << d.dump();
    EXPECT_FALSE(Str(d, "message").empty()) << d.dump();
    ++per_file[fs::path(Str(d, "path")).filename().string()];
  }
  const std::map<std::string, int> expected = {
      {"libattnrt_badabi.so", 1},      {"libattnrt_initfail.so", 1},  {"libattnrt_noentry.so", 1},
      {"libattnrt_notalib.so", 1},     {"libattnrt_nullquery.so", 1}, {"libattnrt_probefail.so", 1},
      {"libattnrt_smallstruct.so", 1}, {"libattnrt_dir.so", 1},
  };
  EXPECT_EQ(per_file, expected) << doc["diagnostics"].dump(2);
}

}  // namespace
}  // namespace attnrt_test
