#include "model_presets.h"

#include <array>
#include <string>

#include "errors.h"

namespace plugin_inspect {
namespace {

constexpr std::array kPresets{
    ModelPreset{"llama-3-8b", 32, 8, 128, 500000.0, -1, 0.0f, "Llama 3 / 3.1 8B"},
    ModelPreset{"llama-3.2-1b", 32, 8, 64, 500000.0, -1, 0.0f, "Llama 3.2 1B (small, quick)"},
    ModelPreset{"qwen2.5-7b", 28, 4, 128, 1000000.0, -1, 0.0f, "Qwen2.5 7B"},
    ModelPreset{"qwen2.5-0.5b", 14, 2, 64, 1000000.0, -1, 0.0f, "Qwen2.5 0.5B (small, quick)"},
    ModelPreset{"mistral-7b", 32, 8, 128, 1000000.0, 4096, 0.0f, "Mistral 7B, sliding window 4096"},
    ModelPreset{"phi-3-mini", 32, 32, 96, 10000.0, -1, 0.0f, "Phi-3 mini (MHA, head size 96)"},
    ModelPreset{"gemma-2-9b", 16, 8, 256, 10000.0, 4096, 50.0f,
                "Gemma 2 9B local layers: softcap 50, window 4096"},
};

}  // namespace

std::span<const ModelPreset> model_presets() { return kPresets; }

const ModelPreset& find_model_preset(std::string_view name) {
  for (const ModelPreset& preset : kPresets) {
    if (preset.name == name) return preset;
  }
  std::string known;
  for (const ModelPreset& preset : kPresets) {
    if (!known.empty()) known += ", ";
    known += preset.name;
  }
  throw UsageError("unknown model '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace plugin_inspect
