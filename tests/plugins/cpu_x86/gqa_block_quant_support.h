// Shared pieces of the PER_BLOCK_32 (ggml Q8_0 / Q4_0 KV cache) tests of the CPU plugin
// (gqa_block_quant_test.cpp, paged_gqa_block_quant_test.cpp): element types of the query, random
// and poisoned cache blocks, the kernel list, and comparisons against the float64 reference with
// the bounds of gqa_dtype_conformance_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace block_quant {

inline constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
inline constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
inline constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
inline constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr uint8_t kBytePoison = 0xA5;
inline constexpr uint16_t kFloat16NaN = 0x7E00;
inline constexpr double kFloat32Tolerance = 1e-5;
inline constexpr double kRelativeSlack = 1e-5;

// One query type with one block format: k_quant_type = v_quant_type = PER_BLOCK_32.
struct Dtypes {
  std::string name;
  FloatFormat query = FloatFormat::kFloat32;
  BlockFormat cache = BlockFormat::kQ8_0;
};

inline void PrintTo(const Dtypes& d, std::ostream* os) { *os << d.name; }

// Emulated (qemu) and sanitized builds run a reduced matrix: a float32 query (ggml's) with both
// formats and a bfloat16 one with Q4_0; every kernel and case still runs.
#if defined(ATTNRT_TEST_REDUCED_MATRIX) || defined(__SANITIZE_ADDRESS__)
constexpr bool kReducedBlockMatrix = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kReducedBlockMatrix = true;
#else
constexpr bool kReducedBlockMatrix = false;
#endif
#else
constexpr bool kReducedBlockMatrix = false;
#endif

inline std::vector<Dtypes> AllDtypes() {
  std::vector<Dtypes> v;
  for (BlockFormat cache : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
    for (FloatFormat query :
         {FloatFormat::kFloat32, FloatFormat::kFloat16, FloatFormat::kBFloat16}) {
      const bool reduced_out = query == FloatFormat::kFloat16 ||
                               (query == FloatFormat::kBFloat16 && cache == BlockFormat::kQ8_0);
      if (kReducedBlockMatrix && reduced_out) continue;
      v.push_back(
          {std::string(FloatFormatName(query)) + "_" + BlockFormatName(cache), query, cache});
    }
  }
  return v;
}

inline int32_t BitWidth(BlockFormat f) { return f == BlockFormat::kQ8_0 ? 8 : 4; }

inline attnrt_dtype QueryDtype(FloatFormat f) {
  switch (f) {
    case FloatFormat::kFloat16:
      return kF16;
    case FloatFormat::kBFloat16:
      return kBF16;
    case FloatFormat::kFloat32:
      break;
  }
  return kF32;
}

// ---- tensors of the query type T ----------------------------------------------------------------
inline std::vector<float> RoundedNormal(FloatFormat f, int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = RoundToFormat(f, dist(rng));
  return v;
}

// Stores float values (exact in f) as elements of type f.
inline void Store(Tensor& t, FloatFormat f, const std::vector<float>& v) {
  ASSERT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    switch (f) {
      case FloatFormat::kFloat32:
        t.f32()[i] = v[i];
        break;
      case FloatFormat::kFloat16:
        static_cast<uint16_t*>(t.data())[i] = Float16Bits(v[i]);
        break;
      case FloatFormat::kBFloat16:
        static_cast<uint16_t*>(t.data())[i] = BFloat16Bits(v[i]);
        break;
    }
  }
}

inline double Load(Tensor& t, FloatFormat f, int64_t i) {
  switch (f) {
    case FloatFormat::kFloat16:
      return Float16Value(static_cast<const uint16_t*>(t.data())[i]);
    case FloatFormat::kBFloat16:
      return BFloat16Value(static_cast<const uint16_t*>(t.data())[i]);
    case FloatFormat::kFloat32:
      break;
  }
  return t.f32()[i];
}

inline Tensor Filled(FloatFormat f, std::vector<int64_t> shape, float value) {
  Tensor t(QueryDtype(f), std::move(shape));
  Store(t, f, std::vector<float>(static_cast<size_t>(t.numel()), value));
  return t;
}

// RoPE of one head row in float from values of T, then rounded to T (docs/gqa-semantics.md,
// "Quantize-on-write of rotated K"); without cos/sin only the rounding.
inline void RotateAndRound(FloatFormat f, float* row, int64_t H, const float* cos_row,
                           const float* sin_row, int64_t half, bool interleaved) {
  if (cos_row != nullptr) RotateRowFloat(row, cos_row, sin_row, half, interleaved);
  for (int64_t i = 0; i < H; ++i) row[i] = RoundToFormat(f, row[i]);
}

