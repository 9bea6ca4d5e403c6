// torch.ops.attnrt.paged_attention_varlen in C++: the schema of the Python-registered operator
// (attnrt/torch.py), on attnrt's C ABI (attnrt/ops/paged_gqa_varlen.h). Tensors are described
// from at::Tensor as they are (data pointer, sizes, strides, dtype; nothing copied), the op comes
// from the runtime's ops by attributes and the plan from the op's plans by signature
// (runtimes.h), so a call costs the descriptors, two lookups and the kernel.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "bindings/torch/runtimes.h"
#include "bindings/torch/tensors.h"

namespace attnrt_torch {
namespace {

int32_t KvLayout(const std::string& layout) {
  std::string upper = layout;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "BSNH") return ATTNRT_PAGED_KV_LAYOUT_BSNH;
  if (upper == "BNSH") return ATTNRT_PAGED_KV_LAYOUT_BNSH;
  ATTNRT_TORCH_CHECK_ARG(false, "kv_layout: expected one of BSNH, BNSH, got '", layout, "'");
}

int32_t PPrecision(const std::string& precision) {
  std::string lower = precision;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "exact") return ATTNRT_P_PRECISION_EXACT;
  if (lower == "input") return ATTNRT_P_PRECISION_INPUT;
  ATTNRT_TORCH_CHECK_ARG(false, "p_precision: expected 'exact' or 'input', got '", precision, "'");
}

// A head count or block size taken from a shape, as the op's int32 attribute (a view expanded
// past 2^31 heads would wrap).
int32_t Int32(int64_t value, const char* name, at::IntArrayRef sizes) {
  ATTNRT_TORCH_CHECK_ARG(value <= INT32_MAX, name, ": a head count or block size of ", value,
                         " is past the op's int32 attributes (shape ", sizes, ")");
  return static_cast<int32_t>(value);
}

