// Dtype conformance of every GQA kernel the cpu_x86 plugin registers (and of the runtime's own
// choice, "auto"): float16 and bfloat16 queries with a cache of the same type, and quantized caches
// (int8, int4 packed in uint8, float8 e4m3fn, float8 e5m2) with PER_TENSOR and PER_CHANNEL scales,
// each with float32, float16 and bfloat16 queries, over a representative subset of the float32
// suite's cases (gqa_conformance_test.cpp). Block-quantized caches (PER_BLOCK_32: ggml Q8_0 / Q4_0)
// have suites of their own: gqa_block_quant_test.cpp, gqa_block_quant_window_cache_test.cpp,
// paged_gqa_block_quant_test.cpp and gqa_block_quant_errors_test.cpp.
//
// Method (independent of the kernels; tests/common/dtype_reference.h):
//   - inputs are fresh N(0,1) floats rounded to the query type T (round to nearest even);
//   - RoPE is computed in float from those rounded inputs and rounded to T (ONNX Runtime's rule,
//     docs/gqa-semantics.md "Quantize-on-write of rotated K"); for float32 nothing is rounded;
//   - quantized caches: every new K row (after that RoPE) and V row is quantized by the test's own
//     quantizer (q = clamp(rint(x · inv), lo, hi), int4 low nibble first with +8, e4m3fn and e5m2
//     saturating RNE); the expected present bytes come from it and must match byte for byte;
//   - the float64 reference (gqa_reference.h) runs on these rounded, rotated and, for quantized
//     caches, dequantized (q · scale) values; its present layout is reused on the element
//     codes to place the expected bytes.
// Outputs are poisoned before the run (NaN for float types, 0xA5 for byte caches), so every element
// the contract says is written must have been written; unreadable past rows are poisoned too (NaN,
// or the largest code where a byte type has no NaN).
// Tolerances: float32 queries 1e-5 absolute; float16/bfloat16 queries (the kernel rounds its
// float32 result to T once) 0.5 ulp(T at the reference value) + 1e-5 · (1 + |ref|), for output and
// output_qk. Each test prints its observed maximum errors ("[observed]" lines).
//
// A pinned kernel is skipped when it cannot run on this CPU, or when it is not a naive kernel and
// declines with a reason that hands the case to another path (flash declines what ONNX Runtime's
// flash path declines, e.g. "uses the naive path (as in ONNX Runtime)"); any other decline fails.
// Seeds: ATTNRT_TEST_SEED reproduces a run; it is printed on failure (SCOPED_TRACE).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kF8E4M3Fn = ATTNRT_DTYPE_FLOAT8_E4M3FN;
constexpr attnrt_dtype kF8E5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint8_t kBytePoison = 0xA5;
constexpr double kFloat32Tolerance = 1e-5;
// Extra output error allowed to an approximate kernel that quantizes each query row to int8
// (symmetric, s_q = max|q| / 127): each q element moves by at most s_q / 2, so a score moves by at
// most scale * s_q / 2 * sum_d |k_d|, ~0.1 with the N(0,1) inputs of these cases (H = 64,
// max|q| ~ 3) and ~0.01 typically; an output, a convex mix of V rows, moves by about the score
// error times |v|. Observed on cpu_arm.gqa.flash.dotprod_approx: at most 0.045 over seeds 1-6. An
// error in the int8 path itself (scale, sign, code offset) shows as errors of order 1.
constexpr double kApproximateQueryTolerance = 0.15;
constexpr double kRelativeSlack = 1e-5;

// ---- dtype combinations -------------------------------------------------------------------------
struct Dtypes {
  std::string name;
  FloatFormat query = FloatFormat::kFloat32;
  bool quantized = false;
  CacheFormat cache = CacheFormat::kInt8;  // when quantized
  int32_t quant = ATTNRT_GQA_QUANT_NONE;   // k_quant_type = v_quant_type
};

void PrintTo(const Dtypes& d, std::ostream* os) { *os << d.name; }

// Emulated builds, and sanitizer builds, whose instrumentation makes the full matrix the longest
// suite of the sanitizer run (the Release run keeps it whole).
#if defined(ATTNRT_TEST_REDUCED_MATRIX) || defined(__SANITIZE_ADDRESS__)
constexpr bool kReducedMatrix = true;
#else
constexpr bool kReducedMatrix = false;
#endif

std::vector<Dtypes> DtypeCombos() {
  std::vector<Dtypes> v;
  v.push_back(
      {"f16_cache_f16", FloatFormat::kFloat16, false, CacheFormat::kInt8, ATTNRT_GQA_QUANT_NONE});
  v.push_back({"bf16_cache_bf16", FloatFormat::kBFloat16, false, CacheFormat::kInt8,
               ATTNRT_GQA_QUANT_NONE});
  const std::pair<CacheFormat, const char*> caches[] = {{CacheFormat::kInt8, "int8"},
                                                        {CacheFormat::kInt4, "int4"},
                                                        {CacheFormat::kFloat8E4M3Fn, "fp8e4m3"},
                                                        {CacheFormat::kFloat8E5M2, "fp8e5m2"}};
  const std::pair<int32_t, const char*> quants[] = {{ATTNRT_GQA_QUANT_PER_TENSOR, "per_tensor"},
                                                    {ATTNRT_GQA_QUANT_PER_CHANNEL, "per_channel"}};
  const std::pair<FloatFormat, const char*> queries[] = {{FloatFormat::kFloat32, "f32"},
                                                         {FloatFormat::kFloat16, "f16"},
                                                         {FloatFormat::kBFloat16, "bf16"}};
  int pair = 0;
  for (const auto& [cache, cache_name] : caches) {
    for (const auto& [quant, quant_name] : quants) {
      int query_index = 0;
      for (const auto& [query, query_name] : queries) {
        // The reduced matrix: every (cache, quantization) pair with one query
        // dtype, the three query dtypes in turn, so each cache type still meets each query type.
        if (kReducedMatrix && query_index++ % 3 != pair % 3) continue;
        v.push_back({std::string(query_name) + "_cache_" + cache_name + "_" + quant_name, query,
                     true, cache, quant});
      }
      ++pair;
    }
  }
  return v;
}

