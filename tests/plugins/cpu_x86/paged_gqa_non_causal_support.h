// Shared pieces of paged_gqa_non_causal_test.cpp (NON-CAUSAL attention, attnrt_gqa_attributes
// causal = 0, through ATTNRT_OP_PAGED_GQA and ATTNRT_OP_PAGED_GQA_VARLEN): the cache types under
// test with their row codecs (the unquantized cache of T, int8/int4/float8 e5m2 PER_TENSOR/
// PER_CHANNEL with k_scale/v_scale, PER_BLOCK_32 Q8_0/Q4_0), the attributes of a call, and the
// test's own float64 attention reference with its error bound.
//
// Written from abi/attnrt/ops/gqa.h, paged_gqa.h, paged_gqa_varlen.h, docs/gqa-semantics.md and
// docs/paged-gqa.md only (no kernel code, no other reference of the suite). The element codecs are
// the tests' own (tests/common/dtype_reference.h: float16/bfloat16 rounding, ONNX Runtime's
// int8/int4 quantizer, the float8 e5m2 encoder, ggml's Q8_0/Q4_0 quantizer); the pools, block
// tables, guarded tensors and the loop over every kernel are paged_gqa_mixed_kv_types_support.h's
// and paged_gqa_head_size_support.h's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace non_causal {

inline constexpr double kU = 0x1p-24;  // unit roundoff of float32, the kernels' arithmetic
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- cache types
// ----------------------------------------------------------------------------------
// kT: the pools hold T itself (float32, float16 or bfloat16, as the query). The int8/int4 caches
// hold ONNX Runtime's codes q = clamp(rint(x * (1/scale))) (int8 dtype; int4 two codes + 8 per
// uint8 byte, element 2i in the low nibble), element value q * scale with scale k_scale/v_scale:
// one value (PER_TENSOR) or Nkv * H values (PER_CHANNEL, kv head h element d at h * H + d). The
// float8 e5m2 caches hold the code of x * (1/scale) rounded to nearest even, saturated to ±57344
// (float8_e5m2 dtype), element value(code) * scale, with the same scales.
// kQ8_0/kQ4_0: ggml's blocks of 32 (abi/attnrt/ops/gqa.h, PER_BLOCK_32), no k_scale/v_scale.
enum class Cache {
  kT,
  kInt8Tensor,
  kInt8Channel,
  kInt4Tensor,
  kInt4Channel,
  kE5M2Tensor,
  kE5M2Channel,
  kQ8_0,
  kQ4_0
};

inline constexpr attnrt_dtype kE5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;

inline const char* CacheName(Cache c) {
  switch (c) {
    case Cache::kT:
      return "cache_t";
    case Cache::kInt8Tensor:
      return "int8_per_tensor";
    case Cache::kInt8Channel:
      return "int8_per_channel";
    case Cache::kInt4Tensor:
      return "int4_per_tensor";
    case Cache::kInt4Channel:
      return "int4_per_channel";
    case Cache::kE5M2Tensor:
      return "e5m2_per_tensor";
    case Cache::kE5M2Channel:
      return "e5m2_per_channel";
    case Cache::kQ8_0:
      return "q8_0";
    case Cache::kQ4_0:
      break;
  }
  return "q4_0";
}

inline bool IsBlock(Cache c) { return c == Cache::kQ8_0 || c == Cache::kQ4_0; }
inline bool IsInt4(Cache c) { return c == Cache::kInt4Tensor || c == Cache::kInt4Channel; }
inline bool IsInt8(Cache c) { return c == Cache::kInt8Tensor || c == Cache::kInt8Channel; }
inline bool IsE5M2(Cache c) { return c == Cache::kE5M2Tensor || c == Cache::kE5M2Channel; }
// One byte per element: int8 and float8 e5m2.
inline bool IsByte(Cache c) { return IsInt8(c) || IsE5M2(c); }
inline bool HasScales(Cache c) { return IsInt4(c) || IsInt8(c) || IsE5M2(c); }
inline bool PerChannel(Cache c) {
  return c == Cache::kInt8Channel || c == Cache::kInt4Channel || c == Cache::kE5M2Channel;
}

