// torch.ops.attnrt.flash_mla_with_kvcache: vLLM's CPU DeepSeek-V4 sparse attention kernel
// (torch.ops._C.flash_mla_with_kvcache_cpu, vLLM 0.32: same schema, same meaning, `out` written in
// place) on attnrt's sparse MLA (attnrt/ops/sparse_mla.h; docs/sparse-mla.md), in C++ so that an
// engine's call reaches the kernel without Python and runs on the runtime it names -- the vLLM
// plugin names one on torch's intra-op threads (torch_threads.cpp), the threads vLLM's own
// operators run on.
//
// The call, as attnrt.vllm's Python adapter (attnrt/_vllm_deepseek_v4.py) makes it:
// - q [T, H, 512] bf16 is a TND query with cu_seqlens_q = [0, T] (each token its own row);
// - each cache is vLLM's fp8_ds_mla pages (quant_mode 2's token format, 584 bytes a token) as a
//   2-D view [num_blocks, >= block_size * 584] whose row stride is the page stride of a buffer
//   shared by layers; it is read in place as the PA_BBND view (num_blocks, block_size, 1, 584),
//   strides (row stride, 584, 584, 1) -- no copy of a cache;
// - window_slots [T, W] / compressed_slots [T, K] int64 are global slot ids, -1 skipped
//   (topk_value_mode 3): range-checked while narrowed to int32 (T * (W + K) * 4 bytes, the one copy
//   of the call); K = 0 is an SWA-only layer (no compressed cache);
// - attn_sink float32 [H] (-inf: none), scale the softmax scale.
// Metadata is computed once per shape signature (runtimes.h: SparseMlaOps). A slot outside its
// cache is an error, where vLLM's kernel skips it; nothing is written to `out` on any error.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"
#include "bindings/torch/runtimes.h"
#include "bindings/torch/tensors.h"

namespace attnrt_torch {
namespace {

constexpr int64_t kTokenBytes = ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;  // fp8_ds_mla: 584
constexpr int64_t kHeadDim = ATTNRT_SPARSE_MLA_HEAD_DIM;              // 512

// A dtype as Python prints it (torch.float32 -> "float32"), as the Python adapter's messages.
std::string DtypeName(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(t.scalar_type());
  }
}

// A double as Python's repr prints it (shortest round trip: 1e+39, nan, -inf), as the adapter's
// messages.
std::string PythonRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, r.ptr);
}

void CheckBlockSize(int64_t block_size, const char* name) {
  ATTNRT_TORCH_CHECK_ARG(block_size >= 1, name,
                         ": expected a positive int (tokens per cache block), got ", block_size);
}

// vLLM's 2-D page view as attnrt's PA_BBND cache (num_blocks, block_size, 1, 584), strides
// (page stride, 584, 584, 1), same storage and offset: a view, nothing copied.
at::Tensor PagedView(const at::Tensor& cache_2d, int64_t block_size, const std::string& name) {
  CheckReadInPlace(cache_2d, name.c_str());
  CheckBlockSize(block_size, (name + " block_size").c_str());
  ATTNRT_TORCH_CHECK_ARG(cache_2d.scalar_type() == at::kByte && cache_2d.dim() == 2, name,
                         ": expected a 2-D uint8 page view [num_blocks, block_size * ", kTokenBytes,
                         "] of vLLM's fp8_ds_mla cache, got ", cache_2d.dim(), "-D ",
                         DtypeName(cache_2d), " ", cache_2d.sizes());
  const int64_t num_blocks = cache_2d.size(0), width = cache_2d.size(1);
  int64_t block_bytes = 0;
  const bool overflow = __builtin_mul_overflow(block_size, kTokenBytes, &block_bytes);
  ATTNRT_TORCH_CHECK_ARG(!overflow && width >= block_bytes, name,
                         ": expected rows of at least block_size * ", kTokenBytes, " = ",
                         overflow ? std::string("(past int64)") : std::to_string(block_bytes),
                         " bytes (block_size ", block_size, "), got ", width);
  ATTNRT_TORCH_CHECK_ARG(cache_2d.stride(1) == 1, name,
                         ": expected the bytes of a page contiguous (stride 1 in dimension 1), "
                         "got strides ",
                         cache_2d.strides());
  const int64_t page_stride =
      num_blocks > 1 ? cache_2d.stride(0) : std::max(cache_2d.stride(0), block_bytes);
  ATTNRT_TORCH_CHECK_ARG(page_stride >= block_bytes, name,
                         ": expected a page stride of at least block_size * ", kTokenBytes, " = ",
                         block_bytes, " bytes (pages must not overlap), got ", page_stride);
  // The page view lies in the storage (checked by name here: as_strided would throw torch's own
  // error), so does the block view inside it.
  Describe(cache_2d, name.c_str());
  return cache_2d.as_strided({num_blocks, block_size, 1, kTokenBytes},
                             {page_stride, kTokenBytes, kTokenBytes, 1}, cache_2d.storage_offset());
}