attnrt_dtype QueryDtype(FloatFormat f) {
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

attnrt_dtype CacheDtype(const Dtypes& d) {
  if (!d.quantized) return QueryDtype(d.query);
  switch (d.cache) {
    case CacheFormat::kInt8:
      return kI8;
    case CacheFormat::kInt4:
      return kU8;  // two elements per byte, H/2 bytes per row
    case CacheFormat::kFloat8E5M2:
      return kF8E5M2;
    case CacheFormat::kFloat8E4M3Fn:
      break;
  }
  return kF8E4M3Fn;
}

// ---- cases (a representative subset of gqa_conformance_test.cpp's) -----------------------------
enum Rotary { kNoRotary, kHalfSplit, kInterleaved };
enum Bias { kNoBias, kBias1NST, kBiasB1ST, kBiasBNST };

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 4, Nkv = 2, H = 64;
  int64_t T = 1;
  std::vector<int32_t> seqlens;  // empty: T - 1 for every batch
  int64_t P = -1;                // past rows; < 0: no past (a quantized cache gets P = 0)
  bool shared_buffer = false;    // present_key/value are the past buffers
  bool packed = false;
  bool shared_kv = false;  // L = 0
  float softcap = 0.0f;
  int32_t window = -1;
  int32_t smooth = -1;
  int32_t qk_output = 0;
  Rotary rotary = kNoRotary;
  int64_t rotary_dim = 0;  // R; 0 = H
  bool position_ids = false;
  Bias bias = kNoBias;
  bool head_sink = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case Prompt(std::string name, int64_t B, int64_t S, std::vector<int32_t> seqlens = {}) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.S = S;
  c.T = S;
  c.seqlens = std::move(seqlens);
  return c;
}

Case Decode(std::string name, int64_t B, int64_t P, std::vector<int32_t> seqlens,
            bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.P = P;
  c.T = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
  c.seqlens = std::move(seqlens);
  c.shared_buffer = shared_buffer;
  return c;
}

Case Subsequent(std::string name, int64_t S, int64_t past_rows, int64_t P,
                bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.S = S;
  c.P = P;
  c.T = past_rows + S;
  c.seqlens = {static_cast<int32_t>(past_rows + S - 1)};
  c.shared_buffer = shared_buffer;
  return c;
}

template <typename F>
Case With(Case c, F&& change) {
  change(c);
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  v.push_back(Prompt("prompt_right_padding", 3, 12, {11, 6, 2}));
  v.push_back(Decode("decode_past", 2, 40, {39, 20}));
  v.push_back(With(Decode("decode_shared_buffer_rotary", 2, 48, {30, 12}, true),
                   [](Case& c) { c.rotary = kHalfSplit; }));
  v.push_back(
      With(Subsequent("subsequent_prompt_window", 5, 17, 17), [](Case& c) { c.window = 4; }));
  v.push_back(With(Subsequent("subsequent_shared_buffer_rotary_ids", 5, 17, 32, true), [](Case& c) {
    c.rotary = kInterleaved;
    c.position_ids = true;
  }));
  v.push_back(With(Prompt("packed_prompt_partial_rotary", 2, 12, {11, 7}), [](Case& c) {
    c.packed = true;
    c.rotary = kHalfSplit;
    c.rotary_dim = 32;
  }));
  v.push_back(With(Decode("packed_decode_rotary", 2, 20, {19, 7}), [](Case& c) {
    c.packed = true;
    c.rotary = kInterleaved;
  }));
  v.push_back(With(Decode("window_bias_decode", 2, 30, {29, 10}), [](Case& c) {
    c.window = 8;
    c.bias = kBiasB1ST;
  }));
  v.push_back(With(Prompt("bias_prompt", 2, 10, {9, 6}), [](Case& c) { c.bias = kBias1NST; }));
  v.push_back(With(Prompt("softcap_sink_qk_output_1_prompt", 2, 10, {9, 6}), [](Case& c) {
    c.softcap = 1.5f;
    c.head_sink = true;
    c.qk_output = 1;
    c.bias = kBiasBNST;
  }));
  v.push_back(With(Decode("smooth_window_qk_output_2_decode", 2, 20, {19, 7}), [](Case& c) {
    c.smooth = 1;
    c.window = 5;
    c.qk_output = 2;
  }));
  v.push_back(
      With(Decode("shared_kv_decode", 2, 24, {23, 9}), [](Case& c) { c.shared_kv = true; }));
  // Head sizes off the 64 above: kernels take 32-, 16- and 8-element paths through a row (the
  // int4 flash kernels read 32 elements at a time where the head size allows).
  v.push_back(With(Decode("head_size_8_decode", 2, 24, {23, 9}), [](Case& c) { c.H = 8; }));
  v.push_back(With(Decode("head_size_40_decode", 2, 24, {23, 9}), [](Case& c) { c.H = 40; }));
  v.push_back(With(Decode("head_size_96_decode", 2, 70, {69, 33}), [](Case& c) { c.H = 96; }));
  v.push_back(With(Prompt("head_size_160_prompt", 2, 12, {11, 7}), [](Case& c) { c.H = 160; }));
  return v;
}

// ---- tensors of type T --------------------------------------------------------------------------
std::vector<float> RoundedNormal(FloatFormat f, int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = RoundToFormat(f, dist(rng));
  return v;
}

