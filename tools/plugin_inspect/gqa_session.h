// One GQA op on a runtime the caller keeps alive: plan (served from the op's plan cache when shapes
// repeat), run with a reusable workspace, explain, and the plan-cache counters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attnrt_handles.h"
#include "gqa_workload.h"

namespace plugin_inspect {

struct StepResult {
  std::string kernel;  // chosen kernel (attnrt_plan_get_info)
  double ms = 0;       // wall time of attnrt_plan_run alone
};

struct PlanCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
};

class GqaSession {
 public:
  GqaSession(attnrt_runtime* runtime, const attnrt_gqa_attributes& attributes);

  // Plans for the tensors' shapes and runs once.
  StepResult step(const GqaTensors& tensors);

  // Every kernel of the op in rank order for these tensors (data is not read).
  // With a non-CPU `device`, the tensors are described as living there (data stays NULL).
  // `tensors_json`, when given, receives each tensor's name, shape, dtype and device.
  ExplanationPtr explain(const GqaTensors& tensors, attnrt_device device = {ATTNRT_DEVICE_CPU, 0},
                         nlohmann::ordered_json* tensors_json = nullptr);

  PlanCacheStats plan_cache_stats() const;

 private:
  struct AlignedFree {
    void operator()(void* p) const;
  };
  OpPtr op_;
  std::unique_ptr<void, AlignedFree> workspace_;
  std::size_t workspace_size_ = 0;
  std::size_t workspace_alignment_ = 0;
};

}  // namespace plugin_inspect
