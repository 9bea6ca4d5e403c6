// What the torch operators share (see tensors.h).
#include "bindings/torch/tensors.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "bindings/torch/runtimes.h"

namespace attnrt_torch {

attnrt_dtype Dtype(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ATTNRT_DTYPE_FLOAT32;
    case at::kHalf:
      return ATTNRT_DTYPE_FLOAT16;
    case at::kBFloat16:
      return ATTNRT_DTYPE_BFLOAT16;
    case at::kInt:
      return ATTNRT_DTYPE_INT32;
    case at::kLong:
      return ATTNRT_DTYPE_INT64;
    case at::kChar:
      return ATTNRT_DTYPE_INT8;
    case at::kByte:
      return ATTNRT_DTYPE_UINT8;
    case at::kFloat8_e4m3fn:
      return ATTNRT_DTYPE_FLOAT8_E4M3FN;
    case at::kFloat8_e5m2:
      return ATTNRT_DTYPE_FLOAT8_E5M2;
    default:
      ATTNRT_TORCH_CHECK_ARG(
          false, name, ": dtype ", t.scalar_type(),
          " is not one attnrt takes (float32, float16, bfloat16, int8, uint8, int32, "
          "int64, float8_e4m3fn, float8_e5m2)");
  }
}

attnrt_tensor Describe(const at::Tensor& t, const char* name) {
  ATTNRT_TORCH_CHECK_ARG(t.layout() == at::kStrided, name,
                         ": expected a strided (dense) tensor, got ", t.layout());
  // The elements must lie in the tensor's storage: torch does not check it again after a view was
  // made, and a storage resized under its views (untyped_storage().resize_) would have the kernel
  // read or write past the allocation.
  if (t.numel() > 0) {
    int64_t last = t.storage_offset();  // the farthest element, in elements (strides are >= 0)
    bool overflow = false;
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t step = 0;
      overflow |= __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &step);
      overflow |= __builtin_add_overflow(last, step, &last);
    }
    int64_t end = 0;
    overflow |= __builtin_add_overflow(last, int64_t{1}, &end);
    overflow |= __builtin_mul_overflow(end, static_cast<int64_t>(t.element_size()), &end);
    const int64_t held = t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
    ATTNRT_TORCH_CHECK_ARG(!overflow && end <= held, name, ": its elements (shape ", t.sizes(),
                           ", strides ", t.strides(), ", storage offset ", t.storage_offset(),
                           ") reach past its storage of ", held, " bytes");
  }
  attnrt_tensor d{};
  d.data = t.data_ptr();
  if (t.is_cpu()) {
    d.device = {ATTNRT_DEVICE_CPU, 0};
  } else if (t.is_cuda()) {
    d.device = {ATTNRT_DEVICE_CUDA, t.get_device()};
  } else {
    ATTNRT_TORCH_CHECK_ARG(false, name, ": expected a CPU or CUDA tensor, got one on ", t.device());
  }
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = Dtype(t, name);
  d.shape = t.sizes().data();
  d.strides = t.strides().data();
  return d;
}

attnrt_tensor HostInt32(const int32_t* data, const int64_t* shape, const int64_t* strides) {
  attnrt_tensor t{};
  t.data = const_cast<int32_t*>(data);  // read only as an input; written as metadata's output
  t.device = {ATTNRT_DEVICE_CPU, 0};
  t.ndim = 1;
  t.dtype = ATTNRT_DTYPE_INT32;
  t.shape = shape;
  t.strides = strides;
  return t;
}

void* Workspace(size_t size, size_t alignment) {
  struct Buffer {
    std::unique_ptr<char[]> bytes;
    size_t capacity = 0;
  };
  thread_local Buffer buffer;
  if (size == 0) return nullptr;
  const size_t need = size + alignment;
  if (buffer.capacity < need) {
    buffer.bytes.reset(new char[need]);
    buffer.capacity = need;
  }
  const auto base = reinterpret_cast<uintptr_t>(buffer.bytes.get());
  return reinterpret_cast<void*>((base + alignment - 1) / alignment * alignment);
}

at::Tensor Resolved(const at::Tensor& t) {
  return t.is_neg() || t.is_conj() ? t.resolve_conj().resolve_neg() : t;
}
c10::optional<at::Tensor> Resolved(const c10::optional<at::Tensor>& t) {
  if (!t.has_value()) return t;
  return Resolved(*t);
}
void CheckWritable(const at::Tensor& t, const char* name) {
  ATTNRT_TORCH_CHECK_ARG(
      !t.is_neg() && !t.is_conj(), name, ": expected a tensor the call can write, got a ",
      t.is_neg() ? "negative" : "conjugate", " view (torch._neg_view / conj); resolve it first");
  // The operator has no autograd kernel: a write into a tensor that requires grad (a leaf
  // parameter, or a tensor of a graph) would go past autograd's version counter and graph.
  ATTNRT_TORCH_CHECK_ARG(!t.requires_grad(), name,
                         ": expected a tensor the call can write, got one that requires grad "
                         "(attnrt's in-place writes have no backward); write into a tensor that "
                         "does not");
  ATTNRT_TORCH_CHECK_ARG(!t.is_inference() || c10::InferenceMode::is_enabled(), name,
                         ": expected a tensor the call can write, got an inference tensor outside "
                         "inference mode (torch allows no in-place update of one there); call "
                         "under torch.inference_mode() or write into a normal tensor");
}
void Written(const at::Tensor& t) {
  // A no-op for an inference tensor in inference mode; CheckWritable refused one outside it.
  t.unsafeGetTensorImpl()->bump_version();
}
void Written(const c10::optional<at::Tensor>& t) {
  if (t.has_value()) Written(*t);
}

void CheckReadInPlace(const at::Tensor& t, const char* name) {
  ATTNRT_TORCH_CHECK_ARG(!t.is_neg() && !t.is_conj(), name,
                         ": expected a cache the call reads in place, got a ",
                         t.is_neg() ? "negative" : "conjugate",
                         " view (torch._neg_view / conj) whose values are not its bytes");
}

void CheckNoOverlap(const at::Tensor& out, const char* out_name, const at::Tensor& input,
                    const char* input_name) {
  if (out.numel() == 0 || input.numel() == 0) return;
  Describe(out, out_name);  // both lie in their storage: the spans below are in bounds
  Describe(input, input_name);
  auto span = [](const at::Tensor& t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
    return std::pair<uintptr_t, uintptr_t>(
        begin, begin + static_cast<uintptr_t>((last + 1) * t.element_size()));
  };
  const auto [out_begin, out_end] = span(out);
  const auto [in_begin, in_end] = span(input);
  ATTNRT_TORCH_CHECK_ARG(out_end <= in_begin || in_end <= out_begin, out_name,
                         ": shares memory with ", input_name, "; ", out_name,
                         " must not overlap an input");
}

void CheckNoGrad(const at::Tensor& t, const char* name) {
  ATTNRT_TORCH_CHECK_ARG(!t.requires_grad() || !c10::GradMode::is_enabled(), name,
                         ": requires grad, but attnrt's ops have no backward (its gradient would "
                         "be silently missing); call under torch.no_grad() or "
                         "torch.inference_mode(), or pass .detach()");
}
void CheckNoGrad(const c10::optional<at::Tensor>& t, const char* name) {
  if (t.has_value()) CheckNoGrad(*t, name);
}

}  // namespace attnrt_torch
