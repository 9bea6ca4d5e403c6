// Shared pieces of the mixed key/value cache type tests of the paged ops (ABI 1.9;
// attnrt/ops/paged_gqa.h, "Value cache type (v_cache_own_type, v_cache_bit_width)"): the five cache
// types with their row codecs, block pools with a shuffled block table, a float64 attention row
// with its error bound, the comparison of T outputs, and the loop that runs one call on every
// registered kernel of an op (pinned) and on the runtime's own choice.
//
// Written from the headers' text alone. With v_cache_own_type = 1
// the pools have independent types:
//   key_cache    k_quant_type NONE: dtype T, kv_cache_bit_width 0; PER_BLOCK_32: uint8 blocks,
//                kv_cache_bit_width 8 (Q8_0) or 4 (Q4_0);
//   value_cache  v_quant_type NONE: float32, float16 or bfloat16 whatever T is, new value rows
//                rounded to it to nearest even, v_cache_bit_width 0; PER_BLOCK_32: uint8 blocks,
//                v_cache_bit_width 8 (Q8_0) or 4 (Q4_0).
// New rows of a PER_BLOCK_32 pool are quantized as ggml's quantize_row_q8_0_ref / q4_0_ref
// (attnrt/ops/gqa.h); the quantizer, the float16/bfloat16 rounding and the block decoder used here
// are the tests' own (tests/common/dtype_reference.h), never the plugin's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace mixed_kv {

// The unit roundoff of float32, in which the CPU kernels compute.
inline constexpr double kU32 = 0x1p-24;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- cache types
// ----------------------------------------------------------------------------------
enum class CacheType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };

inline const char* TypeName(CacheType c) {
  switch (c) {
    case CacheType::kF32:
      return "f32";
    case CacheType::kF16:
      return "f16";
    case CacheType::kBF16:
      return "bf16";
    case CacheType::kQ8_0:
      return "q8_0";
    case CacheType::kQ4_0:
      break;
  }
  return "q4_0";
}

inline bool IsBlock(CacheType c) { return c == CacheType::kQ8_0 || c == CacheType::kQ4_0; }

inline BlockFormat BlockOf(CacheType c) {
  return c == CacheType::kQ8_0 ? BlockFormat::kQ8_0 : BlockFormat::kQ4_0;
}

inline FloatFormat FloatOf(CacheType c) {
  return c == CacheType::kF16    ? FloatFormat::kFloat16
         : c == CacheType::kBF16 ? FloatFormat::kBFloat16
                                 : FloatFormat::kFloat32;
}

inline CacheType FloatType(FloatFormat f) {
  return f == FloatFormat::kFloat16    ? CacheType::kF16
         : f == FloatFormat::kBFloat16 ? CacheType::kBF16
                                       : CacheType::kF32;
}

inline attnrt_dtype DtypeOf(CacheType c) {
  return IsBlock(c) ? block_quant::kU8 : block_quant::QueryDtype(FloatOf(c));
}

// The attribute pair of a pool's type: quant type and bit width (0 for NONE).
inline int32_t QuantType(CacheType c) {
  return IsBlock(c) ? ATTNRT_GQA_QUANT_PER_BLOCK_32 : ATTNRT_GQA_QUANT_NONE;
}
inline int32_t BitWidth(CacheType c) {
  return c == CacheType::kQ8_0 ? 8 : c == CacheType::kQ4_0 ? 4 : 0;
}

// Bytes of a row of n elements, and the pool's last dimension (in elements of its dtype).
inline int64_t RowBytes(CacheType c, int64_t n) {
  if (IsBlock(c)) return BlockRowBytes(BlockOf(c), n);
  return c == CacheType::kF32 ? 4 * n : 2 * n;
}
inline int64_t LastDim(CacheType c, int64_t n) { return IsBlock(c) ? RowBytes(c, n) : n; }