// Stores float values (already exact in f) as elements of type f.
void Store(Tensor& t, FloatFormat f, const std::vector<float>& v) {
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

double Load(Tensor& t, FloatFormat f, int64_t i) {
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

Tensor Filled(attnrt_dtype dtype, FloatFormat f, std::vector<int64_t> shape, float value) {
  Tensor t(dtype, std::move(shape));
  Store(t, f, std::vector<float>(static_cast<size_t>(t.numel()), value));
  return t;
}

// ---- one case's tensors and reference inputs ----------------------------------------------------
struct Built {
  GqaTensors t;
  attnrt_gqa_attributes attributes{};
  GqaRefProblem problem;  // unpacked, RoPE already applied: do_rotary = 0
  // Reference values (float, exact): what the kernel sees, rotated in float and rounded to T;
  // quantized caches dequantized. NaN marks poisoned past rows of a float cache.
  std::vector<float> q, k, v, past_k, past_v, bias, sink;
  // Quantized caches: the element codes (int8 byte, int4 biased nibble, e4m3fn or e5m2 byte) as
  // floats.
  std::vector<float> k_code, v_code, past_k_code, past_v_code;
};

GqaRefInputs RefInputs(const Built& b, bool codes) {
  GqaRefInputs in;
  auto ptr = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  in.query = ptr(b.q);
  in.key = ptr(codes ? b.k_code : b.k);
  in.value = ptr(codes ? b.v_code : b.v);
  in.past_key = ptr(codes ? b.past_k_code : b.past_k);
  in.past_value = ptr(codes ? b.past_v_code : b.past_v);
  in.attention_bias = ptr(b.bias);
  in.head_sink = ptr(b.sink);
  return in;
}

Built Build(const Case& c, const Dtypes& d, std::mt19937_64& rng) {
  Built b;
  GqaTensors& t = b.t;
  const FloatFormat Tq = d.query;
  const attnrt_dtype dq = QueryDtype(Tq);
  const attnrt_dtype dc = CacheDtype(d);
  const int64_t B = c.B, S = c.S, N = c.N, Nkv = c.Nkv, H = c.H, T = c.T;
  const int64_t L = c.shared_kv ? 0 : S;
  const int64_t P = d.quantized ? std::max<int64_t>(c.P, 0) : c.P;  // quantized: past required
  const int64_t Hc = d.quantized && d.cache == CacheFormat::kInt4 ? H / 2 : H;
  const int64_t hidden = c.packed ? (N + 2 * Nkv) * H : N * H;
  std::vector<int32_t> seqlens = c.seqlens;
  if (seqlens.empty()) seqlens.assign(static_cast<size_t>(B), static_cast<int32_t>(T - 1));
  const bool first_prompt = S == T;

  // Query/key/value in T, and their unpacked views (B, S|L, heads, H).
  std::vector<float> query = RoundedNormal(Tq, B * S * hidden, rng);
  t[ATTNRT_GQA_INPUT_QUERY] = Tensor(dq, {B, S, hidden});
  Store(t[ATTNRT_GQA_INPUT_QUERY], Tq, query);
  std::vector<float> q_in(static_cast<size_t>(B * S * N * H));
  std::vector<float> k_in(static_cast<size_t>(B * L * Nkv * H));
  std::vector<float> v_in(k_in.size());
  if (c.packed) {
    for (int64_t r = 0; r < B * S; ++r) {
      const float* row = query.data() + r * hidden;
      std::copy(row, row + N * H, q_in.begin() + r * N * H);
      std::copy(row + N * H, row + (N + Nkv) * H, k_in.begin() + r * Nkv * H);
      std::copy(row + (N + Nkv) * H, row + (N + 2 * Nkv) * H, v_in.begin() + r * Nkv * H);
    }
  } else {
    q_in = query;
    k_in = RoundedNormal(Tq, B * L * Nkv * H, rng);
    v_in = RoundedNormal(Tq, B * L * Nkv * H, rng);
    t[ATTNRT_GQA_INPUT_KEY] = Tensor(dq, {B, L, Nkv * H});
    t[ATTNRT_GQA_INPUT_VALUE] = Tensor(dq, {B, L, Nkv * H});
    Store(t[ATTNRT_GQA_INPUT_KEY], Tq, k_in);
    Store(t[ATTNRT_GQA_INPUT_VALUE], Tq, v_in);
  }
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {B});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});

  // RoPE in float on the rounded inputs, each rotated row rounded to T.
  const int64_t R = c.rotary == kNoRotary ? 0 : (c.rotary_dim > 0 ? c.rotary_dim : H);
  const int64_t half = R / 2;
  const int64_t M = T + 16;
  std::vector<float> cos_cache, sin_cache;
  std::vector<int64_t> ids;
  const int64_t id_cols = S;
  if (c.rotary != kNoRotary) {
    std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
    for (int64_t i = 0; i < M * half; ++i) {
      const double a = angle(rng);
      cos_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::cos(a))));
      sin_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::sin(a))));
    }
    t[ATTNRT_GQA_INPUT_COS_CACHE] = Tensor(dq, {M, half});
    t[ATTNRT_GQA_INPUT_SIN_CACHE] = Tensor(dq, {M, half});
    Store(t[ATTNRT_GQA_INPUT_COS_CACHE], Tq, cos_cache);
    Store(t[ATTNRT_GQA_INPUT_SIN_CACHE], Tq, sin_cache);
    if (c.position_ids) {
      std::uniform_int_distribution<int64_t> any(0, first_prompt ? M - S : M - 1);
      ids.resize(static_cast<size_t>(B * id_cols));
      for (auto& id : ids) id = any(rng);
      if (first_prompt) {
        for (int64_t s = 1; s < S; ++s) ids[static_cast<size_t>(s)] = ids[0] + s;
      }
      t[ATTNRT_GQA_INPUT_POSITION_IDS] = I64(ids, {B, id_cols});
    }
  }
  auto position = [&](int64_t bb, int64_t s) -> int64_t {
    if (first_prompt) return (ids.empty() ? 0 : ids[0]) + s;
    if (!ids.empty()) return ids[static_cast<size_t>(bb * id_cols + s)];
    return int64_t{seqlens[static_cast<size_t>(bb)]} + 1 - S + s;
  };
  auto rotate_rows = [&](std::vector<float>& x, int64_t rows, int64_t heads) {
    for (int64_t bb = 0; bb < B; ++bb) {
      for (int64_t s = 0; s < rows; ++s) {
        for (int64_t h = 0; h < heads; ++h) {
          float* row = x.data() + ((bb * rows + s) * heads + h) * H;
          if (c.rotary != kNoRotary) {
            const int64_t pos = position(bb, s);
            RotateRowFloat(row, cos_cache.data() + pos * half, sin_cache.data() + pos * half, half,
                           c.rotary == kInterleaved);
          }
          for (int64_t i = 0; i < H; ++i) row[i] = RoundToFormat(Tq, row[i]);
        }
      }
    }
  };
  b.q = q_in;
  rotate_rows(b.q, S, N);
  std::vector<float> k_rot = k_in;
  rotate_rows(k_rot, L, Nkv);

  // Scales (quantized): PER_TENSOR one value, PER_CHANNEL Nkv*H values around the base, with one
  // zero-scale channel for the integer formats and float8 e5m2 (inv = 1, dequantized to 0, as ONNX
  // Runtime for the integer ones; e5m2's writer is documented with the same inverse scale). The
  // float8 bases put |x| ~ 3.5 at the format's largest finite value (e4m3fn 448 = 3.5 * 128, e5m2
  // 57344 = 3.5 * 16384), so the tails of N(0,1) rows saturate, more often with the per-channel
  // spread.
  std::vector<float> k_scale, v_scale;
  if (d.quantized) {
    const float base = d.cache == CacheFormat::kInt8         ? 3.0f / 127.0f
                       : d.cache == CacheFormat::kInt4       ? 2.5f / 7.0f
                       : d.cache == CacheFormat::kFloat8E5M2 ? 1.0f / 16384.0f
                                                             : 1.0f / 128.0f;
    const int64_t count = d.quant == ATTNRT_GQA_QUANT_PER_TENSOR ? 1 : Nkv * H;
    std::uniform_real_distribution<float> spread(0.5f, 1.5f);
    for (auto* scales : {&k_scale, &v_scale}) {
      for (int64_t i = 0; i < count; ++i) scales->push_back(count == 1 ? base : base * spread(rng));
      if (count > 1 && d.cache != CacheFormat::kFloat8E4M3Fn) (*scales)[5] = 0.0f;
    }
    t[ATTNRT_GQA_INPUT_K_SCALE] = F32({count});
    t[ATTNRT_GQA_INPUT_V_SCALE] = F32({count});
    std::copy(k_scale.begin(), k_scale.end(), t[ATTNRT_GQA_INPUT_K_SCALE].f32());
    std::copy(v_scale.begin(), v_scale.end(), t[ATTNRT_GQA_INPUT_V_SCALE].f32());
  }
  auto scale_of = [&](const std::vector<float>& scales, int64_t kh, int64_t h) {
    return scales.size() == 1 ? scales[0] : scales[static_cast<size_t>(kh * H + h)];
  };

  // New K/V rows: T values, or quantized codes and their dequantized values.
  if (!d.quantized) {
    b.k = k_rot;
    b.v = v_in;
  } else {
    b.k.resize(k_rot.size());
    b.v.resize(v_in.size());
    b.k_code.resize(k_rot.size());
    b.v_code.resize(v_in.size());
    for (size_t i = 0; i < k_rot.size(); ++i) {
      const int64_t kh = static_cast<int64_t>(i) / H % Nkv;
      const int64_t h = static_cast<int64_t>(i) % H;
      const uint8_t kc = QuantizeElement(d.cache, k_rot[i], scale_of(k_scale, kh, h));
      const uint8_t vc = QuantizeElement(d.cache, v_in[i], scale_of(v_scale, kh, h));
      b.k_code[i] = kc;
      b.v_code[i] = vc;
      b.k[i] = static_cast<float>(DequantizeElement(d.cache, kc, scale_of(k_scale, kh, h)));
      b.v[i] = static_cast<float>(DequantizeElement(d.cache, vc, scale_of(v_scale, kh, h)));
    }
  }

  // Past (B, Nkv, P, H): random content; the rows no kernel may read are poisoned (beyond each
  // batch's valid past; all of it in a first prompt with new rows).
  if (P >= 0) {
    const size_t n = static_cast<size_t>(B * Nkv * P * H);
    auto readable = [&](size_t i) {
      const int64_t bb = static_cast<int64_t>(i) / (Nkv * P * H);
      const int64_t row = static_cast<int64_t>(i) / H % P;
      const int64_t tb = int64_t{seqlens[static_cast<size_t>(bb)]} + 1;
      const int64_t valid = L == 0 ? tb : (first_prompt ? 0 : tb - S);
      return row < valid;
    };
    std::uniform_int_distribution<int> byte(0, 255);
    for (int which = 0; which < 2; ++which) {
      const auto input = which == 0 ? ATTNRT_GQA_INPUT_PAST_KEY : ATTNRT_GQA_INPUT_PAST_VALUE;
      std::vector<float>& values = which == 0 ? b.past_k : b.past_v;
      std::vector<float>& codes = which == 0 ? b.past_k_code : b.past_v_code;
      const std::vector<float>& scales = which == 0 ? k_scale : v_scale;
      t[input] = Tensor(dc, {B, Nkv, P, Hc});
      if (!d.quantized) {
        values = RoundedNormal(Tq, static_cast<int64_t>(n), rng);
        for (size_t i = 0; i < n; ++i) {
          if (!readable(i)) values[i] = kNaN;
        }
        Store(t[input], Tq, values);
        continue;
      }
      values.resize(n);
      codes.resize(n);
      auto* bytes = static_cast<uint8_t*>(t[input].data());
      for (size_t i = 0; i < n; ++i) {
        uint8_t code = 0;
        switch (d.cache) {
          case CacheFormat::kInt8:
            code = readable(i) ? static_cast<uint8_t>(byte(rng)) : 0x7F;  // 127: the largest
            break;
          case CacheFormat::kInt4:
            code = readable(i) ? static_cast<uint8_t>(byte(rng) & 0xF) : 0xF;  // +7: the largest
            break;
          case CacheFormat::kFloat8E4M3Fn:
            do {
              code = static_cast<uint8_t>(byte(rng));
            } while ((code & 0x7F) == 0x7F);
            if (!readable(i)) code = 0x7F;  // NaN
            break;
          case CacheFormat::kFloat8E5M2:
            do {  // finite codes only: no infinity (0x7C, 0xFC) nor NaN (0x7D..0x7F, 0xFD..0xFF)
              code = static_cast<uint8_t>(byte(rng));
            } while ((code & 0x7F) >= 0x7C);
            if (!readable(i)) code = 0x7F;  // NaN
            break;
        }
        const int64_t kh = static_cast<int64_t>(i) / (P * H) % Nkv;
        const int64_t h = static_cast<int64_t>(i) % H;
        codes[i] = code;
        values[i] = static_cast<float>(DequantizeElement(d.cache, code, scale_of(scales, kh, h)));
        if (d.cache == CacheFormat::kInt4) {
          if (i % 2 == 1) bytes[i / 2] = PackInt4(static_cast<uint8_t>(codes[i - 1]), code);
        } else {
          bytes[i] = code;
        }
      }
    }
  }

  if (c.bias != kNoBias) {
    const int64_t bb = c.bias == kBias1NST ? 1 : B;
    const int64_t bn = c.bias == kBiasB1ST ? 1 : N;
    b.bias = RoundedNormal(Tq, bb * bn * S * T, rng);
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = Tensor(dq, {bb, bn, S, T});
    Store(t[ATTNRT_GQA_INPUT_ATTENTION_BIAS], Tq, b.bias);
    b.problem.bias_batch = bb;
    b.problem.bias_heads = bn;
  }
  if (c.head_sink) {
    b.sink = RoundedNormal(Tq, N, rng);
    t[ATTNRT_GQA_INPUT_HEAD_SINK] = Tensor(dq, {N});
    Store(t[ATTNRT_GQA_INPUT_HEAD_SINK], Tq, b.sink);
  }

  // Outputs, poisoned.
  const int64_t present_rows = c.shared_buffer ? P : std::max<int64_t>(T, P);
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = Filled(dq, Tq, {B, S, N * H}, kNaN);
  if (c.shared_buffer) {
    t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY];
    t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = t[ATTNRT_GQA_INPUT_PAST_VALUE];
  } else {
    for (auto o : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
      if (d.quantized) {
        t[o] = Tensor(dc, {B, Nkv, present_rows, Hc});
        std::memset(t[o].data(), kBytePoison, t[o].bytes());
      } else {
        t[o] = Filled(dc, Tq, {B, Nkv, present_rows, Hc}, kNaN);
      }
    }
  }
  if (c.qk_output != 0) t[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = Filled(dq, Tq, {B, N, S, T}, kNaN);

  attnrt_gqa_attributes& a = b.attributes;
  a = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.softcap = c.softcap;
  a.local_window_size = c.window;
  a.do_rotary = c.rotary != kNoRotary ? 1 : 0;
  a.rotary_interleaved = c.rotary == kInterleaved ? 1 : 0;
  a.smooth_softmax = c.smooth;
  a.qk_output = c.qk_output;
  if (d.quantized) {
    a.k_quant_type = d.quant;
    a.v_quant_type = d.quant;
    a.kv_cache_bit_width = d.cache == CacheFormat::kInt4 ? 4 : 8;
  }

  GqaRefProblem& p = b.problem;
  p.batch_size = B;
  p.sequence_length = S;
  p.kv_sequence_length = L;
  p.num_heads = N;
  p.kv_num_heads = Nkv;
  p.head_size = H;
  p.packed_qkv = false;  // the reference reads the unpacked views
  p.has_past = P >= 0;
  p.past_length = std::max<int64_t>(P, 0);
  p.has_present = true;
  p.present_length = present_rows;
  p.present_shares_past = c.shared_buffer;
  p.total_sequence_length = static_cast<int32_t>(T);
  p.seqlens_k = seqlens;
  p.softcap = c.softcap;
  p.local_window_size = c.window;
  p.smooth_softmax = c.smooth;
  p.qk_output = c.qk_output;
  p.do_rotary = 0;  // applied above, in float, as the kernels do
  p.has_head_sink = c.head_sink;
  return b;
}

