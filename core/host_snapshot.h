// One run's copy of the host-read integer inputs that bound memory accesses (lengths, block
// tables, slot mappings, sparse indices, metadata). The caller's arrays are read once, into storage
// the run owns; validation and kernels then read only the copy, so a caller that changes such an
// array while the run is under way (another thread, a numpy array edited while the GIL is
// released) gets a result for one consistent set of values or a clear error, never an access out
// of bounds.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <span>

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

  TensorList inputs() const { return {pointers_.data(), count_}; }

  // The most inputs an op has (sparse MLA: 18); a run's lists live here, not on the heap.
  static constexpr size_t kMaxInputs = 32;

 private:
  static constexpr size_t kInlineBytes = 4096;
  static constexpr size_t kAlignment = 64;

  std::array<const attnrt_tensor*, kMaxInputs> pointers_{};
  std::array<attnrt_tensor, kMaxInputs> copies_{};
  size_t count_ = 0;
  alignas(kAlignment) std::byte inline_[kInlineBytes];
  std::unique_ptr<std::byte[]> heap_;
};

}  // namespace attnrt::core