// Writes the row of the n values x (each exact in float) as a pool of type c stores it: float32
// as is, float16/bfloat16 rounded to nearest even, Q8_0/Q4_0 by ggml's reference quantizers.
inline void EncodeRow(CacheType c, const float* x, int64_t n, uint8_t* out) {
  if (IsBlock(c)) {
    QuantizeBlockRow(BlockOf(c), x, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (c == CacheType::kF32) {
      std::memcpy(out + 4 * i, &x[i], 4);
    } else {
      const uint16_t bits = c == CacheType::kF16 ? Float16Bits(x[i]) : BFloat16Bits(x[i]);
      std::memcpy(out + 2 * i, &bits, 2);
    }
  }
}

// The n element values of a row read as type c.
inline void DecodeRow(CacheType c, const uint8_t* in, int64_t n, float* out) {
  if (IsBlock(c)) {
    DequantizeBlockRow(BlockOf(c), in, n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (c == CacheType::kF32) {
      std::memcpy(&out[i], in + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, in + 2 * i, 2);
      out[i] = c == CacheType::kF16 ? Float16Value(bits) : BFloat16Value(bits);
    }
  }
}

// A row no kernel may read: NaN elements, or blocks whose float16 d is NaN (every element NaN).
inline void PoisonRow(CacheType c, int64_t n, std::mt19937_64& rng, uint8_t* out) {
  if (IsBlock(c)) {
    block_quant::PoisonBlockRow(BlockOf(c), n, rng, out);
    return;
  }
  const std::vector<float> nan(static_cast<size_t>(n), kNaN);
  EncodeRow(c, nan.data(), n, out);
}

// ---- a pair of pool types with the query type
// ------------------------------------------------------
struct Types {
  std::string name;
  FloatFormat t = FloatFormat::kFloat32;  // query, key, value and output type T
  CacheType k = CacheType::kF32, v = CacheType::kF32;
};

// The pairs under test (a NONE key cache has dtype T or, with independent types, a float type of
// its own; a quantized one keeps T as given), and one control whose independent types happen to be
// equal.
inline std::vector<Types> AllTypes() {
  using C = CacheType;
  using F = FloatFormat;
  return {
      {"t_f16_k_f16_v_q4_0", F::kFloat16, C::kF16, C::kQ4_0},
      {"t_f32_k_q4_0_v_f16", F::kFloat32, C::kQ4_0, C::kF16},
      {"t_f32_k_q8_0_v_q4_0", F::kFloat32, C::kQ8_0, C::kQ4_0},
      {"t_f16_k_f16_v_f32", F::kFloat16, C::kF16, C::kF32},
      {"t_bf16_k_bf16_v_f16", F::kBFloat16, C::kBF16, C::kF16},
      {"t_f32_k_q4_0_v_q8_0", F::kFloat32, C::kQ4_0, C::kQ8_0},
      {"t_f32_k_f32_v_bf16", F::kFloat32, C::kF32, C::kBF16},
      // A float key cache of its own type, not T's (llama.cpp's F16 K under a float32 query).
      {"t_f32_k_f16_v_q4_0", F::kFloat32, C::kF16, C::kQ4_0},
      {"t_f32_k_bf16_v_f32", F::kFloat32, C::kBF16, C::kF32},
      {"t_f16_k_f32_v_f16", F::kFloat16, C::kF32, C::kF16},
      {"t_f32_k_q8_0_v_q8_0_control", F::kFloat32, C::kQ8_0, C::kQ8_0},
  };
}

// Attributes of a call with independent types.
inline attnrt_paged_gqa_attributes MixedAttributes(const Types& ty, int64_t N, int64_t Nkv,
                                                   int64_t block_size, int32_t layout) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.gqa.k_quant_type = QuantType(ty.k);
  a.gqa.kv_cache_bit_width = BitWidth(ty.k);
  a.gqa.v_quant_type = QuantType(ty.v);
  a.v_cache_own_type = 1;
  a.v_cache_bit_width = BitWidth(ty.v);
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = layout;
  return a;
}

// ---- block pools
// ----------------------------------------------------------------------------------
// The block table and row mapping (attnrt/ops/paged_gqa.h, attnrt_paged_kv_layout).
struct Paging {
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  int64_t Nkv = 0, block_size = 0, slots = 0, num_blocks = 0;
  std::vector<int32_t> table;  // [B, slots]

  int64_t Row(int64_t b, int64_t h, int64_t j) const {
    const int64_t x = table[static_cast<size_t>(b * slots + j / block_size)];
    const int64_t r = j % block_size;
    return layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? (x * Nkv + h) * block_size + r
                                                 : (x * block_size + r) * Nkv + h;
  }
  int64_t Rows() const { return num_blocks * block_size * Nkv; }
  std::vector<int64_t> Shape(int64_t last) const {
    return layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
               ? std::vector<int64_t>{num_blocks, Nkv, block_size, last}
               : std::vector<int64_t>{num_blocks, block_size, Nkv, last};
  }
};

// Blocks for `lengths` tokens of each sequence, in random order; a table of `capacity` tokens per
// sequence plus one spare slot of -1; two spare blocks that no slot names.
inline Paging MakePaging(int32_t layout, int64_t Nkv, int64_t block_size,
                         const std::vector<int64_t>& lengths, int64_t capacity,
                         std::mt19937_64& rng) {
  Paging p;
  p.layout = layout;
  p.Nkv = Nkv;
  p.block_size = block_size;
  int64_t needed = 0;
  for (int64_t len : lengths) needed += (len + block_size - 1) / block_size;
  p.slots = (capacity + block_size - 1) / block_size + 1;
  p.num_blocks = needed + 2;
  std::vector<int32_t> ids(static_cast<size_t>(p.num_blocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(lengths.size() * static_cast<size_t>(p.slots), -1);
  size_t next = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t i = 0; i < (lengths[b] + block_size - 1) / block_size; ++i) {
      p.table[b * static_cast<size_t>(p.slots) + static_cast<size_t>(i)] = ids[next++];
    }
  }
  return p;
}

// One pool: its type, its row width in elements (H or Hv), its bytes before a run (every row
// poisoned but the past tokens') and as a run must leave them (the new tokens' rows written).
struct Pool {
  const char* name = "key_cache";
  CacheType type = CacheType::kF32;
  int64_t width = 0;
  std::vector<uint8_t> before, after;

  int64_t RowBytesOf() const { return RowBytes(type, width); }
  uint8_t* RowIn(std::vector<uint8_t>& image, const Paging& p, int64_t b, int64_t h,
                 int64_t j) const {
    return image.data() + p.Row(b, h, j) * RowBytesOf();
  }
  const uint8_t* RowIn(const std::vector<uint8_t>& image, const Paging& p, int64_t b, int64_t h,
                       int64_t j) const {
    return image.data() + p.Row(b, h, j) * RowBytesOf();
  }
  Tensor MakeTensor(const Paging& p) const {
    return Tensor(DtypeOf(type), p.Shape(LastDim(type, width)));
  }
  // Describes byte `byte` of the pool: block, row within the block, byte within the row.
  std::string Describe(const Paging& p, int64_t byte) const {
    const int64_t row = byte / RowBytesOf();
    return std::string(name) + " (" + TypeName(type) + ") block " +
           std::to_string(row / (p.block_size * p.Nkv)) + ", row " +
           std::to_string(row % (p.block_size * p.Nkv)) + " of the block, byte " +
           std::to_string(byte % RowBytesOf()) + " of " + std::to_string(RowBytesOf());
  }
};

inline void PoisonPool(Pool& pool, const Paging& p, std::mt19937_64& rng) {
  pool.before.assign(static_cast<size_t>(p.Rows() * pool.RowBytesOf()), 0);
  for (int64_t r = 0; r < p.Rows(); ++r) {
    PoisonRow(pool.type, pool.width, rng, pool.before.data() + r * pool.RowBytesOf());
  }
}

// Values of T for a new value row of a T = float32 call whose value cache is float16 or bfloat16:
// N(0,1), with the first `ties` elements moved to exact midpoints between two neighbours of the
// cache type, so that rounding to nearest even (and not truncation or rounding half away) is what
// the pool bytes check.
inline std::vector<float> ValueRow(FloatFormat t, CacheType v, int64_t n, int64_t ties,
                                   std::mt19937_64& rng) {
  std::vector<float> x = block_quant::RoundedNormal(t, n, rng);
  if (t != FloatFormat::kFloat32 || (v != CacheType::kF16 && v != CacheType::kBF16)) return x;
  for (int64_t i = 0; i < std::min(ties, n); ++i) {
    const FloatFormat f = FloatOf(v);
    const float base = RoundToFormat(f, x[static_cast<size_t>(i)]);
    const double half = 0.5 * UnitInLastPlace(f, base);
    x[static_cast<size_t>(i)] = static_cast<float>(base + (base < 0 ? -half : half));
  }
  return x;
}

// ---- float64 attention row
// ------------------------------------------------------------------------
// The score pipeline beyond scale · q·k (attnrt/ops/gqa.h; docs/gqa-semantics.md, "Non-finite
// values", items 2-5): softcap · tanh(s / softcap) when softcap > 0, and the head_sink logit of the
// row's head joining the softmax as one more logit that brings no value.
struct Scoring {
  double softcap = 0.0;
  bool has_sink = false;
  double sink = 0.0;
};

// One query row q (H values) over keys [lo, hi): o_d = sum_j p_j v_jd with p = softmax(s),
// s_j = alpha * sum_i q_i k_ji (then softcapped), every product and sum in double from the element
// values a kernel reads (the pools' decoded rows). Any H and Hv >= 1. Its bound on what float32
// arithmetic may change in o_d:
//   - a score is off by at most D_j = (H + 4) u alpha sum_i |q_i k_ji| + 4 u (|s_j| + |m|): a dot
//     product of H terms in any order, the product of a block's code and d, the scale multiply,
//     and s_j - m (m the row maximum, the sink logit where that is larger); with a softcap,
//     4 u (softcap + |alpha q.k|) more: the division by softcap (its rounding moves tanh's argument
//     by u |alpha q.k| / softcap, tanh's slope is at most 1), tanh itself and the multiply (a few
//     ulp of softcap, which bounds |s_j|); tanh is 1-Lipschitz, so D_j passes through it;
//   - scores off by at most D = max_j D_j, and exp, its sum and the division off by a few ulp,
//     change each normalized weight by a factor within e^(+-(2D + 16u)); since the weights still
//     sum to 1 (the sink counted as a key of value 0), o_d moves by at most
//     (e^(2D + 16u) - 1) (sum_j p_j |v_jd - o_d| + p_sink |o_d|);
//   - the n-term sums l and sum_j p_j v_jd, the value dequantization products and the division
//     cost at most (2n + 16) u sum_j p_j |v_jd|.
// bound_d is their sum; tv is the total variation distance of the keys' weights (normalized to sum
// 1 when a sink takes a share) from the uniform weights.
struct RowRef {
  std::vector<double> out, bound;
  double tv = 0.0;
  int64_t keys = 0;
};

template <typename KeyRow, typename ValueRow>
RowRef AttendRow(const float* q, int64_t H, int64_t Hv, int64_t lo, int64_t hi, double alpha,
                 KeyRow key, ValueRow value, const Scoring& scoring = Scoring{}) {
  RowRef r;
  r.out.assign(static_cast<size_t>(Hv), 0.0);
  r.bound.assign(static_cast<size_t>(Hv), 0.0);
  r.keys = std::max<int64_t>(0, hi - lo);
  if (r.keys <= 0) return r;  // no key: a zero row (docs/gqa-semantics.md, non-finite rule 4)
  std::vector<double> s(static_cast<size_t>(r.keys)), err(s.size());
  double m = scoring.has_sink ? scoring.sink : -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    const float* kj = key(j);
    double dot = 0.0, mag = 0.0;
    for (int64_t i = 0; i < H; ++i) {
      dot += double{q[i]} * double{kj[i]};
      mag += std::fabs(double{q[i]} * double{kj[i]});
    }
    double sj = alpha * dot;
    double e = static_cast<double>(H + 4) * kU32 * alpha * mag;
    if (scoring.softcap > 0.0) {
      e += 4.0 * kU32 * (scoring.softcap + std::fabs(sj));
      sj = scoring.softcap * std::tanh(sj / scoring.softcap);
    }
    s[static_cast<size_t>(j - lo)] = sj;
    err[static_cast<size_t>(j - lo)] = e;
    m = std::max(m, sj);
  }
  double l = scoring.has_sink ? std::exp(scoring.sink - m) : 0.0, D = 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    l += std::exp(s[j] - m);
    D = std::max(D, err[j] + 4.0 * kU32 * (std::fabs(s[j]) + std::fabs(m)));
  }
  if (scoring.has_sink) D = std::max(D, 4.0 * kU32 * (std::fabs(scoring.sink) + std::fabs(m)));
  std::vector<double> p(s.size());
  double key_weight = 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    p[j] = std::exp(s[j] - m) / l;
    key_weight += p[j];
    const float* vj = value(lo + static_cast<int64_t>(j));
    for (int64_t d = 0; d < Hv; ++d) r.out[static_cast<size_t>(d)] += p[j] * double{vj[d]};
  }
  for (size_t j = 0; j < s.size(); ++j) {
    r.tv += 0.5 * std::fabs(p[j] / key_weight - 1.0 / static_cast<double>(r.keys));
  }
  const double p_sink = scoring.has_sink ? std::exp(scoring.sink - m) / l : 0.0;
  const double spread = std::expm1(2.0 * D + 16.0 * kU32);
  const double arithmetic = static_cast<double>(2 * r.keys + 16) * kU32;
  for (int64_t d = 0; d < Hv; ++d) {
    const double o = r.out[static_cast<size_t>(d)];
    double deviation = p_sink * std::fabs(o), magnitude = 0.0;
    for (size_t j = 0; j < p.size(); ++j) {
      const double vjd = value(lo + static_cast<int64_t>(j))[d];
      deviation += p[j] * std::fabs(vjd - o);
      magnitude += p[j] * std::fabs(vjd);
    }
    r.bound[static_cast<size_t>(d)] = spread * deviation + arithmetic * magnitude;
  }
  return r;
}

