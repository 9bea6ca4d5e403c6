// Shared pieces of the value head size tests of the paged ops (ABI 1.8; attnrt/ops/paged_gqa.h,
// "Value head size"): the cache formats with their row codecs, a float64 attention row with its
// error bound, the comparison of T outputs with that bound, and the loop that runs one call on
// every registered kernel of an op and on the runtime's own choice.
//
// Written from the headers' text alone: Hv is value_cache's last dimension (Hv elements; Hv bytes
// for int8 and float8 e5m2, Hv/2 for int4, Hv/32 blocks of 34 (Q8_0) or 18 (Q4_0) bytes), value
// rows and output head rows have Hv elements, a per-channel v_scale has Nkv*Hv values (channel
// h*Hv + d), and the scores stay scale * q·k over the H elements of q and k, scale 0 meaning
// 1/sqrt(H). The quantizers are the tests' own (tests/common/dtype_reference.h: ONNX Runtime's
// int8/int4 rule, the saturating round-to-nearest-even float8 e5m2 encoder and ggml's Q8_0/Q4_0
// reference quantizers), never the plugin's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace value_head_size {

using block_quant::kNaN;
using block_quant::QueryDtype;

// Emulated (qemu) and sanitized builds run a reduced matrix (every head size pair and cache format
// still meets a case; fewer query types, phases and layouts).
#if defined(ATTNRT_TEST_REDUCED_MATRIX) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kReduced = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kReduced = true;
#else
inline constexpr bool kReduced = false;
#endif
#else
inline constexpr bool kReduced = false;
#endif

// The unit roundoff of float32, in which every CPU kernel computes.
inline constexpr double kU32 = 0x1p-24;

inline constexpr attnrt_dtype kE5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;

// ---- head sizes and cache formats
// -----------------------------------------------------------------
struct HeadSizes {
  int64_t H = 0, Hv = 0;  // key head size (query, key, key_cache), value head size
};

// (H, Hv) pairs: MLA-style 192/128 and 96/64, a wider V, sizes that are not multiples of 32 on
// either side, 128/256, and the equal control.
inline std::vector<HeadSizes> AllHeadSizes() {
  return {{192, 128}, {96, 64}, {64, 128}, {72, 64}, {64, 72}, {128, 256}, {128, 128}};
}

enum class Cache {
  kFloat,
  kInt8PerTensor,
  kInt8PerChannel,
  kInt4PerChannel,
  kE5M2PerTensor,
  kE5M2PerChannel,
  kQ8_0,
  kQ4_0
};

inline const char* CacheName(Cache c) {
  switch (c) {
    case Cache::kFloat:
      return "cache_t";
    case Cache::kInt8PerTensor:
      return "int8_per_tensor";
    case Cache::kInt8PerChannel:
      return "int8_per_channel";
    case Cache::kInt4PerChannel:
      return "int4_per_channel";
    case Cache::kE5M2PerTensor:
      return "e5m2_per_tensor";
    case Cache::kE5M2PerChannel:
      return "e5m2_per_channel";
    case Cache::kQ8_0:
      return "q8_0";
    case Cache::kQ4_0:
      break;
  }
  return "q4_0";
}

inline bool IsBlock(Cache c) { return c == Cache::kQ8_0 || c == Cache::kQ4_0; }
inline bool IsE5M2(Cache c) { return c == Cache::kE5M2PerTensor || c == Cache::kE5M2PerChannel; }
inline BlockFormat Block(Cache c) {
  return c == Cache::kQ8_0 ? BlockFormat::kQ8_0 : BlockFormat::kQ4_0;
}

// The formats a pair takes: PER_BLOCK_32 only when both H and Hv are multiples of 32; float8 e5m2
// (PER_TENSOR and PER_CHANNEL) always.
inline std::vector<Cache> CachesFor(const HeadSizes& hs) {
  std::vector<Cache> v = {Cache::kFloat, Cache::kInt8PerTensor, Cache::kInt8PerChannel,
                          Cache::kInt4PerChannel};
  if (hs.H % 32 == 0 && hs.Hv % 32 == 0) {
    v.push_back(Cache::kQ8_0);
    v.push_back(Cache::kQ4_0);
  }
  v.push_back(Cache::kE5M2PerTensor);
  v.push_back(Cache::kE5M2PerChannel);
  return v;
}

