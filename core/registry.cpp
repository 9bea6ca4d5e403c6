#include "core/registry.h"

#include <algorithm>

#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

constexpr size_t kReasonCapacity = 512;

const char* DeviceName(int32_t device_type) {
  switch (device_type) {
    case ATTNRT_DEVICE_CPU:
      return "cpu";
    case ATTNRT_DEVICE_CUDA:
      return "cuda";
    default:
      return "unknown";
  }
}

}  // namespace

void Registry::Build(const std::vector<std::unique_ptr<PluginRecord>>& plugins) {
  ranked_.clear();
  for (const auto& plugin : plugins) {
    for (const auto& kernel : plugin->kernels) ranked_.push_back(&kernel);
  }
  std::sort(ranked_.begin(), ranked_.end(), [](const KernelRecord* a, const KernelRecord* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->name < b->name;
  });
}

std::vector<const KernelRecord*> Registry::KernelsFor(int32_t op_kind) const {
  std::vector<const KernelRecord*> kernels;
  for (const auto* kernel : ranked_) {
    if (kernel->op_kind == op_kind) kernels.push_back(kernel);
  }
  return kernels;
}

std::vector<Candidate> Registry::Evaluate(const RuntimeConfig& config, int32_t op_kind,
                                          const Problem& problem) const {
  const int32_t device_type = problem.device_type();
  const AbiNeed need = problem.abi_need();
  std::vector<Candidate> candidates;
  bool selected = false;
  for (const auto* kernel : KernelsFor(op_kind)) {
    Candidate candidate{kernel, ATTNRT_CANDIDATE_DECLINED, "", false};
    if (!kernel->plugin->available) {
      candidate.status = ATTNRT_CANDIDATE_UNAVAILABLE;
      candidate.reason =
          "plugin '" + kernel->plugin->name + "' unavailable: " + kernel->plugin->reason;
    } else if (kernel->device_type != device_type) {
      candidate.status = ATTNRT_CANDIDATE_WRONG_DEVICE;
      candidate.reason = std::string("runs on ") + DeviceName(kernel->device_type) +
                         ", the tensors are on " + DeviceName(device_type);
    } else if (const std::string* pattern = config.disabled.Match(kernel->name)) {
      candidate.status = ATTNRT_CANDIDATE_DISABLED;
      candidate.reason = "disabled by " + config.disabled.source + " pattern '" + *pattern + "'";
    } else if (!config.pins.empty() && config.pins.Match(kernel->name) == nullptr) {
      candidate.status = ATTNRT_CANDIDATE_NOT_PINNED;
      candidate.reason = "not among the kernels pinned by " + config.pins.source;
    } else if (kernel->plugin->abi_minor < need.minor) {
      candidate.reason = "plugin '" + kernel->plugin->name + "' was built for ABI 1." +
                         std::to_string(kernel->plugin->abi_minor) + ", and " + need.feature +
                         " needs ABI 1." + std::to_string(need.minor);
    } else {
      char reason[kReasonCapacity] = {0};
      int32_t accepted = 0;
      const std::string failure = CallPlugin([&] {
        accepted = kernel->desc->supports(kernel->plugin->context, problem.abi_for_kernel(*kernel),
                                          reason, sizeof(reason));
      });
      reason[sizeof(reason) - 1] = '\0';
      if (!failure.empty()) {
        candidate.reason = "supports() " + failure;
        candidate.malfunction = true;
      } else if (accepted == 1) {
        candidate.status = selected ? ATTNRT_CANDIDATE_ELIGIBLE : ATTNRT_CANDIDATE_SELECTED;
        selected = true;
      } else if (accepted != 0) {
        candidate.reason = "supports() returned " + std::to_string(accepted) +
                           ", neither 1 (accepts) nor 0 (declines)";
        candidate.malfunction = true;
      } else {
        candidate.reason = reason[0] != '\0' ? reason : "declined without a reason";
      }
    }
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

attnrt_status RejectionCode(const std::vector<Candidate>& candidates) {
  for (const auto& candidate : candidates) {
    if (candidate.malfunction) return ATTNRT_ERROR_INTERNAL;
  }
  return ATTNRT_ERROR_UNSUPPORTED;
}

std::string DescribeRejections(const std::vector<Candidate>& candidates) {
  if (candidates.empty()) return "no kernel is registered for this op";
  std::string text;
  for (const auto& candidate : candidates) {
    if (!text.empty()) text += "; ";
    text += candidate.kernel->name + ": " + candidate.reason;
  }
  return text;
}

}  // namespace attnrt::core
