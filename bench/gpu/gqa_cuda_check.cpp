// GPU check of the CUDA GroupQueryAttention kernels (run by bench/gpu/check.sh on a GPU machine).
//
// Part 1, correctness (gqa_cuda_check_correctness.cpp): every CUDA kernel (pinned one at a time
// through the runtime) over a matrix of shapes and options, on fresh seeded random inputs with
// poisoned outputs (NaN bytes), against the float64 reference of tests/common (ONNX Runtime's
// GroupQueryAttention semantics; docs/gqa-semantics.md). Output and present caches are compared
// element by element; any unwritten element shows as NaN.
// Part 2, performance (gqa_cuda_check_perf.cpp): each kernel timed with CUDA events, the L2 cache
// flushed before every sample, reported as TFLOP/s (visible query-key pairs x 4 H) and GB/s (bytes
// the kernel must move) next to the device's measured copy bandwidth (device-to-device cudaMemcpy)
// and matrix-product rate (cuBLAS bf16 GEMM, fp32 accumulation).
// The inputs, device buffers and plans are gqa_cuda_check_workload.cpp's.
//
// Exit status 0 only when every check passed. Usage: attnrt_gqa_cuda_check [--quick]
// (ATTNRT_CHECK_SEED fixes the seed; it is printed either way).
#include "gqa_cuda_check.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace gqa_cuda_check;

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  uint64_t seed = 0;
  if (const char* env = std::getenv("ATTNRT_CHECK_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  std::printf("attnrt GPU check, seed %llu (ATTNRT_CHECK_SEED=%llu reproduces it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  try {
    int device = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, L2 %d bytes\n", device, prop.name,
                prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize);
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::printf("\n== correctness: every CUDA kernel vs the float64 reference ==\n");
    std::mt19937_64 rng(seed);
    int failures = 0, checks = 0;
    for (const Case& c : CorrectnessCases(rng)) {
      for (const std::string& kernel : c.kernels) {
        ++checks;
        try {
          if (!CheckCase(c, kernel, rng(), stream)) ++failures;
        } catch (const std::exception& e) {
          ++failures;
          std::printf("  FAIL %-34s %-44s error: %s\n", kernel.c_str(), c.name.c_str(), e.what());
          (void)cudaGetLastError();
        }
      }
    }
    std::printf("correctness: %d of %d checks passed\n", checks - failures, checks);

    std::printf("\n== performance (CUDA events, L2 flushed before every sample) ==\n");
    const double copy_gbps = MeasureCopyBandwidth(stream);
    const double gemm_tflops = MeasureGemmRate(stream);
    std::printf(
        "measured device copy bandwidth %.0f GB/s (read + write), cuBLAS bf16 GEMM "
        "%.0f TFLOP/s\n",
        copy_gbps, gemm_tflops);
    DeviceBuffer flush(static_cast<size_t>(std::max(prop.l2CacheSize, 1 << 20)) * 2);
    std::vector<PerfRow> rows;
    int perf_failures = 0;
    for (const auto& [c, kernel] : PerfCases(rng)) {
      if (quick && c.S > 4096) continue;
      try {
        rows.push_back(TimeCase(c, kernel, rng(), stream, flush));
        const PerfRow& r = rows.back();
        std::printf("  %-34s %-40s %9.3f ms\n", r.kernel.c_str(), r.name.c_str(), r.ms);
      } catch (const std::exception& e) {
        ++perf_failures;
        std::printf("  FAIL %-34s %-40s error: %s\n", kernel.c_str(), c.name.c_str(), e.what());
        (void)cudaGetLastError();
      }
    }

    std::printf("\n== summary ==\n");
    std::printf("copy bandwidth %.0f GB/s; bf16 GEMM %.0f TFLOP/s; correctness %d/%d\n", copy_gbps,
                gemm_tflops, checks - failures, checks);
    std::printf("%-34s %-40s %9s %9s %7s %9s %7s\n", "kernel", "case", "ms", "TFLOP/s", "%GEMM",
                "GB/s", "%copy");
    for (const PerfRow& r : rows) {
      std::printf("%-34s %-40s %9.3f %9.1f %6.1f%% %9.0f %6.1f%%\n", r.kernel.c_str(),
                  r.name.c_str(), r.ms, r.tflops, 100.0 * r.tflops / gemm_tflops, r.gbps,
                  100.0 * r.gbps / copy_gbps);
    }
    cudaStreamDestroy(stream);
    if (failures > 0 || perf_failures > 0) {
      std::printf("\nFAILED: %d correctness and %d timing failures (seed %llu)\n", failures,
                  perf_failures, static_cast<unsigned long long>(seed));
      return 1;
    }
    std::printf("\nPASSED\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FATAL: %s\n", e.what());
    return 2;
  }
}
