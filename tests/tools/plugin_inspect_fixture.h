// The harness of the black-box plugin-inspect tests: a temporary folder with in/ and out/, the
// real binary run under `timeout` (a hang fails instead of blocking) with its exit code, stdout
// and stderr, and .npy files written byte by byte.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace plugin_inspect_test {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::string all() const { return out + err; }
};

inline std::string Quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

class PluginInspectFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    // The runtime must pick kernels by rank, not by the caller's environment.
    unsetenv("ATTNRT_KERNEL");
    unsetenv("ATTNRT_DISABLE");
    char pattern[] = "/tmp/attnrt_pi_robust_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    in_ = root_ / "in";
    out_ = root_ / "out";
    fs::create_directories(in_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Runs plugin-inspect with `args` under a 60 s timeout (exit 124 means it hung).
  Result Run(const std::vector<std::string>& args) const {
    std::string command = "timeout 60 " ATTNRT_TEST_EMULATOR + Quote(ATTNRT_TEST_PLUGIN_INSPECT);
    for (const std::string& arg : args) command += " " + Quote(arg);
    const fs::path err_file = root_ / "stderr.txt";
    command += " 2>" + Quote(err_file.string()) + " </dev/null";
    Result r;
    FILE* pipe = popen(command.c_str(), "r");
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
    return r;
  }

  // run --inputs in --outputs out --num-heads 2 --kv-num-heads 1 [extra...]
  Result RunFiles(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args{"run",       "--inputs",       in_.string(),
                                  "--outputs", out_.string(),    "--num-heads",
                                  "2",         "--kv-num-heads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  }

  static void WriteBytes(const fs::path& path, const std::string& bytes) {
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // A .npy file: magic, version, little-endian header length, the header dict padded with
  // spaces and a newline to a multiple of 64 bytes, then `data`.
  static std::string Npy(const std::string& descr, const std::string& shape,
                         const std::string& data, int major = 1,
                         const std::string& fortran = "False") {
    std::string header =
        "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
    return NpyWithHeader(header, data, major);
  }
  static std::string NpyWithHeader(std::string header, const std::string& data, int major = 1) {
    const std::size_t preamble = major == 1 ? 10 : 12;
    while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += static_cast<char>(major);
    bytes += '\0';
    const std::size_t length = header.size();
    for (std::size_t i = 0; i < preamble - 8; ++i) bytes += static_cast<char>(length >> (8 * i));
    return bytes + header + data;
  }
  static std::string Floats(std::size_t count, float value = 0.25f) {
    std::string data;
    for (std::size_t i = 0; i < count; ++i) {
      data.append(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    return data;
  }
  static std::string Int32(int32_t value) {
    return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
  }

  // A valid decode call: B=1, S=1, N=2, Nkv=1, H=8, past P=3, T=4.
  void WriteValidInputs(int major = 1) const {
    WriteBytes(in_ / "query.npy", Npy("<f4", "(1, 1, 16)", Floats(16), major));
    WriteBytes(in_ / "key.npy", Npy("<f4", "(1, 1, 8)", Floats(8, 0.5f)));
    WriteBytes(in_ / "value.npy", Npy("<f4", "(1, 1, 8)", Floats(8, -0.5f)));
    WriteBytes(in_ / "past_key.npy", Npy("<f4", "(1, 1, 3, 8)", Floats(24, 0.125f)));
    WriteBytes(in_ / "past_value.npy", Npy("<f4", "(1, 1, 3, 8)", Floats(24, 1.0f)));
    WriteBytes(in_ / "seqlens_k.npy", Npy("<i4", "(1,)", Int32(3)));
    WriteBytes(in_ / "total_sequence_length.npy", Npy("<i4", "(1,)", Int32(4)));
  }

  // Replaces query.npy with `bytes` and expects a clean error naming query.npy.
  Result ExpectQueryRejected(const std::string& bytes, const std::string& expected) {
    WriteValidInputs();
    WriteBytes(in_ / "query.npy", bytes);
    const Result r = RunFiles();
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_NE(r.err.find("query.npy"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
    return r;
  }

  Result ExpectAttributesRejected(const std::string& json, const std::string& expected) {
    WriteValidInputs();
    WriteBytes(in_ / "attributes.json", json);
    const Result r = Run({"run", "--inputs", in_.string(), "--outputs", out_.string()});
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_NE(r.err.find("attributes.json"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    return r;
  }

  static nlohmann::json ParseJson(const Result& r) {
    try {
      return nlohmann::json::parse(r.out);
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << r.out << "\n" << r.err;
      return nullptr;
    }
  }

  fs::path root_, in_, out_;
};

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace plugin_inspect_test
