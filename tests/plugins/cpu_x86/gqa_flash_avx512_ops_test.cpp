// White-box tests of gqa.flash.avx512's block operations, linked from the plugin's objects
// (attnrt_cpu_x86_flash_internal):
//   - accumulate over a float16/bfloat16 V: a tall tile (more than 8 rows, read through a float32
//     slab widened once per chunk of keys) has exactly the bits of the same rows handed over in
//     blocks of at most 8 (decode tiles, each V vector widened where it is used), for every shape
//     class, odd key counts, head sizes that are not a multiple of 16 and a preloaded accumulator;
//     split into several calls at any key offset, it gives the bits of one call.
//   - round (plugins/cpu_common/gqa_flash.h) against gqa_convert.h's scalar conversions over the
//     bfloat16 and float16 edge values.
// Skipped, saying why, where the CPU or OS lacks AVX-512 F/BW/VL and FMA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gqa_convert.h"
#include "gqa_flash.h"
#include "gqa_kernels.h"

namespace attnrt::cpu {
namespace {

bool HasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}

#define SKIP_WITHOUT_AVX512()                                              \
  if (!HasAvx512())                                                        \
  GTEST_SKIP() << "the CPU or OS lacks AVX-512 F/BW/VL or FMA (the block " \
                  "operations of gqa.flash.avx512)"
uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

float ToBFloat16(float x) { return BFloat16ToFloat(FloatToBFloat16(x)); }

// One P·V problem: P rows x ld (keys used), V keys rows of h bfloat16 (or float16) with a row
// stride of three heads (a BSNH cache's kv head), acc rows x h.
struct Problem {
  int64_t rows = 0, keys = 0, h = 0, ld = 0;
  GqaCacheType type = GqaCacheType::kBFloat16;
  std::vector<float> p;
  std::vector<uint16_t> v;
  std::vector<float> acc;
  size_t row_bytes() const { return static_cast<size_t>(3 * h) * sizeof(uint16_t); }
  GqaFlashKv Kv(int64_t first_key = 0) const {
    return {reinterpret_cast<const unsigned char*>(v.data()) +
                static_cast<size_t>(first_key) * row_bytes(),
            row_bytes(), type, nullptr, false};
  }
};

// Probabilities in [0, 1] times a per-row magnitude (2^0 .. 2^-30), a quarter of them 0 (masked
// keys), rounded to bfloat16 unless `rounded` is false; V normal, rounded to bfloat16; acc
// preloaded with normal values, some of them exact zeros of either sign.
Problem MakeProblem(int64_t rows, int64_t keys, int64_t h, std::mt19937_64& rng,
                    bool rounded = true, GqaCacheType type = GqaCacheType::kBFloat16) {
  Problem x;
  x.type = type;
  x.rows = rows;
  x.keys = keys;
  x.h = h;
  x.ld = keys + 5;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(0, 30);
  x.p.assign(static_cast<size_t>(rows * x.ld), 7.0f);  // past the keys: never read as P
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, -magnitude(rng));
    for (int64_t j = 0; j < keys; ++j) {
      float e = unit(rng) < 0.25f ? 0.0f : unit(rng) * scale;
      if (rounded) e = ToBFloat16(e);
      x.p[static_cast<size_t>(r * x.ld + j)] = e;
    }
  }
  x.v.assign(static_cast<size_t>(keys * 3 * h), 0x7FC0);  // other heads: NaN, never read
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t d = 0; d < h; ++d) {
      const float e = 4.0f * normal(rng);
      x.v[static_cast<size_t>(j * 3 * h + d)] =
          type == GqaCacheType::kFloat16 ? FloatToHalf(e) : FloatToBFloat16(e);
    }
  }
  x.acc.resize(static_cast<size_t>(rows * h));
  for (float& a : x.acc) {
    const float u = unit(rng);
    a = u < 0.05f ? 0.0f : u < 0.1f ? -0.0f : normal(rng);
  }
  return x;
}

