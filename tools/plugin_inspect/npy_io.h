// .npy files as HostTensors, through xtensor's npy reader and writer. Supported dtypes: float32,
// float16, int8, uint8, int32, int64 (little-endian, C order). bfloat16 has no .npy encoding.
#pragma once

#include <filesystem>

#include "host_tensor.h"

namespace plugin_inspect {

// Throws ToolError naming the file for unreadable files, unsupported dtypes, Fortran order or
// truncated data.
HostTensor load_npy(const std::filesystem::path& path);

// Throws ToolError naming the file when it cannot be written or the dtype has no .npy encoding.
void save_npy(const std::filesystem::path& path, const HostTensor& tensor);

}  // namespace plugin_inspect