// The allowed error of an output element of type T whose float32 value may be off by `b` from
// the reference w: float32, b plus the float32 rounding of w; float16/bfloat16, the kernel rounds
// its float32 value x to T once, |rnd(x) - w| <= |rnd(x) - x| + |x - w| <= 0.5 ulp_T(w) + 2b (a
// power of two, exact in T, lies between x and w when they are in different binades).
inline double Allowed(FloatFormat t, double w, double b) {
  const double f32 = b + kU32 * (1.0 + std::fabs(w));
  return t == FloatFormat::kFloat32 ? f32 : 0.5 * UnitInLastPlace(t, w) + b + f32;
}

// The expected output: out (NaN: the element must stay the NaN poison) and the float32 bounds.
struct Expected {
  std::vector<double> out, bound;
};

struct Comparison {
  int64_t checked = 0, bad = 0, first = -1;
  double worst_ratio = 0.0;  // the largest error / allowed error among the elements in bound
};

// Every element of got (a T tensor) against want.
inline Comparison Compare(Tensor& got, FloatFormat t, const Expected& want) {
  Comparison c;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = block_quant::Load(got, t, i);
    const double w = want.out[static_cast<size_t>(i)];
    ++c.checked;
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else {
      const double allowed = Allowed(t, w, want.bound[static_cast<size_t>(i)]);
      const double error = std::fabs(g - w);
      ok = error <= allowed;  // false for a NaN g
      if (ok) c.worst_ratio = std::max(c.worst_ratio, error / allowed);
    }
    if (!ok) {
      ++c.bad;
      if (c.first < 0) c.first = i;
    }
  }
  return c;
}