void CheckSlotsShape(const at::Tensor& slots, const char* name, int64_t num_tokens) {
  ATTNRT_TORCH_CHECK_ARG(
      slots.scalar_type() == at::kLong && slots.dim() == 2 && slots.size(0) == num_tokens, name,
      ": expected int64 [num_tokens=", num_tokens, ", n] global slot ids, got ", DtypeName(slots),
      " ", slots.sizes());
  ATTNRT_TORCH_CHECK_ARG(slots.is_contiguous(), name,
                         ": expected a contiguous tensor, got strides ", slots.strides());
  Describe(slots, name);  // its ids lie in its storage: read below
}

// int64 [T, n] global slot ids -> int32 (T, 1, n), every entry -1 or in [0, num_slots).
at::Tensor Slots(const at::Tensor& slots_view, const char* name, int64_t num_tokens,
                 int64_t num_slots) {
  const at::Tensor slots = Resolved(slots_view);  // a negative view's ids are its values
  CheckSlotsShape(slots, name, num_tokens);
  ATTNRT_TORCH_CHECK_ARG(num_slots - 1 <= INT32_MAX, name, ": its cache holds ", num_slots,
                         " slots, attnrt's slot ids are int32 (at most ", int64_t{INT32_MAX} + 1,
                         " slots)");
  const int64_t n = slots.size(1);
  at::Tensor narrowed = at::empty({num_tokens, 1, n}, slots.options().dtype(at::kInt));
  const int64_t* from = slots.data_ptr<int64_t>();
  int32_t* to = narrowed.data_ptr<int32_t>();
  const int64_t count = num_tokens * n;
  int64_t bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = from[i];
    bad = (v < -1 || v >= num_slots) && bad < 0 ? i : bad;
    to[i] = static_cast<int32_t>(v);
  }
  ATTNRT_TORCH_CHECK_ARG(bad < 0, name, "[", bad / (n > 0 ? n : 1), "][", bad % (n > 0 ? n : 1),
                         "]: expected -1 (skip) or a slot in [0, ", num_slots,
                         ") (num_blocks * block_size of its cache), got ", bad < 0 ? 0 : from[bad]);
  return narrowed;
}

