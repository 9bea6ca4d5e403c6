// This machine's limits, measured by the benchmark binary itself at startup: the last-level cache
// size (to size the rotated working sets), the multi-threaded streaming read bandwidth of a buffer
// much larger than L3 (the decode roofline) and the AVX2 and AVX-512 FP32 FMA peaks (the prefill
// roofline, and that of compute-bound decode over quantized caches).
#ifndef ATTNRT_BENCH_CPU_X86_MACHINE_LIMITS_H_
#define ATTNRT_BENCH_CPU_X86_MACHINE_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnrt_bench {

// L3 size in bytes from sysfs (/sys/devices/system/cpu/cpu0/cache/index*/), 0 when not found.
size_t SysfsL3CacheBytes();

struct ReadBandwidth {
  double bytes_per_second = 0;  // best of the passes
  size_t buffer_bytes = 0;
  int threads = 0;
  bool avx2 = false;  // AVX2 loads (else 64-bit scalar loads)
};

// Streaming read of a `buffer_bytes` buffer split in contiguous chunks over `threads` threads (8
// independent vector accumulators per thread); best of `passes` timed passes after one warm pass.
ReadBandwidth MeasureReadBandwidth(size_t buffer_bytes, int threads, int passes);

struct FmaPeak {
  double flops_per_second = 0;  // best of the repetitions; 2 FLOP per FMA lane
  int threads = 0;
  bool avx2_fma = false;    // MeasureFmaPeak: false when the CPU lacks AVX2+FMA (nothing measured)
  bool avx512_fma = false;  // MeasureFmaPeakAvx512: false when the CPU/OS lacks AVX-512F+FMA
};

// `threads` threads, each running 12 independent chains of 8-wide FP32 FMAs (enough to cover the
// FMA latency on every AVX2 core), for about `seconds` each repetition; best of `repetitions`.
FmaPeak MeasureFmaPeak(int threads, double seconds, int repetitions);

// The same with 16-wide AVX-512 FMAs (12 chains); on CPUs with full-width 512-bit FMA units this is
// twice the AVX2 peak, on those that split 512-bit operations it equals it.
FmaPeak MeasureFmaPeakAvx512(int threads, double seconds, int repetitions);

// Implemented in machine_limits_avx2.cpp (built with -mavx2 -mfma); call only when the CPU has
// them (__builtin_cpu_supports).
double ReadSumAvx2(const float* data, size_t count);
float FmaChainsAvx2(int64_t iterations, float seed);
inline constexpr int kFmaChains = 12;

// Implemented in machine_limits_avx512.cpp (built with -mavx512f -mfma); call only when the CPU
// and OS have them (__builtin_cpu_supports).
float FmaChainsAvx512(int64_t iterations, float seed);

}  // namespace attnrt_bench

#endif  // ATTNRT_BENCH_CPU_X86_MACHINE_LIMITS_H_