// ---- comparison ---------------------------------------------------------------------------------
std::string Index(const std::vector<int64_t>& shape, int64_t flat) {
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

// The allowed error of a T result at reference value w: the kernel rounds a float32 result (error
// far below 1e-5 relative) to T once.
double Bound(FloatFormat f, double w) {
  if (f == FloatFormat::kFloat32) return kFloat32Tolerance;
  return 0.5 * UnitInLastPlace(f, w) + kRelativeSlack * (1.0 + std::fabs(w));
}

// Compares a T tensor with the reference over the selected elements; every selected element must
// have been written (the NaN poison is gone). Prints the observed maximum error. `approximation` is
// added to the bound for kernels that are approximate by design (IsApproximate).
template <typename Selected>
void ExpectClose(const std::string& what, Tensor& got, FloatFormat f,
                 const std::vector<double>& want, Selected selected, double approximation = 0.0) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
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
    const double bound = Bound(f, w) + approximation;
    max_ratio = std::max(max_ratio, error / bound);
    if (!(error <= bound)) {
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  std::printf("[observed] %s max_abs_error=%.3e max_error_over_bound=%.3f\n", what.c_str(),
              max_error, max_ratio);
  testing::Test::RecordProperty(what + "_max_abs_error", std::to_string(max_error));
  EXPECT_EQ(unwritten, 0) << what << ": elements left unwritten (NaN); first at "
                          << Index(got.shape(), first_bad);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements off by more than the bound (max error "
                    << max_error << ", " << max_ratio << " of the bound); first at "
                    << Index(got.shape(), first_bad) << ": got "
                    << (first_bad >= 0 ? Load(got, f, first_bad) : 0.0) << ", want "
                    << (first_bad >= 0 ? want[static_cast<size_t>(first_bad)] : 0.0);
}

// A float cache of type T: exact, NaN where the poison must stay (shared buffer rows not written).
void ExpectPresentExact(const std::string& what, Tensor& got, FloatFormat f,
                        const std::vector<double>& want) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = Load(got, f, i);
    const double w = want[static_cast<size_t>(i)];
    const bool same = std::isnan(w) ? std::isnan(g) : g == w;
    if (!same) {
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ; first at "
                    << Index(got.shape(), first_bad) << ": got "
                    << (first_bad >= 0 ? Load(got, f, first_bad) : 0.0) << ", want "
                    << (first_bad >= 0 ? want[static_cast<size_t>(first_bad)] : 0.0);
}

// A quantized cache: byte for byte. want_codes holds one code per element (the reference's present
// layout run on codes: rows it zero-fills give code 0 = byte 0).
void ExpectPresentBytes(const std::string& what, Tensor& got, CacheFormat f,
                        const std::vector<double>& want_codes, int64_t H) {
  std::vector<uint8_t> want;
  if (f == CacheFormat::kInt4) {
    for (size_t i = 0; i + 1 < want_codes.size(); i += 2) {
      want.push_back(
          PackInt4(static_cast<uint8_t>(want_codes[i]), static_cast<uint8_t>(want_codes[i + 1])));
    }
  } else {
    for (double code : want_codes) want.push_back(static_cast<uint8_t>(code));
  }
  ASSERT_EQ(got.bytes(), want.size()) << what;
  const auto* bytes = static_cast<const uint8_t*>(got.data());
  int64_t bad = 0, first_bad = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (bytes[i] != want[i]) {
      ++bad;
      if (first_bad < 0) first_bad = static_cast<int64_t>(i);
    }
  }
  if (bad == 0) return;
  const std::vector<int64_t>& shape = got.shape();
  const int64_t row_bytes = shape.back();
  const int64_t row = first_bad / row_bytes;
  const int64_t col = first_bad % row_bytes;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "got 0x%02X, want 0x%02X", bytes[first_bad], want[first_bad]);
  ADD_FAILURE() << what << " (" << CacheFormatName(f) << "): " << bad << " of " << want.size()
                << " bytes differ; first at byte " << Index(shape, first_bad) << " (row " << row
                << ", element"
                << (f == CacheFormat::kInt4
                        ? "s " + std::to_string(2 * col) + "," + std::to_string(2 * col + 1)
                        : " " + std::to_string(col))
                << " of H=" << H << "): " << buf;
}