// One pool's codec: its cache type, the query type T, the head size and, for int8/int4/e5m2, the
// scales (k_scale or v_scale).
struct Codec {
  Cache cache = Cache::kT;
  FloatFormat t = FloatFormat::kFloat32;
  int64_t H = 0;
  std::vector<float> scale;

  mixed_kv::CacheType FloatOrBlock() const {
    if (cache == Cache::kQ8_0) return mixed_kv::CacheType::kQ8_0;
    if (cache == Cache::kQ4_0) return mixed_kv::CacheType::kQ4_0;
    return mixed_kv::FloatType(t);
  }
  CacheFormat ScaledFormat() const {
    if (IsE5M2(cache)) return CacheFormat::kFloat8E5M2;
    return IsInt4(cache) ? CacheFormat::kInt4 : CacheFormat::kInt8;
  }
  int64_t RowBytes() const {
    if (IsByte(cache)) return H;
    if (IsInt4(cache)) return H / 2;
    return mixed_kv::RowBytes(FloatOrBlock(), H);
  }
  // The pool's last dimension, in elements of its dtype.
  int64_t LastDim() const { return cache == Cache::kT ? H : RowBytes(); }
  attnrt_dtype Dtype() const {
    if (cache == Cache::kT) return block_quant::QueryDtype(t);
    if (IsE5M2(cache)) return kE5M2;
    return IsInt8(cache) ? block_quant::kI8 : block_quant::kU8;
  }
  float Scale(int64_t h, int64_t d) const {
    return scale.size() == 1 ? scale[0] : scale[static_cast<size_t>(h * H + d)];
  }
  // Row of kv head h holding the values x (each exact in T) as the pool stores it.
  void Encode(const float* x, int64_t h, uint8_t* out) const {
    if (!HasScales(cache)) return mixed_kv::EncodeRow(FloatOrBlock(), x, H, out);
    for (int64_t d = 0; d < H; ++d) {
      const uint8_t code = QuantizeElement(ScaledFormat(), x[d], Scale(h, d));
      if (IsByte(cache)) {
        out[d] = code;
      } else if (d % 2 == 0) {
        out[d / 2] = code;
      } else {
        out[d / 2] = PackInt4(out[d / 2], code);
      }
    }
  }
  // The H element values a kernel reads from a row of kv head h.
  void Decode(const uint8_t* in, int64_t h, double* out) const {
    if (!HasScales(cache)) {
      std::vector<float> f(static_cast<size_t>(H));
      mixed_kv::DecodeRow(FloatOrBlock(), in, H, f.data());
      for (int64_t d = 0; d < H; ++d) out[d] = f[static_cast<size_t>(d)];
      return;
    }
    for (int64_t d = 0; d < H; ++d) {
      const uint8_t code =
          IsByte(cache) ? in[d]
                        : static_cast<uint8_t>(d % 2 == 0 ? in[d / 2] & 0xF : in[d / 2] >> 4);
      out[d] = DequantizeElement(ScaledFormat(), code, Scale(h, d));
    }
  }
  // A row no kernel may read: NaN elements (T; float8 e5m2 code 0x7F), NaN block scales
  // (Q8_0/Q4_0); an int8/int4 code cannot be NaN, so those rows hold the largest code everywhere
  // (elements 127 or 7 times the scale, far outside the values of readable rows: a key that
  // dominates or vanishes, a value that moves the output far beyond the bound).
  void Poison(std::mt19937_64& rng, uint8_t* out) const {
    if (!HasScales(cache)) return mixed_kv::PoisonRow(FloatOrBlock(), H, rng, out);
    std::memset(out, IsByte(cache) ? 0x7F : 0xFF, static_cast<size_t>(RowBytes()));
  }
};

