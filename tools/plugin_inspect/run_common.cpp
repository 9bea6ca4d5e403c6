#include "run_common.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "dtypes.h"
#include "tensor_compare.h"
#include "text_output.h"

namespace plugin_inspect {

std::string same_algorithm_scalar(const std::string& kernel) {
  const std::size_t dot = kernel.rfind('.');
  std::string family = dot == std::string::npos ? kernel : kernel.substr(0, dot);
  if (const std::size_t at = family.find(".paged_gqa."); at != std::string::npos) {
    family.replace(at, std::string(".paged_gqa.").size(), ".gqa.");
  }
  return family + ".scalar";
}

std::string reference_glob(const attnrt_runtime* runtime, const std::string& kernel) {
  const std::string scalar = same_algorithm_scalar(kernel);
  return runtime_has_kernel(runtime, scalar) ? scalar : kReferenceKernelGlob;
}

RuntimeSettings reference_settings(const RuntimeSettings& settings, const std::string& glob) {
  RuntimeSettings reference = settings;
  reference.kernel = glob;
  reference.disable = "";
  return reference;
}

ReferenceSessions::ReferenceSessions(const attnrt_runtime* runtime, RuntimeSettings settings,
                                     const attnrt_gqa_attributes& attributes)
    : runtime_(runtime), settings_(std::move(settings)), attributes_(attributes) {}

GqaSession& ReferenceSessions::for_kernel(const std::string& kernel) {
  const std::string glob = reference_glob(runtime_, kernel);
  for (Entry& entry : entries_) {
    if (entry.glob == glob) return *entry.session;
  }
  Entry entry{glob, make_runtime(reference_settings(settings_, glob)), nullptr};
  entry.session = std::make_unique<GqaSession>(entry.runtime.get(), attributes_);
  entries_.push_back(std::move(entry));
  return *entries_.back().session;
}

std::string describe_reference(const std::string& kernel, const std::string& reference) {
  if (reference.empty()) return "(not run)";
  if (reference == same_algorithm_scalar(kernel)) {
    return reference + (reference == kernel ? " (the kernel under test is itself the scalar kernel)"
                                            : " (the scalar kernel of the same algorithm)");
  }
  return reference + " (the highest-ranked kernel matching '" + kReferenceKernelGlob +
         "': " + kernel + "'s algorithm has no scalar kernel here, so padded rows may differ)";
}

double tolerance_for(const RunOptions& options, attnrt_dtype dtype) {
  if (options.tolerance) return *options.tolerance;
  if (same_dtype(dtype, kFloat16)) return 2e-3;
  if (same_dtype(dtype, kBFloat16)) return 1.6e-2;
  return 1e-4;
}

void OutputErrors::accumulate(const GqaTensors& actual, const GqaTensors& reference) {
  const auto error = [&](int index) {
    const auto& a = actual.outputs[static_cast<std::size_t>(index)];
    const auto& b = reference.outputs[static_cast<std::size_t>(index)];
    return a && b ? max_abs_error(*a, *b) : 0.0;
  };
  // std::max keeps NaN from neither side, so fold with a NaN-propagating maximum.
  const auto fold = [](double current, double next) {
    return std::isnan(next) || next > current ? next : current;
  };
  output = fold(output, error(ATTNRT_GQA_OUTPUT_OUTPUT));
  present_key = fold(present_key, error(ATTNRT_GQA_OUTPUT_PRESENT_KEY));
  present_value = fold(present_value, error(ATTNRT_GQA_OUTPUT_PRESENT_VALUE));
  if (actual.outputs[ATTNRT_GQA_OUTPUT_OUTPUT_QK]) {
    output_qk = fold(output_qk.value_or(0.0), error(ATTNRT_GQA_OUTPUT_OUTPUT_QK));
  }
}

double OutputErrors::worst() const {
  double worst_error = std::max({output, present_key, present_value, output_qk.value_or(0.0)});
  for (double e : {output, present_key, present_value, output_qk.value_or(0.0)}) {
    if (std::isnan(e)) worst_error = e;
  }
  return worst_error;
}

nlohmann::ordered_json OutputErrors::to_json() const {
  // JSON has no inf/NaN: those become null, which a reader treats as a failed comparison.
  const auto number = [](double e) -> nlohmann::ordered_json {
    if (!std::isfinite(e)) return nullptr;
    return e;
  };
  nlohmann::ordered_json json;
  json["output"] = number(output);
  json["present_key"] = number(present_key);
  json["present_value"] = number(present_value);
  if (output_qk) json["output_qk"] = number(*output_qk);
  return json;
}

std::string OutputErrors::to_text() const {
  std::string text = "output " + format_error(output) + "  present_key " +
                     format_error(present_key) + "  present_value " + format_error(present_value);
  if (output_qk) text += "  output_qk " + format_error(*output_qk);
  return text;
}

}  // namespace plugin_inspect
