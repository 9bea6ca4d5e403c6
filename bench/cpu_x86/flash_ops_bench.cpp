// gqa.flash.avx512's P·V block operation on a prompt tile, on its own (linked from the plugin's
// objects, attnrt_cpu_x86_flash_internal): accumulate (float32 FMAs, each bfloat16 V element
// widened per use) against accumulate_rounded (VDPBF16PS over key pairs, for P rounded to
// bfloat16), which give the same bits.
//
//   BM_FlashPv/<op>/rows:128/keys:<K>         one call (h 128) over K in {64, 128, 256, 512} keys
//   of a
//                                             bfloat16 V (a BSNH cache's rows: 8 kv heads apart)
//
// Warm caches: one tile's P, V and accumulator (at most 256 KiB) stay in L2, as the flash driver
// reads them. Counter FLOP/s: 2 * rows * keys * h. Compare the two ops run interleaved, e.g.
//   bench_flash_ops_cpu_x86 --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
// accumulate_rounded needs AVX512-BF16; its benchmarks skip (with the reason) without it.
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
using attnrt::cpu::kGqaFlashOpsAvx512Bf16;

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

void BM_FlashPv(benchmark::State& state, bool rounded) {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  if (!avx512 || (rounded && !__builtin_cpu_supports("avx512bf16"))) {
    state.SkipWithError(rounded ? "needs AVX-512 F/BW/VL, FMA and AVX512-BF16"
                                : "needs AVX-512 F/BW/VL and FMA");
    return;
  }
  const int64_t keys = state.range(0);
  const int64_t ld = keys;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(static_cast<size_t>(kRows * ld));
  for (float& e : p) e = BFloat16Value(BFloat16Bits(unit(rng) / static_cast<float>(keys)));
  std::vector<uint16_t> v(static_cast<size_t>(keys * kKvNumHeads * kHeadSize));
  for (uint16_t& e : v) e = BFloat16Bits(normal(rng));
  std::vector<float> acc(static_cast<size_t>(kRows * kHeadSize), 0.0f);
  const GqaFlashKv kv{v.data(), kKvNumHeads * kHeadSize * sizeof(uint16_t), GqaCacheType::kBFloat16,
                      nullptr, false};
  const auto op =
      rounded ? kGqaFlashOpsAvx512Bf16.accumulate_rounded : kGqaFlashOpsAvx512.accumulate;
  for (auto _ : state) {
    op(p.data(), kRows, ld, kv, keys, kHeadSize, acc.data(), nullptr, 0);
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      static_cast<double>(2 * kRows * keys * kHeadSize) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void Register() {
  for (const bool rounded : {false, true}) {
    const std::string name =
        std::string("BM_FlashPv/") + (rounded ? "accumulate_rounded" : "accumulate") + "/rows:128";
    auto* b = benchmark::RegisterBenchmark(
        name.c_str(), [rounded](benchmark::State& state) { BM_FlashPv(state, rounded); });
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
