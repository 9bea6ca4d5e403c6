// CUDA device probe (see cuda_probe.h). Host code against the CUDA runtime API only.
#include "cuda_probe.h"

#include <cuda_runtime_api.h>

#include <string>

namespace attnrt::cuda {
namespace {

std::string ErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

ProbeResult ProbeCudaDevice() {
  ProbeResult r;
  int runtime_version = 0;
  if (cudaRuntimeGetVersion(&runtime_version) == cudaSuccess) {
    r.facts.emplace_back("cuda_runtime_version", std::to_string(runtime_version));
  }
  int driver_version = 0;
  const cudaError_t driver_status = cudaDriverGetVersion(&driver_version);
  r.facts.emplace_back("cuda_driver_version", driver_status == cudaSuccess
                                                  ? std::to_string(driver_version)
                                                  : "none (" + ErrorText(driver_status) + ")");
  r.facts.emplace_back("cuda_architectures", "sm_80,sm_90");
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    r.reason = status != cudaSuccess
                   ? "no CUDA device (cudaGetDeviceCount: " + ErrorText(status) + ")"
                   : "no CUDA device (cudaGetDeviceCount returned 0)";
    // The failed call leaves a sticky last error in the runtime; clear it.
    (void)cudaGetLastError();
    r.facts.emplace_back("cuda_devices", "0");
    return r;
  }
  r.facts.emplace_back("cuda_devices", std::to_string(count));
  int device = 0;
  (void)cudaGetDevice(&device);
  cudaDeviceProp prop{};
  const cudaError_t prop_status = cudaGetDeviceProperties(&prop, device);
  if (prop_status != cudaSuccess) {
    r.reason = "cudaGetDeviceProperties(" + std::to_string(device) + "): " + ErrorText(prop_status);
    return r;
  }
  r.caps.present = true;
  r.caps.compute_major = prop.major;
  r.caps.compute_minor = prop.minor;
  r.caps.sm_count = prop.multiProcessorCount;
  r.caps.max_smem_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  r.facts.emplace_back("cuda_device", std::to_string(device) + ": " + prop.name);
  r.facts.emplace_back("compute_capability",
                       std::to_string(prop.major) + "." + std::to_string(prop.minor));
  r.facts.emplace_back("sm_count", std::to_string(prop.multiProcessorCount));
  r.facts.emplace_back("shared_memory_per_block_optin",
                       std::to_string(prop.sharedMemPerBlockOptin));
  r.facts.emplace_back("l2_cache_bytes", std::to_string(prop.l2CacheSize));
  r.facts.emplace_back("global_memory_bytes", std::to_string(prop.totalGlobalMem));
  if (prop.major < 8) {
    r.reason = "compute capability " + std::to_string(prop.major) + "." +
               std::to_string(prop.minor) + " is below 8.0 (kernels are built for sm_80, sm_90)";
    return r;
  }
  r.available = true;
  return r;
}

}  // namespace attnrt::cuda
