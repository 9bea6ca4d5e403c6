// Element types as plugin-inspect uses them: names, sizes, and float conversion for filling inputs
// and comparing outputs of any dtype attnrt knows on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnrt/attnrt.h"

namespace plugin_inspect {

inline constexpr attnrt_dtype kFloat32 = ATTNRT_DTYPE_FLOAT32;
inline constexpr attnrt_dtype kFloat16 = ATTNRT_DTYPE_FLOAT16;
inline constexpr attnrt_dtype kBFloat16 = ATTNRT_DTYPE_BFLOAT16;
inline constexpr attnrt_dtype kInt8 = ATTNRT_DTYPE_INT8;
inline constexpr attnrt_dtype kUInt8 = ATTNRT_DTYPE_UINT8;
inline constexpr attnrt_dtype kInt32 = ATTNRT_DTYPE_INT32;
inline constexpr attnrt_dtype kInt64 = ATTNRT_DTYPE_INT64;

inline bool same_dtype(attnrt_dtype a, attnrt_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// --dtype (the query's): "float32", "float16" or "bfloat16"; --cache-dtype: those, "int8" (8-bit
// quantized cache) or "uint8" (4-bit). Throw UsageError naming the flag and only its dtypes.
attnrt_dtype query_dtype_from_name(std::string_view name);
attnrt_dtype cache_dtype_from_name(std::string_view name);

// attnrt_dtype_name, or "dtype(code=C,bits=B)" for a dtype the library does not know.
std::string dtype_name(attnrt_dtype dtype);

// Bytes of one element; every dtype the tool allocates is byte-sized or larger.
std::size_t element_size(attnrt_dtype dtype);

bool is_floating(attnrt_dtype dtype);

// Element i of a host buffer of `dtype`, widened to double (float16/bfloat16 decoded exactly).
double load_element(const void* data, attnrt_dtype dtype, std::size_t i);

// Stores `value` as element i, rounding to nearest even for float16/bfloat16 and saturating casts
// for integer types.
void store_element(void* data, attnrt_dtype dtype, std::size_t i, double value);

}  // namespace plugin_inspect