// acc after accumulate over all rows in one call (a tall tile when rows > 8).
std::vector<float> Accumulate(const Problem& x) {
  std::vector<float> acc = x.acc;
  kGqaFlashOpsAvx512.accumulate(x.p.data(), x.rows, x.ld, x.Kv(), x.keys, x.h, acc.data(), nullptr,
                                0);
  return acc;
}

// acc after accumulate over blocks of at most 8 rows (decode tiles), `shift` keys further into V.
std::vector<float> AccumulateShortTiles(const Problem& x, int64_t shift = 0) {
  std::vector<float> acc = x.acc;
  for (int64_t r = 0; r < x.rows; r += 8) {
    const int64_t n = std::min<int64_t>(8, x.rows - r);
    kGqaFlashOpsAvx512.accumulate(x.p.data() + r * x.ld, n, x.ld, x.Kv(shift), x.keys - shift, x.h,
                                  acc.data() + r * x.h, nullptr, 0);
  }
  return acc;
}

// Empty when a and b hold the same bits; else where they first differ.
std::string FirstDifference(const std::vector<float>& a, const std::vector<float>& b, int64_t h) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (Bits(a[i]) != Bits(b[i])) {
      return "row " + std::to_string(i / static_cast<size_t>(h)) + " column " +
             std::to_string(i % static_cast<size_t>(h)) + ": " + std::to_string(a[i]) + " (0x" +
             std::to_string(Bits(a[i])) + ") vs " + std::to_string(b[i]) + " (0x" +
             std::to_string(Bits(b[i])) + ")";
    }
  }
  return {};
}

TEST(GqaFlashAvx512Ops, TallTilesHaveShortTilesBits) {
  SKIP_WITHOUT_AVX512();
  std::mt19937_64 rng(20240611);
  const int64_t row_counts[] = {9, 13, 64, 128};
  const int64_t key_counts[] = {1, 2, 3, 17, 63, 64, 65, 129, 200};
  const int64_t head_sizes[] = {64, 128, 256, 8, 24, 72, 512};
  for (const GqaCacheType type : {GqaCacheType::kBFloat16, GqaCacheType::kFloat16}) {
    for (const int64_t h : head_sizes) {
      for (const int64_t rows : row_counts) {
        for (const int64_t keys : key_counts) {
          const Problem x = MakeProblem(rows, keys, h, rng, /*rounded=*/false, type);
          EXPECT_EQ(FirstDifference(Accumulate(x), AccumulateShortTiles(x), h), "")
              << "rows " << rows << " keys " << keys << " h " << h << " float16 "
              << (type == GqaCacheType::kFloat16);
        }
      }
    }
  }
}

TEST(GqaFlashAvx512Ops, TallTileSplitCallsGiveOneCallsBits) {
  SKIP_WITHOUT_AVX512();
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(9, 128)(rng);
    const int64_t keys = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    const int64_t head_sizes[] = {64, 128, 256, 8, 24, 72};
    const int64_t h = head_sizes[trial % 6];
    const Problem x = MakeProblem(rows, keys, h, rng, /*rounded=*/false);
    const std::vector<float> whole = Accumulate(x);
    std::vector<float> split = x.acc;
    std::string pieces;
    for (int64_t j0 = 0; j0 < keys;) {
      const int64_t n =
          std::min<int64_t>(keys - j0, std::uniform_int_distribution<int64_t>(1, 70)(rng));
      kGqaFlashOpsAvx512.accumulate(x.p.data() + j0, rows, x.ld, x.Kv(j0), n, h, split.data(),
                                    nullptr, 0);
      pieces += " " + std::to_string(n);
      j0 += n;
    }
    EXPECT_EQ(FirstDifference(split, whole, h), "")
        << "rows " << rows << " keys " << keys << " h " << h << ", calls of" << pieces;
  }
}

