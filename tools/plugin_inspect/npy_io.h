// .npy files as HostTensors. Reading parses and validates the whole header before anything is
// allocated (format versions 1.0, 2.0 and 3.0; every dimension a non-negative integer; the data
// exactly as long as dtype and shape say); writing uses xtensor's header writer. Supported dtypes:
// float32, float16, int8, uint8, int32, int64 (little-endian, C order). bfloat16 has no .npy
// encoding.
#pragma once

#include <filesystem>

#include "host_tensor.h"

namespace plugin_inspect {

// Throws ToolError "<path>: not a regular file (a FIFO)" (or a directory, a device, ...) unless
// `path` is, after following symlinks, a regular file; "<path>: cannot open (...)" when it does
// not exist or cannot be examined. Every input file the tool reads is checked first, so that a
// FIFO or a device never blocks or floods it.
void require_regular_file(const std::filesystem::path& path);

// Throws ToolError when `path` exists and is not a regular file (writing would block on a FIFO
// or write into a device).
void require_writable_file_path(const std::filesystem::path& path);

// Throws ToolError naming the file and the expected vs actual value for: a non-regular file, a bad
// magic or version, a header longer than the file, a malformed header dict (unknown, missing or
// repeated keys; a dimension that is not a non-negative integer), an unsupported dtype, Fortran
// order, a size that overflows 64 bits, and data shorter ("truncated") or longer ("trailing
// data") than dtype and shape need. OutOfMemoryError when the validated data does not fit.
HostTensor load_npy(const std::filesystem::path& path);

// Throws ToolError naming the file when it cannot be written, is not a regular file, or the dtype
// has no .npy encoding.
void save_npy(const std::filesystem::path& path, const HostTensor& tensor);

}  // namespace plugin_inspect