void Run(int64_t runtime, const at::Tensor& out, const at::Tensor& q_view,
         const at::Tensor& window_cache_2d, const at::Tensor& window_slots,
         int64_t window_block_size, const at::Tensor& compressed_cache_2d,
         const at::Tensor& compressed_slots, int64_t compressed_block_size,
         const at::Tensor& attn_sink_view, double scale) {
  CheckWritable(out, "out");
  CheckNoGrad(q_view, "q");
  CheckNoGrad(window_cache_2d, "window_cache_2d");
  CheckNoGrad(compressed_cache_2d, "compressed_cache_2d");
  CheckNoGrad(attn_sink_view, "attn_sink");
  at::Tensor q = Resolved(q_view);
  const at::Tensor attn_sink = Resolved(attn_sink_view);
  ATTNRT_TORCH_CHECK_ARG(q.dim() == 3 && q.size(2) == kHeadDim && q.scalar_type() == at::kBFloat16,
                         "q: expected bfloat16 [num_tokens, num_heads, ", kHeadDim, "], got ",
                         DtypeName(q), " ", q.sizes());
  ATTNRT_TORCH_CHECK_ARG(q.stride(2) == 1,
                         "q: expected its last dimension contiguous, got strides ", q.strides());
  const int64_t num_tokens = q.size(0), num_heads = q.size(1);
  ATTNRT_TORCH_CHECK_ARG(
      out.sizes() == q.sizes() && out.scalar_type() == at::kBFloat16 && out.is_contiguous(),
      "out: expected a contiguous bfloat16 tensor of q's shape ", q.sizes(), ", got ",
      out.is_contiguous() ? "" : "non-contiguous ", DtypeName(out), " ", out.sizes());
  ATTNRT_TORCH_CHECK_ARG(attn_sink.scalar_type() == at::kFloat && attn_sink.numel() == num_heads &&
                             attn_sink.is_contiguous(),
                         "attn_sink: expected contiguous float32 with num_heads=", num_heads,
                         " values, got ", DtypeName(attn_sink), " ", attn_sink.sizes());
  const at::Tensor ori_kv = PagedView(window_cache_2d, window_block_size, "window_cache_2d");
  const at::Tensor ori_idx =
      Slots(window_slots, "window_slots", num_tokens, ori_kv.size(0) * window_block_size);
  ATTNRT_TORCH_CHECK_ARG(window_slots.size(1) > 0,
                         "window_slots: expected at least one column, got [T, 0]");
  const int64_t num_compressed = compressed_slots.dim() == 2 ? compressed_slots.size(1) : -1;
  at::Tensor cmp_kv, cmp_idx;
  if (num_compressed == 0 && compressed_slots.scalar_type() == at::kLong &&
      compressed_slots.size(0) == num_tokens) {
    // SWA-only layer: vLLM passes the window cache again with block size 1, unread.
    CheckBlockSize(compressed_block_size, "compressed_block_size");
  } else {
    cmp_kv = PagedView(compressed_cache_2d, compressed_block_size, "compressed_cache_2d");
    cmp_idx = Slots(compressed_slots, "compressed_slots", num_tokens,
                    cmp_kv.size(0) * compressed_block_size);
  }
  const float softmax_scale = static_cast<float>(scale);
  ATTNRT_TORCH_CHECK_ARG(std::isfinite(softmax_scale), "scale: expected a finite float32, got ",
                         PythonRepr(scale));
  // out is written while every input is read (the slot ids before: a copy of them is what the op
  // sees, so its own overlap check would not see the caller's).
  CheckNoOverlap(out, "out", q_view, "q");
  CheckNoOverlap(out, "out", window_cache_2d, "window_cache_2d");
  CheckNoOverlap(out, "out", window_slots, "window_slots");
  if (cmp_kv.defined()) CheckNoOverlap(out, "out", compressed_cache_2d, "compressed_cache_2d");
  CheckNoOverlap(out, "out", compressed_slots, "compressed_slots");
  CheckNoOverlap(out, "out", attn_sink_view, "attn_sink");
  if (num_tokens == 0) return;
  if (!q.is_contiguous()) q = q.contiguous();  // attnrt's TND query is compact

  SparseMlaKey key;
  attnrt_sparse_mla_attributes& a = key.attributes;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = 2;
  a.softmax_scale = softmax_scale;
  a.cmp_ratio = 1;  // unused with global slot ids; 1 is what an SWA-only layer needs
  a.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  a.topk_value_mode = 3;
  const std::shared_ptr<SparseMlaOps> ops = SparseMlaOpsFor(runtime, key);

  ATTNRT_TORCH_CHECK_ARG(num_tokens <= INT32_MAX, "q: ", num_tokens,
                         " tokens are past cu_seqlens_q's int32");
  const int32_t cu_seqlens[2] = {0, static_cast<int32_t>(num_tokens)};
  const int64_t cu_shape[1] = {2}, cu_strides[1] = {1};
  const at::Tensor sinks = attn_sink.view({num_heads});

  attnrt_tensor t[ATTNRT_SPARSE_MLA_NUM_INPUTS + 2] = {};
  const attnrt_tensor* inputs[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {};
  auto set = [&](int i, const at::Tensor& x, const char* name) {
    t[i] = Describe(x, name);
    inputs[i] = &t[i];
  };
  set(ATTNRT_SPARSE_MLA_INPUT_Q, q, "q");
  set(ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ori_kv, "window_cache_2d");
  set(ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, ori_idx, "window_slots");
  if (cmp_kv.defined()) {
    set(ATTNRT_SPARSE_MLA_INPUT_CMP_KV, cmp_kv, "compressed_cache_2d");
    set(ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES, cmp_idx, "compressed_slots");
  }
  set(ATTNRT_SPARSE_MLA_INPUT_SINKS, sinks, "attn_sink");
  t[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q] = HostInt32(cu_seqlens, cu_shape, cu_strides);
  inputs[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q] = &t[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q];

  // Metadata: from the shapes alone here (global slot ids, cu_seqlens_q = [0, T]).
  const std::shared_ptr<const std::vector<int32_t>> metadata =
      ops->Metadata(inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS);
  const int64_t metadata_shape[1] = {ATTNRT_SPARSE_MLA_METADATA_SIZE}, metadata_strides[1] = {1};
  t[ATTNRT_SPARSE_MLA_NUM_INPUTS] = HostInt32(metadata->data(), metadata_shape, metadata_strides);
  inputs[ATTNRT_SPARSE_MLA_INPUT_METADATA] = &t[ATTNRT_SPARSE_MLA_NUM_INPUTS];

  attnrt_tensor& output = t[ATTNRT_SPARSE_MLA_NUM_INPUTS + 1];
  output = Describe(out, "out");
  const attnrt_tensor* outputs[1] = {&output};
  const CachedPlan plan = ops->op().Plan(inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, outputs, 1);
  const attnrt_status status = attnrt_plan_run(
      plan.plan.get(), inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, outputs, 1,
      Workspace(plan.workspace_size, plan.workspace_alignment), plan.workspace_size, nullptr);
  if (status != ATTNRT_OK) ThrowStatus(status);
  Written(out);
}

void FlashMlaWithKvcache(const at::Tensor& out, const at::Tensor& q,
                         const at::Tensor& window_cache_2d, const at::Tensor& window_slots,
                         int64_t window_block_size, const at::Tensor& compressed_cache_2d,
                         const at::Tensor& compressed_slots, int64_t compressed_block_size,
                         const at::Tensor& attn_sink, double scale) {
  Run(kDefaultRuntime, out, q, window_cache_2d, window_slots, window_block_size,
      compressed_cache_2d, compressed_slots, compressed_block_size, attn_sink, scale);
}

void FlashMlaWithKvcacheOn(int64_t runtime, const at::Tensor& out, const at::Tensor& q,
                           const at::Tensor& window_cache_2d, const at::Tensor& window_slots,
                           int64_t window_block_size, const at::Tensor& compressed_cache_2d,
                           const at::Tensor& compressed_slots, int64_t compressed_block_size,
                           const at::Tensor& attn_sink, double scale) {
  Run(runtime, out, q, window_cache_2d, window_slots, window_block_size, compressed_cache_2d,
      compressed_slots, compressed_block_size, attn_sink, scale);
}

}  // namespace

