// GPU check of the CUDA GroupQueryAttention kernels, part 2: performance. The device's copy
// bandwidth and cuBLAS bf16 GEMM rate, and each timed case's median time with CUDA events (L2
// flushed before every sample) as TFLOP/s and GB/s.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gqa_cuda_check.h"

namespace gqa_cuda_check {
namespace {

double MedianMs(std::vector<float>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth (bytes read + written per second), GB/s.
}  // namespace

double MeasureCopyBandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes), b(bytes);
  CHECK_CUDA(cudaMemset(a.ptr, 1, bytes));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 12; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (MedianMs(times) * 1e-3) / 1e9;
}

// cuBLAS bf16 GEMM (fp32 accumulation) rate, TFLOP/s.
double MeasureGemmRate(cudaStream_t stream) {
  const int n = 8192;
  const size_t bytes = size_t{2} * n * n;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  // Non-zero operands (0x3C3C is 0.0115 in bfloat16): an all-zero GEMM draws less power.
  CHECK_CUDA(cudaMemset(a.ptr, 0x3C, bytes));
  CHECK_CUDA(cudaMemset(b.ptr, 0x3C, bytes));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
  cublasSetStream(handle, stream);
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 10; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.ptr,
                                          CUDA_R_16BF, n, b.ptr, CUDA_R_16BF, n, &beta, c.ptr,
                                          CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  return 2.0 * n * double(n) * n / (MedianMs(times) * 1e-3) / 1e12;
}

namespace {

// Visible (query, key) pairs of a case (the causal mask and local window of ONNX Runtime's
// GroupQueryAttention), and cache rows read.
void CountWork(const Case& c, double* pairs, double* rows) {
  *pairs = 0;
  *rows = 0;
  const bool first = c.S == c.T;
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t Tb = c.seqlens[static_cast<size_t>(b)] + 1;
    const int64_t offset = (first || (!c.has_past)) ? 0 : Tb - c.S;
    const int64_t rows_b = std::min(Tb, offset + c.S);
    *rows += static_cast<double>(rows_b);
    for (int64_t s = 0; s < c.S; ++s) {
      const int64_t ecl = c.causal ? std::min(offset + s + 1, rows_b) : rows_b;
      const int64_t lo = (c.window >= 0 && ecl > c.window) ? ecl - c.window : 0;
      *pairs += static_cast<double>(ecl - lo) * c.N;
    }
  }
}

}  // namespace

PerfRow TimeCase(const Case& c, const std::string& kernel, uint64_t seed, cudaStream_t stream,
                 DeviceBuffer& flush) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.c = c;
  Build(w, rng, true);
  Binding b;
  Bind(w, b);
  Planned p;
  PlanFor(w, b, kernel, p);
  Reset(w);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) RunOnce(p, b, stream);
  std::vector<float> times;
  const auto wall = std::chrono::steady_clock::now();
  while (times.size() < 30 &&
         (times.size() < 5 || std::chrono::steady_clock::now() - wall < std::chrono::seconds(4))) {
    CHECK_CUDA(
        cudaMemsetAsync(flush.ptr, static_cast<int>(times.size() & 0xFF), flush.bytes, stream));
    CHECK_CUDA(cudaEventRecord(start, stream));
    RunOnce(p, b, stream);
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  PerfRow row;
  row.kernel = kernel;
  row.name = c.name;
  row.ms = MedianMs(times);
  double pairs = 0, rows = 0;
  CountWork(c, &pairs, &rows);
  const double elem = c.cache == Cache::kSame ? 2.0 : 1.0;
  // K and V rows read once per kv head, Q and output once, new K/V rows written.
  const double bytes = rows * c.Nkv * c.H * elem * 2 + 2.0 * c.B * c.S * c.N * c.H * 2 +
                       2.0 * c.B * c.S * c.Nkv * c.H * (2 + elem);
  row.tflops = 4.0 * c.H * pairs / (row.ms * 1e-3) / 1e12;
  row.gbps = bytes / (row.ms * 1e-3) / 1e9;
  return row;
}

std::vector<std::pair<Case, std::string>> PerfCases(std::mt19937_64& rng) {
  std::vector<std::pair<Case, std::string>> cases;
  auto decode = [&](int64_t B, int64_t P, Cache cache, const std::string& kernel) {
    Case c;
    c.B = B, c.S = 1, c.N = 32, c.Nkv = 8, c.H = 128, c.P = P, c.T = P;
    c.has_past = c.shared = true;
    c.bf16 = true;
    c.cache = cache;
    c.seqlens.assign(static_cast<size_t>(B), static_cast<int32_t>(P - 1));
    c.name = "decode bf16 llama3-8b B" + std::to_string(B) + " P" + std::to_string(P) +
             (cache == Cache::kInt8  ? " int8"
              : cache == Cache::kFp8 ? " fp8"
                                     : "");
    cases.emplace_back(c, kernel);
  };
  decode(1, 32768, Cache::kSame, kXqa);
  decode(8, 32768, Cache::kSame, kXqa);
  decode(8, 32768, Cache::kSame, kFlashDecode);
  decode(8, 32768, Cache::kInt8, kXqa);
  decode(8, 32768, Cache::kFp8, kXqa);
  decode(64, 4096, Cache::kSame, kXqa);
  auto prefill = [&](int64_t S, int64_t H, bool causal, const std::string& kernel) {
    Case c;
    c.B = 1, c.S = S, c.T = S, c.N = 32, c.Nkv = 8, c.H = H;
    c.bf16 = true;
    c.causal = causal;
    c.seqlens = {static_cast<int32_t>(S - 1)};
    c.name = std::string("prefill bf16 ") + (causal ? "causal" : "full") + " H" +
             std::to_string(H) + " S" + std::to_string(S);
    cases.emplace_back(c, kernel);
  };
  prefill(8192, 128, true, kFlash);
  prefill(8192, 128, false, kFlash);
  prefill(4096, 64, true, kFlash);
  prefill(4096, 256, true, kFlash);
  prefill(2048, 128, true, kUnfused);
  (void)rng;
  return cases;
}

}  // namespace gqa_cuda_check
