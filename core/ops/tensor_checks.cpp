#include "core/ops/tensor_checks.h"

#include <algorithm>
#include <vector>

namespace attnrt::core {

bool DtypeEquals(attnrt_dtype a, attnrt_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

int DtypeBits(attnrt_dtype dtype) {
  return std::string_view(attnrt_dtype_name(dtype)) == "unknown" ? 0 : dtype.bits;
}

std::string ShapeString(const attnrt_tensor& t) {
  std::string s = "[";
  for (int32_t i = 0; t.shape != nullptr && i < t.ndim; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

std::string DeviceString(attnrt_device device) {
  switch (device.device_type) {
    case ATTNRT_DEVICE_CPU:
      return StrCat("cpu:", device.device_id);
    case ATTNRT_DEVICE_CUDA:
      return StrCat("cuda:", device.device_id);
    default:
      return StrCat("device_type ", device.device_type, ":", device.device_id);
  }
}

std::string DtypeString(attnrt_dtype dtype) {
  const std::string_view known = attnrt_dtype_name(dtype);
  if (known != "unknown") return std::string(known);
  std::string_view family;
  switch (dtype.code) {
    case ATTNRT_DTYPE_CODE_INT:
      family = "int";
      break;
    case ATTNRT_DTYPE_CODE_UINT:
      family = "uint";
      break;
    case ATTNRT_DTYPE_CODE_FLOAT:
      family = "float";
      break;
    case ATTNRT_DTYPE_CODE_BFLOAT:
      family = "bfloat";
      break;
    default:
      break;
  }
  if (family.empty()) {
    return StrCat("dtype(code=", static_cast<int>(dtype.code),
                  ", bits=", static_cast<int>(dtype.bits),
                  ", lanes=", static_cast<int>(dtype.lanes), ")");
  }
  std::string text = StrCat(family, static_cast<int>(dtype.bits));
  if (dtype.lanes != 1) text += StrCat("x", static_cast<int>(dtype.lanes));
  return text;
}

Status CheckWellFormed(const attnrt_tensor& t, std::string_view name) {
  if (t.ndim < 0 || t.ndim > kMaxRank) {
    return InvalidArgument(StrCat(name, ": ndim must be in [0, ", kMaxRank, "], got ", t.ndim));
  }
  if (t.ndim > 0 && t.shape == nullptr) {
    return InvalidArgument(StrCat(name, ": shape is NULL for a tensor of rank ", t.ndim));
  }
  int64_t elements = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    const int64_t d = t.shape[i];
    if (d < 0) {
      return InvalidArgument(StrCat(name, ": dimension ", i, " must be non-negative, got ", d,
                                    " (shape ", ShapeString(t), ")"));
    }
    if (d > kMaxDimExtent) {
      return InvalidArgument(StrCat(name, ": dimension ", i, " is ", d,
                                    ", which exceeds the supported maximum ", kMaxDimExtent));
    }
    // Both factors are at most 2^56 and 2^31 here, so the product fits in int64 before the check.
    elements *= d;
    if (elements > kMaxElements) {
      return InvalidArgument(StrCat(name, ": shape ", ShapeString(t),
                                    " has more elements than the supported maximum ",
                                    kMaxElements));
    }
  }
  return Status::Ok();
}

int64_t NumElements(const attnrt_tensor& t) {
  int64_t elements = 1;
  for (int32_t i = 0; i < t.ndim; ++i) elements *= t.shape[i];
  return elements;
}

uint64_t NumBytes(const attnrt_tensor& t) {
  const uint64_t bits =
      static_cast<uint64_t>(NumElements(t)) * static_cast<uint64_t>(DtypeBits(t.dtype));
  return (bits + 7) / 8;
}

Status CheckCompact(const attnrt_tensor& t, std::string_view name) {
  if (t.strides == nullptr || NumElements(t) == 0) return Status::Ok();
  int64_t expected = 1;
  bool compact = true;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) compact = false;
    expected *= t.shape[i];
  }
  if (compact) return Status::Ok();
  return InvalidArgument(StrCat(name,
                                ": only compact row-major tensors are supported, got strides ",
                                StridesString(t), " for shape ", ShapeString(t)));
}

std::string StridesString(const attnrt_tensor& t) {
  std::vector<int64_t> strides(static_cast<size_t>(std::max(t.ndim, 0)));
  int64_t compact = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    strides[static_cast<size_t>(i)] = t.strides != nullptr ? t.strides[i] : compact;
    compact *= t.shape[i];
  }
  std::string text = "[";
  for (size_t i = 0; i < strides.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(strides[i]);
  }
  return text + "]";
}

Status CheckRank(const attnrt_tensor& t, std::string_view name, int32_t rank) {
  if (t.ndim == rank) return Status::Ok();
  return InvalidArgument(StrCat(name, ": expected rank ", rank, ", got ", t.ndim));
}

Status CheckDtype(const attnrt_tensor& t, std::string_view name, attnrt_dtype expected,
                  std::string_view why) {
  if (DtypeEquals(t.dtype, expected)) return Status::Ok();
  std::string message = StrCat(name, ": expected dtype ", DtypeString(expected));
  if (!why.empty()) message += StrCat(" (", why, ")");
  return InvalidArgument(StrCat(message, ", got ", DtypeString(t.dtype)));
}

bool SameDevice(attnrt_device a, attnrt_device b) {
  if (a.device_type != b.device_type) return false;
  return a.device_type == ATTNRT_DEVICE_CPU || a.device_id == b.device_id;
}

bool Overlaps(const ByteRange& a, const ByteRange& b) {
  if (a.empty() || b.empty()) return false;
  return a.begin < b.end && b.begin < a.end;
}

Status ResolveRange(const attnrt_tensor& t, std::string_view name, ByteRange* out) {
  const uint64_t bytes = NumBytes(t);
  if (t.data == nullptr) {
    if (bytes != 0) {
      return InvalidArgument(StrCat(name, ": data is NULL but the tensor has shape ",
                                    ShapeString(t), " (", NumElements(t), " elements)"));
    }
    *out = ByteRange{};
    return Status::Ok();
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t max = UINTPTR_MAX;
  if (t.byte_offset > max - base || bytes > max - base - t.byte_offset) {
    return InvalidArgument(StrCat(name, ": data + byte_offset (", t.byte_offset, ") + ", bytes,
                                  " bytes wraps around the address space"));
  }
  out->begin = base + static_cast<uintptr_t>(t.byte_offset);
  out->end = out->begin + static_cast<uintptr_t>(bytes);
  return Status::Ok();
}

Status ValidationException(const char* op, const char* where, bool out_of_memory) noexcept {
  const attnrt_status code = out_of_memory ? ATTNRT_ERROR_OUT_OF_MEMORY : ATTNRT_ERROR_INTERNAL;
  try {
    return {code, StrCat(op, out_of_memory ? ": out of memory in " : ": unexpected exception in ",
                         where)};
  } catch (...) {
    return {code, std::string()};
  }
}

}  // namespace attnrt::core
