// Shared pieces of the head size tests of the paged ops (ABI 1.9; paged_gqa_head_size_test.cpp,
// paged_gqa_varlen_head_size_test.cpp, paged_gqa_head_size_errors_test.cpp): the head sizes and
// cache types under test, the attributes of a call, tensors with guard bytes on both sides, and
// the verdicts every registered kernel must give.
//
// The rule under test (ABI 1.9): an unquantized cache (k_quant_type NONE: float32, float16 or
// bfloat16 pools) may have any positive head size, key (head_size) and value (v_head_size,
// value_cache's last dimension) alike, no longer only multiples of 8. Quantized caches keep their
// rules (int8/int4 multiples of 8, PER_BLOCK_32 multiples of 32; a value cache of a type of its own
// follows its type's rule). The naive paged kernels run such problems; the flash paged kernels
// decline them with a reason naming the head size, so the runtime's own choice must still succeed.
// Everything else (the float64 reference and its bound, the pools' codecs, the loop over every
// kernel) is paged_gqa_mixed_kv_types_support.h's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"
#include "common/dtype_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"
#include "paged_gqa_mixed_kv_types_support.h"

namespace attnrt_test {
namespace head_size {

using mixed_kv::CacheType;

// (H, Hv): none of them a multiple of 8 on both sides, among them llama.cpp's 65 and 67 (its own
// flash-attention suite), 1, sizes just past a power of two, and one side a multiple of 8.
struct HeadSizes {
  int64_t H, Hv;
};
inline constexpr HeadSizes kHeadSizes[] = {{65, 67}, {1, 1},   {3, 5},     {12, 12}, {36, 20},
                                           {67, 65}, {67, 67}, {129, 127}, {7, 64},  {64, 7}};

// The query type T and the two pools' types. own: v_cache_own_type 1 (v_quant_type NONE,
// v_cache_bit_width 0, or the block format's); else 0 and value_cache has key_cache's type.
struct TypeSet {
  std::string name;
  FloatFormat t = FloatFormat::kFloat32;
  CacheType k = CacheType::kF32, v = CacheType::kF32;
  bool own = false;
};

inline std::vector<TypeSet> FloatTypeSets() {
  using C = CacheType;
  using F = FloatFormat;
  return {
      {"f32", F::kFloat32, C::kF32, C::kF32, false},
      {"f16", F::kFloat16, C::kF16, C::kF16, false},
      {"bf16", F::kBFloat16, C::kBF16, C::kBF16, false},
      {"k_f32_v_f16", F::kFloat32, C::kF32, C::kF16, true},
      {"k_f16_v_bf16", F::kFloat16, C::kF16, C::kBF16, true},
      {"k_bf16_v_f32", F::kBFloat16, C::kBF16, C::kF32, true},
  };
}

// One pool PER_BLOCK_32 (its head size a multiple of 32), the other of a float type with a head
// size that is not a multiple of 8: each pool's head size follows its own type's rule.
struct QuantValueSet {
  TypeSet types;
  HeadSizes hs;
};
inline std::vector<QuantValueSet> QuantValueSets() {
  using C = CacheType;
  using F = FloatFormat;
  return {
      {{"k_f16_v_q8_0", F::kFloat16, C::kF16, C::kQ8_0, true}, {65, 64}},
      {{"k_f32_v_q4_0", F::kFloat32, C::kF32, C::kQ4_0, true}, {3, 32}},
      {{"k_bf16_v_q8_0", F::kBFloat16, C::kBF16, C::kQ8_0, true}, {129, 96}},
      {{"k_f32_v_q8_0", F::kFloat32, C::kF32, C::kQ8_0, true}, {67, 64}},
      {{"k_q8_0_v_f16", F::kFloat32, C::kQ8_0, C::kF16, true}, {64, 67}},
      {{"k_q4_0_v_bf16", F::kBFloat16, C::kQ4_0, C::kBF16, true}, {32, 5}},
  };
}

// Bits of a case's index, well mixed, for rotating its parameters independently of one another
// (the index runs over head sizes x type sets x layouts; plain moduli would tie each parameter to
// a type set).
inline uint64_t Mix(size_t index) {
  uint64_t x = (static_cast<uint64_t>(index) + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}

// The score pipeline's optional parts a case turns on.
struct Features {
  float softcap = 0.0f;
  bool sink = false;
  int32_t window = -1;  // local_window_size
};

inline std::string FeatureName(const Features& f) {
  std::string s;
  if (f.softcap > 0.0f) s += "_softcap";
  if (f.sink) s += "_sink";
  if (f.window >= 0) s += "_window" + std::to_string(f.window);
  return s;
}

inline attnrt_paged_gqa_attributes Attributes(const TypeSet& ty, int64_t N, int64_t Nkv,
                                              int64_t block_size, int32_t layout,
                                              const Features& f) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.gqa.k_quant_type = mixed_kv::QuantType(ty.k);
  a.gqa.kv_cache_bit_width = mixed_kv::BitWidth(ty.k);
  a.gqa.v_quant_type = mixed_kv::QuantType(ty.own ? ty.v : ty.k);
  a.gqa.softcap = f.softcap;
  a.gqa.local_window_size = f.window;
  a.v_cache_own_type = ty.own ? 1 : 0;
  a.v_cache_bit_width = ty.own ? mixed_kv::BitWidth(ty.v) : 0;
  a.block_size = static_cast<int32_t>(block_size);
  a.kv_layout = layout;
  return a;
}

// ---- tensors with guard bytes
// ------------------------------------------------------------------- A tensor whose descriptor
// covers `shape` and starts `guard` bytes into an allocation `guard` bytes longer on each side; the
// guards hold `pattern` (rows no kernel may read: NaN), and must hold it after every run: a kernel
// that reads a row past a head size rounded up, or writes one, shows in the output or here.
class Guarded {
 public:
  Guarded() = default;
  Guarded(attnrt_dtype dtype, std::vector<int64_t> shape, int64_t guard_bytes,
          std::vector<uint8_t> pattern)
      : shape_(std::move(shape)), guard_(guard_bytes), pattern_(std::move(pattern)) {
    int64_t numel = 1;
    for (int64_t d : shape_) numel *= d;
    const int64_t element = (dtype.bits + 7) / 8;
    body_ = numel * element;
    whole_ = Tensor(dtype, {(body_ + 2 * guard_) / element});
    desc_ = *whole_.get();
    base_ = static_cast<uint8_t*>(whole_.data());
    desc_.shape = shape_.data();
    desc_.ndim = static_cast<int32_t>(shape_.size());
    desc_.byte_offset = static_cast<uint64_t>(guard_);
    RestoreGuards();
  }
  const attnrt_tensor* get() {
    desc_.shape = shape_.data();  // this object may have moved since the constructor
    return &desc_;
  }
  uint8_t* body() { return base_ + guard_; }
  const uint8_t* body() const { return base_ + guard_; }
  int64_t body_bytes() const { return body_; }
  void RestoreGuards() {
    uint8_t* p = base_;
    for (int64_t i = 0; i < guard_; ++i) {
      p[i] = pattern_[static_cast<size_t>(i) % pattern_.size()];
      p[guard_ + body_ + i] = pattern_[static_cast<size_t>(i) % pattern_.size()];
    }
  }
  // Expects both guards as RestoreGuards left them.
  void ExpectGuards(const std::string& name) const {
    const uint8_t* p = base_;
    for (int side = 0; side < 2; ++side) {
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < guard_; ++i) {
        if (p[(side == 0 ? 0 : guard_ + body_) + i] !=
            pattern_[static_cast<size_t>(i) % pattern_.size()]) {
          ++bad;
          if (first < 0) first = i;
        }
      }
      EXPECT_EQ(bad, 0) << bad << " bytes of the guard " << (side == 0 ? "before " : "after ")
                        << name << " were written; first at guard byte " << first;
    }
  }

