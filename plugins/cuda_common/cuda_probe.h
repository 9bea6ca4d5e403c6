// CUDA device probe of the cuda_* plugins. The CUDA runtime is linked statically, so the plugin
// loads on a machine without a GPU or driver; there the probe reports "no CUDA device" with the
// runtime's error text, and every kernel is listed as unavailable with that reason.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gqa_cuda_rules.h"

namespace attnrt::cuda {

struct ProbeResult {
  DeviceCaps caps;
  bool available = false;
  std::string reason;  // why not available
  std::vector<std::pair<std::string, std::string>> facts;
};

// Queries the current CUDA device. Never fails: every error becomes the reason.
ProbeResult ProbeCudaDevice();

}  // namespace attnrt::cuda
