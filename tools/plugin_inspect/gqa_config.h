// From command-line flags (and optionally a model preset) to a GqaConfig without lengths; the
// subcommands set batch and lengths themselves.
#pragma once

#include <string>

#include "cli_options.h"
#include "gqa_workload.h"
#include "model_presets.h"

namespace plugin_inspect {

// Attributes start at the reference defaults, then the preset (num_heads, kv_num_heads, head size,
// local window, softcap, do_rotary=1), then the flags. dtype defaults to float32; the cache dtype
// to int8 (8-bit quant), uint8 (4-bit or PER_BLOCK_32 quant) or the query dtype. Throws UsageError
// when the head counts or head size end up unset.
GqaConfig config_from_flags(const GqaFlags& flags, const ModelPreset* preset);

// One line: "B=1 S=1 P=4096 T=4097 N=32 Nkv=8 H=128 float32/float32 rotary window=4096 ...".
std::string describe_config(const GqaConfig& config);

}  // namespace plugin_inspect