void Run(int64_t runtime, const at::Tensor& q_view, const at::Tensor& k_cache,
         const at::Tensor& v_cache, const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens,
         const at::Tensor& block_table, const at::Tensor& out,
         const c10::optional<at::Tensor>& k_view, const c10::optional<at::Tensor>& v_view,
         const c10::optional<at::Tensor>& slot_mapping, const c10::optional<at::Tensor>& sinks_view,
         double softmax_scale, int64_t window_left, double softcap, const std::string& kv_layout,
         const std::string& p_precision, c10::optional<bool> causal_given,
         const c10::optional<at::Tensor>& k_scale_view,
         const c10::optional<at::Tensor>& v_scale_view,
         const c10::optional<at::Tensor>& cu_seqlens_k,
         const c10::optional<at::Tensor>& alibi_slopes, int64_t window_right) {
  CheckWritable(k_cache, "k_cache");
  CheckWritable(v_cache, "v_cache");
  CheckWritable(out, "out");
  CheckNoGrad(q_view, "q");
  CheckNoGrad(k_view, "k");
  CheckNoGrad(v_view, "v");
  CheckNoGrad(sinks_view, "sinks");
  CheckNoGrad(cu_seqlens_q, "cu_seqlens_q");
  CheckNoGrad(seq_lens, "seq_lens");
  CheckNoGrad(block_table, "block_table");
  CheckNoGrad(slot_mapping, "slot_mapping");
  CheckNoGrad(k_scale_view, "k_scale");
  CheckNoGrad(v_scale_view, "v_scale");
  CheckNoGrad(cu_seqlens_k, "cu_seqlens_k");
  CheckNoGrad(alibi_slopes, "alibi_slopes");
  const at::Tensor q = Resolved(q_view);
  const c10::optional<at::Tensor> k = Resolved(k_view), v = Resolved(v_view);
  const c10::optional<at::Tensor> sinks = Resolved(sinks_view);
  const c10::optional<at::Tensor> k_scale = Resolved(k_scale_view),
                                  v_scale = Resolved(v_scale_view);
  // Values read by the op: a negative view's stored values are not its values.
  const c10::optional<at::Tensor> key_starts = Resolved(cu_seqlens_k),
                                  slopes = Resolved(alibi_slopes);
  // window_left + 1 is the op's int32 local_window_size (as the Python path refuses more).
  ATTNRT_TORCH_CHECK_ARG(window_left >= -1 && window_left < int64_t{INT32_MAX},
                         "window_left: expected -1 (off) or 0..", int64_t{INT32_MAX} - 1, ", got ",
                         window_left);
  // The attributes, from the shapes as attnrt.paged_attention_varlen derives them.
  OpKey key;
  key.kv_layout = KvLayout(kv_layout);
  key.p_precision = PPrecision(p_precision);
  ATTNRT_TORCH_CHECK_ARG(
      k_cache.dim() == 4,
      "k_cache: expected 4 dimensions [num_blocks, block_size, Nkv, H] (BSNH) or "
      "[num_blocks, Nkv, block_size, H] (BNSH), got ",
      k_cache.sizes());
  ATTNRT_TORCH_CHECK_ARG(q.dim() == 2 || q.dim() == 3,
                         "q: expected [num_tokens, N, H] or [num_tokens, N * H], got ", q.sizes());
  const bool bnsh = key.kv_layout == ATTNRT_PAGED_KV_LAYOUT_BNSH;
  const int64_t head_size = k_cache.size(3);
  ATTNRT_TORCH_CHECK_ARG(head_size > 0, "k_cache: head size (the last dimension) must be > 0, got ",
                         k_cache.sizes());
  ATTNRT_TORCH_CHECK_ARG(q.dim() == 3 || q.size(1) % head_size == 0,
                         "q: expected [num_tokens, N * H] with H = ", head_size,
                         " (k_cache's head size), got ", q.sizes());
  key.num_heads = Int32(q.dim() == 3 ? q.size(1) : q.size(1) / head_size, "q", q.sizes());
  key.kv_num_heads = Int32(bnsh ? k_cache.size(1) : k_cache.size(2), "k_cache", k_cache.sizes());
  key.block_size = Int32(bnsh ? k_cache.size(2) : k_cache.size(1), "k_cache", k_cache.sizes());
  key.scale = static_cast<float>(softmax_scale);
  key.softcap = static_cast<float>(softcap);
  // 0 means the default scale (1/sqrt(H)) and no softcap: a value that only rounds to 0 in
  // float32 would silently be read as one.
  ATTNRT_TORCH_CHECK_ARG(softmax_scale == 0.0 || key.scale != 0.0f,
                         "softmax_scale: ", softmax_scale,
                         " rounds to 0 in float32, which means the default 1/sqrt(head_size); "
                         "expected 0 or a magnitude above 2^-150 (7.0e-46)");
  ATTNRT_TORCH_CHECK_ARG(softcap == 0.0 || key.softcap != 0.0f, "softcap: ", softcap,
                         " rounds to 0 in float32, which means no softcap; expected 0 or a "
                         "magnitude above 2^-150 (7.0e-46)");
  key.local_window_size = window_left >= 0 ? static_cast<int32_t>(window_left + 1) : -1;
  // None is the default (causal): torch would read None as False for a plain bool.
  const bool causal = causal_given.value_or(true);
  // FlashAttention's window_size[1]: with causal only 0 or -1; without, the keys after each row it
  // sees (-1: all), with window_left the window of non-causal attention.
  ATTNRT_TORCH_CHECK_ARG(window_right >= -1 && window_right < int64_t{INT32_MAX},
                         "window_right: expected -1 (off) or 0..", int64_t{INT32_MAX} - 1, ", got ",
                         window_right);
  ATTNRT_TORCH_CHECK_ARG(
      !causal || window_right <= 0,
      "window_right: causal attention sees no later key, so window_right must be "
      "0 or -1, got ",
      window_right);
  key.causal = causal ? 1 : 0;
  key.local_window_right = causal ? -1 : static_cast<int32_t>(window_right);
  // A quantized cache is 8-bit (int8, float8_e4m3fn or float8_e5m2) with float32 scales: one each
  // (per tensor, as vLLM's k_scale/v_scale) or Nkv * H (per channel). The op checks the rest
  // (scales absent for a cache of the query's type, their dtype, the caches' dtypes).
  if (k_scale.has_value() || v_scale.has_value()) {
    const at::ScalarType cache_type = k_cache.scalar_type();
    ATTNRT_TORCH_CHECK_ARG(
        cache_type == at::kChar || cache_type == at::kFloat8_e4m3fn ||
            cache_type == at::kFloat8_e5m2,
        k_scale.has_value() ? "k_scale" : "v_scale",
        ": scales are for 8-bit caches (int8, float8_e4m3fn or float8_e5m2), got a "
        "k_cache of ",
        cache_type);
    const at::Tensor& scale = k_scale.has_value() ? *k_scale : *v_scale;
    key.quant_type =
        scale.numel() == 1 ? ATTNRT_GQA_QUANT_PER_TENSOR : ATTNRT_GQA_QUANT_PER_CHANNEL;
    key.kv_cache_bit_width = 8;
  }
  const std::shared_ptr<CachedOp> op = VarlenOp(runtime, key);

  attnrt_tensor t[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS + 1];
  const attnrt_tensor* inputs[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS] = {};
  auto set = [&](int i, const at::Tensor& x, const char* name) {
    t[i] = Describe(x, name);
    inputs[i] = &t[i];
  };
  auto set_optional = [&](int i, const c10::optional<at::Tensor>& x, const char* name) {
    if (x.has_value()) set(i, *x, name);
  };
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY, q, "q");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY, k, "k");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE, v, "v");
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE, k_cache, "k_cache");
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE, v_cache, "v_cache");
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC, cu_seqlens_q, "cu_seqlens_q");
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS, seq_lens, "seq_lens");
  set(ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE, block_table, "block_table");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING, slot_mapping, "slot_mapping");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_HEAD_SINK, sinks, "sinks");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_K_SCALE, k_scale, "k_scale");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_V_SCALE, v_scale, "v_scale");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC, key_starts, "cu_seqlens_k");
  set_optional(ATTNRT_PAGED_GQA_VARLEN_INPUT_ALIBI_SLOPES, slopes, "alibi_slopes");
  attnrt_tensor& output = t[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS];
  output = Describe(out, "out");
  const attnrt_tensor* outputs[1] = {&output};

  const CachedPlan plan = op->Plan(inputs, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, outputs, 1);
  void* workspace = Workspace(plan.workspace_size, plan.workspace_alignment);
  const attnrt_status status =
      attnrt_plan_run(plan.plan.get(), inputs, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, outputs, 1,
                      workspace, plan.workspace_size, nullptr);
  if (status != ATTNRT_OK) ThrowStatus(status);
  Written(out);
  if (k_view.has_value()) {  // the new rows were written into the caches
    Written(k_cache);
    Written(v_cache);
  }
}

