// One run's copy of the host-read integer inputs that bound memory accesses (lengths, block
// tables, slot mappings, sparse indices, metadata). The caller's arrays are read once, into storage
// the run owns; validation and kernels then read only the copy, so a caller that changes such an
// array while the run is under way (another thread, a numpy array edited while the GIL is
// released) gets a result for one consistent set of values or a clear error, never an access out
// of bounds.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "attnrt/attnrt.h"
#include "core/ops/op_family.h"
#include "core/status.h"

namespace attnrt::core {

class HostSnapshot {
 public:
  // Copies every input of family.HostReadInputs() that is present, in host memory and non-empty,
  // and refuses an output that shares bytes with one of them (it would be written over an array the
  // caller gave as an input), as is an input of family.WrittenInputs() (written in place: a paged
  // cache) that does. The tensors must have passed ReadSignature (data present, extents bounded).
  // `inputs()` then lists the same tensors with those inputs replaced by the copies.
  Status Take(const OpFamily& family, const TensorList& inputs, const TensorList& outputs);

  TensorList inputs() const { return {pointers_.data(), pointers_.size()}; }
  // Bytes copied by the last Take (for tests and measurements).
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kInlineBytes = 4096;
  static constexpr size_t kAlignment = 64;

  std::vector<const attnrt_tensor*> pointers_;
  std::vector<attnrt_tensor> copies_;
  alignas(kAlignment) std::byte inline_[kInlineBytes];
  std::unique_ptr<std::byte[]> heap_;
  size_t bytes_ = 0;
};

}  // namespace attnrt::core