// ---- cache blocks -------------------------------------------------------------------------------
// A readable cache row of H elements: per block a random float16 d (either sign, |d| chosen so the
// elements are of order 1, or with `subnormal` a float16 subnormal d, |d| < 2^-14, so the elements
// are of order 1e-4) and random codes (every byte value, -128 included for Q8_0).
inline void RandomBlockRow(BlockFormat f, int64_t H, std::mt19937_64& rng, uint8_t* out,
                           bool subnormal = false) {
  std::uniform_real_distribution<float> magnitude(
      subnormal ? 1e-6f : (f == BlockFormat::kQ8_0 ? 0.004f : 0.08f),
      subnormal ? 6e-5f : (f == BlockFormat::kQ8_0 ? 0.03f : 0.5f));
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t block = 0; block < H / kBlockElements; ++block) {
    uint8_t* b = out + block * BlockBytes(f);
    const float d = byte(rng) < 128 ? magnitude(rng) : -magnitude(rng);
    const uint16_t bits = Float16Bits(d);
    b[0] = static_cast<uint8_t>(bits & 0xFF);
    b[1] = static_cast<uint8_t>(bits >> 8);
    for (int64_t j = 2; j < BlockBytes(f); ++j) b[j] = static_cast<uint8_t>(byte(rng));
  }
}

// A row no kernel may read: every block's d is a float16 NaN, so any element read is NaN and
// shows in the output.
inline void PoisonBlockRow(BlockFormat f, int64_t H, std::mt19937_64& rng, uint8_t* out) {
  RandomBlockRow(f, H, rng, out);
  for (int64_t block = 0; block < H / kBlockElements; ++block) {
    out[block * BlockBytes(f)] = static_cast<uint8_t>(kFloat16NaN & 0xFF);
    out[block * BlockBytes(f) + 1] = static_cast<uint8_t>(kFloat16NaN >> 8);
  }
}