// Expects every element within its bound; describe(i) names element i.
template <typename Describe>
double ExpectOutput(const std::string& what, Tensor& got, FloatFormat t, const Expected& want,
                    Describe describe) {
  EXPECT_EQ(static_cast<size_t>(got.numel()), want.out.size()) << what;
  if (static_cast<size_t>(got.numel()) != want.out.size()) return 0.0;
  const Comparison c = Compare(got, t, want);
  if (c.bad > 0) {
    const double g = block_quant::Load(got, t, c.first);
    const double w = want.out[static_cast<size_t>(c.first)];
    char buf[160];
    std::snprintf(buf, sizeof(buf), "got %.9g, want %.9g, allowed error %.3g", g, w,
                  std::isnan(w) ? 0.0 : Allowed(t, w, want.bound[static_cast<size_t>(c.first)]));
    ADD_FAILURE() << what << ": " << c.bad << " of " << c.checked
                  << " elements outside the bound; first at " << describe(c.first) << ": "
                  << (std::isnan(w) ? std::string("must stay NaN (never written), ") : "") << buf;
  }
  return c.worst_ratio;
}

// A pool's bytes against the expected image, every byte.
inline void ExpectPoolBytes(const Pool& pool, const Paging& p, const uint8_t* got) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < pool.after.size(); ++i) {
    if (got[i] != pool.after[i]) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  if (bad > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "got 0x%02X, want 0x%02X (before the run 0x%02X)", got[first],
                  pool.after[static_cast<size_t>(first)], pool.before[static_cast<size_t>(first)]);
    ADD_FAILURE() << pool.name << ": " << bad << " of " << pool.after.size()
                  << " bytes differ from the expected image; first at " << pool.Describe(p, first)
                  << ": " << buf;
  }
}

