// Shared pieces of the shared-pool tests of the paged ops (ABI 1.8; attnrt/ops/paged_gqa.h, the
// paragraph on strided pools): one cache tensor whose rows of H elements are key_cache, and
// value_cache the strided view key_cache[..., :Hv] of the same memory (key_cache's shape and
// element strides but for the last dimension), as MLA caches keep their V rows inside their K rows
// (K head size 576 with V 512; 96 with 64, 192 with 128; 128 with 128, V exactly K). The V values a
// kernel must read follow from that text alone: the leading Hv elements of each K row, decoded with
// v_scale for a quantized cache. Two wrong readings serve as controls: the trailing Hv elements of
// each K row, and (int8) the leading ones decoded with k_scale.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/test_support.h"
#include "paged_gqa_value_head_size_support.h"

namespace attnrt_test {
namespace value_head_size {
namespace shared_pool {

// (H, Hv): DeepSeek's MLA latent 576 / 512, the MLA-style 96 / 64 and 192 / 128, and V exactly K.
inline std::vector<HeadSizes> SharedHeadSizes() {
  return {{576, 512}, {96, 64}, {192, 128}, {128, 128}};
}

// How V is read from the K rows: the rule, and the two wrong readings the controls compute.
enum Read { kLeading = 0, kTrailing = 1, kKeyScale = 2, kReads = 3 };

// key_cache: a compact pool of rows of H elements in kv_layout's order (blocks in random order,
// every row but the sequences' tokens poisoned); value_cache: the view key_cache[..., :Hv]. An int8
// PER_TENSOR cache gets a v_scale other than its k_scale (V codes are K codes), so a kernel that
// decodes V with k_scale shows.
struct SharedPool {
  Pools p;  // width {H, H}; image 0 holds key_cache's bytes (image 1 is unused)
  int64_t H = 0, Hv = 0;
  std::vector<float> v_scale;  // int8 PER_TENSOR: one value; else empty
  Tensor key_cache;
  std::vector<int64_t> value_shape, value_strides;
  attnrt_tensor value_view{};
  bool same_descriptor = false;  // Hv == H and value_cache given as key_cache's own descriptor
  // Per (sequence, kv head): the T_b K rows (H values each) as a kernel reads them, and the T_b V
  // rows (Hv values each) read each way (Read).
  std::vector<std::vector<float>> keys, values[kReads];

  SharedPool() = default;
  SharedPool(const SharedPool&) = delete;
  SharedPool& operator=(const SharedPool&) = delete;

  const attnrt_tensor* KeyCache() { return key_cache.get(); }
  const attnrt_tensor* ValueCache() { return same_descriptor ? key_cache.get() : &value_view; }
  uint8_t* Bytes() { return static_cast<uint8_t*>(key_cache.data()); }
  void Restore() { std::copy(p.before[0].begin(), p.before[0].end(), Bytes()); }
  const std::vector<float>& K(int64_t b, int64_t h) const {
    return keys[static_cast<size_t>(b * p.Nkv + h)];
  }
  const std::vector<float>& V(int read, int64_t b, int64_t h) const {
    return values[read][static_cast<size_t>(b * p.Nkv + h)];
  }
  // "key_cache block x, row r of the block, byte i of n".
  std::string Describe(int64_t byte) const { return p.Describe(0, byte); }
};

// Sequences of `lengths` tokens, every token's K row random values of T (encoded with the test's
// own codec), a table of `capacity` tokens per sequence.
inline void MakeSharedPool(SharedPool& s, Cache cache, FloatFormat t, int32_t layout, int64_t Nkv,
                           int64_t block_size, const HeadSizes& hs,
                           const std::vector<int64_t>& lengths, int64_t capacity,
                           bool same_descriptor, std::mt19937_64& rng) {
  Pools& p = s.p;
  p.cache = cache;
  p.t = t;
  p.layout = layout;
  p.Nkv = Nkv;
  p.block_size = block_size;
  p.width[0] = p.width[1] = hs.H;
  MakePools(p, lengths, capacity, rng);
  s.H = hs.H;
  s.Hv = hs.Hv;
  if (cache == Cache::kInt8PerTensor) {
    p.scales[0] = {4.0f / 127.0f};
    s.v_scale = {3.0f / 127.0f};
  }
  const int64_t H = hs.H, Hv = hs.Hv;
  const int64_t trailing = RowBytes(cache, t, H - Hv);  // bytes before the trailing Hv elements
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t tb = lengths[b];
    for (int64_t h = 0; h < Nkv; ++h) {
      s.keys.emplace_back(static_cast<size_t>(tb * H));
      for (auto& v : s.values) v.emplace_back(static_cast<size_t>(tb * Hv));
      for (int64_t j = 0; j < tb; ++j) {
        const std::vector<float> x = block_quant::RoundedNormal(t, H, rng);
        const int64_t bb = static_cast<int64_t>(b);
        PutRow(p, p.before[0], 0, bb, h, j, x.data(), s.keys.back().data() + j * H);
        const uint8_t* row = p.RowIn(p.before[0], 0, bb, h, j);
        DecodeRow(cache, t, row, Hv, s.v_scale, h, s.values[kLeading].back().data() + j * Hv);
        DecodeRow(cache, t, row + trailing, Hv, s.v_scale, h,
                  s.values[kTrailing].back().data() + j * Hv);
        DecodeRow(cache, t, row, Hv, p.scales[0], h, s.values[kKeyScale].back().data() + j * Hv);
      }
    }
  }
  p.after[0] = p.before[0];
  s.key_cache = p.MakeTensor(0);
  s.Restore();
  const std::vector<int64_t>& ks = s.key_cache.shape();
  s.value_shape = ks;
  s.value_shape.back() = LastDim(cache, t, Hv);
  s.value_strides = {ks[1] * ks[2] * ks[3], ks[2] * ks[3], ks[3], 1};
  s.value_view = *s.key_cache.get();
  s.value_view.shape = s.value_shape.data();
  s.value_view.strides = s.value_strides.data();
  s.same_descriptor = same_descriptor && H == Hv;
}

// The reference outputs of one call for each reading of V, with their bounds; NaN where no row is
// computed (an engine's padding rows: never written).
struct Expected {
  std::vector<double> want[kReads], bound[kReads];
  double nonuniformity = 0.0;
  int64_t rows_of_4 = 0;

