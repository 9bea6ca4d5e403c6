#include "core/host_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/ops/tensor_checks.h"

namespace attnrt::core {
namespace {

// The bytes a strided tensor's elements span: element 0 lies `lead` bytes past `begin`.
struct Span {
  uintptr_t begin = 0;
  uint64_t size = 0;
  uint64_t lead = 0;
};

// False when the span does not fit the address space (strides far beyond any real buffer).
bool SpanOf(const attnrt_tensor& t, Span* out) {
  const int64_t element = t.dtype.bits / 8;
  int64_t low = 0;   // most negative element offset, in elements
  int64_t high = 0;  // most positive
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    const int64_t extent = t.shape[d];
    const int64_t stride = t.strides != nullptr ? t.strides[d] : expected;
    int64_t reach = 0;
    if (__builtin_mul_overflow(stride, extent - 1, &reach)) return false;
    if (reach < 0 ? __builtin_add_overflow(low, reach, &low)
                  : __builtin_add_overflow(high, reach, &high)) {
      return false;
    }
    if (t.strides == nullptr && __builtin_mul_overflow(expected, extent, &expected)) return false;
  }
  int64_t count = 0;
  int64_t bytes = 0;
  int64_t lead = 0;
  if (__builtin_sub_overflow(high, low, &count) || __builtin_add_overflow(count, 1, &count) ||
      __builtin_mul_overflow(count, element, &bytes) ||
      __builtin_mul_overflow(-low, element, &lead)) {
    return false;
  }
  const uintptr_t first = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  if (static_cast<uint64_t>(lead) > first ||
      static_cast<uint64_t>(bytes) > UINTPTR_MAX - (first - static_cast<uint64_t>(lead))) {
    return false;
  }
  *out = {first - static_cast<uintptr_t>(lead), static_cast<uint64_t>(bytes),
          static_cast<uint64_t>(lead)};
  return true;
}

bool Snapshotted(const attnrt_tensor* t) {
  if (t == nullptr || t->device.device_type != ATTNRT_DEVICE_CPU || t->dtype.bits < 8 ||
      t->data == nullptr) {
    return false;
  }
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] == 0) return false;
  }
  return true;
}

}  // namespace

Status HostSnapshot::Take(const OpFamily& family, const TensorList& inputs,
                          const TensorList& outputs) {
  const std::span<const size_t> indices = family.HostReadInputs();
  const std::span<const size_t> written = family.WrittenInputs();
  if (inputs.count > kMaxInputs) {
    return Internal(
        StrCat("HostSnapshot holds ", kMaxInputs, " inputs, the op has ", inputs.count));
  }
  count_ = inputs.count;
  std::copy(inputs.tensors, inputs.tensors + inputs.count, pointers_.begin());
  std::array<Span, kMaxInputs> spans{};  // size 0: not copied
  size_t total = 0;
  for (size_t i : indices) {
    const attnrt_tensor* t = inputs.at(i);
    if (!Snapshotted(t)) continue;
    if (!SpanOf(*t, &spans[i])) {
      return InvalidArgument(StrCat("input '", family.input_name(i),
                                    "': its strides and byte_offset reach outside the address "
                                    "space (shape ",
                                    ShapeString(*t), ")"));
    }
    // Outputs (and inputs written in place) change while the run reads this input's copy: one
    // over the caller's array would silently overwrite an input, so it is refused.
    const ByteRange in_range{spans[i].begin, spans[i].begin + spans[i].size};
    for (size_t o = 0; o < outputs.count; ++o) {
      const attnrt_tensor* out = outputs.at(o);
      if (out == nullptr || out->device.device_type != ATTNRT_DEVICE_CPU) continue;
      ByteRange out_range;
      ATTNRT_RETURN_IF_ERROR(ResolveRange(*out, family.output_name(o), &out_range));
      if (Overlaps(out_range, in_range)) {
        return InvalidArgument(StrCat("Output '", family.output_name(o), "' overlaps Input '",
                                      family.input_name(i),
                                      "' in memory, expected disjoint buffers"));
      }
    }
    for (size_t w : written) {
      const attnrt_tensor* cache = inputs.at(w);
      if (cache == nullptr || cache->device.device_type != ATTNRT_DEVICE_CPU) continue;
      ByteRange cache_range;
      ATTNRT_RETURN_IF_ERROR(ResolveRange(*cache, family.input_name(w), &cache_range));
      if (Overlaps(cache_range, in_range)) {
        return InvalidArgument(StrCat("Input '", family.input_name(i), "' shares memory with ",
                                      family.input_name(w), "; the run writes ",
                                      family.input_name(w), ", expected disjoint memory"));
      }
    }
    total += (spans[i].size + kAlignment - 1) / kAlignment * kAlignment;
  }
  std::byte* storage = inline_;
  if (total > kInlineBytes) {
    heap_.reset(new (std::nothrow) std::byte[total + kAlignment]);
    if (!heap_) {
      return {ATTNRT_ERROR_OUT_OF_MEMORY,
              StrCat("cannot allocate ", total, " bytes to copy the host integer inputs")};
    }
    const uintptr_t raw = reinterpret_cast<uintptr_t>(heap_.get());
    storage = heap_.get() + ((kAlignment - raw % kAlignment) % kAlignment);
  }
  size_t offset = 0;
  for (size_t i : indices) {
    if (spans[i].size == 0) continue;
    std::memcpy(storage + offset, reinterpret_cast<const void*>(spans[i].begin), spans[i].size);
    copies_[i] = *inputs.at(i);
    copies_[i].data = storage + offset + spans[i].lead;
    copies_[i].byte_offset = 0;
    pointers_[i] = &copies_[i];
    offset += (spans[i].size + kAlignment - 1) / kAlignment * kAlignment;
  }
  return Status::Ok();
}

}  // namespace attnrt::core
