// Private to the GPU check of the CUDA GroupQueryAttention kernels (gqa_cuda_check.cpp: main;
// gqa_cuda_check_workload.cpp: inputs, device buffers, descriptors and plans;
// gqa_cuda_check_correctness.cpp: the checks against the float64 reference;
// gqa_cuda_check_perf.cpp: timings): the cases, the device workload and what the pieces share.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "common/dtype_reference.h"

namespace gqa_cuda_check {

#define CHECK_CUDA(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t check_status_ = (expr);                                                \
    if (check_status_ != cudaSuccess) {                                                      \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorName(check_status_) + \
                               ": " + cudaGetErrorString(check_status_));                    \
    }                                                                                        \
  } while (0)

// Throws when `status` is not ATTNRT_OK, with the runtime's last error message.
void CheckAttnrt(attnrt_status status, const char* what);

enum class Cache { kSame, kInt8, kFp8 };

struct Case {
  std::string name;
  std::vector<std::string> kernels;  // each is pinned and must be the one planned
  int64_t B = 1, S = 1, N = 8, Nkv = 2, H = 128;
  int64_t L = -1;  // new K/V rows; -1: S (0: shared KV, the past supplies every row)
  int64_t P = 0;   // past rows (0 with has_past false: no past inputs)
  bool has_past = false;
  bool shared = false;  // present is the past buffer
  bool has_present = true;
  int64_t T = 1;
  std::vector<int32_t> seqlens;
  bool bf16 = false;
  Cache cache = Cache::kSame;
  int32_t causal = 1, window = -1;
  float softcap = 0.0f;
  bool bias = false, bias_broadcast = false, sink = false, smooth = false;
  int rotary = 0;  // 0 none, 1 half-split, 2 interleaved
  bool position_ids = false, packed = false;
};

// A float16 (bf16 false) or bfloat16 value decoded from its bits.
float Decode16(bool bf16, uint16_t bits);
// The reference's cache format of a quantized Cache.
attnrt_test::CacheFormat CacheFormatOf(Cache c);

// A device buffer.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0) CHECK_CUDA(cudaMalloc(&ptr, n));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    if (host.size() * sizeof(T) != bytes) throw std::runtime_error("upload size mismatch");
    if (bytes > 0) CHECK_CUDA(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes / sizeof(T));
    if (bytes > 0) CHECK_CUDA(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

// One GQA call's tensors on the device plus their float (reference) values.
struct Workload {
  Case c;
  int64_t L = 0, PL = 0, qrow = 0, M = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  std::vector<float> query, key, value, past_key, past_value, cos, sin, bias, sink;
  std::vector<int64_t> positions;
  std::vector<uint16_t> query16, key16, value16, cos16, sin16, bias16, sink16;
  std::vector<uint8_t> past_k_bytes, past_v_bytes;  // cache encoding (2 bytes/elem for kSame)
  std::vector<DeviceBuffer*> owned;
  DeviceBuffer *d_query = nullptr, *d_key = nullptr, *d_value = nullptr, *d_past_k = nullptr,
               *d_past_v = nullptr, *d_cos = nullptr, *d_sin = nullptr, *d_pos = nullptr,
               *d_bias = nullptr, *d_sink = nullptr, *d_kscale = nullptr, *d_vscale = nullptr,
               *d_out = nullptr, *d_pres_k = nullptr, *d_pres_v = nullptr;
  Workload() = default;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  ~Workload() {
    for (DeviceBuffer* b : owned) delete b;
  }
  DeviceBuffer* Make(size_t bytes) {
    owned.push_back(new DeviceBuffer(bytes));
    return owned.back();
  }
  int64_t CacheElem() const { return c.cache == Cache::kSame ? 2 : 1; }
};

// Builds inputs (values, encodings, device copies) and poisons the outputs.
void Build(Workload& w, std::mt19937_64& rng, bool perf);

// Poison outputs (and restore a shared cache) before every run.
void Reset(Workload& w);

// Tensor descriptors for the runtime.
struct Binding {
  std::vector<std::vector<int64_t>> shapes;
  attnrt_tensor in[ATTNRT_GQA_NUM_INPUTS]{};
  attnrt_tensor out[ATTNRT_GQA_NUM_OUTPUTS]{};
  const attnrt_tensor* in_ptrs[ATTNRT_GQA_NUM_INPUTS]{};
  const attnrt_tensor* out_ptrs[ATTNRT_GQA_NUM_OUTPUTS]{};
  int32_t seqlens_host[4096]{};
  int32_t total_host = 0;
};

// Fills the descriptors of `b` from `w`.
void Bind(Workload& w, Binding& b);

// A planned op on a runtime that pins `kernel`.
struct Planned {
  attnrt_runtime* runtime = nullptr;
  attnrt_op* op = nullptr;
  attnrt_plan* plan = nullptr;
  DeviceBuffer* workspace = nullptr;
  std::string kernel;
  ~Planned() {
    delete workspace;
    if (plan != nullptr) attnrt_plan_release(plan);
    if (op != nullptr) attnrt_op_destroy(op);
    if (runtime != nullptr) attnrt_runtime_destroy(runtime);
  }
};

// Plans `w`'s call on a runtime pinned to `kernel` into `p`; throws unless `kernel` was planned.
void PlanFor(Workload& w, Binding& b, const std::string& kernel, Planned& p);

// One run of the plan on `stream`.
void RunOnce(Planned& p, Binding& b, cudaStream_t stream);

inline const std::string kXqa = "cuda_xqa.gqa.xqa.sm80";
inline const std::string kFlashDecode = "cuda_flash.gqa.flash_decode.sm80";
inline const std::string kFlash = "cuda_flash.gqa.flash.sm80";
inline const std::string kUnfused = "cuda_flash.gqa.unfused.sm80";

// ---- correctness (gqa_cuda_check_correctness.cpp) ----------------------------------------------

// Checks one kernel on one case; returns true when every element matches.
bool CheckCase(const Case& c, const std::string& kernel, uint64_t seed, cudaStream_t stream);

// The correctness matrix: shapes and options, each with the kernels that must take it.
std::vector<Case> CorrectnessCases(std::mt19937_64& rng);

// ---- performance (gqa_cuda_check_perf.cpp) ------------------------------------------------------

struct PerfRow {
  std::string kernel, name;
  double ms = 0, tflops = 0, gbps = 0;
};

// Device-to-device copy bandwidth (bytes read + written per second), GB/s.
double MeasureCopyBandwidth(cudaStream_t stream);

// cuBLAS bf16 GEMM (fp32 accumulation) rate, TFLOP/s.
double MeasureGemmRate(cudaStream_t stream);

// Times one kernel on one case (median of CUDA event samples, L2 flushed through `flush`).
PerfRow TimeCase(const Case& c, const std::string& kernel, uint64_t seed, cudaStream_t stream,
                 DeviceBuffer& flush);

// The timed cases, each with its kernel.
std::vector<std::pair<Case, std::string>> PerfCases(std::mt19937_64& rng);

}  // namespace gqa_cuda_check