void PagedAttentionVarlen(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens,
                          const at::Tensor& block_table, const at::Tensor& out,
                          const c10::optional<at::Tensor>& k, const c10::optional<at::Tensor>& v,
                          const c10::optional<at::Tensor>& slot_mapping,
                          const c10::optional<at::Tensor>& sinks, double softmax_scale,
                          int64_t window_left, double softcap, c10::string_view kv_layout,
                          c10::string_view p_precision, c10::optional<bool> causal,
                          const c10::optional<at::Tensor>& k_scale,
                          const c10::optional<at::Tensor>& v_scale,
                          const c10::optional<at::Tensor>& cu_seqlens_k,
                          const c10::optional<at::Tensor>& alibi_slopes, int64_t window_right) {
  Run(kDefaultRuntime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out, k, v,
      slot_mapping, sinks, softmax_scale, window_left, softcap, std::string(kv_layout),
      std::string(p_precision), causal, k_scale, v_scale, cu_seqlens_k, alibi_slopes, window_right);
}

void PagedAttentionVarlenOn(
    int64_t runtime, const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
    const at::Tensor& cu_seqlens_q, const at::Tensor& seq_lens, const at::Tensor& block_table,
    const at::Tensor& out, const c10::optional<at::Tensor>& k, const c10::optional<at::Tensor>& v,
    const c10::optional<at::Tensor>& slot_mapping, const c10::optional<at::Tensor>& sinks,
    double softmax_scale, int64_t window_left, double softcap, c10::string_view kv_layout,
    c10::string_view p_precision, c10::optional<bool> causal,
    const c10::optional<at::Tensor>& k_scale, const c10::optional<at::Tensor>& v_scale,
    const c10::optional<at::Tensor>& cu_seqlens_k, const c10::optional<at::Tensor>& alibi_slopes,
    int64_t window_right) {
  Run(runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out, k, v, slot_mapping,
      sinks, softmax_scale, window_left, softcap, std::string(kv_layout), std::string(p_precision),
      causal, k_scale, v_scale, cu_seqlens_k, alibi_slopes, window_right);
}

}  // namespace

