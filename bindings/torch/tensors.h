// What the torch operators share: at::Tensor described as attnrt_tensor (borrowed, nothing
// copied), the argument checks every operator makes (negative/conjugate views, grad), and the
// kernels' per-thread workspace.
#ifndef ATTNRT_BINDINGS_TORCH_TENSORS_H_
#define ATTNRT_BINDINGS_TORCH_TENSORS_H_

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstddef>

#include "attnrt/attnrt.h"

namespace attnrt_torch {

// attnrt's dtype of `t`; c10::ValueError naming `name` for one attnrt does not take.
attnrt_dtype Dtype(const at::Tensor& t, const char* name);

// A borrowed descriptor of `t`: its data, sizes and strides (in elements) as they are. Checks that
// its elements lie in its storage; the descriptor points into `t`'s sizes and strides.
attnrt_tensor Describe(const at::Tensor& t, const char* name);

// A borrowed descriptor of a compact 1-D int32 array in host memory: `shape` and `strides` are the
// caller's one-element arrays ({count} and {1}), which must outlive the descriptor.
attnrt_tensor HostInt32(const int32_t* data, const int64_t* shape, const int64_t* strides);

// Aligned scratch memory of the calling thread for a plan's workspace, grown as plans ask (valid
// until the thread's next call).
void* Workspace(size_t size, size_t alignment);

// The operators take negative and conjugate views themselves (the Negative and Conjugate keys fall
// through to them: torch's fallback for them cannot write a mutable argument back): a read-only
// one is materialized, one the call writes is refused by name (CheckWritable), as is one that
// requires grad (the writes have no backward).
// A tensor the call writes must also not be an inference tensor outside inference mode (torch
// forbids in-place updates of one there); after the write, Written bumps its version counter as
// torch's in-place operators do, so that autograd refuses a graph that saved its old values.
at::Tensor Resolved(const at::Tensor& t);
c10::optional<at::Tensor> Resolved(const c10::optional<at::Tensor>& t);
void CheckWritable(const at::Tensor& t, const char* name);
void Written(const at::Tensor& t);
void Written(const c10::optional<at::Tensor>& t);

// A tensor read in place (a cache: never copied) must not be a negative or conjugate view.
void CheckReadInPlace(const at::Tensor& t, const char* name);

// c10::ValueError naming both when the bytes `out` spans meet those `input` spans (the span from
// the first to the last element, as attnrt's validation compares them). Checks the storage
// extents first (Describe).
void CheckNoOverlap(const at::Tensor& out, const char* out_name, const at::Tensor& input,
                    const char* input_name);

// The operators have no backward: under grad mode an input that requires grad would give an
// output without its gradient. c10::ValueError naming `name`.
void CheckNoGrad(const at::Tensor& t, const char* name);
void CheckNoGrad(const c10::optional<at::Tensor>& t, const char* name);

}  // namespace attnrt_torch

#endif  // ATTNRT_BINDINGS_TORCH_TENSORS_H_