// ---- every kernel
// ---------------------------------------------------------------------------------
// One call, run again for each kernel: reset() restores the pools and poisons the output, check()
// compares them after a run of `kernel`.
struct Call {
  int32_t op_kind = ATTNRT_OP_PAGED_GQA;
  const attnrt_paged_gqa_attributes* attributes = nullptr;
  std::vector<const attnrt_tensor*> inputs, outputs;
  std::function<void()> reset;
  std::function<void(const std::string& kernel)> check;
};

// What the loop saw: the kernels that ran the case, those that declined it (with the reason),
// those this CPU cannot run, and the runtime's own choice.
struct Outcome {
  std::vector<std::string> accepted;
  std::vector<std::pair<std::string, std::string>> declined;
  std::vector<std::string> unavailable;
  std::string chosen;
};

inline std::map<std::string, std::set<std::string>>& Verdicts() {
  static std::map<std::string, std::set<std::string>> verdicts;
  return verdicts;
}

// "[kernel] name: verdict" once per (kernel, verdict), printed when the run ends.
class VerdictSummary : public testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [kernel, verdicts] : Verdicts()) {
      for (const std::string& v : verdicts)
        std::printf("[kernel] %s: %s\n", kernel.c_str(), v.c_str());
    }
  }
};
inline testing::Environment* const kVerdictSummary =
    testing::AddGlobalTestEnvironment(new VerdictSummary);