// Scales of an int8/int4/e5m2 pool: per tensor the base (int8 3/127, int4 2.5/7, e5m2 3/57344:
// N(0,1) values within the code range), per channel Nkv * H values within [0.5, 1.5] times it.
inline std::vector<float> MakeScales(Cache c, int64_t Nkv, int64_t H, std::mt19937_64& rng) {
  if (!HasScales(c)) return {};
  const float base = IsInt8(c) ? 3.0f / 127.0f : IsE5M2(c) ? 3.0f / 57344.0f : 2.5f / 7.0f;
  if (!PerChannel(c)) return {base};
  std::uniform_real_distribution<float> spread(0.5f, 1.5f);
  std::vector<float> s(static_cast<size_t>(Nkv * H));
  for (float& x : s) x = base * spread(rng);
  return s;
}

// ---- attributes
// -----------------------------------------------------------------------------------
// The optional parts of the score pipeline a case turns on.
struct Features {
  float softcap = 0.0f;  // > 0: softcap * tanh(s / softcap)
  bool sink = false;     // head_sink input: one more logit per head, bringing no value
  bool smooth = false;   // smooth_softmax = 1 without head_sink: an extra logit 0
  float scale = 0.0f;    // the scale attribute (0: 1/sqrt(H))
  bool p_input = false;  // p_precision INPUT (P rounded to T before P·V)
};

inline std::string FeatureName(const Features& f) {
  std::string s;
  if (f.softcap > 0.0f) s += "_softcap";
  if (f.sink) s += "_sink";
  if (f.smooth) s += "_smooth";
  if (f.scale != 0.0f) s += "_scale";
  s += f.p_input ? "_p_input" : "_p_exact";
  return s;
}

// Attributes of a call: causal as given (0 under test), local_window_size -1, the cache type.
inline attnrt_paged_gqa_attributes Attributes(Cache cache, int64_t N, int64_t Nkv,
                                              int64_t block_size, int32_t layout, const Features& f,
                                              int32_t causal = 0) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.gqa.causal = causal;
  a.gqa.local_window_size = -1;
  int32_t quant = ATTNRT_GQA_QUANT_NONE, bits = 0;
  switch (cache) {
    case Cache::kT:
      break;
    case Cache::kInt8Tensor:
      quant = ATTNRT_GQA_QUANT_PER_TENSOR, bits = 8;
      break;
    case Cache::kInt8Channel:
      quant = ATTNRT_GQA_QUANT_PER_CHANNEL, bits = 8;
      break;
    case Cache::kInt4Tensor:
      quant = ATTNRT_GQA_QUANT_PER_TENSOR, bits = 4;
      break;
    case Cache::kInt4Channel:
      quant = ATTNRT_GQA_QUANT_PER_CHANNEL, bits = 4;
      break;
    case Cache::kE5M2Tensor:
      quant = ATTNRT_GQA_QUANT_PER_TENSOR, bits = 8;
      break;
    case Cache::kE5M2Channel:
      quant = ATTNRT_GQA_QUANT_PER_CHANNEL, bits = 8;
      break;
    case Cache::kQ8_0:
      quant = ATTNRT_GQA_QUANT_PER_BLOCK_32, bits = 8;
      break;
    case Cache::kQ4_0:
      quant = ATTNRT_GQA_QUANT_PER_BLOCK_32, bits = 4;
      break;
  }
  a.gqa.k_quant_type = a.gqa.v_quant_type = quant;
  a.gqa.kv_cache_bit_width = bits;
  a.gqa.softcap = f.softcap;
  a.gqa.smooth_softmax = f.smooth ? 1 : -1;
  a.gqa.scale = f.scale;
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = layout;
  a.p_precision = f.p_input ? ATTNRT_P_PRECISION_INPUT : ATTNRT_P_PRECISION_EXACT;
  return a;
}

