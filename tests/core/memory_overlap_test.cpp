// core/ops/memory_overlap: the exact overlap of strided views against a brute force that lists
// every byte of both views, on random small views (seed printed), plus the layouts serving engines
// use and the errors DescribeStrided reports.
#include "core/ops/memory_overlap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace attnrt::core {
namespace {

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;

struct Desc {
  std::vector<int64_t> shape, strides;
  uint64_t byte_offset = 0;
  attnrt_dtype dtype = kF32;
  attnrt_tensor t{};
  const attnrt_tensor& Get(void* base) {
    t = attnrt_tensor{};
    t.data = base;
    t.device = {ATTNRT_DEVICE_CPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
    return t;
  }
};

// Every byte offset (from the base) an element of `d` occupies, listed element by element.
std::multiset<int64_t> Bytes(const Desc& d) {
  std::multiset<int64_t> bytes;
  int64_t count = 1;
  for (int64_t e : d.shape) count *= e;
  const int64_t eb = d.dtype.bits / 8;
  std::vector<int64_t> compact(d.shape.size(), 1);
  for (int i = static_cast<int>(d.shape.size()) - 2; i >= 0; --i) {
    compact[i] = compact[i + 1] * d.shape[i + 1];
  }
  for (int64_t linear = 0; linear < count; ++linear) {
    int64_t rest = linear;
    int64_t offset = static_cast<int64_t>(d.byte_offset);
    for (int i = static_cast<int>(d.shape.size()) - 1; i >= 0; --i) {
      const int64_t index = rest % d.shape[i];
      rest /= d.shape[i];
      offset += index * (d.strides.empty() ? compact[i] : d.strides[i]) * eb;
    }
    for (int64_t b = 0; b < eb; ++b) bytes.insert(offset + b);
  }
  return bytes;
}

bool BruteSelfOverlap(const Desc& d) {
  const auto bytes = Bytes(d);
  return std::set<int64_t>(bytes.begin(), bytes.end()).size() != bytes.size();
}

bool BruteOverlap(const Desc& a, const Desc& b) {
  const auto x = Bytes(a);
  for (int64_t byte : Bytes(b)) {
    if (x.count(byte) != 0) return true;
  }
  return false;
}

Overlap Self(Desc& d, void* base) {
  StridedBytes v;
  EXPECT_TRUE(DescribeStrided(d.Get(base), "t", &v).ok());
  return SelfOverlap(v);
}

Overlap Pair(Desc& a, Desc& b, void* base) {
  StridedBytes va, vb;
  EXPECT_TRUE(DescribeStrided(a.Get(base), "a", &va).ok());
  EXPECT_TRUE(DescribeStrided(b.Get(base), "b", &vb).ok());
  return ViewsOverlap(va, vb);
}

Desc RandomDesc(std::mt19937_64& rng, attnrt_dtype dtype) {
  Desc d;
  d.dtype = dtype;
  const int rank = static_cast<int>(rng() % 4) + 1;
  for (int i = 0; i < rank; ++i) {
    d.shape.push_back(static_cast<int64_t>(rng() % 4) + 1);
    d.strides.push_back(static_cast<int64_t>(rng() % 13));
  }
  d.byte_offset = (rng() % 24) * static_cast<uint64_t>(dtype.bits / 8);
  if (rng() % 5 == 0) d.strides.clear();  // compact
  return d;
}

uint64_t Seed() {
  const char* env = std::getenv("ATTNRT_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

TEST(MemoryOverlap, MatchesBruteForceOnRandomViews) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (ATTNRT_TEST_SEED reproduces)");
  std::mt19937_64 rng(seed);
  alignas(64) static unsigned char arena[4096];
  int overlapping = 0, disjoint = 0;
  for (int i = 0; i < 3000; ++i) {
    const attnrt_dtype dtype = i % 3 == 0 ? kF32 : i % 3 == 1 ? kF16 : kU8;
    Desc a = RandomDesc(rng, dtype);
    Desc b = i % 2 == 0 ? RandomDesc(rng, dtype) : a;  // same geometry, another offset
    if (i % 2 != 0) b.byte_offset = (rng() % 40) * static_cast<uint64_t>(dtype.bits / 8);
    const bool self = BruteSelfOverlap(a);
    EXPECT_EQ(Self(a, arena), self ? Overlap::kOverlap : Overlap::kDisjoint) << "view " << i;
    const bool pair = BruteOverlap(a, b);
    EXPECT_EQ(Pair(a, b, arena), pair ? Overlap::kOverlap : Overlap::kDisjoint) << "pair " << i;
    (pair ? overlapping : disjoint) += 1;
  }
  // Both answers were exercised.
  EXPECT_GT(overlapping, 100);
  EXPECT_GT(disjoint, 100);
}

TEST(MemoryOverlap, EngineCacheHalvesAreDisjoint) {
  alignas(64) static float cache[2 * 4 * 2 * 16 * 8];
  // vLLM CPU [num_blocks=4, Nkv=2, block_size=16, 2 * H=16]: K = [..., :8], V = [..., 8:].
  Desc k{{4, 2, 16, 8}, {2 * 16 * 16, 16 * 16, 16, 1}, 0, kF32, {}};
  Desc v = k;
  v.byte_offset = 8 * 4;
  EXPECT_EQ(Pair(k, v, cache), Overlap::kDisjoint);
  EXPECT_EQ(Self(k, cache), Overlap::kDisjoint);
  // V shifted by 4 elements into K's rows.
  v.byte_offset = 4 * 4;
  EXPECT_EQ(Pair(k, v, cache), Overlap::kOverlap);
  // [2, num_blocks, block_size, Nkv, H] halves.
  Desc k2{{4, 16, 2, 8}, {}, 0, kF32, {}};
  Desc v2 = k2;
  v2.byte_offset = 4 * 16 * 2 * 8 * 4;
  EXPECT_EQ(Pair(k2, v2, cache), Overlap::kDisjoint);
}

TEST(MemoryOverlap, ZeroStrideOverlapsItself) {
  alignas(64) static float buffer[64];
  Desc d{{3, 8}, {0, 1}, 0, kF32, {}};
  EXPECT_EQ(Self(d, buffer), Overlap::kOverlap);
  Desc single{{1, 8}, {0, 1}, 0, kF32, {}};  // an extent of 1 may carry any stride
  EXPECT_EQ(Self(single, buffer), Overlap::kDisjoint);
}

TEST(MemoryOverlap, TooManyRunsIsUndecided) {
  // Two views whose rows interleave irregularly (no common lattice): 2^12 x 2^11 runs of one
  // element each exceed the listing budget.
  alignas(64) static unsigned char buffer[64];
  Desc a{{4096, 2048}, {3, 5}, 0, kU8, {}};
  Desc b{{4096, 2048}, {5, 3}, 1, kU8, {}};
  EXPECT_EQ(Pair(a, b, buffer), Overlap::kUndecided);
}

TEST(MemoryOverlap, DescribeStridedErrors) {
  alignas(64) static float buffer[64];
  StridedBytes v;
  Desc negative{{2, 8}, {-8, 1}, 64, kF32, {}};
  Status s = DescribeStrided(negative.Get(buffer), "key_cache", &v);
  EXPECT_EQ(s.code, ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("key_cache: dimension 0 has stride -8"), std::string::npos) << s.message;
  Desc huge{{2, 8}, {INT64_MAX / 2, 1}, 0, kF32, {}};
  s = DescribeStrided(huge.Get(buffer), "value_cache", &v);
  EXPECT_EQ(s.code, ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("value_cache: strides reach beyond the address space"),
            std::string::npos)
      << s.message;
  Desc null_data{{2, 8}, {8, 1}, 0, kF32, {}};
  s = DescribeStrided(null_data.Get(nullptr), "key_cache", &v);
  EXPECT_NE(s.message.find("data is NULL"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace attnrt::core
