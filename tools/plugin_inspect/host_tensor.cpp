#include "host_tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "dtypes.h"
#include "errors.h"
#include "sizes.h"

namespace plugin_inspect {

namespace {
constexpr std::size_t kAlignment = 64;
}

HostTensor::HostTensor(attnrt_dtype dtype, std::vector<int64_t> shape, bool allocate,
                       std::string_view what)
    : dtype_(dtype), shape_(std::move(shape)) {
  if (!allocate) return;
  const auto describe = [&] {
    return what.empty() ? "a " + dtype_name(dtype_) + " " + shape_string() + " tensor"
                        : std::string(what) + " " + shape_string();
  };
  const std::optional<uint64_t> size = checked_nbytes();
  if (!size) {
    bool negative = false;
    for (int64_t extent : shape_) negative = negative || extent < 0;
    throw ToolError("cannot allocate " + describe() +
                    (negative ? ": negative dimension" : ": its size overflows 64 bits"));
  }
  // aligned_alloc needs a size that is a non-zero multiple of the alignment.
  std::optional<uint64_t> padded;
  if (*size <= UINT64_MAX - 2 * kAlignment) {
    padded = (*size + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
  }
  const auto out_of_memory = [&] {
    return OutOfMemoryError("out of memory while allocating " + describe() + " (" +
                            format_bytes(size) + memory_note() + ")");
  };
  if (!fits_in_memory(padded) || *padded > SIZE_MAX) throw out_of_memory();
  const auto bytes = static_cast<std::size_t>(*padded);
  storage_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, bytes)));
  if (!storage_) throw out_of_memory();
  std::memset(storage_.get(), 0, bytes);
}

std::optional<uint64_t> HostTensor::checked_nbytes(attnrt_dtype dtype,
                                                   const std::vector<int64_t>& shape) {
  bool empty = false;
  for (int64_t extent : shape) {
    if (extent < 0) return std::nullopt;
    empty = empty || extent == 0;
  }
  if (empty) return 0;  // (2^40, 2^40, 0) holds nothing: no overflow to report
  std::optional<uint64_t> bytes = element_size(dtype);
  for (int64_t extent : shape) bytes = checked_mul(bytes, static_cast<uint64_t>(extent));
  return bytes;
}

std::size_t HostTensor::numel() const {
  std::size_t count = 1;
  for (int64_t extent : shape_) count *= static_cast<std::size_t>(extent);
  return count;
}

std::size_t HostTensor::nbytes() const { return numel() * element_size(dtype_); }

attnrt_tensor HostTensor::view() const {
  attnrt_tensor tensor{};
  tensor.data = storage_.get();
  tensor.device = {ATTNRT_DEVICE_CPU, 0};
  tensor.ndim = static_cast<int32_t>(shape_.size());
  tensor.dtype = dtype_;
  tensor.shape = shape_.data();
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  return tensor;
}

HostTensor HostTensor::clone(std::string_view what) const {
  HostTensor copy(dtype_, shape_, allocated(), what);
  if (allocated()) std::memcpy(copy.data(), data(), nbytes());
  return copy;
}

void HostTensor::poison() {
  if (!allocated()) return;
  if (!is_floating(dtype_)) {
    std::memset(data(), 0x5A, nbytes());
    return;
  }
  const std::size_t count = numel();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 0; i < count; ++i) store_element(data(), dtype_, i, nan);
}

std::string HostTensor::shape_string() const { return plugin_inspect::shape_string(shape_); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

}  // namespace plugin_inspect