// The schema of the Python-registered operator, so that callers do not change; window_left is a
// SymInt as torch.library.custom_op declares an int. What later versions added comes last, with
// defaults, so positional callers of the older schemas work: p_precision ("exact" or "input", the
// paged op's attribute), causal (False: every query row sees every key of its sequence, the
// encoder form; None or True: causal), k_scale/v_scale (float32 scales of an int8 or
// float8_e4m3fn cache), cu_seqlens_k (int32 [B+1]: k and v have rows of their own count, sequence
// b's [cu_seqlens_k[b], cu_seqlens_k[b+1]), its last tokens; the op's key_start_loc),
// alibi_slopes (float32 [N]: ALiBi, slope * (key position - query position) added to the scores)
// and window_right (FlashAttention's window_size[1]: with causal=False, the keys after each row
// it sees, -1 all).
#define ATTNRT_VARLEN_ARGS                                                                     \
  "Tensor q, Tensor(a1!) k_cache, Tensor(a2!) v_cache, Tensor cu_seqlens_q, Tensor seq_lens, " \
  "Tensor block_table, Tensor(a6!) out, Tensor? k=None, Tensor? v=None, "                      \
  "Tensor? slot_mapping=None, Tensor? sinks=None, float softmax_scale=0., "                    \
  "SymInt window_left=-1, float softcap=0., str kv_layout=\"BSNH\", "                          \
  "str p_precision=\"exact\", bool? causal=None, Tensor? k_scale=None, Tensor? v_scale=None, " \
  "Tensor? cu_seqlens_k=None, Tensor? alibi_slopes=None, SymInt window_right=-1"

TORCH_LIBRARY_FRAGMENT(attnrt, m) {
  m.def("paged_attention_varlen(" ATTNRT_VARLEN_ARGS ") -> ()");
  // The same on a given runtime (an id from _register_runtime; 0 = the library's own).
  m.def("_paged_attention_varlen_on(int runtime, " ATTNRT_VARLEN_ARGS ") -> ()");
  m.def("_register_runtime(int handle) -> int", &RegisterRuntime);
  // A runtime on torch's intra-op threads, owned by the library (_release_runtime destroys it).
  m.def("_torch_threads_runtime(int num_threads=0) -> int", &TorchThreadsRuntime);
  m.def("_release_runtime(int runtime) -> ()", &ReleaseRuntime);
  m.def("_use_runtime(int runtime) -> ()", &UseRuntime);
  m.def("_runtime_stats(int runtime) -> int[]", &RuntimeStats);
}

// Negative and conjugate views reach the CPU kernel as they are (Resolved, CheckWritable).
TORCH_LIBRARY_IMPL(attnrt, Negative, m) {
  m.impl("paged_attention_varlen", torch::CppFunction::makeFallthrough());
  m.impl("_paged_attention_varlen_on", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(attnrt, Conjugate, m) {
  m.impl("paged_attention_varlen", torch::CppFunction::makeFallthrough());
  m.impl("_paged_attention_varlen_on", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(attnrt, CPU, m) {
  m.impl("paged_attention_varlen", &PagedAttentionVarlen);
  m.impl("_paged_attention_varlen_on", &PagedAttentionVarlenOn);
}

}  // namespace attnrt_torch
