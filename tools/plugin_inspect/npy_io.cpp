// xtensor's npy header parser uses std::regex, whose inlined std::function members trip GCC 12's
// -Wmaybe-uninitialized false positive in optimized and sanitizer builds. It
// must be silenced before any standard header is seen, hence first in this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "npy_io.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <xtensor/xnpy.hpp>

#include "dtypes.h"
#include "errors.h"

namespace plugin_inspect {
namespace {

struct NpyType {
  const char* descr;
  attnrt_dtype dtype;
};

// descr strings as numpy writes them on a little-endian machine.
constexpr NpyType kNpyTypes[] = {
    {"<f4", kFloat32}, {"<f2", kFloat16}, {"|i1", kInt8},
    {"|u1", kUInt8},   {"<i4", kInt32},   {"<i8", kInt64},
};

std::string describe_descr(const std::string& descr) {
  if (descr == "<f8") return "float64 ('<f8')";
  if (descr == "|b1") return "bool ('|b1')";
  if (!descr.empty() && descr[0] == '>') return "big-endian '" + descr + "'";
  return "'" + descr + "'";
}

}  // namespace

HostTensor load_npy(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw ToolError(path.string() + ": cannot open");
  try {
    xt::detail::npy_file file = xt::detail::load_npy_file(stream);
    if (!stream) throw ToolError(path.string() + ": truncated .npy data");
    if (file.m_fortran_order) {
      throw ToolError(path.string() +
                      ": Fortran-order arrays are not supported (save a C-order "
                      "array, e.g. np.ascontiguousarray)");
    }
    for (const NpyType& type : kNpyTypes) {
      if (file.m_typestring != type.descr) continue;
      std::vector<int64_t> shape(file.m_shape.begin(), file.m_shape.end());
      HostTensor tensor(type.dtype, std::move(shape));
      std::memcpy(tensor.data(), file.ptr(), tensor.nbytes());
      return tensor;
    }
    throw ToolError(path.string() + ": unsupported dtype " + describe_descr(file.m_typestring) +
                    " (supported: float32, float16, int8, uint8, int32, int64)");
  } catch (const ToolError&) {
    throw;
  } catch (const std::exception& e) {
    throw ToolError(path.string() + ": not a valid .npy file (" + e.what() + ")");
  }
}

void save_npy(const std::filesystem::path& path, const HostTensor& tensor) {
  const char* descr = nullptr;
  for (const NpyType& type : kNpyTypes) {
    if (same_dtype(type.dtype, tensor.dtype())) descr = type.descr;
  }
  if (!descr) {
    throw ToolError(path.string() + ": dtype " + dtype_name(tensor.dtype()) +
                    " cannot be stored in .npy");
  }
  std::ofstream stream(path, std::ios::binary);
  if (!stream) throw ToolError(path.string() + ": cannot create");
  const std::vector<std::size_t> shape(tensor.shape().begin(), tensor.shape().end());
  xt::detail::write_header(stream, descr, false, shape);
  stream.write(static_cast<const char*>(tensor.data()),
               static_cast<std::streamsize>(tensor.nbytes()));
  if (!stream) throw ToolError(path.string() + ": write failed");
}

}  // namespace plugin_inspect