// The runtime pinned to `kernel` ("" for the runtime's own choice), made once per process with
// every ATTNRT_* variable unset.
inline attnrt_runtime* RuntimeFor(const std::string& kernel) {
  static std::map<std::string, RuntimePtr> runtimes;
  auto it = runtimes.find(kernel);
  if (it != runtimes.end()) return it->second.get();
  CleanAttnrtEnv env;
  attnrt_runtime_options options = DefaultOptions();
  options.kernel = kernel.c_str();
  options.disable = "";
  options.num_threads = 3;
  RuntimePtr runtime = CreateRuntime(options);
  attnrt_runtime* raw = runtime.get();
  if (raw != nullptr) runtimes.emplace(kernel, std::move(runtime));
  return raw;
}

// Every CPU kernel any loaded plugin registers for op_kind, from the runtime's kernel enumeration
// (attnrt_runtime_plugin_kernel), sorted.
inline const std::vector<std::string>& KernelsOf(int32_t op_kind) {
  static std::map<int32_t, std::vector<std::string>> kernels;
  auto it = kernels.find(op_kind);
  if (it != kernels.end()) return it->second;
  std::vector<std::string> names;
  if (attnrt_runtime* runtime = RuntimeFor("")) {
    for (const PluginInfo& plugin : ListPlugins(runtime)) {
      for (const KernelInfo& k : plugin.kernels) {
        if (k.op_kind == op_kind && k.device_type == ATTNRT_DEVICE_CPU) names.push_back(k.name);
      }
    }
  }
  std::sort(names.begin(), names.end());
  return kernels.emplace(op_kind, std::move(names)).first->second;
}

inline OpPtr MakeOp(attnrt_runtime* runtime, const Call& call) {
  attnrt_op* op = nullptr;
  const attnrt_status st = attnrt_op_create(runtime, call.op_kind, call.attributes, &op);
  EXPECT_EQ(st, ATTNRT_OK) << "op create: " << LastError(st);
  return OpPtr(st == ATTNRT_OK ? op : nullptr);
}

// Plans and runs the call on runtime's op; returns the kernel that ran ("" on failure).
inline std::string PlanAndRun(attnrt_runtime* runtime, Call& call) {
  OpPtr op = MakeOp(runtime, call);
  if (!op) return "";
  attnrt_plan* raw = nullptr;
  attnrt_status st = attnrt_op_plan(op.get(), call.inputs.data(), call.inputs.size(),
                                    call.outputs.data(), call.outputs.size(), &raw);
  EXPECT_EQ(st, ATTNRT_OK) << "plan: " << LastError(st);
  if (st != ATTNRT_OK) return "";
  PlanPtr plan(raw);
  const std::string kernel = PlanKernel(plan.get());
  call.reset();
  st = attnrt_plan_run(plan.get(), call.inputs.data(), call.inputs.size(), call.outputs.data(),
                       call.outputs.size(), nullptr, 0, nullptr);
  EXPECT_EQ(st, ATTNRT_OK) << "run on " << kernel << ": " << LastError(st);
  return st == ATTNRT_OK ? kernel : "";
}

