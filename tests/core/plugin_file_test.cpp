// Plugin files that the dynamic loader must never see: copies of the CPU plugin cut at many lengths
// (dlopen maps a segment past the end of the file and dies of SIGBUS), a copy marked for another
// machine, a 32-bit one, an executable, a text file. Each is skipped with one diagnostic saying
// what is wrong with it, and the real plugin loads beside it. Each runtime is made in a child, so a
// crash is reported with the length that caused it.
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCopyName = "libattnrt_t.so";

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Where the last loadable segment of a 64-bit ELF image ends in the file (the test's own reading
// of the program headers).
uint64_t EndOfLoadableSegments(const std::vector<char>& image) {
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof(header));
  uint64_t end = header.e_phoff + uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    std::memcpy(&segment, image.data() + header.e_phoff + i * sizeof(Elf64_Phdr), sizeof(segment));
    if (segment.p_type == PT_LOAD) end = std::max(end, segment.p_offset + segment.p_filesz);
  }
  return end;
}

class PluginFileTest : public testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("attnrt_plugin_file_" + std::to_string(getpid()));
    fs::create_directories(folder_);
    image_ = ReadFile(DefaultPluginDir() + "/libattnrt_" ATTNRT_TEST_CPU_PLUGIN ".so");
    ASSERT_GT(image_.size(), sizeof(Elf64_Ehdr));
  }
  void TearDown() override { fs::remove_all(folder_); }

  void WriteCopy(const std::vector<char>& bytes) {
    std::ofstream(folder_ / kCopyName, std::ios::binary).write(bytes.data(), bytes.size());
  }

  // In a child: a runtime over the default folder, then the copy's folder. Returns "" when the CPU
  // plugin loaded from the default folder and the copy got one diagnostic containing `word`; else
  // what went wrong.
  std::string Check(const std::string& word) {
    std::string output;
    const std::string failure = RunInChild(
        120,
        [&](std::string* out) {
          const std::string default_dir = DefaultPluginDir();
          const std::string copy_dir = folder_.string();
          const char* paths[] = {default_dir.c_str(), copy_dir.c_str()};
          attnrt_runtime_options options = DefaultOptions();
          options.plugin_paths = paths;
          options.num_plugin_paths = 2;
          options.search_default_paths = 0;
          attnrt_runtime* runtime = nullptr;
          if (attnrt_runtime_create(&options, &runtime) != ATTNRT_OK) {
            *out = "runtime creation failed: " + std::string(attnrt_last_error_message());
            return 1;
          }
          bool cpu_loaded = false;
          for (const auto& p : ListPlugins(runtime)) {
            cpu_loaded = cpu_loaded || (p.name == ATTNRT_TEST_CPU_PLUGIN &&
                                        fs::path(p.path).parent_path() == fs::path(default_dir));
          }
          std::vector<std::string> mine;
          for (const auto& d : ListDiagnostics(runtime)) {
            if (fs::path(d.path).filename() == kCopyName) mine.push_back(d.message);
          }
          attnrt_runtime_destroy(runtime);
          if (!cpu_loaded) *out = "the CPU plugin did not load from the default folder; ";
          if (mine.size() != 1) *out += std::to_string(mine.size()) + " diagnostics for the copy; ";
          if (!mine.empty() && !ContainsI(mine[0], word)) {
            *out += "\"" + mine[0] + "\" lacks \"" + word + "\"";
          }
          return out->empty() ? 0 : 1;
        },
        &output);
    return failure.empty() ? "" : failure + ": " + output;
  }

  CleanAttnrtEnv env_;
  fs::path folder_;
  std::vector<char> image_;
};

TEST_F(PluginFileTest, TruncatedCopiesAreRefusedBeforeTheLoaderSeesThem) {
  const uint64_t size = image_.size();
  const uint64_t load_end = EndOfLoadableSegments(image_);
  ASSERT_LE(load_end, size);
  std::set<uint64_t> cuts = {0,   1,    3,    4,    16,           63,       64,      65,
                             100, 1000, 4096, 5000, load_end - 1, load_end, size - 1};
  for (uint64_t k = 1; k < 32; ++k) cuts.insert(size * k / 32);
  for (const uint64_t cut : cuts) {
    if (cut > size) continue;
    SCOPED_TRACE("copy cut to " + std::to_string(cut) + " of " + std::to_string(size) + " bytes");
    WriteCopy(std::vector<char>(image_.begin(), image_.begin() + static_cast<std::ptrdiff_t>(cut)));
    // Shorter than the magic: not ELF at all. Cut inside a segment: truncated. Cut after the last
    // segment (only section headers lost): it loads, and is then a second plugin of the same name.
    const std::string word = cut < 4          ? "not an ELF file"
                             : cut < load_end ? "truncated"
                                              : "duplicate plugin name";
    EXPECT_EQ(Check(word), "");
  }
}

TEST_F(PluginFileTest, CopyForAnotherMachineNamesThatMachine) {
#if defined(__x86_64__)
  const uint16_t other = EM_AARCH64;
  const std::string name = "built for aarch64";
#else
  const uint16_t other = EM_X86_64;
  const std::string name = "built for x86-64";
#endif
  std::vector<char> copy = image_;
  std::memcpy(copy.data() + offsetof(Elf64_Ehdr, e_machine), &other, sizeof(other));
  WriteCopy(copy);
  EXPECT_EQ(Check(name), "");
}

TEST_F(PluginFileTest, ThirtyTwoBitExecutableAndTextFilesAreNamedForWhatTheyAre) {
  std::vector<char> copy = image_;
  copy[EI_CLASS] = ELFCLASS32;
  WriteCopy(copy);
  EXPECT_EQ(Check("32-bit"), "");

  copy = image_;
  const uint16_t executable = ET_EXEC;
  std::memcpy(copy.data() + offsetof(Elf64_Ehdr, e_type), &executable, sizeof(executable));
  WriteCopy(copy);
  EXPECT_EQ(Check("executable"), "");

  const std::string text = "This is a text file named like a plugin.\n";
  WriteCopy(std::vector<char>(text.begin(), text.end()));
  EXPECT_EQ(Check("not an ELF file"), "");
}

}  // namespace
}  // namespace attnrt_test
