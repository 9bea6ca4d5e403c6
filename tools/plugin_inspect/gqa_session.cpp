#include "gqa_session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <string>

#include "errors.h"
#include "sizes.h"

namespace plugin_inspect {

void GqaSession::AlignedFree::operator()(void* p) const { std::free(p); }

GqaSession::GqaSession(attnrt_runtime* runtime, const attnrt_gqa_attributes& attributes) {
  attnrt_op* op = nullptr;
  check(attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op));
  op_.reset(op);
}

StepResult GqaSession::step(const GqaTensors& tensors) {
  const GqaBinding binding(tensors);
  attnrt_plan* raw_plan = nullptr;
  check(attnrt_op_plan(op_.get(), binding.inputs(), binding.num_inputs(), binding.outputs(),
                       binding.num_outputs(), &raw_plan));
  const PlanPtr plan(raw_plan);
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  check(attnrt_plan_get_info(plan.get(), &info));

  // Grow the workspace when this plan needs more (or stricter alignment) than the last one.
  const std::size_t alignment = std::max<std::size_t>({info.workspace_alignment, 64});
  if (info.workspace_size > workspace_size_ || alignment > workspace_alignment_) {
    // The kernel's request is checked like any size: rounding must not wrap, and it must fit.
    const auto out_of_memory = [&] {
      return OutOfMemoryError("out of memory while allocating the kernel workspace of " +
                              std::string(info.kernel ? info.kernel : "?") + " (" +
                              format_bytes(info.workspace_size) + memory_note() + ")");
    };
    if (info.workspace_size > SIZE_MAX - alignment) throw out_of_memory();
    const std::size_t bytes = (info.workspace_size + alignment - 1) / alignment * alignment;
    if (!fits_in_memory(bytes)) throw out_of_memory();
    workspace_.reset(nullptr);  // free the old one first: it may be most of the memory
    workspace_size_ = 0;
    workspace_.reset(std::aligned_alloc(alignment, std::max(bytes, alignment)));
    if (!workspace_) throw out_of_memory();
    workspace_size_ = info.workspace_size;
    workspace_alignment_ = alignment;
  }

  StepResult result;
  result.kernel = info.kernel ? info.kernel : "";
  const auto start = std::chrono::steady_clock::now();
  check(attnrt_plan_run(plan.get(), binding.inputs(), binding.num_inputs(), binding.outputs(),
                        binding.num_outputs(), info.workspace_size ? workspace_.get() : nullptr,
                        info.workspace_size, nullptr));
  const auto stop = std::chrono::steady_clock::now();
  result.ms = std::chrono::duration<double, std::milli>(stop - start).count();
  return result;
}

ExplanationPtr GqaSession::explain(const GqaTensors& tensors, attnrt_device device,
                                   nlohmann::ordered_json* tensors_json) {
  GqaBinding binding(tensors);
  binding.place_on(device);
  if (tensors_json) {
    append_tensors_json(*tensors_json, binding.inputs(), binding.num_inputs(),
                        [](size_t i) { return gqa_input_name(static_cast<int>(i)); });
    append_tensors_json(*tensors_json, binding.outputs(), binding.num_outputs(),
                        [](size_t i) { return gqa_output_name(static_cast<int>(i)); });
  }
  attnrt_explanation* explanation = nullptr;
  check(attnrt_op_explain(op_.get(), binding.inputs(), binding.num_inputs(), binding.outputs(),
                          binding.num_outputs(), &explanation));
  return ExplanationPtr(explanation);
}

PlanCacheStats GqaSession::plan_cache_stats() const {
  PlanCacheStats stats;
  check(attnrt_op_plan_cache_stats(op_.get(), &stats.hits, &stats.misses));
  return stats;
}

}  // namespace plugin_inspect