inline size_t TypeBytes(FloatFormat t) { return t == FloatFormat::kFloat32 ? 4 : 2; }

// Bytes of a cache row of n elements.
inline int64_t RowBytes(Cache c, FloatFormat t, int64_t n) {
  switch (c) {
    case Cache::kFloat:
      return n * static_cast<int64_t>(TypeBytes(t));
    case Cache::kInt8PerTensor:
    case Cache::kInt8PerChannel:
    case Cache::kE5M2PerTensor:
    case Cache::kE5M2PerChannel:
      return n;
    case Cache::kInt4PerChannel:
      return n / 2;
    case Cache::kQ8_0:
    case Cache::kQ4_0:
      break;
  }
  return BlockRowBytes(Block(c), n);
}

// The pool's last dimension for rows of n elements (in elements of the pool's dtype).
inline int64_t LastDim(Cache c, FloatFormat t, int64_t n) {
  return c == Cache::kFloat ? n : RowBytes(c, t, n);
}

inline attnrt_dtype CacheDtype(Cache c, FloatFormat t) {
  switch (c) {
    case Cache::kFloat:
      return QueryDtype(t);
    case Cache::kInt8PerTensor:
    case Cache::kInt8PerChannel:
      return block_quant::kI8;
    case Cache::kE5M2PerTensor:
    case Cache::kE5M2PerChannel:
      return kE5M2;
    default:
      break;
  }
  return block_quant::kU8;
}

// k_quant_type = v_quant_type and kv_cache_bit_width of a format.
inline void SetQuantization(Cache c, attnrt_gqa_attributes& a) {
  switch (c) {
    case Cache::kFloat:
      return;
    case Cache::kInt8PerTensor:
      a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
      a.kv_cache_bit_width = 8;
      return;
    case Cache::kInt8PerChannel:
      a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.kv_cache_bit_width = 8;
      return;
    case Cache::kInt4PerChannel:
      a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.kv_cache_bit_width = 4;
      return;
    case Cache::kE5M2PerTensor:
      a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
      a.kv_cache_bit_width = 8;
      return;
    case Cache::kE5M2PerChannel:
      a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.kv_cache_bit_width = 8;
      return;
    case Cache::kQ8_0:
    case Cache::kQ4_0:
      break;
  }
  a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.kv_cache_bit_width = c == Cache::kQ8_0 ? 8 : 4;
}

// k_scale/v_scale values: none (float and PER_BLOCK_32 caches), one (PER_TENSOR) or Nkv * n
// (PER_CHANNEL; channel h * n + d), sized for N(0,1) rows: int8 about 4/127 (codes up to ~127 for
// |x| ~ 4), int4 about 2.5/7, float8 e5m2 about 4/57344 (|x| ~ 4 at its largest finite value,
// beyond it saturated), each channel drawn from [0.5, 1.5] of that.
inline std::vector<float> MakeScales(Cache c, int64_t Nkv, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> spread(0.5f, 1.5f);
  switch (c) {
    case Cache::kInt8PerTensor:
      return {4.0f / 127.0f};
    case Cache::kE5M2PerTensor:
      return {4.0f / 57344.0f};
    case Cache::kInt8PerChannel:
    case Cache::kInt4PerChannel:
    case Cache::kE5M2PerChannel: {
      const float base = c == Cache::kInt8PerChannel   ? 4.0f / 127.0f
                         : c == Cache::kE5M2PerChannel ? 4.0f / 57344.0f
                                                       : 2.5f / 7.0f;
      std::vector<float> v(static_cast<size_t>(Nkv * n));
      for (float& x : v) x = base * spread(rng);
      return v;
    }
    default:
      break;
  }
  return {};
}

