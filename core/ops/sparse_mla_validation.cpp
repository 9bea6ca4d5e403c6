// Sparse MLA validation: the attributes at op creation (on their own and in combination), the
// gathering of a call's tensors and the input and output names. The shape checks at plan are in
// sparse_mla_validation_shapes.cpp, the value checks at run in sparse_mla_validation_run.cpp. The
// constraints are those of CANN's MixedQuantSparseFlashMla README, with attnrt's decisions where
// it leaves room (docs/sparse-mla.md).
#include "core/ops/sparse_mla_validation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/ops/sparse_mla_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::sparse_mla {
namespace detail {
namespace {

const char* LayoutName(int32_t layout) {
  switch (layout) {
    case ATTNRT_SPARSE_MLA_LAYOUT_BSND:
      return "BSND";
    case ATTNRT_SPARSE_MLA_LAYOUT_TND:
      return "TND";
    case ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND:
      return "PA_BBND";
    default:
      return "invalid";
  }
}

Status CheckAttributeValues(const attnrt_sparse_mla_attributes& a) {
  if (a.quant_mode < 1 || a.quant_mode > 3) {
    return InvalidArgument(StrCat("quant_mode: expected 1, 2 or 3, got ", a.quant_mode));
  }
  if (a.rope_head_dim != ATTNRT_SPARSE_MLA_ROPE_DIM) {
    return InvalidArgument(
        StrCat("rope_head_dim: expected 64 (the only supported value), got ", a.rope_head_dim));
  }
  if (!std::isfinite(a.softmax_scale)) {
    return InvalidArgument(
        StrCat("softmax_scale: expected a finite number, got ", a.softmax_scale));
  }
  if (a.cmp_ratio < 1 || a.cmp_ratio > 128) {
    return InvalidArgument(StrCat("cmp_ratio: expected 1 to 128, got ", a.cmp_ratio));
  }
  if (a.ori_mask_mode != 0 && a.ori_mask_mode != 3 && a.ori_mask_mode != 4) {
    return InvalidArgument(StrCat(
        "ori_mask_mode: expected 0 (no mask), 3 (rightDownCausal) or 4 (sliding window), got ",
        a.ori_mask_mode));
  }
  if (a.cmp_mask_mode != 0 && a.cmp_mask_mode != 3) {
    return InvalidArgument(StrCat(
        "cmp_mask_mode: expected 0 (no mask) or 3 (rightDownCausal), got ", a.cmp_mask_mode));
  }
  for (const auto& [name, value] :
       {std::pair{"ori_win_left", a.ori_win_left}, std::pair{"ori_win_right", a.ori_win_right}}) {
    if (value < -1) {
      return InvalidArgument(
          StrCat(name, ": expected -1 (unbounded) or a non-negative value, got ", value));
    }
    if (value >= 0 && a.ori_mask_mode != ATTNRT_SPARSE_MLA_MASK_SLIDING_WINDOW) {
      return InvalidArgument(StrCat(name,
                                    ": a value >= 0 needs ori_mask_mode 4 (sliding window), got ",
                                    name, "=", value, " with ori_mask_mode=", a.ori_mask_mode));
    }
  }
  if (a.layout_q != ATTNRT_SPARSE_MLA_LAYOUT_BSND && a.layout_q != ATTNRT_SPARSE_MLA_LAYOUT_TND) {
    return InvalidArgument(StrCat("layout_q: expected 0 (BSND) or 1 (TND), got ", a.layout_q));
  }
  if (a.layout_kv < ATTNRT_SPARSE_MLA_LAYOUT_BSND ||
      a.layout_kv > ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    return InvalidArgument(
        StrCat("layout_kv: expected 0 (BSND), 1 (TND) or 2 (PA_BBND), got ", a.layout_kv));
  }
  if (a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND && a.layout_kv != a.layout_q) {
    return InvalidArgument(StrCat(
        "layout_q/layout_kv: supported pairs are BSND/BSND, TND/TND, BSND/PA_BBND and TND/PA_BBND, "
        "got ",
        LayoutName(a.layout_q), "/", LayoutName(a.layout_kv)));
  }
  if (a.quant_mode == 2 && a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    return InvalidArgument(
        StrCat("layout_kv: quant_mode 2 (block-planar tokens) needs PA_BBND, got ",
               LayoutName(a.layout_kv)));
  }
  if (a.topk_value_mode < 1 || a.topk_value_mode > 3) {
    return InvalidArgument(
        StrCat("topk_value_mode: expected 1 (logical positions), 2 (physical token offsets) or 3 "
               "(global slot ids), got ",
               a.topk_value_mode));
  }
  if (a.topk_value_mode >= 2 && a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    return InvalidArgument(
        StrCat("topk_value_mode: ", a.topk_value_mode,
               a.topk_value_mode == 2 ? " (physical token offsets)" : " (global slot ids)",
               " needs layout_kv PA_BBND, got layout_kv ", LayoutName(a.layout_kv)));
  }
  if (a.topk_value_mode == 3) {
    // The slot lists are the selection: no mask narrows them.
    for (const auto& [name, value] : {std::pair{"ori_mask_mode", a.ori_mask_mode},
                                      std::pair{"cmp_mask_mode", a.cmp_mask_mode}}) {
      if (value != 0) {
        return InvalidArgument(StrCat(name,
                                      ": must be 0 with topk_value_mode 3 (global slot ids: the "
                                      "index lists are the keys), got ",
                                      value));
      }
    }
  }
  if (a.return_softmax_lse != 0 && a.return_softmax_lse != 1) {
    return InvalidArgument(
        StrCat("return_softmax_lse: expected 0 or 1, got ", a.return_softmax_lse));
  }
  return Status::Ok();
}

}  // namespace

Status Gather(const attnrt_tensor* const* inputs, size_t num_inputs,
              const attnrt_tensor* const* outputs, size_t num_outputs, bool metadata_op,
              Tensors* t) {
  const char* op = metadata_op ? "MixedQuantSparseFlashMlaMetadata" : "MixedQuantSparseFlashMla";
  if (num_inputs < 1 || num_inputs > ATTNRT_SPARSE_MLA_NUM_INPUTS) {
    return InvalidArgument(StrCat(op, ": expected 1 to ", int{ATTNRT_SPARSE_MLA_NUM_INPUTS},
                                  " inputs (q, ori_kv, ..., metadata), got ", num_inputs));
  }
  const size_t max_outputs = metadata_op ? 1 : ATTNRT_SPARSE_MLA_NUM_OUTPUTS;
  if (num_outputs < 1 || num_outputs > max_outputs) {
    return InvalidArgument(
        StrCat(op, ": expected 1 to ", max_outputs,
               metadata_op ? " output (metadata)" : " outputs (attn_out, softmax_lse)", ", got ",
               num_outputs));
  }
  if (inputs == nullptr) return InvalidArgument(StrCat(op, ": inputs must not be NULL"));
  if (outputs == nullptr) return InvalidArgument(StrCat(op, ": outputs must not be NULL"));
  for (size_t i = 0; i < num_inputs; ++i) t->in[i] = inputs[i];
  for (size_t i = 0; i < num_outputs; ++i) t->out[i] = outputs[i];
  return Status::Ok();
}

}  // namespace detail

using namespace detail;

Status ValidateAttributes(const void* attributes, attnrt_sparse_mla_attributes* out) {
  if (attributes == nullptr) return InvalidArgument("attributes: must not be NULL");
  const size_t size = *static_cast<const size_t*>(attributes);
  if (size < ATTNRT_SPARSE_MLA_ATTRIBUTES_STRUCT_SIZE) {
    return AbiMismatch(StrCat("attnrt_sparse_mla_attributes struct_size: expected at least ",
                              ATTNRT_SPARSE_MLA_ATTRIBUTES_STRUCT_SIZE, ", got ", size,
                              "; set it with attnrt_sparse_mla_attributes_init"));
  }
  *out = attnrt_sparse_mla_attributes{};
  std::memcpy(out, attributes, std::min(size, sizeof(attnrt_sparse_mla_attributes)));
  out->struct_size = sizeof(attnrt_sparse_mla_attributes);
  return CheckAttributeValues(*out);
}

const char* InputName(size_t index) {
  return index < ATTNRT_SPARSE_MLA_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) {
  return index < ATTNRT_SPARSE_MLA_NUM_OUTPUTS ? kOutputNames[index] : "?";
}

}  // namespace attnrt::core::sparse_mla