// vLLM 0.32's schema of torch.ops._C.flash_mla_with_kvcache_cpu.
#define ATTNRT_FLASH_MLA_ARGS                                                    \
  "Tensor(a!) out, Tensor q, Tensor window_cache_2d, Tensor window_slots, "      \
  "int window_block_size, Tensor compressed_cache_2d, Tensor compressed_slots, " \
  "int compressed_block_size, Tensor attn_sink, float scale"

TORCH_LIBRARY_FRAGMENT(attnrt, m) {
  m.def("flash_mla_with_kvcache(" ATTNRT_FLASH_MLA_ARGS ") -> ()");
  // The same on a given runtime (an id from _register_runtime or _torch_threads_runtime).
  m.def("_flash_mla_with_kvcache_on(int runtime, " ATTNRT_FLASH_MLA_ARGS ") -> ()");
}

TORCH_LIBRARY_IMPL(attnrt, Negative, m) {
  m.impl("flash_mla_with_kvcache", torch::CppFunction::makeFallthrough());
  m.impl("_flash_mla_with_kvcache_on", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(attnrt, CPU, m) {
  m.impl("flash_mla_with_kvcache", &FlashMlaWithKvcache);
  m.impl("_flash_mla_with_kvcache_on", &FlashMlaWithKvcacheOn);
}

}  // namespace attnrt_torch