// ---- the test body ------------------------------------------------------------------------------
std::vector<std::string> CpuGqaKernels() {
  std::vector<std::string> names;
  attnrt_runtime* raw = nullptr;
  if (attnrt_runtime_create(nullptr, &raw) != ATTNRT_OK) return names;
  RuntimePtr runtime(raw);
  for (const PluginInfo& plugin : ListPlugins(runtime.get())) {
    if (plugin.name != ATTNRT_TEST_CPU_PLUGIN) continue;
    for (const KernelInfo& k : plugin.kernels) {
      if (k.op_kind == ATTNRT_OP_GQA) names.push_back(k.name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool IsCpuFeatureReason(const std::string& reason) {
  for (const char* word : {"avx", "cpu", "isa", "fma", "f16c", "xcr0", "feature", "instruction"}) {
    if (ContainsI(reason, word)) return true;
  }
  return false;
}

// A decline that hands the case to another path (ONNX Runtime's eligibility rules).
bool IsOtherPathReason(const std::string& reason) {
  return ContainsI(reason, "naive") || ContainsI(reason, "ONNX Runtime");
}

// Opt-in kernels that quantize the float32 query (cpu_arm.gqa.flash.dotprod_approx, as ONNX
// Runtime's ORT_MLAS_QKGEMM_S8_APPROX_VNNI path): named *_approx, compared with a looser output
// bound (kApproximateQueryTolerance).
bool IsApproximate(const std::string& kernel) {
  return kernel.size() > 7 && kernel.compare(kernel.size() - 7, 7, "_approx") == 0;
}

std::string Algorithm(const std::string& kernel) {
  const size_t a = kernel.find('.', kernel.find('.') + 1);
  const size_t b = kernel.find('.', a + 1);
  return a == std::string::npos ? "" : kernel.substr(a + 1, b - a - 1);
}

using Param = std::tuple<std::string, Dtypes, Case>;

class GqaDtypeConformance : public testing::TestWithParam<Param> {};

TEST_P(GqaDtypeConformance, MatchesReference) {
  const std::string& pinned = std::get<0>(GetParam());
  const Dtypes& d = std::get<1>(GetParam());
  const Case& c = std::get<2>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", dtypes " +
               d.name + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  Built b = Build(c, d, rng);
  ASSERT_FALSE(HasFatalFailure());

  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();  // "" pins nothing
  options.disable = "";
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &b.attributes, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);

  if (!pinned.empty()) {
    const std::vector<Candidate> candidates = Explain(op.get(), b.t);
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& x) { return x.kernel == pinned; });
    ASSERT_NE(it, candidates.end()) << "explain does not list " << pinned;
    if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE ||
        (it->status == ATTNRT_CANDIDATE_DECLINED && IsCpuFeatureReason(it->reason))) {
      GTEST_SKIP() << pinned << " cannot run on this CPU: " << it->reason;
    }
    // Only the naive kernels must accept everything; another algorithm may decline a case that
    // belongs to another path, and must say so.
    if (it->status == ATTNRT_CANDIDATE_DECLINED && Algorithm(pinned) != "naive" &&
        IsOtherPathReason(it->reason)) {
      GTEST_SKIP() << pinned << " declines this case: " << it->reason;
    }
    ASSERT_EQ(it->status, ATTNRT_CANDIDATE_SELECTED)
        << pinned << " is " << attnrt_candidate_status_name(it->status) << ": " << it->reason;
  }

  PlanPtr plan = Plan(op.get(), b.t);
  ASSERT_TRUE(plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  } else {
    // Approximate kernels are opt-in: the runtime's own choice is always an exact one.
    ASSERT_FALSE(IsApproximate(kernel)) << "chosen without a pin: " << kernel;
  }
  RecordProperty("kernel", kernel);
  SCOPED_TRACE("ran " + kernel);
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());

  b.problem.flash_padded_window = Algorithm(kernel) == "flash";
  const GqaRefOutputs ref = ComputeGqaReference(b.problem, RefInputs(b, false));
  GqaRefOutputs ref_codes;
  if (d.quantized) ref_codes = ComputeGqaReference(b.problem, RefInputs(b, true));

  st = RunPlan(plan.get(), b.t);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  auto all = [](int64_t) { return true; };
  ExpectClose("output", b.t[ATTNRT_GQA_OUTPUT_OUTPUT], d.query, ref.output, all,
              IsApproximate(kernel) ? kApproximateQueryTolerance : 0.0);
  if (d.quantized) {
    ExpectPresentBytes("present_key", b.t[ATTNRT_GQA_OUTPUT_PRESENT_KEY], d.cache,
                       ref_codes.present_key, c.H);
    ExpectPresentBytes("present_value", b.t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE], d.cache,
                       ref_codes.present_value, c.H);
  } else {
    ExpectPresentExact("present_key", b.t[ATTNRT_GQA_OUTPUT_PRESENT_KEY], d.query, ref.present_key);
    ExpectPresentExact("present_value", b.t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE], d.query,
                       ref.present_value);
  }
  if (c.qk_output != 0) {
    // Columns [T_b, T) are unspecified (ONNX Runtime leaves them).
    const int64_t per_batch = c.N * c.S * c.T;
    auto valid_column = [&](int64_t i) {
      return i % c.T < ref.valid_keys[static_cast<size_t>(i / per_batch)];
    };
    ExpectClose("output_qk", b.t[ATTNRT_GQA_OUTPUT_OUTPUT_QK], d.query, ref.output_qk,
                valid_column);
  }
}