// Control: the comparison above sees a tile that reads V one key off.
TEST(GqaFlashAvx512Ops, TallTileComparisonSeesAShiftedV) {
  SKIP_WITHOUT_AVX512();
  std::mt19937_64 rng(11);
  Problem x = MakeProblem(32, 65, 128, rng, /*rounded=*/false);
  const std::vector<float> shifted = AccumulateShortTiles(x, 1);
  x.keys -= 1;
  EXPECT_NE(FirstDifference(Accumulate(x), shifted, x.h), "");
}

// Float32 values around every bfloat16 / float16 rounding boundary, and the special ones.
std::vector<float> EdgeValues() {
  std::vector<float> x;
  for (uint32_t high = 0; high < 0x10000u; ++high) {
    for (const uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x2000u, 0x3000u,
                               0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      x.push_back(FromBits(high << 16 | low));
    }
  }
  // Float16 subnormal ties and neighbours: (k + 1/2) units of 2^-24, max finite 65504, the
  // overflow threshold 65520, signaling and quiet NaNs with payloads.
  for (int k = 0; k < 2048; ++k) {
    const float tie = (static_cast<float>(k) + 0.5f) * 0x1p-24f;
    for (const float e : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1.0f)}) {
      x.push_back(e);
      x.push_back(-e);
    }
  }
  for (const uint32_t u :
       {0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FA00001u,
        0x7FC00000u, 0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x00800000u}) {
    x.push_back(FromBits(u));
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 1 << 20; ++i) x.push_back(FromBits(static_cast<uint32_t>(rng())));
  return x;
}

void ExpectRoundMatchesScalar(GqaFloatType type) {
  const std::vector<float> values = EdgeValues();
  std::vector<float> rounded = values;
  rounded.push_back(1.2345f);  // past n: untouched
  kGqaFlashOpsAvx512.round(rounded.data(), static_cast<int64_t>(values.size()), type);
  EXPECT_EQ(Bits(rounded.back()), Bits(1.2345f));
  int64_t failures = 0;
  for (size_t i = 0; i < values.size() && failures < 10; ++i) {
    const float expected = RoundToType(values[i], type);
    if (Bits(rounded[i]) != Bits(expected)) {
      ++failures;
      ADD_FAILURE() << "input bits " << Bits(values[i]) << ": got " << Bits(rounded[i])
                    << ", scalar " << Bits(expected);
    }
  }
}

TEST(GqaFlashAvx512Ops, RoundBFloat16MatchesScalar) {
  SKIP_WITHOUT_AVX512();
  ExpectRoundMatchesScalar(GqaFloatType::kBFloat16);
}

TEST(GqaFlashAvx512Ops, RoundFloat16MatchesScalar) {
  SKIP_WITHOUT_AVX512();
  ExpectRoundMatchesScalar(GqaFloatType::kFloat16);
}

TEST(GqaFlashAvx512Ops, RoundFloat32IsNoOp) {
  SKIP_WITHOUT_AVX512();
  const std::vector<float> values = EdgeValues();
  std::vector<float> x = values;
  kGqaFlashOpsAvx512.round(x.data(), static_cast<int64_t>(x.size()), GqaFloatType::kFloat32);
  EXPECT_EQ(std::memcmp(x.data(), values.data(), x.size() * sizeof(float)), 0);
}

// Tails: every count below 48 leaves the elements past it alone.
TEST(GqaFlashAvx512Ops, RoundTouchesOnlyItsRange) {
  SKIP_WITHOUT_AVX512();
  for (int64_t n = 1; n < 48; ++n) {
    std::vector<float> x(48, 1.00390625f + 0x1p-10f);  // not a bfloat16 value
    kGqaFlashOpsAvx512.round(x.data(), n, GqaFloatType::kBFloat16);
    for (int64_t i = 0; i < 48; ++i) {
      const float expected = i < n ? RoundToType(x[47], GqaFloatType::kBFloat16) : x[47];
      ASSERT_EQ(Bits(x[static_cast<size_t>(i)]), Bits(expected)) << "n " << n << " i " << i;
    }
  }
}

}  // namespace
}  // namespace attnrt::cpu