// ---- kernels ------------------------------------------------------------------------------------
inline std::vector<std::string> CpuKernels(int32_t op_kind) {
  std::vector<std::string> names;
  attnrt_runtime* raw = nullptr;
  if (attnrt_runtime_create(nullptr, &raw) != ATTNRT_OK) return names;
  RuntimePtr runtime(raw);
  for (const PluginInfo& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != ATTNRT_TEST_CPU_PLUGIN) continue;
    for (const KernelInfo& k : plugin.kernels) {
      if (k.op_kind == op_kind) names.push_back(k.name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "" (the runtime's own choice) and every kernel of the op.
inline std::vector<std::string> KernelParams(int32_t op_kind) {
  std::vector<std::string> params = {""};
  for (auto& k : CpuKernels(op_kind)) params.push_back(k);
  return params;
}

inline bool IsCpuFeatureReason(const std::string& reason) {
  for (const char* word : {"avx", "cpu", "isa", "fma", "f16c", "xcr0", "feature", "instruction"}) {
    if (ContainsI(reason, word)) return true;
  }
  return false;
}

// A decline that hands the case to another path (ONNX Runtime's eligibility rules).
inline bool IsOtherPathReason(const std::string& reason) {
  return ContainsI(reason, "naive") || ContainsI(reason, "ONNX Runtime");
}

inline bool IsApproximate(const std::string& kernel) {
  return kernel.size() > 7 && kernel.compare(kernel.size() - 7, 7, "_approx") == 0;
}

// "flash" of "cpu_x86.gqa.flash.avx2" and of "cpu_x86.paged_gqa.flash.avx2".
inline std::string Algorithm(const std::string& kernel) {
  const size_t a = kernel.find('.', kernel.find('.') + 1);
  const size_t b = kernel.find('.', a + 1);
  return a == std::string::npos ? "" : kernel.substr(a + 1, b - a - 1);
}

// Whether a pinned kernel's explain entry lets the test run it; otherwise skips (a kernel this CPU
// cannot run, or a non-naive kernel handing the case to another path) or fails (any other decline).
// Returns false when the test must stop.
inline bool PinnedKernelRuns(const std::vector<Candidate>& candidates, const std::string& pinned,
                             std::string* skip_reason) {
  auto it = std::find_if(candidates.begin(), candidates.end(),
                         [&](const Candidate& x) { return x.kernel == pinned; });
  if (it == candidates.end()) {
    ADD_FAILURE() << "explain does not list " << pinned;
    return false;
  }
  if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE ||
      (it->status == ATTNRT_CANDIDATE_DECLINED && IsCpuFeatureReason(it->reason))) {
    *skip_reason = pinned + " cannot run on this CPU: " + it->reason;
    return false;
  }
  if (it->status == ATTNRT_CANDIDATE_DECLINED && Algorithm(pinned) != "naive" &&
      IsOtherPathReason(it->reason)) {
    *skip_reason = pinned + " declines this case: " + it->reason;
    return false;
  }
  if (it->status != ATTNRT_CANDIDATE_SELECTED) {
    ADD_FAILURE() << pinned << " is " << attnrt_candidate_status_name(it->status) << ": "
                  << it->reason;
    return false;
  }
  return true;
}

// ---- comparison ---------------------------------------------------------------------------------
inline std::string Index(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t dim = shape.size(); dim-- > 0;) {
    idx[dim] = flat % shape[dim];
    flat /= shape[dim];
  }
  std::ostringstream os;
  os << "[";
  for (size_t dim = 0; dim < idx.size(); ++dim) os << (dim ? "," : "") << idx[dim];
  os << "]";
  return os.str();
}

// The allowed error of a T result at reference value w: float32 1e-5; float16/bfloat16 half an ulp
// of T (the kernel rounds its float32 result to T once) plus 1e-5 relative.
// `slack` scales the float32 part (for outputs far below 1).
inline double Bound(FloatFormat f, double w, double slack = 1.0) {
  if (f == FloatFormat::kFloat32) return kFloat32Tolerance * slack;
  return 0.5 * UnitInLastPlace(f, w) + kRelativeSlack * slack * (1.0 + std::fabs(w));
}

// Compares a T tensor with the reference over the selected elements; every selected element must
// have been written (the NaN poison gone). Prints and returns the maximum error.
template <typename Selected>
double ExpectClose(const std::string& what, Tensor& got, FloatFormat f,
                   const std::vector<double>& want, Selected selected, double slack = 1.0) {
  EXPECT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  if (static_cast<size_t>(got.numel()) != want.size()) return 0.0;
  int64_t unwritten = 0, bad = 0, first_bad = -1;
  double max_error = 0.0, max_ratio = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!selected(i)) continue;
    const double g = Load(got, f, i);
    const double w = want[static_cast<size_t>(i)];
    if (std::isnan(g)) {
      ++unwritten;
      if (first_bad < 0) first_bad = i;
      continue;
    }
    const double error = std::fabs(g - w);
    max_error = std::max(max_error, error);
    const double bound = Bound(f, w, slack);
    max_ratio = std::max(max_ratio, error / bound);
    if (!(error <= bound)) {
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  std::printf("[observed] %s max_abs_error=%.3e max_error_over_bound=%.3f\n", what.c_str(),
              max_error, max_ratio);
  testing::Test::RecordProperty(what + "_max_abs_error", std::to_string(max_error));
  EXPECT_EQ(unwritten, 0) << what << ": elements NaN (unwritten, or a poisoned row read); first at "
                          << Index(got.shape(), first_bad) << ", want "
                          << (first_bad >= 0 ? want[static_cast<size_t>(first_bad)] : 0.0);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements off by more than the bound (max error "
                    << max_error << ", " << max_ratio << " of the bound); first at "
                    << Index(got.shape(), first_bad) << ": got "
                    << (first_bad >= 0 ? Load(got, f, first_bad) : 0.0) << ", want "
                    << (first_bad >= 0 ? want[static_cast<size_t>(first_bad)] : 0.0);
  return max_error;
}

// Compares cache rows byte for byte: `rows` rows of `row_bytes` bytes each, got(r) and want(r)
// the r-th row's bytes; `describe(r)` names row r in a failure message (batch, kv head, token).
template <typename GotRow, typename WantRow, typename Describe>
void ExpectRowBytes(const std::string& what, BlockFormat f, int64_t rows, int64_t row_bytes,
                    GotRow got, WantRow want, Describe describe) {
  int64_t bad_rows = 0, bad_bytes = 0, first_row = -1, first_col = -1;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* g = got(r);
    const uint8_t* w = want(r);
    bool row_bad = false;
    for (int64_t i = 0; i < row_bytes; ++i) {
      if (g[i] == w[i]) continue;
      ++bad_bytes;
      row_bad = true;
      if (first_row < 0) {
        first_row = r;
        first_col = i;
      }
    }
    bad_rows += row_bad ? 1 : 0;
  }
  if (bad_bytes == 0) return;
  const int64_t block = first_col / BlockBytes(f);
  const int64_t in_block = first_col % BlockBytes(f);
  std::string part;
  if (in_block < 2) {
    part = "d (float16 scale) byte " + std::to_string(in_block);
  } else if (f == BlockFormat::kQ8_0) {
    part = "q of element " + std::to_string(block * kBlockElements + in_block - 2);
  } else {
    part = "nibbles of elements " + std::to_string(block * kBlockElements + in_block - 2) +
           " (low) and " + std::to_string(block * kBlockElements + in_block - 2 + 16) + " (high)";
  }
  const uint8_t* g = got(first_row);
  const uint8_t* w = want(first_row);
  const int64_t b0 = block * BlockBytes(f);
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "got 0x%02X, want 0x%02X; block d got 0x%02X%02X, want 0x%02X%02X", g[first_col],
                w[first_col], g[b0 + 1], g[b0], w[b0 + 1], w[b0]);
  ADD_FAILURE() << what << " (" << BlockFormatName(f) << "): " << bad_bytes << " bytes in "
                << bad_rows << " of " << rows << " rows differ; first at " << describe(first_row)
                << ", byte " << first_col << " (block " << block << ", " << part << "): " << buf;
}

}  // namespace block_quant
}  // namespace attnrt_test