std::vector<std::string> KernelParams() {
  std::vector<std::string> params = {""};
  for (auto& k : CpuGqaKernels()) params.push_back(k);
  return params;
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name +
                     "__" + std::get<2>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaDtypeConformance,
                         testing::Combine(testing::ValuesIn(KernelParams()),
                                          testing::ValuesIn(DtypeCombos()),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaDtypeConformance);

TEST(GqaDtypeConformanceSetup, CpuPluginRegistersItsGqaKernels) {
  const std::vector<std::string> kernels = CpuGqaKernels();
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"),
            kernels.end());
}

// ---- the dtype helpers themselves ---------------------------------------------------------------
TEST(DtypeReferenceSelfCheck, Float16RoundsToNearestEven) {
  EXPECT_EQ(Float16Bits(1.0f), 0x3C00);
  EXPECT_EQ(Float16Bits(-2.0f), 0xC000);
  EXPECT_EQ(Float16Bits(65504.0f), 0x7BFF);
  EXPECT_EQ(Float16Bits(65519.0f), 0x7BFF);               // below the midpoint to 65536
  EXPECT_EQ(Float16Bits(65520.0f), 0x7C00);               // the midpoint rounds to even: infinity
  EXPECT_EQ(Float16Bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Float16Bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(Float16Bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 subnormal steps: tie to even (2)
  EXPECT_EQ(Float16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie: stays at the even 1.0
  EXPECT_EQ(Float16Bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie: up to the even mantissa
  EXPECT_EQ(Float16Bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(Float16Value(Float16Bits(kNaN))));
  EXPECT_EQ(Float16Value(0x3555), RoundToFormat(FloatFormat::kFloat16, 1.0f / 3.0f));
  // Every float16 value round-trips.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float v = Float16Value(static_cast<uint16_t>(bits));
    if (std::isnan(v)) continue;
    ASSERT_EQ(Float16Bits(v), bits) << bits;
  }
#if defined(__FLT16_MAX__)
  // Cross-check with the compiler's float16 conversion on random floats.
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF);
  std::uniform_int_distribution<uint32_t> exponent(127 - 27, 127 + 16);  // subnormal to overflow
  std::uniform_int_distribution<uint32_t> sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng));
#if defined(__aarch64__)
    // GCC 12 has no _Float16 in C++ on AArch64; __fp16 converts with the same rounding (FCVT).
    const __fp16 h = static_cast<__fp16>(x);
#else
    __extension__ const _Float16 h = static_cast<_Float16>(x);
#endif
    ASSERT_EQ(Float16Bits(x), std::bit_cast<uint16_t>(h)) << x;
  }
