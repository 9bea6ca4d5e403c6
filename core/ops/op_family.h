// What the core needs to know about one op family (GQA today; paged GQA and sparse MLA later):
// how to validate its attributes and shapes into the problem struct kernels see, and how to check
// run-time values and call a kernel. op.cpp does the rest (signatures, plan cache, dispatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "core/plugin_record.h"
#include "core/status.h"

namespace attnrt::core {

struct TensorList {
  const attnrt_tensor* const* tensors = nullptr;
  size_t count = 0;

  const attnrt_tensor* at(size_t i) const { return i < count ? tensors[i] : nullptr; }
};

// A validated problem: the ABI struct handed to supports()/workspace_size(), plus run().
class Problem {
 public:
  virtual ~Problem() = default;
  // Pointer to the op's ABI problem struct (e.g. attnrt_gqa_problem).
  virtual const void* abi() const = 0;
  // The problem struct in the layout a plugin built for ABI 1.`plugin_abi_minor` reads, kept as
  // long as the problem (default: abi(), the same layout for every minor version). Only kernels
  // whose plugins meet abi_need() are offered the problem at all.
  virtual const void* abi_for(uint32_t plugin_abi_minor) const {
    (void)plugin_abi_minor;
    return abi();
  }
  const void* abi_for_kernel(const KernelRecord& kernel) const {
    return abi_for(kernel.plugin->abi_minor);
  }
  virtual int32_t device_type() const = 0;
  // Kernels of plugins built for an older ABI minor version than this are not offered the problem.
  virtual AbiNeed abi_need() const { return {}; }
  // Checks run-time values and calls the kernel. Nothing is written on a validation error.
  virtual Status Run(const KernelRecord& kernel, const TensorList& inputs,
                     const TensorList& outputs, void* workspace, size_t workspace_size,
                     void* stream) const = 0;
  // Ops the core computes itself (the sparse MLA metadata op): planned without a kernel, run by
  // RunInCore with the runtime's thread count.
  virtual bool computed_by_core() const { return false; }
  virtual Status RunInCore(const TensorList& /*inputs*/, const TensorList& /*outputs*/,
                           int32_t /*num_threads*/) const {
    return Internal("this op is not computed by the core");
  }
};

// One dimension of an input or output tensor, by position.
struct DimRef {
  bool output = false;
  size_t index = 0;
  int32_t dim = 0;

  bool operator==(const DimRef& other) const = default;
};

class OpFamily {
 public:
  virtual ~OpFamily() = default;
  virtual int32_t kind() const = 0;
  virtual size_t max_inputs() const = 0;
  virtual size_t max_outputs() const = 0;
  virtual const char* input_name(size_t index) const = 0;
  virtual const char* output_name(size_t index) const = 0;
  // Full shape validation of the tensors against the op's attributes.
  virtual Status Prepare(const TensorList& inputs, const TensorList& outputs,
                         std::unique_ptr<Problem>* out) const = 0;
  // The host-read integer inputs that bound a memory access (lengths, block tables, slot mappings,
  // indices, metadata): each run copies them once (HostSnapshot) and validates and runs on the
  // copies only. WrittenInputs: inputs a run writes in place (paged caches), which must not share
  // bytes with them.
  // Attributes a plan's description (debug log, errors) names after its tensors, e.g.
  // "p_precision=input"; "" for none.
  virtual std::string AttributeText() const { return ""; }
  virtual std::span<const size_t> HostReadInputs() const { return {}; }
  virtual std::span<const size_t> WrittenInputs() const { return {}; }
  // The dimensions of a cache that grows from run to run in these tensors (read only after the
  // core checked them well-formed): a plan made for them also runs other extents of these
  // dimensions, up to a capacity, when its kernel accepts them and its workspace suffices. Empty
  // (the default): a plan runs the shapes it was made for only.
  virtual std::vector<DimRef> GrowingDims(const TensorList& /*inputs*/,
                                          const TensorList& /*outputs*/) const {
    return {};
  }
};

// Validates `attributes` for `kind` and creates the family. INVALID_ARGUMENT for an unknown kind.
Status CreateOpFamily(int32_t kind, const void* attributes, std::unique_ptr<OpFamily>* out);

}  // namespace attnrt::core
