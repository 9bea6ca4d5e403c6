#include "machine_limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

namespace attnrt_bench {
namespace {

using Clock = std::chrono::steady_clock;

bool HasAvx2() { return __builtin_cpu_supports("avx2"); }
bool HasAvx2Fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
// libgcc's check includes the OS-enabled opmask/ZMM state (XCR0).
bool HasAvx512Fma() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"); }

// "32768K" / "8M" / "1048576" -> bytes.
size_t ParseCacheSize(const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  size_t scale = 1;
  if (end != nullptr && (*end == 'K' || *end == 'k')) scale = 1024;
  if (end != nullptr && (*end == 'M' || *end == 'm')) scale = 1024 * 1024;
  return static_cast<size_t>(value) * scale;
}

// Runs fn(thread_index) on `threads` threads started together; returns the wall seconds from the
// common start until the last one finished.
template <typename Fn>
double TimeOnThreads(int threads, Fn fn) {
  std::latch ready(threads + 1);
  std::latch go(1);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      fn(t);
    });
  }
  ready.arrive_and_wait();
  const auto start = Clock::now();
  go.count_down();
  for (auto& thread : pool) thread.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ReadSumScalar(const float* data, size_t count) {
  const auto* words = reinterpret_cast<const uint64_t*>(data);
  const size_t n = count / 2;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a0 += words[i];
    a1 += words[i + 1];
    a2 += words[i + 2];
    a3 += words[i + 3];
  }
  return static_cast<double>(a0 ^ a1 ^ a2 ^ a3);
}

}  // namespace

size_t SysfsL3CacheBytes() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path base("/sys/devices/system/cpu/cpu0/cache");
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    std::ifstream level_file(entry.path() / "level");
    int level = 0;
    if (!(level_file >> level) || level != 3) continue;
    std::ifstream size_file(entry.path() / "size");
    std::string size;
    if (size_file >> size) return ParseCacheSize(size);
  }
  return 0;
}

ReadBandwidth MeasureReadBandwidth(size_t buffer_bytes, int threads, int passes) {
  ReadBandwidth result;
  result.threads = std::max(threads, 1);
  result.avx2 = HasAvx2();
  const size_t chunk_floats = (buffer_bytes / sizeof(float) / result.threads) / 64 * 64;
  const size_t count = chunk_floats * static_cast<size_t>(result.threads);
  result.buffer_bytes = count * sizeof(float);
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(std::aligned_alloc(64, result.buffer_bytes)), &std::free);
  if (!buffer) return result;
  float* data = buffer.get();
  // Each thread writes (first-touches) its own chunk with non-zero data.
  TimeOnThreads(result.threads, [&](int t) {
    float* chunk = data + static_cast<size_t>(t) * chunk_floats;
    for (size_t i = 0; i < chunk_floats; ++i) chunk[i] = 1.0f + static_cast<float>(i & 7);
  });
  std::vector<double> sinks(static_cast<size_t>(result.threads));
  double best = 1e30;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms up
    const double seconds = TimeOnThreads(result.threads, [&](int t) {
      const float* chunk = data + static_cast<size_t>(t) * chunk_floats;
      sinks[static_cast<size_t>(t)] +=
          result.avx2 ? ReadSumAvx2(chunk, chunk_floats) : ReadSumScalar(chunk, chunk_floats);
    });
    if (pass > 0) best = std::min(best, seconds);
  }
  volatile double sink = 0;
  for (double s : sinks) sink = sink + s;
  result.bytes_per_second = static_cast<double>(result.buffer_bytes) / best;
  return result;
}

namespace {

// `threads` threads each running chains(iterations, seed) (kFmaChains FMAs of `lanes` lanes per
// iteration) for about `seconds`, best of `repetitions`; FLOP/s with 2 FLOP per FMA lane.
double FmaFlopsPerSecond(float (*chains)(int64_t, float), int lanes, int threads, double seconds,
                         int repetitions) {
  // Calibrate the iteration count on one thread.
  int64_t iterations = 1 << 16;
  for (;;) {
    const auto start = Clock::now();
    volatile float sink = chains(iterations, 1.0f);
    (void)sink;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed > 0.02 || iterations > (int64_t{1} << 34)) {
      iterations = static_cast<int64_t>(static_cast<double>(iterations) * seconds / elapsed) + 1;
      break;
    }
    iterations *= 4;
  }
  std::vector<float> sinks(static_cast<size_t>(threads));
  double best = 1e30;
  for (int rep = 0; rep < repetitions; ++rep) {
    const double elapsed = TimeOnThreads(threads, [&](int t) {
      sinks[static_cast<size_t>(t)] += chains(iterations, static_cast<float>(t));
    });
    best = std::min(best, elapsed);
  }
  volatile float sink = 0;
  for (float s : sinks) sink = sink + s;
  return static_cast<double>(iterations) * kFmaChains * lanes * 2 * static_cast<double>(threads) /
         best;
}

}  // namespace

FmaPeak MeasureFmaPeak(int threads, double seconds, int repetitions) {
  FmaPeak result;
  result.threads = std::max(threads, 1);
  result.avx2_fma = HasAvx2Fma();
  if (!result.avx2_fma) return result;
  result.flops_per_second =
      FmaFlopsPerSecond(&FmaChainsAvx2, 8, result.threads, seconds, repetitions);
  return result;
}

FmaPeak MeasureFmaPeakAvx512(int threads, double seconds, int repetitions) {
  FmaPeak result;
  result.threads = std::max(threads, 1);
  result.avx512_fma = HasAvx512Fma();
  if (!result.avx512_fma) return result;
  result.flops_per_second =
      FmaFlopsPerSecond(&FmaChainsAvx512, 16, result.threads, seconds, repetitions);
  return result;
}

}  // namespace attnrt_bench