// The scale of element d of a row of kv head h (rows of n elements).
inline float ScaleOf(const std::vector<float>& scales, int64_t h, int64_t n, int64_t d) {
  if (scales.empty()) return 1.0f;
  return scales.size() == 1 ? scales[0] : scales[static_cast<size_t>(h * n + d)];
}

// ---- row codec
// -------------------------------------------------------------------------------------- Writes the
// cache row of the n values x (exact in T for a float cache) of kv head h at out.
inline void EncodeRow(Cache c, FloatFormat t, const float* x, int64_t n,
                      const std::vector<float>& scales, int64_t h, uint8_t* out) {
  switch (c) {
    case Cache::kFloat:
      for (int64_t i = 0; i < n; ++i) {
        if (t == FloatFormat::kFloat32) {
          std::memcpy(out + 4 * i, &x[i], 4);
        } else {
          const uint16_t bits = t == FloatFormat::kFloat16 ? Float16Bits(x[i]) : BFloat16Bits(x[i]);
          std::memcpy(out + 2 * i, &bits, 2);
        }
      }
      return;
    case Cache::kInt8PerTensor:
    case Cache::kInt8PerChannel:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = QuantizeElement(CacheFormat::kInt8, x[i], ScaleOf(scales, h, n, i));
      }
      return;
    case Cache::kInt4PerChannel:
      for (int64_t i = 0; i < n; i += 2) {
        out[i / 2] =
            PackInt4(QuantizeElement(CacheFormat::kInt4, x[i], ScaleOf(scales, h, n, i)),
                     QuantizeElement(CacheFormat::kInt4, x[i + 1], ScaleOf(scales, h, n, i + 1)));
      }
      return;
    case Cache::kE5M2PerTensor:
    case Cache::kE5M2PerChannel:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = QuantizeElement(CacheFormat::kFloat8E5M2, x[i], ScaleOf(scales, h, n, i));
      }
      return;
    case Cache::kQ8_0:
    case Cache::kQ4_0:
      break;
  }
  QuantizeBlockRow(Block(c), x, n, out);
}

// The n element values of a cache row of kv head h.
inline void DecodeRow(Cache c, FloatFormat t, const uint8_t* in, int64_t n,
                      const std::vector<float>& scales, int64_t h, float* out) {
  switch (c) {
    case Cache::kFloat:
      for (int64_t i = 0; i < n; ++i) {
        if (t == FloatFormat::kFloat32) {
          std::memcpy(&out[i], in + 4 * i, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, in + 2 * i, 2);
          out[i] = t == FloatFormat::kFloat16 ? Float16Value(bits) : BFloat16Value(bits);
        }
      }
      return;
    case Cache::kInt8PerTensor:
    case Cache::kInt8PerChannel:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(
            DequantizeElement(CacheFormat::kInt8, in[i], ScaleOf(scales, h, n, i)));
      }
      return;
    case Cache::kInt4PerChannel:
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t nibble = i % 2 == 0 ? (in[i / 2] & 0xF) : (in[i / 2] >> 4);
        out[i] = static_cast<float>(
            DequantizeElement(CacheFormat::kInt4, nibble, ScaleOf(scales, h, n, i)));
      }
      return;
    case Cache::kE5M2PerTensor:
    case Cache::kE5M2PerChannel:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(
            DequantizeElement(CacheFormat::kFloat8E5M2, in[i], ScaleOf(scales, h, n, i)));
      }
      return;
    case Cache::kQ8_0:
    case Cache::kQ4_0:
      break;
  }
  DequantizeBlockRow(Block(c), in, n, out);
}

// A row no kernel may read: NaN for float caches and block formats (a NaN d), the NaN code 0x7F
// for float8 e5m2, the most negative code for int8/int4 (element -128 or -8 times the scale, which
// moves any score or output it reaches far beyond the bounds).
inline void PoisonRow(Cache c, FloatFormat t, int64_t n, std::mt19937_64& rng, uint8_t* out) {
  if (IsE5M2(c)) {
    std::memset(out, 0x7F, static_cast<size_t>(RowBytes(c, t, n)));
  } else if (c == Cache::kFloat) {
    const std::vector<float> nan(static_cast<size_t>(n), kNaN);
    EncodeRow(c, t, nan.data(), n, {}, 0, out);
  } else if (IsBlock(c)) {
    block_quant::PoisonBlockRow(Block(c), n, rng, out);
  } else {
    std::memset(out, c == Cache::kInt4PerChannel ? 0x00 : 0x80,
                static_cast<size_t>(RowBytes(c, t, n)));
  }
}