// ---- the float64 reference
// ------------------------------------------------------------------------
// What one output row (a query row of one head) must hold, from the definition:
//   s_j = softcap * tanh(alpha q.k_j / softcap) (softcap > 0) or alpha q.k_j, for the keys j of
//   [0, hi) (non-causal: hi = T_b; causal, for the negative control: the row's own token + 1);
//   the sink logit z (head_sink[n], or 0 with smooth_softmax = 1) joins the softmax bringing no
//   value: o = sum_j e^(s_j) v_j / (sum_j e^(s_j) + e^z); every product and sum in double from
//   the element values the pools hold.
// The bound on what the kernels' float32 arithmetic may change (derived here):
//   - each score: a dot product of H float32 products in any order, a dequantization multiply per
//     element, alpha rounded to float32 and multiplied: |ds_j| <= (H + 8) u alpha sum_i |q_i k_ji|;
//     a softcap (1-Lipschitz tanh, the division and the multiply by softcap, tanh's own error)
//     adds 2 u |alpha q.k_j| + 4 u softcap;
//   - e^(s_j - m) with the float32 subtraction: u (|s_j| + |m|) more in the exponent, and 2 u of
//     exp itself (a running maximum's rescaling multiplies numerator and denominator alike);
//   - so every unnormalized weight (the sink's too) is off by a factor e^(+-E), E the largest of
//     these; the normalized weights w_j then by e^(+-2E), and since they (with the sink's) still
//     sum to 1, o_d moves by at most (e^(2E) - 1) (sum_j w_j |v_jd - o_d| + w_sink |o_d|);
//   - the float32 sums of n terms (denominator and numerator, a split-KV merge) and the division:
//     (2 n + 16) u sum_j w_j |v_jd|;
//   - p_precision INPUT with T float16/bfloat16 (docs/gqa-semantics.md, "Probability
//     precision"): 2 u_T max_j |v_jd| + n (2^-24 + eta_T) max_j |v_jd|;
//   - then the output's rounding: float32 u |o|; T float16/bfloat16 half an ulp of T at |o| + b.
struct Pipeline {
  double alpha = 1.0;
  double softcap = 0.0;
  bool has_sink = false;
  double sink = 0.0;
  bool p_input = false;
  FloatFormat t = FloatFormat::kFloat32;
};

struct Row {
  std::vector<double> out, tol;
  double tv = 0.0;  // total variation distance of the keys' weights from uniform ones
  int64_t keys = 0;
};

// The allowed distance of an output element of type t from w, its float32 value being within b.
inline double Tolerance(FloatFormat t, double w, double b) {
  const double f32 = b + kU * (std::fabs(w) + b) + 1e-37;
  if (t == FloatFormat::kFloat32) return f32;
  return f32 + 0.5 * UnitInLastPlace(t, (std::fabs(w) + 2.0 * b) * (1.0 + 0x1p-20));
}