// Runs the call on every kernel of the op, each pinned, then on the runtime's own choice:
//   - a kernel that declines must give a reason, and pinned, its plan must fail with
//     ATTNRT_ERROR_UNSUPPORTED; a naive kernel may decline only for the CPU (the naive kernels
//     serve two cache types: attnrt/ops/paged_gqa.h);
//   - a kernel that accepts must run and pass check();
//   - at least one kernel accepts, and the runtime's own choice is one of them.
inline Outcome RunOnEveryKernel(Call& call) {
  Outcome outcome;
  attnrt_runtime* unpinned = RuntimeFor("");
  if (unpinned == nullptr) return outcome;
  const std::vector<std::string>& kernels = KernelsOf(call.op_kind);
  EXPECT_FALSE(kernels.empty()) << "no CPU kernel is registered for "
                                << attnrt_op_kind_name(call.op_kind);
  std::vector<Candidate> candidates;
  {
    OpPtr op = MakeOp(unpinned, call);
    if (!op) return outcome;
    candidates = Explain(op.get(), call.inputs.data(), call.inputs.size(), call.outputs.data(),
                         call.outputs.size());
  }
  if (candidates.empty()) return outcome;  // explain failed (recorded): the case is not valid
  for (const std::string& kernel : kernels) {
    SCOPED_TRACE("kernel " + kernel);
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& c) { return c.kernel == kernel; });
    if (it == candidates.end()) {
      ADD_FAILURE() << "explain does not list " << kernel;
      continue;
    }
    if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE) {
      Verdicts()[kernel].insert("unavailable on this CPU: " + it->reason);
      outcome.unavailable.push_back(kernel);
      continue;
    }
    if (it->status == ATTNRT_CANDIDATE_DECLINED) {
      EXPECT_FALSE(it->reason.empty()) << kernel << " declines without a reason";
      Verdicts()[kernel].insert("declines: " + it->reason);
      outcome.declined.emplace_back(kernel, it->reason);
      if (block_quant::Algorithm(kernel) == "naive" &&
          !block_quant::IsCpuFeatureReason(it->reason)) {
        ADD_FAILURE() << kernel
                      << " (a naive kernel, which serves two cache types) declines: " << it->reason;
      }
      attnrt_runtime* pinned = RuntimeFor(kernel);
      if (pinned == nullptr) continue;
      OpPtr op = MakeOp(pinned, call);
      if (!op) continue;
      attnrt_plan* raw = nullptr;
      const attnrt_status st = attnrt_op_plan(op.get(), call.inputs.data(), call.inputs.size(),
                                              call.outputs.data(), call.outputs.size(), &raw);
      PlanPtr plan(raw);
      EXPECT_EQ(st, ATTNRT_ERROR_UNSUPPORTED)
          << "plan pinned to " << kernel << ", which declines: " << LastError(st);
      continue;
    }
    if (it->status != ATTNRT_CANDIDATE_SELECTED && it->status != ATTNRT_CANDIDATE_ELIGIBLE) {
      ADD_FAILURE() << kernel << " is " << attnrt_candidate_status_name(it->status) << ": "
                    << it->reason;
      continue;
    }
    if (block_quant::IsApproximate(kernel)) {
      // An opt-in approximate kernel (cpu_arm's int8 dot products) is outside these bounds.
      Verdicts()[kernel].insert("accepts; approximate, not compared");
      continue;
    }
    attnrt_runtime* pinned = RuntimeFor(kernel);
    if (pinned == nullptr) continue;
    const std::string ran = PlanAndRun(pinned, call);
    if (ran.empty()) continue;
    EXPECT_EQ(ran, kernel);
    Verdicts()[kernel].insert("accepts (compared with the reference)");
    call.check(kernel);
    outcome.accepted.push_back(kernel);
  }
  EXPECT_GE(outcome.accepted.size(), 1u) << "no registered kernel accepts the case";
  SCOPED_TRACE("the runtime's own choice");
  outcome.chosen = PlanAndRun(unpinned, call);
  if (!outcome.chosen.empty()) {
    EXPECT_NE(std::find(outcome.accepted.begin(), outcome.accepted.end(), outcome.chosen),
              outcome.accepted.end())
        << "auto dispatch chose " << outcome.chosen << ", not among the accepting kernels";
    call.check("auto (" + outcome.chosen + ")");
  }
  return outcome;
}

}  // namespace mixed_kv
}  // namespace attnrt_test