#endif
}

TEST(DtypeReferenceSelfCheck, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16Bits(1.0f), 0x3F80);
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie: even
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie: even (up)
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // rounds to infinity
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie: even
  EXPECT_EQ(BFloat16Bits(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_TRUE(std::isnan(BFloat16Value(BFloat16Bits(kNaN))));
  // Against the integer formulation of RNE on the float bits.
  std::mt19937_64 rng(4321);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = any(rng);
    if (std::isnan(std::bit_cast<float>(u))) continue;
    const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
    ASSERT_EQ(BFloat16Bits(std::bit_cast<float>(u)), static_cast<uint16_t>(rounded >> 16)) << u;
  }
}

TEST(DtypeReferenceSelfCheck, E4M3FnEncodesNearestEvenSaturating) {
  EXPECT_EQ(E4M3FnValue(0x7E), 448.0);
  EXPECT_EQ(E4M3FnValue(0x38), 1.0);
  EXPECT_EQ(E4M3FnValue(0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(E4M3FnValue(0x7F)));
  EXPECT_TRUE(std::isnan(E4M3FnValue(0xFF)));
  EXPECT_EQ(E4M3FnEncode(1.0f), 0x38);
  EXPECT_EQ(E4M3FnEncode(-1.0f), 0xB8);
  EXPECT_EQ(E4M3FnEncode(448.0f), 0x7E);
  EXPECT_EQ(E4M3FnEncode(1000.0f), 0x7E);  // saturates
  EXPECT_EQ(E4M3FnEncode(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(E4M3FnEncode(1.0625f), 0x38);  // tie between 1 and 1.125: even mantissa (1)
  EXPECT_EQ(E4M3FnEncode(1.1875f), 0x3A);  // tie between 1.125 and 1.25: even (1.25)
  EXPECT_EQ(E4M3FnEncode(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal: 0
  EXPECT_EQ(E4M3FnEncode(std::ldexp(3.0f, -10)), 0x02);   // 1.5 subnormal steps: even (2)
  EXPECT_EQ(E4M3FnEncode(-std::ldexp(1.0f, -12)), 0x80);  // -tiny: -0
  EXPECT_EQ(E4M3FnEncode(kNaN), 0x7F);
  for (int c = 0; c < 256; ++c) {  // every finite code round-trips
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(E4M3FnEncode(static_cast<float>(E4M3FnValue(static_cast<uint8_t>(c)))), c);
  }
}

TEST(DtypeReferenceSelfCheck, E5M2EncodesNearestEvenSaturating) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(E5M2Value(0x7B), 57344.0);
  EXPECT_EQ(E5M2Value(0x3C), 1.0);
  EXPECT_EQ(E5M2Value(0x01), std::ldexp(1.0, -16));  // smallest subnormal: (1/4) * 2^-14
  EXPECT_EQ(E5M2Value(0x04), std::ldexp(1.0, -14));  // smallest normal
  EXPECT_EQ(E5M2Value(0x03), std::ldexp(3.0, -16));  // largest subnormal
  EXPECT_EQ(E5M2Value(0xBE), -1.5);
  EXPECT_EQ(E5M2Value(0x7C), std::numeric_limits<double>::infinity());
  EXPECT_EQ(E5M2Value(0xFC), -std::numeric_limits<double>::infinity());
  for (int c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    EXPECT_TRUE(std::isnan(E5M2Value(static_cast<uint8_t>(c)))) << c;
  }
  EXPECT_EQ(E5M2Encode(1.0f), 0x3C);
  EXPECT_EQ(E5M2Encode(-1.0f), 0xBC);
  EXPECT_EQ(E5M2Encode(57344.0f), 0x7B);
  EXPECT_EQ(E5M2Encode(57345.0f), 0x7B);  // saturates
  EXPECT_EQ(E5M2Encode(1e6f), 0x7B);
  EXPECT_EQ(E5M2Encode(-1e6f), 0xFB);
  EXPECT_EQ(E5M2Encode(kInf), 0x7B);  // an infinity saturates too
  EXPECT_EQ(E5M2Encode(-kInf), 0xFB);
  EXPECT_EQ(E5M2Encode(1.125f), 0x3C);                  // tie between 1 and 1.25: even mantissa (1)
  EXPECT_EQ(E5M2Encode(1.375f), 0x3E);                  // tie between 1.25 and 1.5: even (1.5)
  EXPECT_EQ(E5M2Encode(1.126f), 0x3D);                  // above the tie: 1.25
  EXPECT_EQ(E5M2Encode(1.874f), 0x3F);                  // below the tie between 1.75 and 2: 1.75
  EXPECT_EQ(E5M2Encode(1.875f), 0x40);                  // the tie: even (2, the next binade)
  EXPECT_EQ(E5M2Encode(-1.375f), 0xBE);                 // ties keep the sign
  EXPECT_EQ(E5M2Encode(std::ldexp(1.0f, -17)), 0x00);   // half the smallest subnormal: 0
  EXPECT_EQ(E5M2Encode(std::ldexp(3.0f, -17)), 0x02);   // 1.5 subnormal steps: even (2)
  EXPECT_EQ(E5M2Encode(std::ldexp(7.0f, -17)), 0x04);   // 3.5 steps: even, the smallest normal
  EXPECT_EQ(E5M2Encode(-std::ldexp(1.0f, -20)), 0x80);  // -tiny: -0
  EXPECT_EQ(E5M2Encode(-0.0f), 0x80);
  EXPECT_EQ(E5M2Encode(kNaN), 0x7F);
  EXPECT_EQ(E5M2Encode(-kNaN), 0xFF);
  for (int c = 0; c < 256; ++c) {  // every finite code round-trips
    if ((c & 0x7F) >= 0x7C) continue;
    EXPECT_EQ(E5M2Encode(static_cast<float>(E5M2Value(static_cast<uint8_t>(c)))), c);
  }
  // e5m2 is the top byte of a float16: for every finite float16 value h, the encoder must agree
  // with the integer round-to-nearest-even of h's bits to their top byte (a carry out of the
  // mantissa is the next exponent), saturated at 0x7B.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7C00) == 0x7C00) continue;  // infinities and NaNs
    const uint32_t rounded = (bits + 0x7F + ((bits >> 8) & 1)) >> 8;
    const uint32_t sign = rounded & 0x80;
    const uint32_t want = std::min<uint32_t>(rounded & 0x7F, 0x7B) | sign;
    ASSERT_EQ(E5M2Encode(Float16Value(static_cast<uint16_t>(bits))), want) << bits;
  }
}

TEST(DtypeReferenceSelfCheck, IntegerQuantizer) {
  // rint half to even (as ORT): 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2; clamps; scale 0 -> inv 1.
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 0.5f, 1.0f), 0);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 1.5f, 1.0f), 2);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 2.5f, 1.0f), 2);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, -2.5f, 1.0f), 0xFE);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 1000.0f, 1.0f), 0x7F);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, -1000.0f, 1.0f), 0x80);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 3.0f, 0.0f), 3);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt8, 1.0f, 0.25f), 4);
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt4, 100.0f, 1.0f), 15);  // +7 biased
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt4, -100.0f, 1.0f), 0);  // -8 biased
  EXPECT_EQ(QuantizeElement(CacheFormat::kInt4, -2.5f, 1.0f), 6);    // -2 biased
  EXPECT_EQ(PackInt4(0x1, 0xE), 0xE1);                               // element 2i in the low nibble
  EXPECT_EQ(DequantizeElement(CacheFormat::kInt4, 0x0, 0.5f), -4.0);
  EXPECT_EQ(DequantizeElement(CacheFormat::kInt8, 0xFF, 0.5f), -0.5);
  EXPECT_EQ(DequantizeElement(CacheFormat::kFloat8E4M3Fn, 0x38, 0.5f), 0.5);
  EXPECT_EQ(QuantizeElement(CacheFormat::kFloat8E4M3Fn, 1.0f, 1.0f / 128.0f), 0x70);  // 128
  EXPECT_EQ(DequantizeElement(CacheFormat::kFloat8E5M2, 0x3C, 0.5f), 0.5);
  EXPECT_EQ(DequantizeElement(CacheFormat::kFloat8E5M2, 0xBE, 0.25f), -0.375);
  EXPECT_EQ(QuantizeElement(CacheFormat::kFloat8E5M2, 1.0f, 1.0f / 16384.0f), 0x74);  // 2^14
  EXPECT_EQ(QuantizeElement(CacheFormat::kFloat8E5M2, 3.0f, 0.0f), 0x42);  // scale 0: inv 1, 3
  EXPECT_EQ(QuantizeElement(CacheFormat::kFloat8E5M2, 10.0f, 1.0f / 16384.0f), 0x7B);  // saturates
  EXPECT_EQ(QuantizeElement(CacheFormat::kFloat8E5M2, -1e-9f, 1.0f), 0x80);            // -0
  EXPECT_EQ(std::string(CacheFormatName(CacheFormat::kFloat8E5M2)), "float8_e5m2");
}

}  // namespace
}  // namespace attnrt_test