// ---- block pools
// ---------------------------------------------------------------------------------- key_cache
// (rows of H elements) and value_cache (rows of Hv), compact, in kv_layout's order, with a block
// table whose blocks are in random order: the pools' bytes before a run (every row poisoned but the
// past tokens') and as a run must leave them (the new tokens' rows written).
struct Pools {
  Cache cache = Cache::kFloat;
  FloatFormat t = FloatFormat::kFloat32;
  int32_t layout = ATTNRT_PAGED_KV_LAYOUT_BSNH;
  int64_t Nkv = 0, block_size = 0, slots = 0, num_blocks = 0;
  int64_t width[2] = {0, 0};  // H, Hv
  std::vector<int32_t> table;
  std::vector<float> scales[2];  // k_scale, v_scale values (empty when absent)
  std::vector<uint8_t> before[2], after[2];

  int64_t RowBytesOf(int which) const { return RowBytes(cache, t, width[which]); }
  // Row index of token j of sequence b, kv head h (attnrt/ops/paged_gqa.h, attnrt_paged_kv_layout).
  int64_t Row(int64_t b, int64_t h, int64_t j) const {
    const int64_t x = table[static_cast<size_t>(b * slots + j / block_size)];
    const int64_t r = j % block_size;
    return layout == ATTNRT_PAGED_KV_LAYOUT_BNSH ? (x * Nkv + h) * block_size + r
                                                 : (x * block_size + r) * Nkv + h;
  }
  uint8_t* RowIn(std::vector<uint8_t>& image, int which, int64_t b, int64_t h, int64_t j) const {
    return image.data() + Row(b, h, j) * RowBytesOf(which);
  }
  Tensor MakeTensor(int which) const {
    const int64_t last = LastDim(cache, t, width[which]);
    return Tensor(CacheDtype(cache, t),
                  layout == ATTNRT_PAGED_KV_LAYOUT_BNSH
                      ? std::vector<int64_t>{num_blocks, Nkv, block_size, last}
                      : std::vector<int64_t>{num_blocks, block_size, Nkv, last});
  }
  // "block x, row r of the block, byte i of n" for a byte offset into pool `which`.
  std::string Describe(int which, int64_t byte) const {
    const int64_t row_bytes = RowBytesOf(which), row = byte / row_bytes;
    return std::string(which == 0 ? "key_cache" : "value_cache") + " block " +
           std::to_string(row / (block_size * Nkv)) + ", row " +
           std::to_string(row % (block_size * Nkv)) + " of the block, byte " +
           std::to_string(byte % row_bytes) + " of " + std::to_string(row_bytes);
  }
};

// Sequences of `lengths` tokens (each one's blocks), a table of `capacity` tokens per sequence
// plus one spare slot of -1, two spare blocks; every row poisoned; scales drawn.
inline void MakePools(Pools& p, const std::vector<int64_t>& lengths, int64_t capacity,
                      std::mt19937_64& rng) {
  const int64_t bs = p.block_size;
  int64_t needed_total = 0;
  for (int64_t len : lengths) needed_total += (len + bs - 1) / bs;
  p.slots = (capacity + bs - 1) / bs + 1;
  p.num_blocks = needed_total + 2;
  std::vector<int32_t> ids(static_cast<size_t>(p.num_blocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(lengths.size() * static_cast<size_t>(p.slots), -1);
  size_t next = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t i = 0; i < (lengths[b] + bs - 1) / bs; ++i) {
      p.table[b * static_cast<size_t>(p.slots) + static_cast<size_t>(i)] = ids[next++];
    }
  }
  const int64_t rows = p.num_blocks * bs * p.Nkv;
  for (int which = 0; which < 2; ++which) {
    p.scales[which] = MakeScales(p.cache, p.Nkv, p.width[which], rng);
    const int64_t row_bytes = p.RowBytesOf(which);
    p.before[which].resize(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      PoisonRow(p.cache, p.t, p.width[which], rng, p.before[which].data() + r * row_bytes);
    }
  }
}

