// A host tensor the tool owns: dtype, row-major shape and a 64-byte-aligned buffer. Its view() is
// the borrowed attnrt_tensor handed to the runtime; the view points into this object and stays
// valid while the HostTensor lives (moving it keeps the buffers in place).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnrt/attnrt.h"

namespace plugin_inspect {

class HostTensor {
 public:
  // allocate = false gives a descriptor-only tensor (data NULL), enough for plan and explain.
  // Allocating checks the size first: a negative dimension or a size that overflows 64 bits
  // throws ToolError; more than the machine's physical memory, or a failed allocation, throws
  // OutOfMemoryError. Both name `what` ("present_key", a file name; default: dtype and shape).
  HostTensor(attnrt_dtype dtype, std::vector<int64_t> shape, bool allocate = true,
             std::string_view what = {});

  // Bytes of a tensor of `dtype` and `shape`, or nullopt when a dimension is negative or the
  // size does not fit 64 bits. Safe on any shape (descriptor-only tensors included).
  static std::optional<uint64_t> checked_nbytes(attnrt_dtype dtype,
                                                const std::vector<int64_t>& shape);
  std::optional<uint64_t> checked_nbytes() const { return checked_nbytes(dtype_, shape_); }

  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  attnrt_dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  std::size_t numel() const;
  std::size_t nbytes() const;
  void* data() { return storage_.get(); }
  const void* data() const { return storage_.get(); }
  bool allocated() const { return storage_ != nullptr; }

  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data());
  }

  // The borrowed CPU descriptor (compact row-major, byte_offset 0).
  attnrt_tensor view() const;

  // A deep copy (same dtype, shape and bytes); `what` names it if allocation fails.
  HostTensor clone(std::string_view what = {}) const;

  // Fills with NaN (floating dtypes) or 0x5A bytes (integer dtypes), so unwritten outputs show.
  void poison();

  // "(2, 8, 128)".
  std::string shape_string() const;

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  attnrt_dtype dtype_;
  std::vector<int64_t> shape_;
  std::unique_ptr<std::byte, FreeDeleter> storage_;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace plugin_inspect