// Query row q (H values) over keys [0, hi) of k and v (rows of H doubles).
inline Row Attend(const double* q, int64_t H, const double* k, const double* v, int64_t hi,
                  const Pipeline& p) {
  Row r;
  r.out.assign(static_cast<size_t>(H), 0.0);
  r.tol.assign(static_cast<size_t>(H), 0.0);
  r.keys = hi;
  if (hi <= 0) return r;
  std::vector<double> s(static_cast<size_t>(hi)), es(s.size());
  double m = p.has_sink ? p.sink : -INFINITY;
  for (int64_t j = 0; j < hi; ++j) {
    double dot = 0.0, abs = 0.0;
    for (int64_t i = 0; i < H; ++i) {
      dot += q[i] * k[j * H + i];
      abs += std::fabs(q[i] * k[j * H + i]);
    }
    double sj = p.alpha * dot;
    double e = static_cast<double>(H + 8) * kU * p.alpha * abs;
    if (p.softcap > 0.0) {
      e += 2.0 * kU * std::fabs(sj) + 4.0 * kU * p.softcap;
      sj = p.softcap * std::tanh(sj / p.softcap);
    }
    s[static_cast<size_t>(j)] = sj;
    es[static_cast<size_t>(j)] = e;
    m = std::max(m, sj);
  }
  double E = p.has_sink ? kU * (std::fabs(p.sink) + std::fabs(m)) + 2.0 * kU : 0.0;
  double denom = p.has_sink ? std::exp(p.sink - m) : 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    denom += std::exp(s[j] - m);
    E = std::max(E, es[j] + kU * (std::fabs(s[j]) + std::fabs(m)) + 2.0 * kU);
  }
  std::vector<double> w(s.size());
  double key_share = 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    w[j] = std::exp(s[j] - m) / denom;
    key_share += w[j];
    for (int64_t d = 0; d < H; ++d) r.out[static_cast<size_t>(d)] += w[j] * v[j * H + d];
  }
  for (size_t j = 0; j < w.size(); ++j) {
    r.tv += 0.5 * std::fabs(w[j] / key_share - 1.0 / static_cast<double>(hi));
  }
  const double w_sink = 1.0 - key_share;
  const double spread = std::expm1(2.0 * E);
  const double sums = static_cast<double>(2 * hi + 16) * kU;
  double u_t = 0.0, eta = 0.0;
  if (p.p_input && p.t == FloatFormat::kBFloat16) u_t = 0x1p-8;
  if (p.p_input && p.t == FloatFormat::kFloat16) u_t = 0x1p-11, eta = 0x1p-25;
  for (int64_t d = 0; d < H; ++d) {
    const double o = r.out[static_cast<size_t>(d)];
    double deviation = std::fabs(w_sink) * std::fabs(o), magnitude = 0.0, vmax = 0.0;
    for (size_t j = 0; j < w.size(); ++j) {
      const double vjd = v[static_cast<int64_t>(j) * H + d];
      deviation += w[j] * std::fabs(vjd - o);
      magnitude += w[j] * std::fabs(vjd);
      vmax = std::max(vmax, std::fabs(vjd));
    }
    double b = spread * deviation + sums * magnitude;
    if (u_t > 0.0) b += (2.0 * u_t + static_cast<double>(hi) * (0x1p-24 + eta)) * vmax;
    r.tol[static_cast<size_t>(d)] = Tolerance(p.t, o, b);
  }
  return r;
}

// ---- one call's data
// ------------------------------------------------------------------------------
// A sequence of a call: `rows` query rows at output rows [first, first + rows) (also its new K/V
// rows' rows in key/value), row i being token offset + i; T_b keys. A new K/V row i is stored at
// token offset + i when key/value are given and offset + i < T_b (a right-padded first prompt's
// padding rows are not stored).
struct Seq {
  int64_t first = 0, rows = 1, offset = 0, tb = 1;
};

// Everything of one call but the op's tensors: shapes, types, pools before/after the run, the
// T values of the query, new K/V rows and head_sink, and the references.
struct Scenario {
  std::string name;
  FloatFormat t = FloatFormat::kFloat32;
  Cache cache = Cache::kT;
  int64_t N = 4, Nkv = 2, H = 64, block_size = 16;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  Features f;
  std::vector<Seq> seqs;
  int64_t rows_total = 0;  // output rows, an engine's padding included
  int64_t capacity = 0;    // tokens the block table must hold
  bool new_rows = true;    // key/value (or packed QKV) given
  Codec kc, vc;
  mixed_kv::Paging paging;
  std::vector<uint8_t> k_before, v_before, k_after, v_after;
  std::vector<float> q, k_new, v_new, sink;
  // The non-causal reference (NaN where the output must stay NaN), its tolerances, and the causal
  // reference of the same inputs (the negative control).
  std::vector<double> want, tol, causal, causal_tol;
  std::vector<double> separation;  // per sequence: max over its rows of |want - causal| / tol
  double mean_tv = 0.0;
};