// Token j of sequence b, kv head h: encodes x (width[which] values) into `image` and returns the
// values a kernel reads back in out.
inline void PutRow(const Pools& p, std::vector<uint8_t>& image, int which, int64_t b, int64_t h,
                   int64_t j, const float* x, float* out) {
  uint8_t* row = p.RowIn(image, which, b, h, j);
  EncodeRow(p.cache, p.t, x, p.width[which], p.scales[which], h, row);
  DecodeRow(p.cache, p.t, row, p.width[which], p.scales[which], h, out);
}

// ---- float64 attention row
// ----------------------------------------------------------------------------
struct Softmax {
  double alpha = 0.0;  // the score scale: the attribute, or 1/sqrt(H) when it is 0
  double softcap = 0.0;
  bool has_sink = false;
  double sink = 0.0;  // head_sink[n], a T value
};

inline double Alpha(float scale, int64_t H) {
  return scale != 0.0f ? static_cast<double>(scale) : 1.0 / std::sqrt(static_cast<double>(H));
}

// One query row over keys [lo, hi): its Hv outputs, the scores and probabilities of every column
// (0 outside [lo, hi), as GroupQueryAttention's output_qk), and bounds on what float32 arithmetic
// may change in each (the kernels compute in float32 from the same element values; bounds of
// Higham, "Accuracy and Stability of Numerical Algorithms", ch. 3, with u = 2^-24):
//   - a score s_j = alpha · Σ_i q_i k_ji (H products) is off by at most
//     delta_j = (H + 4) u alpha Σ_i |q_i k_ji| + 4 u (|s_j| + softcap): the dot product in any
//     summation order (γ_H), the dequantization product of a quantized key element and the scale
//     multiply (one rounding each), tanh of the softcap (a few ulp of softcap); with an
//     attention_bias row (bias[j], added after the softcap), 4 u (|bias_j| + |s_j + bias_j|) more
//     for the float32 addition, and a key of bias -inf has probability exactly 0;
//   - softmax(s + delta) with |delta_j| <= delta for every key: each probability moves by at most
//     p_j (e^(2 delta) - 1), and since the weights sum to the same value, the output element d by
//     at most (e^(2 delta) - 1) Σ_j p_j |v_jd - o_d| (the sink, when present, a key of value 0);
//   - the exponentials, the sum l of n terms, the division and the n-term sum Σ p_j v_jd cost at
//     most (2n + 16) u Σ_j p_j |v_jd|;
// so out_bound_d is their sum. It is a worst case (observed errors are far below it) and still well
// under what a kernel reading the wrong head size, column, key or scale gets wrong (order 0.1-1
// with the score spread of these tests).
struct RowRef {
  std::vector<double> out, out_bound;  // Hv
  std::vector<double> score, prob;     // columns 0..T-1
  double score_bound = 0.0;            // max delta_j
  double prob_relative_bound = 0.0;    // relative bound of each probability
  // 0.5 Σ_j |p_j / Σ p - 1/keys| over the keys no bias masks: 0 for uniform attention.
  double nonuniformity = 0.0;
  int64_t keys = 0;
};

