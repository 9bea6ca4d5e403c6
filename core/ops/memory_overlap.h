// Exact element-level overlap of strided tensors: whether two views (or one view with itself) share
// a byte, decided from their strides rather than from the address ranges they span. Two views of
// one allocation may interleave (the K and V halves of one cache tensor) without sharing an
// element; a range test would reject them.
//
// The decision: disjoint address ranges are disjoint; otherwise, when both views have the same
// extents and strides, the pair is one view with an extra dimension of extent 2 whose stride is the
// distance between the two bases, and the sorted-strides rule (each stride, in increasing order, at
// least the span of every smaller dimension) proves that view free of overlap; otherwise the
// contiguous runs of both views are listed, sorted and swept, up to kMaxOverlapRuns runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnrt/attnrt.h"
#include "core/ops/tensor_checks.h"
#include "core/status.h"

namespace attnrt::core {

// The byte layout of a well-formed tensor: element 0 at `base`, `element_bytes` per element, and
// its dimensions of extent > 1 as (extent, byte stride), sorted by stride. `empty` when it has no
// elements.
struct StridedBytes {
  uintptr_t base = 0;
  int64_t element_bytes = 0;
  int32_t ndim = 0;
  int64_t extent[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  bool empty = true;
};

// Most contiguous runs the exhaustive comparison lists (both views together); beyond it the answer
// is kUndecided.
inline constexpr int64_t kMaxOverlapRuns = int64_t{1} << 22;

enum class Overlap { kDisjoint, kOverlap, kUndecided };

// The layout of `t` (a well-formed tensor of a whole-byte dtype). Errors, naming `name`: a negative
// stride, data NULL with elements, or a span that wraps the address space.
Status DescribeStrided(const attnrt_tensor& t, std::string_view name, StridedBytes* out);

// [first byte, last byte + 1) of the view; empty for an empty view.
ByteRange SpanOf(const StridedBytes& v);

// Whether two elements of `v` share a byte (a zero stride of an extent > 1 does).
Overlap SelfOverlap(const StridedBytes& v);

// Whether an element of `a` shares a byte with an element of `b`.
Overlap ViewsOverlap(const StridedBytes& a, const StridedBytes& b);

}  // namespace attnrt::core