inline double Alpha(const Scenario& s) {
  return s.f.scale != 0.0f ? static_cast<double>(s.f.scale)
                           : 1.0 / std::sqrt(static_cast<double>(s.H));
}

// Fills the pools (every row poisoned, then the rows the cache already holds), the new rows, the
// query (N(0,1) times 4: a peaked softmax) and the expected pools after the run.
inline void BuildScenario(Scenario& s, std::mt19937_64& rng) {
  const FloatFormat t = s.t;
  const int64_t N = s.N, Nkv = s.Nkv, H = s.H;
  s.kc = Codec{s.cache, t, H, MakeScales(s.cache, Nkv, H, rng)};
  s.vc = Codec{s.cache, t, H, MakeScales(s.cache, Nkv, H, rng)};
  std::vector<int64_t> lengths;
  for (const Seq& q : s.seqs) lengths.push_back(q.tb);
  s.paging = mixed_kv::MakePaging(s.layout, Nkv, s.block_size, lengths, s.capacity, rng);
  const int64_t rb = s.kc.RowBytes();
  s.k_before.assign(static_cast<size_t>(s.paging.Rows() * rb), 0);
  s.v_before = s.k_before;
  for (int64_t r = 0; r < s.paging.Rows(); ++r) {
    s.kc.Poison(rng, s.k_before.data() + r * rb);
    s.vc.Poison(rng, s.v_before.data() + r * rb);
  }
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const Seq& q = s.seqs[b];
    const int64_t held = s.new_rows ? q.offset : q.tb;
    for (int64_t h = 0; h < Nkv; ++h) {
      for (int64_t j = 0; j < held; ++j) {
        const int64_t row = s.paging.Row(static_cast<int64_t>(b), h, j);
        const std::vector<float> k = block_quant::RoundedNormal(t, H, rng);
        const std::vector<float> v = block_quant::RoundedNormal(t, H, rng);
        s.kc.Encode(k.data(), h, s.k_before.data() + row * rb);
        s.vc.Encode(v.data(), h, s.v_before.data() + row * rb);
      }
    }
  }
  s.q = block_quant::RoundedNormal(t, s.rows_total * N * H, rng);
  for (float& x : s.q) x = RoundToFormat(t, 4.0f * x);
  s.k_new = block_quant::RoundedNormal(t, s.rows_total * Nkv * H, rng);
  s.v_new = block_quant::RoundedNormal(t, s.rows_total * Nkv * H, rng);
  s.sink = block_quant::RoundedNormal(t, N, rng);
  for (float& x : s.sink) x = RoundToFormat(t, 2.0f * x + 1.0f);
  s.k_after = s.k_before;
  s.v_after = s.v_before;
  for (size_t b = 0; b < s.seqs.size() && s.new_rows; ++b) {
    const Seq& q = s.seqs[b];
    for (int64_t i = 0; i < q.rows && q.offset + i < q.tb; ++i) {
      for (int64_t h = 0; h < Nkv; ++h) {
        const int64_t row = s.paging.Row(static_cast<int64_t>(b), h, q.offset + i);
        const int64_t src = ((q.first + i) * Nkv + h) * H;
        s.kc.Encode(s.k_new.data() + src, h, s.k_after.data() + row * rb);
        s.vc.Encode(s.v_new.data() + src, h, s.v_after.data() + row * rb);
      }
    }
  }
}

