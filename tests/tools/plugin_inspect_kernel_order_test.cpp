// The dispatch order of the CPU plugins is a contract (docs/plugins.md, Names and ranking): every
// kernel of the architecture's CPU plugin and of sparse_mla, with its op and priority, in the order
// plugin-inspect list reports it, must match the checked-in list of the architecture
// (kernel_order_<arch>.txt). A kernel added, removed, renamed or re-ranked fails here until the
// list and the documentation say so.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "plugin_inspect_fixture.h"

namespace plugin_inspect_test {
namespace {

using PluginInspectKernelOrder = PluginInspectFixture;

// "<name> <op> <priority>" lines of `path`, without comments and blank lines.
std::string ExpectedOrder(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read the expected kernel order " << path;
  std::string lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    lines += line + "\n";
  }
  return lines;
}

TEST_F(PluginInspectKernelOrder, ListMatchesTheDocumentedOrder) {
  const Result r =
      Run({"list", "--json", "--no-default-paths", "--plugin-path", ATTNRT_TEST_PLUGIN_DIR});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json list = nlohmann::json::parse(r.out);
  const std::set<std::string> cpu_plugins = {"cpu_x86", "cpu_arm", "sparse_mla"};
  std::ostringstream actual;
  std::set<std::string> seen;
  for (const auto& plugin : list.at("plugins")) {
    const std::string name = plugin.at("name").get<std::string>();
    if (cpu_plugins.count(name) == 0) continue;
    seen.insert(name);
    for (const auto& kernel : plugin.at("kernels")) {
      actual << kernel.at("name").get<std::string>() << " " << kernel.at("op").get<std::string>()
             << " " << kernel.at("priority").get<int>() << "\n";
    }
  }
  EXPECT_EQ(seen.size(), 2u) << "expected the CPU plugin and sparse_mla, found " << seen.size()
                             << " of them:\n"
                             << r.out;
  EXPECT_EQ(actual.str(), ExpectedOrder(ATTNRT_TEST_KERNEL_ORDER_FILE));
}

}  // namespace
}  // namespace plugin_inspect_test