// k(j), v(j): the H and Hv values of key j.
// bias: the row's attention_bias values by column (nullptr: none).
template <typename KeyRow, typename ValueRow>
RowRef AttendRow(const float* q, int64_t H, int64_t Hv, int64_t lo, int64_t hi, int64_t columns,
                 const Softmax& sm, KeyRow k, ValueRow v, const double* bias = nullptr) {
  RowRef r;
  r.out.assign(static_cast<size_t>(Hv), 0.0);
  r.out_bound.assign(static_cast<size_t>(Hv), 0.0);
  r.score.assign(static_cast<size_t>(columns), 0.0);
  r.prob.assign(static_cast<size_t>(columns), 0.0);
  r.keys = std::max<int64_t>(0, hi - lo);
  if (hi <= lo) return r;  // no key: a zero row (docs/gqa-semantics.md, non-finite rule 4)
  double m = sm.has_sink ? sm.sink : -INFINITY;
  for (int64_t j = lo; j < hi; ++j) {
    const float* kj = k(j);
    double dot = 0.0, abs_dot = 0.0;
    for (int64_t i = 0; i < H; ++i) {
      dot += double{q[i]} * kj[i];
      abs_dot += std::fabs(double{q[i]} * kj[i]);
    }
    double s = sm.alpha * dot;
    if (sm.softcap > 0.0) s = sm.softcap * std::tanh(s / sm.softcap);
    double bound = static_cast<double>(H + 4) * kU32 * sm.alpha * abs_dot +
                   4.0 * kU32 * (std::fabs(s) + sm.softcap);
    if (bias != nullptr) {
      const double b = bias[j];
      if (b == -INFINITY) {  // a masked key: weight exactly 0
        r.score[static_cast<size_t>(j)] = -INFINITY;
        continue;
      }
      s += b;
      bound += 4.0 * kU32 * (std::fabs(b) + std::fabs(s));
    }
    r.score[static_cast<size_t>(j)] = s;
    r.score_bound = std::max(r.score_bound, bound);
    m = std::max(m, s);
  }
  if (m == -INFINITY) return r;  // every key masked: a zero row (non-finite rule 4)
  double l = sm.has_sink ? std::exp(sm.sink - m) : 0.0;
  for (int64_t j = lo; j < hi; ++j) l += std::exp(r.score[static_cast<size_t>(j)] - m);
  for (int64_t j = lo; j < hi; ++j) {
    const double p = std::exp(r.score[static_cast<size_t>(j)] - m) / l;
    r.prob[static_cast<size_t>(j)] = p;
    const float* vj = v(j);
    for (int64_t d = 0; d < Hv; ++d) r.out[static_cast<size_t>(d)] += p * vj[d];
  }
  double key_weight = 0.0;
  int64_t unmasked = 0;
  for (int64_t j = lo; j < hi; ++j) {
    key_weight += r.prob[static_cast<size_t>(j)];
    unmasked += r.score[static_cast<size_t>(j)] == -INFINITY ? 0 : 1;
  }
  for (int64_t j = lo; j < hi; ++j) {
    if (r.score[static_cast<size_t>(j)] == -INFINITY) continue;  // the mask's, not the scores'
    r.nonuniformity += 0.5 * std::fabs(r.prob[static_cast<size_t>(j)] / key_weight -
                                       1.0 / static_cast<double>(unmasked));
  }
  const double spread = std::expm1(2.0 * r.score_bound);
  const double arithmetic = static_cast<double>(2 * r.keys + 16) * kU32;
  r.prob_relative_bound = spread + arithmetic;
  const double p_sink = sm.has_sink ? std::exp(sm.sink - m) / l : 0.0;
  for (int64_t d = 0; d < Hv; ++d) {
    const double o = r.out[static_cast<size_t>(d)];
    double deviation = p_sink * std::fabs(o), magnitude = 0.0;
    for (int64_t j = lo; j < hi; ++j) {
      const double p = r.prob[static_cast<size_t>(j)];
      deviation += p * std::fabs(v(j)[d] - o);
      magnitude += p * std::fabs(v(j)[d]);
    }
    r.out_bound[static_cast<size_t>(d)] = spread * deviation + arithmetic * magnitude;
  }
  return r;
}