// Makes the negative control certain: in every sequence of more than one query row, row 0 of
// every head gets a query aligned with the key of the sequence's LAST token (q = 4 sqrt(H) k / |k|
// rounded to T: a score of about 4 sqrt(H), far above the others), which its non-causal row sees
// and its causal row does not. The other rows stay random.
inline void PlantLaterKey(Scenario& s) {
  const int64_t N = s.N, Nkv = s.Nkv, H = s.H, rb = s.kc.RowBytes();
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const Seq& q = s.seqs[b];
    if (q.rows < 2) continue;
    for (int64_t h = 0; h < Nkv; ++h) {
      std::vector<double> k(static_cast<size_t>(H));
      const int64_t row = s.paging.Row(static_cast<int64_t>(b), h, q.tb - 1);
      s.kc.Decode(s.k_after.data() + row * rb, h, k.data());
      double norm = 0.0;
      for (double x : k) norm += x * x;
      norm = std::sqrt(norm);
      if (!(norm > 0.0)) continue;
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        for (int64_t d = 0; d < H; ++d) {
          s.q[static_cast<size_t>((q.first * N + n) * H + d)] =
              RoundToFormat(s.t, static_cast<float>(4.0 * std::sqrt(static_cast<double>(H)) *
                                                    k[static_cast<size_t>(d)] / norm));
        }
      }
    }
  }
}

// The references from the pools as the run must leave them: output row q.first + i of head n
// sees keys [0, T_b) (non-causal) or [0, min(offset + i + 1, T_b)) (causal).
inline void ComputeReferences(Scenario& s) {
  const int64_t N = s.N, Nkv = s.Nkv, H = s.H, rb = s.kc.RowBytes();
  const size_t size = static_cast<size_t>(s.rows_total * N * H);
  s.want.assign(size, std::numeric_limits<double>::quiet_NaN());
  s.causal = s.want;
  s.tol.assign(size, 0.0);
  s.causal_tol = s.tol;
  s.separation.assign(s.seqs.size(), 0.0);
  Pipeline p;
  p.alpha = Alpha(s);
  p.softcap = s.f.softcap;
  p.p_input = s.f.p_input;
  p.t = s.t;
  double tv = 0.0;
  int64_t tv_rows = 0;
  for (size_t b = 0; b < s.seqs.size(); ++b) {
    const Seq& sq = s.seqs[b];
    for (int64_t h = 0; h < Nkv; ++h) {
      std::vector<double> k(static_cast<size_t>(sq.tb * H)), v(k.size());
      for (int64_t j = 0; j < sq.tb; ++j) {
        const int64_t row = s.paging.Row(static_cast<int64_t>(b), h, j);
        s.kc.Decode(s.k_after.data() + row * rb, h, k.data() + j * H);
        s.vc.Decode(s.v_after.data() + row * rb, h, v.data() + j * H);
      }
      for (int64_t n = h * (N / Nkv); n < (h + 1) * (N / Nkv); ++n) {
        p.has_sink = s.f.sink || s.f.smooth;
        p.sink = s.f.sink ? s.sink[static_cast<size_t>(n)] : 0.0;
        for (int64_t i = 0; i < sq.rows; ++i) {
          const int64_t o = ((sq.first + i) * N + n) * H;
          std::vector<double> qd(s.q.begin() + o, s.q.begin() + o + H);
          const Row nc = Attend(qd.data(), H, k.data(), v.data(), sq.tb, p);
          const Row c =
              Attend(qd.data(), H, k.data(), v.data(), std::min(sq.offset + i + 1, sq.tb), p);
          std::copy(nc.out.begin(), nc.out.end(), s.want.begin() + o);
          std::copy(nc.tol.begin(), nc.tol.end(), s.tol.begin() + o);
          std::copy(c.out.begin(), c.out.end(), s.causal.begin() + o);
          std::copy(c.tol.begin(), c.tol.end(), s.causal_tol.begin() + o);
          for (int64_t d = 0; d < H; ++d) {
            const size_t e = static_cast<size_t>(d);
            s.separation[b] =
                std::max(s.separation[b], std::fabs(nc.out[e] - c.out[e]) / nc.tol[e]);
          }
          if (nc.keys >= 4) {
            tv += nc.tv;
            ++tv_rows;
          }
        }
      }
    }
  }
  s.mean_tv = tv_rows > 0 ? tv / static_cast<double>(tv_rows) : 1.0;
}

}  // namespace non_causal
}  // namespace attnrt_test
