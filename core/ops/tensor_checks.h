// Small checks on attnrt_tensor descriptors shared by the op validators: dtype names and equality,
// well-formed shapes with overflow-safe element counts, compact row-major strides, devices, ranks,
// byte ranges for aliasing checks. Every failing check returns INVALID_ARGUMENT with a message that
// starts with the tensor's name and gives the expected and the actual value.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <string_view>

#include "attnrt/attnrt.h"
#include "core/status.h"

namespace attnrt::core {

// Concatenates its arguments with operator<< (message building).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// The status of an exception that reached a validator's entry point `where` of op `op` ("Group
// QueryAttention", ...): OUT_OF_MEMORY for std::bad_alloc, INTERNAL otherwise. Never throws (an
// allocation failure while building the message leaves the message empty).
Status ValidationException(const char* op, const char* where, bool out_of_memory) noexcept;

// Runs a validator step so that nothing it throws crosses the ABI (see ValidationException).
template <typename Step>
Status GuardValidation(const char* op, const char* where, Step&& step) noexcept {
  try {
    return step();
  } catch (const std::bad_alloc&) {
    return ValidationException(op, where, /*out_of_memory=*/true);
  } catch (...) {
    return ValidationException(op, where, /*out_of_memory=*/false);
  }
}

// Element `index` of a host int32/int64 array at `base` (a value input such as seqlens_k), read
// without assuming its alignment.
inline int32_t ReadInt32(const void* base, int64_t index) {
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(base) + index * 4, sizeof v);
  return v;
}
inline int64_t ReadInt64(const void* base, int64_t index) {
  int64_t v;
  std::memcpy(&v, static_cast<const char*>(base) + index * 8, sizeof v);
  return v;
}

// The element types of attnrt.h.
inline constexpr attnrt_dtype kFloat32 = ATTNRT_DTYPE_FLOAT32;
inline constexpr attnrt_dtype kFloat16 = ATTNRT_DTYPE_FLOAT16;
inline constexpr attnrt_dtype kBFloat16 = ATTNRT_DTYPE_BFLOAT16;
inline constexpr attnrt_dtype kInt8 = ATTNRT_DTYPE_INT8;
inline constexpr attnrt_dtype kUInt8 = ATTNRT_DTYPE_UINT8;
inline constexpr attnrt_dtype kInt32 = ATTNRT_DTYPE_INT32;
inline constexpr attnrt_dtype kInt64 = ATTNRT_DTYPE_INT64;
inline constexpr attnrt_dtype kFloat8E4M3FN = ATTNRT_DTYPE_FLOAT8_E4M3FN;
inline constexpr attnrt_dtype kFloat8E5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;
inline constexpr attnrt_dtype kFloat8E8M0FNU = ATTNRT_DTYPE_FLOAT8_E8M0FNU;
inline constexpr attnrt_dtype kInt4 = ATTNRT_DTYPE_INT4;

// Largest extent of one dimension. Kernels index rows and columns with 32-bit integers and every
// run-time length (seqlens_k, total_sequence_length) is int32, so larger extents are rejected.
inline constexpr int64_t kMaxDimExtent = INT32_MAX;
// Largest element count of one tensor (2^56: any larger tensor is absurd, and byte sizes of every
// known dtype then fit int64 with room to spare).
inline constexpr int64_t kMaxElements = int64_t{1} << 56;
// Largest rank accepted by the generic checks (the ops use ranks 0 to 4).
inline constexpr int32_t kMaxRank = 8;

// The address of element 0 (data + byte_offset); NULL for an absent tensor or NULL data.
inline const void* DataOf(const attnrt_tensor* t) {
  return t != nullptr && t->data != nullptr ? static_cast<const char*>(t->data) + t->byte_offset
                                            : nullptr;
}

// Same code, bits and lanes.
bool DtypeEquals(attnrt_dtype a, attnrt_dtype b);

// Bits per element of a known dtype; 0 for an unknown one.
int DtypeBits(attnrt_dtype dtype);

// "[2, 3, 64]" (rank 0: "[]").
std::string ShapeString(const attnrt_tensor& t);

// "cpu:0", "cuda:1", or "device_type 7:0".
std::string DeviceString(attnrt_device device);

// attnrt_dtype_name for a dtype the library knows; any other is named from its fields, so a
// message says what it got: "int16", "float64", "uint32", "float32x4" (lanes), or
// "dtype(code=9, bits=8, lanes=1)" for a code outside attnrt_dtype_code.
std::string DtypeString(attnrt_dtype dtype);

// ndim in [0, kMaxRank], shape non-NULL when ndim > 0, every extent in [0, kMaxDimExtent], element
// count at most kMaxElements (computed without overflow).
Status CheckWellFormed(const attnrt_tensor& t, std::string_view name);

// Element count of a well-formed tensor (1 for rank 0).
int64_t NumElements(const attnrt_tensor& t);

// Bytes spanned by a well-formed tensor of known dtype: ceil(elements * bits / 8).
uint64_t NumBytes(const attnrt_tensor& t);

// strides NULL, or equal to the compact row-major strides (extents of 1 may carry any stride, and
// a tensor with no elements has no layout), else "<name>: only compact row-major tensors are
// supported, got strides [..] for shape [..]".
Status CheckCompact(const attnrt_tensor& t, std::string_view name);

// "[8192, 1024, 64, 1]": the strides as given, or the compact ones when NULL.
std::string StridesString(const attnrt_tensor& t);

// "<name>: expected rank R, got r".
Status CheckRank(const attnrt_tensor& t, std::string_view name, int32_t rank);

// "<name>: expected dtype D, got d" (with `why` appended in parentheses when non-empty).
Status CheckDtype(const attnrt_tensor& t, std::string_view name, attnrt_dtype expected,
                  std::string_view why = {});

// Equal device type and, except on the CPU, equal device id.
bool SameDevice(attnrt_device a, attnrt_device b);

// Half-open byte range [begin, end) of a tensor's elements in its device's address space.
struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool empty() const { return begin == end; }
};

// Both ranges non-empty and intersecting.
bool Overlaps(const ByteRange& a, const ByteRange& b);

// The range of a well-formed tensor of known dtype: (char*)data + byte_offset, NumBytes(t) long.
// Errors when data is NULL for a tensor with elements, or when the range wraps the address space.
Status ResolveRange(const attnrt_tensor& t, std::string_view name, ByteRange* out);

}  // namespace attnrt::core