 private:
  std::vector<int64_t> shape_;
  int64_t guard_ = 0, body_ = 0;
  std::vector<uint8_t> pattern_;
  Tensor whole_;
  uint8_t* base_ = nullptr;  // whole_'s storage, shared by copies
  attnrt_tensor desc_{};
};

// A pool with one block of poisoned rows on each side.
inline Guarded GuardedPool(const mixed_kv::Pool& pool, const mixed_kv::Paging& p,
                           std::mt19937_64& rng) {
  const int64_t rows = p.block_size * p.Nkv;
  std::vector<uint8_t> guard(static_cast<size_t>(rows * pool.RowBytesOf()));
  for (int64_t r = 0; r < rows; ++r) {
    mixed_kv::PoisonRow(pool.type, pool.width, rng, guard.data() + r * pool.RowBytesOf());
  }
  return Guarded(mixed_kv::DtypeOf(pool.type), p.Shape(mixed_kv::LastDim(pool.type, pool.width)),
                 static_cast<int64_t>(guard.size()), std::move(guard));
}

// An output of type t, NaN, with 64 NaN elements on each side.
inline Guarded GuardedOutput(FloatFormat t, std::vector<int64_t> shape) {
  const int64_t element = t == FloatFormat::kFloat32 ? 4 : 2;
  std::vector<uint8_t> nan(static_cast<size_t>(element));
  mixed_kv::EncodeRow(mixed_kv::FloatType(t), &mixed_kv::kNaN, 1, nan.data());
  return Guarded(block_quant::QueryDtype(t), std::move(shape), 64 * element, std::move(nan));
}

// Fills a guarded output's body with NaN.
inline void PoisonOutput(Guarded& out, FloatFormat t) {
  const int64_t element = t == FloatFormat::kFloat32 ? 4 : 2;
  for (int64_t i = 0; i < out.body_bytes() / element; ++i) {
    mixed_kv::EncodeRow(mixed_kv::FloatType(t), &mixed_kv::kNaN, 1, out.body() + i * element);
  }
}

// The element i of a guarded output of type t.
inline double LoadOutput(const Guarded& out, FloatFormat t, int64_t i) {
  float x = 0.0f;
  mixed_kv::DecodeRow(mixed_kv::FloatType(t), out.body() + i * (t == FloatFormat::kFloat32 ? 4 : 2),
                      1, &x);
  return x;
}

// ---- the kernels' verdicts
// ---------------------------------------------------------------------------- After
// mixed_kv::RunOnEveryKernel (which already failed a naive kernel that declines for anything but
// the CPU, and compared every kernel that accepted): every naive kernel this CPU can run accepted,
// no flash kernel accepted, each flash kernel declined with a reason, naming the head size when the
// head size is all that keeps it off the case (`head_size_reason`: one pool type, H == Hv, no
// softcap or head_sink), and the runtime's own choice succeeded.
inline void ExpectVerdicts(const mixed_kv::Outcome& o, int32_t op_kind, bool head_size_reason,
                           int64_t odd_size) {
  for (const std::string& kernel : mixed_kv::KernelsOf(op_kind)) {
    SCOPED_TRACE("kernel " + kernel);
    const bool accepted =
        std::find(o.accepted.begin(), o.accepted.end(), kernel) != o.accepted.end();
    const bool unavailable =
        std::find(o.unavailable.begin(), o.unavailable.end(), kernel) != o.unavailable.end();
    const auto declined = std::find_if(o.declined.begin(), o.declined.end(),
                                       [&](const auto& d) { return d.first == kernel; });
    const std::string algorithm = block_quant::Algorithm(kernel);
    if (algorithm == "naive") {
      EXPECT_TRUE(
          accepted || unavailable ||
          (declined != o.declined.end() && block_quant::IsCpuFeatureReason(declined->second)))
          << "a naive paged kernel must run a head size of " << odd_size;
    } else if (algorithm == "flash") {
      EXPECT_FALSE(accepted) << "a flash paged kernel accepted a head size of " << odd_size
                             << " (ABI 1.9: the flash kernels decline them)";
      if (declined == o.declined.end()) continue;  // unavailable on this CPU
      const std::string& reason = declined->second;
      if (head_size_reason && !block_quant::IsCpuFeatureReason(reason)) {
        EXPECT_TRUE(ContainsI(reason, "head_size") || ContainsI(reason, "head size"))
            << "the reason does not name the head size: " << reason;
        EXPECT_NE(reason.find(std::to_string(odd_size)), std::string::npos)
            << "the reason does not give the head size " << odd_size << ": " << reason;
      }
    }
  }
  EXPECT_FALSE(o.chosen.empty()) << "the runtime's own choice failed";
}

// The size the verdicts name: H when it is not a multiple of 8, else Hv.
inline int64_t OddSize(int64_t H, int64_t Hv) { return H % 8 != 0 ? H : Hv; }

}  // namespace head_size
}  // namespace attnrt_test
