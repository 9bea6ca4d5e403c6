#include "run_common.h"

#include <algorithm>
#include <cmath>

#include "dtypes.h"
#include "tensor_compare.h"
#include "text_output.h"

namespace plugin_inspect {

RuntimeSettings reference_settings(const RuntimeSettings& settings) {
  RuntimeSettings reference = settings;
  reference.kernel = kReferenceKernelGlob;
  reference.disable = "";
  return reference;
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
