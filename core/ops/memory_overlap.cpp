// Exact overlap of strided tensors (memory_overlap.h).
#include "core/ops/memory_overlap.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace attnrt::core {
namespace {

// Sorts the dimensions by stride and merges a dimension into the next when the next continues it
// (stride == extent * stride of the smaller one): the same bytes, fewer runs to list.
void Normalize(StridedBytes* v) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent)
  for (int32_t d = 0; d < v->ndim; ++d) dims.emplace_back(v->stride[d], v->extent[d]);
  std::sort(dims.begin(), dims.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& [stride, extent] : dims) {
    if (!merged.empty() && merged.back().first != 0 &&
        stride == merged.back().first * merged.back().second) {
      merged.back().second *= extent;
      continue;
    }
    merged.emplace_back(stride, extent);
  }
  v->ndim = static_cast<int32_t>(merged.size());
  for (int32_t d = 0; d < v->ndim; ++d) {
    v->stride[d] = merged[static_cast<size_t>(d)].first;
    v->extent[d] = merged[static_cast<size_t>(d)].second;
  }
}

// The sorted-strides rule: every stride, in increasing order, at least the bytes spanned by the
// smaller dimensions (and the element); then no two elements share a byte. `v` is normalized.
bool ProvablyDisjointElements(const StridedBytes& v) {
  int64_t span = v.element_bytes;
  for (int32_t d = 0; d < v.ndim; ++d) {
    if (v.stride[d] < span) return false;
    span += (v.extent[d] - 1) * v.stride[d];
  }
  return true;
}

// Contiguous runs of a normalized view: every run is `length` bytes long; `starts` sorted.
struct Runs {
  int64_t length = 0;
  std::vector<uintptr_t> starts;
};

// False when the view has more than `budget` runs.
bool ListRuns(const StridedBytes& v, int64_t budget, Runs* out) {
  int32_t first_outer = 0;
  out->length = v.element_bytes;
  if (v.ndim > 0 && v.stride[0] == v.element_bytes) {
    out->length = v.extent[0] * v.element_bytes;
    first_outer = 1;
  }
  int64_t count = 1;
  for (int32_t d = first_outer; d < v.ndim; ++d) {
    if (v.extent[d] > budget / count) return false;
    count *= v.extent[d];
  }
  out->starts.clear();
  out->starts.reserve(static_cast<size_t>(count));
  int64_t index[kMaxRank] = {};
  for (int64_t r = 0; r < count; ++r) {
    int64_t offset = 0;
    for (int32_t d = first_outer; d < v.ndim; ++d) offset += index[d] * v.stride[d];
    out->starts.push_back(v.base + static_cast<uintptr_t>(offset));
    for (int32_t d = first_outer; d < v.ndim; ++d) {
      if (++index[d] < v.extent[d]) break;
      index[d] = 0;
    }
  }
  std::sort(out->starts.begin(), out->starts.end());
  return true;
}

bool SameGeometry(const StridedBytes& a, const StridedBytes& b) {
  if (a.element_bytes != b.element_bytes || a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.extent[d] != b.extent[d] || a.stride[d] != b.stride[d]) return false;
  }
  return true;
}

}  // namespace

