// gqa.flash.avx512's P·V block operation (accumulate) on a prompt tile, on its own (linked from
// the plugin's objects, attnrt_cpu_x86_flash_internal): a bfloat16 V (widened to float32 once per
// chunk of keys into a slab every block of rows reads) against a float32 V of the same values, so
// the difference is what the widening costs.
//
//   BM_FlashPv/<v dtype>/rows:128/keys:<K>    one call (h 128) over K in {64, 128, 256, 512} keys
//                                             of a BSNH cache's rows (8 kv heads apart)
//
// Warm caches: one tile's P, V and accumulator (at most 256 KiB of bfloat16 V) stay in L2, as the
// flash driver reads them. Counter FLOP/s: 2 * rows * keys * h. Compare the two run interleaved:
//   bench_flash_ops_cpu_x86 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gqa_flash.h"
#include "gqa_kernels.h"

namespace {

using attnrt::cpu::GqaCacheType;
using attnrt::cpu::GqaFlashKv;
using attnrt::cpu::kGqaFlashOpsAvx512;

constexpr int64_t kRows = 128;
constexpr int64_t kHeadSize = 128;
constexpr int64_t kKvNumHeads = 8;

uint16_t BFloat16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float BFloat16Value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

void BM_FlashPv(benchmark::State& state, bool bfloat16) {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  if (!avx512) {
    state.SkipWithError("needs AVX-512 F/BW/VL and FMA");
    return;
  }
  const int64_t keys = state.range(0);
  const int64_t ld = keys;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(static_cast<size_t>(kRows * ld));
  for (float& e : p) e = unit(rng) / static_cast<float>(keys);
  const size_t elements = static_cast<size_t>(keys * kKvNumHeads * kHeadSize);
  std::vector<uint16_t> v16(elements);
  std::vector<float> v32(elements);
  for (size_t i = 0; i < elements; ++i) {
    v16[i] = BFloat16Bits(normal(rng));
    v32[i] = BFloat16Value(v16[i]);
  }
  std::vector<float> acc(static_cast<size_t>(kRows * kHeadSize), 0.0f);
  const GqaFlashKv kv = bfloat16
                            ? GqaFlashKv{v16.data(), kKvNumHeads * kHeadSize * sizeof(uint16_t),
                                         GqaCacheType::kBFloat16, nullptr, false}
                            : GqaFlashKv{v32.data(), kKvNumHeads * kHeadSize * sizeof(float),
                                         GqaCacheType::kFloat32, nullptr, false};
  for (auto _ : state) {
    kGqaFlashOpsAvx512.accumulate(p.data(), kRows, ld, kv, keys, kHeadSize, acc.data(), nullptr, 0);
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(2 * kRows * keys * kHeadSize) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void Register() {
  for (const bool bfloat16 : {true, false}) {
    const std::string name =
        std::string("BM_FlashPv/") + (bfloat16 ? "bfloat16" : "float32") + "/rows:128";
    auto* b = benchmark::RegisterBenchmark(
        name.c_str(), [bfloat16](benchmark::State& state) { BM_FlashPv(state, bfloat16); });
    b->ArgName("keys")->Arg(64)->Arg(128)->Arg(256)->Arg(512);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
