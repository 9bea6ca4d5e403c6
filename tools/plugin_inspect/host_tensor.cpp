#include "host_tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "dtypes.h"

namespace plugin_inspect {

namespace {
constexpr std::size_t kAlignment = 64;
}

HostTensor::HostTensor(attnrt_dtype dtype, std::vector<int64_t> shape, bool allocate)
    : dtype_(dtype), shape_(std::move(shape)) {
  if (!allocate) return;
  // aligned_alloc needs a size that is a non-zero multiple of the alignment.
  const std::size_t bytes = (nbytes() + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
  storage_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, bytes)));
  if (!storage_) throw std::bad_alloc();
  std::memset(storage_.get(), 0, bytes);
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

HostTensor HostTensor::clone() const {
  HostTensor copy(dtype_, shape_, allocated());
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