  explicit Expected(size_t n) {
    for (int r = 0; r < kReads; ++r) {
      want[r].assign(n, block_quant::kNaN);
      bound[r].assign(n, 0.0);
    }
  }
  // Query row q of sequence b, a head of kv head h, over keys [lo, hi) (bias by column, or null):
  // its Hv outputs at element `at`.
  void Row(const SharedPool& s, int64_t b, int64_t h, const float* q, int64_t lo, int64_t hi,
           int64_t columns, const Softmax& sm, const double* bias, size_t at) {
    const std::vector<float>& kk = s.K(b, h);
    for (int r = 0; r < kReads; ++r) {
      const std::vector<float>& vv = s.V(r, b, h);
      const RowRef ref = AttendRow(
          q, s.H, s.Hv, lo, hi, columns, sm, [&](int64_t j) { return kk.data() + j * s.H; },
          [&](int64_t j) { return vv.data() + j * s.Hv; }, bias);
      std::copy(ref.out.begin(), ref.out.end(), want[r].begin() + static_cast<ptrdiff_t>(at));
      std::copy(ref.out_bound.begin(), ref.out_bound.end(),
                bound[r].begin() + static_cast<ptrdiff_t>(at));
      if (r == kLeading && ref.keys >= 4) {
        nonuniformity += ref.nonuniformity;
        ++rows_of_4;
      }
    }
  }
};

// The controls a case has: the trailing reading where Hv < H, the k_scale reading for int8.
inline std::vector<int> Controls(const SharedPool& s) {
  std::vector<int> v;
  if (s.Hv < s.H) v.push_back(kTrailing);
  if (!s.v_scale.empty()) v.push_back(kKeyScale);
  return v;
}

inline const char* ReadName(int read) {
  return read == kTrailing ? "V from the trailing Hv elements of the K rows"
                           : "V decoded with k_scale";
}

// Elements of `got` (T values; or of the rule's reference when got is null) outside the bound of
// the control reading `read`, over the elements the reference computes; *compared gets their count.
inline int64_t ControlMisses(const Expected& e, int read, FloatFormat t, Tensor* got,
                             int64_t* compared) {
  int64_t misses = 0;
  *compared = 0;
  for (size_t i = 0; i < e.want[kLeading].size(); ++i) {
    const double w = e.want[read][i];
    if (std::isnan(e.want[kLeading][i])) continue;
    ++*compared;
    const double g =
        got != nullptr ? block_quant::Load(*got, t, static_cast<int64_t>(i)) : e.want[kLeading][i];
    misses += std::fabs(g - w) <= Bound(t, w, e.bound[read][i]) ? 0 : 1;
  }
  return misses;
}

// Checks of a reference before any run: attention far from uniform (so that a kernel reading the
// wrong rows shows), and every control reading rejected on most elements by the rule's reference
// itself (so the controls below can fail).
inline void CheckReference(const std::string& name, const SharedPool& s, const Expected& e,
                           FloatFormat t) {
  ASSERT_GT(e.rows_of_4, 0);
  const double mean = e.nonuniformity / static_cast<double>(e.rows_of_4);
  std::printf("[observed] %s: mean distance from uniform attention %.3f\n", name.c_str(), mean);
  EXPECT_GE(mean, 0.3) << "attention too uniform for the test to see a wrong kernel";
  for (int read : Controls(s)) {
    int64_t compared = 0;
    const int64_t misses = ControlMisses(e, read, t, nullptr, &compared);
    EXPECT_GT(misses, compared * 9 / 10)
        << "the bounds cannot tell " << ReadName(read) << " from the leading Hv elements";
  }
}

// After a run of `kernel`: every output element within the rule's bound (padding rows NaN),
// every control reading rejected on more than half of the elements, key_cache byte for byte as
// before.
template <typename Describe>
void CheckRun(const std::string& name, const std::string& kernel, SharedPool& s, Tensor& output,
              FloatFormat t, const Expected& e, Describe describe) {
  SCOPED_TRACE("checked after " + kernel);
  const double worst = ExpectWithinBound(
      "output", output, t, e.want[kLeading], e.bound[kLeading], [](int64_t) { return true; },
      describe);
  std::printf("[observed] %s on %s: output max error / bound %.3g\n", name.c_str(), kernel.c_str(),
              worst);
  for (int read : Controls(s)) {
    int64_t compared = 0;
    const int64_t misses = ControlMisses(e, read, t, &output, &compared);
    std::printf("[observed] %s on %s: %s rejects %lld of %lld elements\n", name.c_str(),
                kernel.c_str(), ReadName(read), static_cast<long long>(misses),
                static_cast<long long>(compared));
    EXPECT_GT(misses, compared / 2)
        << "the output also matches the reference with " << ReadName(read);
  }
  ExpectSameBytes("key_cache (value_cache's memory too)", s.Bytes(), s.p.before[0],
                  [&](int64_t byte) { return s.Describe(byte); });
}

}  // namespace shared_pool
}  // namespace value_head_size
}  // namespace attnrt_test