Status DescribeStrided(const attnrt_tensor& t, std::string_view name, StridedBytes* out) {
  StridedBytes v;
  const int bits = DtypeBits(t.dtype);
  const int64_t elements = NumElements(t);
  v.empty = elements == 0;
  if (bits % 8 != 0 && t.strides != nullptr) {
    return InvalidArgument(StrCat(name, ": strides are not supported for the packed dtype ",
                                  DtypeString(t.dtype), ", expected a compact tensor"));
  }
  ByteRange range;
  if (v.empty || bits % 8 != 0 || t.strides == nullptr) {
    // Compact: one run of NumBytes bytes (ResolveRange checks data and wrapping).
    ATTNRT_RETURN_IF_ERROR(ResolveRange(t, name, &range));
    v.base = range.begin;
    v.element_bytes = static_cast<int64_t>(range.end - range.begin);
    *out = v;
    return Status::Ok();
  }
  v.element_bytes = bits / 8;
  int64_t last = 0;  // byte offset of the last element
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 1) continue;
    const int64_t stride = t.strides[d];
    if (stride < 0) {
      return InvalidArgument(StrCat(name, ": dimension ", d, " has stride ", stride,
                                    ", expected strides of at least 0"));
    }
    int64_t bytes = 0;
    int64_t reach = 0;
    if (__builtin_mul_overflow(stride, v.element_bytes, &bytes) ||
        __builtin_mul_overflow(bytes, t.shape[d] - 1, &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return InvalidArgument(StrCat(name, ": strides reach beyond the address space (dimension ", d,
                                    " has stride ", stride, ")"));
    }
    v.extent[v.ndim] = t.shape[d];
    v.stride[v.ndim] = bytes;
    ++v.ndim;
  }
  if (t.data == nullptr) {
    return InvalidArgument(StrCat(name, ": data is NULL but the tensor has shape ", ShapeString(t),
                                  " (", elements, " elements)"));
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  const uint64_t span = static_cast<uint64_t>(last) + static_cast<uint64_t>(v.element_bytes);
  if (t.byte_offset > UINTPTR_MAX - base || span > UINTPTR_MAX - base - t.byte_offset) {
    return InvalidArgument(StrCat(name, ": data + byte_offset (", t.byte_offset, ") + ", span,
                                  " bytes wraps around the address space"));
  }
  v.base = base + static_cast<uintptr_t>(t.byte_offset);
  Normalize(&v);
  *out = v;
  return Status::Ok();
}

ByteRange SpanOf(const StridedBytes& v) {
  if (v.empty) return ByteRange{};
  int64_t last = 0;
  for (int32_t d = 0; d < v.ndim; ++d) last += (v.extent[d] - 1) * v.stride[d];
  return ByteRange{v.base, v.base + static_cast<uintptr_t>(last + v.element_bytes)};
}

Overlap SelfOverlap(const StridedBytes& v) {
  if (v.empty) return Overlap::kDisjoint;
  if (ProvablyDisjointElements(v)) return Overlap::kDisjoint;
  Runs runs;
  if (!ListRuns(v, kMaxOverlapRuns, &runs)) return Overlap::kUndecided;
  for (size_t k = 1; k < runs.starts.size(); ++k) {
    if (runs.starts[k] - runs.starts[k - 1] < static_cast<uintptr_t>(runs.length)) {
      return Overlap::kOverlap;
    }
  }
  return Overlap::kDisjoint;
}

Overlap ViewsOverlap(const StridedBytes& a, const StridedBytes& b) {
  if (!Overlaps(SpanOf(a), SpanOf(b))) return Overlap::kDisjoint;
  if (SameGeometry(a, b) && a.ndim < kMaxRank) {
    if (a.base == b.base) return Overlap::kOverlap;
    // Both views as one, with a dimension of extent 2 stepping from the lower base to the higher.
    StridedBytes both = a;
    both.base = std::min(a.base, b.base);
    both.extent[both.ndim] = 2;
    both.stride[both.ndim] = static_cast<int64_t>(std::max(a.base, b.base) - both.base);
    ++both.ndim;
    Normalize(&both);
    if (ProvablyDisjointElements(both)) return Overlap::kDisjoint;
  }
  Runs ra;
  Runs rb;
  if (!ListRuns(a, kMaxOverlapRuns / 2, &ra) || !ListRuns(b, kMaxOverlapRuns / 2, &rb)) {
    return Overlap::kUndecided;
  }
  // Runs of one list all have one length, so their ends are sorted as their starts are.
  size_t i = 0;
  size_t j = 0;
  while (i < ra.starts.size() && j < rb.starts.size()) {
    const uintptr_t a_end = ra.starts[i] + static_cast<uintptr_t>(ra.length);
    const uintptr_t b_end = rb.starts[j] + static_cast<uintptr_t>(rb.length);
    if (a_end <= rb.starts[j]) {
      ++i;
    } else if (b_end <= ra.starts[i]) {
      ++j;
    } else {
      return Overlap::kOverlap;
    }
  }
  return Overlap::kDisjoint;
}

}  // namespace attnrt::core