// ---- comparison
// ------------------------------------------------------------------------------------- The allowed
// error of a T element whose float32 value may be off by f32_bound from the reference w: float32 T,
// f32_bound (plus the float32 rounding of w itself); float16/bfloat16 T, the kernel rounds its
// float32 value x to T once: |rnd(x) - w| <= |rnd(x) - x| + |x - w|, where |rnd(x) - x| <= 0.5
// ulp_T(w) when x lies in w's binade, and otherwise <= |x - w| (a power of two, exact in T, lies
// between them), so 0.5 ulp_T(w) + 2 f32_bound covers both.
inline double Bound(FloatFormat t, double w, double f32_bound) {
  if (t == FloatFormat::kFloat32) return f32_bound + kU32 * (1.0 + std::fabs(w));
  return 0.5 * UnitInLastPlace(t, w) + 2.0 * f32_bound + kU32 * (1.0 + std::fabs(w));
}

// Every selected element of got (a T tensor) against want within Bound(t, want, f32_bound); NaN
// in want means "must stay NaN" (the poison: neither read nor written). describe(i) names element
// i in failure messages. Returns the largest error over bound seen.
template <typename Selected, typename Describe>
double ExpectWithinBound(const std::string& what, Tensor& got, FloatFormat t,
                         const std::vector<double>& want, const std::vector<double>& f32_bound,
                         Selected selected, Describe describe) {
  EXPECT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  if (static_cast<size_t>(got.numel()) != want.size()) return 0.0;
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!selected(i)) continue;
    const double g = block_quant::Load(got, t, i);
    const double w = want[static_cast<size_t>(i)];
    if (std::isnan(w)) {
      if (!std::isnan(g)) {
        ++bad;
        if (first < 0) first = i;
      }
      continue;
    }
    const double bound = Bound(t, w, f32_bound[static_cast<size_t>(i)]);
    const double error = std::fabs(g - w);
    if (!(error <= bound)) {
      ++bad;
      if (first < 0) first = i;
    } else {
      worst = std::max(worst, error / bound);
    }
  }
  if (bad > 0) {
    const double g = block_quant::Load(got, t, first);
    const double w = want[static_cast<size_t>(first)];
    ADD_FAILURE() << what << ": " << bad << " of " << got.numel() << " elements wrong; first at "
                  << describe(first) << ": got " << g << ", want "
                  << (std::isnan(w) ? std::string("NaN (never written)") : std::to_string(w))
                  << ", allowed error "
                  << (std::isnan(w) ? 0.0 : Bound(t, w, f32_bound[static_cast<size_t>(first)]));
  }
  return worst;
}

// Compares two byte images of a pool; describe(byte) names a byte offset.
template <typename Describe>
void ExpectSameBytes(const std::string& what, const uint8_t* got, const std::vector<uint8_t>& want,
                     Describe describe) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  if (bad > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "got 0x%02X, want 0x%02X", got[first],
                  want[static_cast<size_t>(first)]);
    ADD_FAILURE() << what << ": " << bad << " bytes differ; first at " << describe(first) << ": "
                  << buf;
  }
}

// ---- every kernel
// --------------------------------------------------------------------------------- One call, run
// again for each kernel: reset() restores the pools and poisons the outputs, check() compares them
// after a run of `kernel`.
struct Call {
  std::vector<const attnrt_tensor*> inputs, outputs;
  std::function<void()> reset;
  std::function<void(const std::string& kernel)> check;
};

// Runs the call on every kernel of op_kind that accepts it (pinned), then on the runtime's own
// choice. Declines must carry a reason; a naive kernel may decline only for the CPU (the naive
// kernels take Hv != H: attnrt/ops/paged_gqa.h); at least one pinned kernel must run. Returns the
// number of kernels run (pinned, without auto).
int RunOnEveryKernel(int32_t op_kind, const void* attributes, Call& call);

// The runtime pinned to `kernel` ("": unpinned, the runtime's own choice), made once per process
// with every ATTNRT_* variable unset (null, with a test failure, when it cannot be made).
attnrt_runtime* RuntimeFor(const std::string& kernel);

// The kernels the CPU plugin registers for op_kind, sorted.
const std::vector<std::string>& KernelsOf(int32_t op_kind);

// "[declined]" summary lines: kernel, reason, how many cases; printed at the end of the run.
void RecordDecline(const std::string& kernel, const std::string& reason);

}  // namespace value_head_size
}  // namespace attnrt_test
