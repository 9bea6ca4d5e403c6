// Attention shapes of well-known decoder models, as embedded presets for `explain --model` and
// `run --model`. Values are the models' published configs (config.json of each checkpoint).
#pragma once

#include <span>
#include <string_view>

namespace plugin_inspect {

struct ModelPreset {
  std::string_view name;
  int num_heads;
  int kv_num_heads;
  int head_size;
  double rope_theta;      // RoPE base θ (cos/sin caches are computed from it)
  int local_window_size;  // -1 = full attention; else ONNX semantics: W keys, the query included
  float softcap;          // attention logit soft-capping; 0 = off
  std::string_view notes;
};

inline constexpr std::string_view kDefaultModel = "llama-3-8b";

std::span<const ModelPreset> model_presets();

// The preset named `name`; throws UsageError listing the known names otherwise.
const ModelPreset& find_model_preset(std::string_view name);

}  // namespace plugin_inspect
