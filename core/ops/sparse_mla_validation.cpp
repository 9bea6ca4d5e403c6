// Sparse MLA validation (seed 001 "Constraints", reference sparse-mla-semantics.md §2–§4). Order:
// attributes alone, attribute combinations, then per input: presence for the scenario and layout,
// rank and extents, dtype, device and strides; outputs last. Run-time values follow reference §3.1.
#include "core/ops/sparse_mla_validation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "core/ops/sparse_mla_metadata.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::sparse_mla {
namespace {

constexpr const char* kInputNames[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {"q",
                                                                   "ori_kv",
                                                                   "cmp_kv",
                                                                   "ori_sparse_indices",
                                                                   "cmp_sparse_indices",
                                                                   "ori_block_table",
                                                                   "cmp_block_table",
                                                                   "cu_seqlens_q",
                                                                   "cu_seqlens_ori_kv",
                                                                   "cu_seqlens_cmp_kv",
                                                                   "seqused_q",
                                                                   "seqused_ori_kv",
                                                                   "seqused_cmp_kv",
                                                                   "cmp_residual_kv",
                                                                   "ori_topk_length",
                                                                   "cmp_topk_length",
                                                                   "sinks",
                                                                   "metadata"};
constexpr const char* kOutputNames[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {"attn_out", "softmax_lse"};

constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

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
  if (a.topk_value_mode != 1 && a.topk_value_mode != 2) {
    return InvalidArgument(StrCat("topk_value_mode: expected 1 or 2, got ", a.topk_value_mode));
  }
  if (a.topk_value_mode == 2 && a.layout_kv != ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND) {
    return InvalidArgument(StrCat(
        "topk_value_mode: 2 (physical token offsets) needs layout_kv PA_BBND, got layout_kv ",
        LayoutName(a.layout_kv)));
  }
  if (a.return_softmax_lse != 0 && a.return_softmax_lse != 1) {
    return InvalidArgument(
        StrCat("return_softmax_lse: expected 0 or 1, got ", a.return_softmax_lse));
  }
  return Status::Ok();
}

// ---- shapes
// ---------------------------------------------------------------------------------------

struct Tensors {
  const attnrt_tensor* in[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {};
};

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

bool Empty(const attnrt_tensor* t) { return t == nullptr || NumElements(*t) == 0; }

// "<name>: expected shape [..], got [..]" with `what` describing the expected dims.
Status CheckShape(const attnrt_tensor& t, const char* name, std::initializer_list<int64_t> dims,
                  const char* what) {
  bool ok = t.ndim == static_cast<int32_t>(dims.size());
  size_t d = 0;
  for (int64_t e : dims) {
    if (ok && e >= 0 && t.shape[d] != e) ok = false;
    ++d;
  }
  if (ok) return Status::Ok();
  std::string expected = "[";
  d = 0;
  for (int64_t e : dims) {
    if (d++ > 0) expected += ", ";
    expected += e >= 0 ? std::to_string(e) : std::string("*");
  }
  return InvalidArgument(
      StrCat(name, ": expected shape ", expected, "] ", what, ", got ", ShapeString(t)));
}

Status CheckCommon(const attnrt_tensor& t, const char* name, attnrt_device device) {
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(t, name));
  ATTNRT_RETURN_IF_ERROR(CheckCompact(t, name));
  if (!SameDevice(t.device, device)) {
    return InvalidArgument(StrCat(name, ": expected the device of q (", DeviceString(device),
                                  "), got ", DeviceString(t.device)));
  }
  return Status::Ok();
}

bool ByteView(attnrt_dtype d) { return DtypeEquals(d, kUInt8) || DtypeEquals(d, kFloat8E4M3FN); }

// dtype and last dim of ori_kv / cmp_kv per quant mode (seed 001, quant_mode).
Status CheckKvDtype(const attnrt_tensor& t, const char* name, int32_t quant_mode, bool cmp,
                    attnrt_dtype q_dtype, int64_t* kv_d) {
  if (quant_mode == 3) {
    if (cmp) {
      *kv_d = ATTNRT_SPARSE_MLA_TQ4_TOKEN_BYTES;
      return CheckDtype(t, name, kUInt8, "TQ4 codes and fp16 scales of quant_mode 3");
    }
    *kv_d = kD;
    return CheckDtype(t, name, q_dtype, "the dtype of q; ori_kv is not quantized in quant_mode 3");
  }
  *kv_d =
      quant_mode == 1 ? ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES : ATTNRT_SPARSE_MLA_MODE2_TOKEN_BYTES;
  if (ByteView(t.dtype)) return Status::Ok();
  return InvalidArgument(StrCat(name,
                                ": expected dtype uint8 or float8_e4m3fn (byte view of quant_mode ",
                                quant_mode, " tokens), got ", DtypeString(t.dtype)));
}

// ori_kv / cmp_kv shape by layout_kv; fills rows (BSND S, TND T, PA num_blocks) and block size.
Status CheckKvShape(const attnrt_tensor& t, const char* name, int32_t layout_kv, int64_t batch,
                    int64_t kv_d, int64_t* rows, int64_t* block_size) {
  *block_size = 0;
  switch (layout_kv) {
    case ATTNRT_SPARSE_MLA_LAYOUT_BSND:
      ATTNRT_RETURN_IF_ERROR(
          CheckShape(t, name, {batch, -1, 1, kv_d}, "(batch, kv rows, kv_n = 1, kv_d) for BSND"));
      *rows = t.shape[1];
      return Status::Ok();
    case ATTNRT_SPARSE_MLA_LAYOUT_TND:
      ATTNRT_RETURN_IF_ERROR(
          CheckShape(t, name, {-1, 1, kv_d}, "(kv tokens, kv_n = 1, kv_d) for TND"));
      *rows = t.shape[0];
      return Status::Ok();
    default:
      ATTNRT_RETURN_IF_ERROR(CheckShape(t, name, {-1, -1, 1, kv_d},
                                        "(num_blocks, block_size, kv_n = 1, kv_d) for PA_BBND"));
      if (t.shape[1] < 1 || t.shape[1] > 1024) {
        return InvalidArgument(
            StrCat(name, ": block_size (dimension 1) must be 1 to 1024, got ", t.shape[1]));
      }
      *rows = t.shape[0];
      *block_size = t.shape[1];
      return Status::Ok();
  }
}

Status CheckInt32Vector(const Tensors& t, int index, int64_t length, const char* what) {
  const attnrt_tensor& x = *t.in[index];
  ATTNRT_RETURN_IF_ERROR(CheckDtype(x, kInputNames[index], kInt32));
  return CheckShape(x, kInputNames[index], {length}, what);
}

Status MustBeAbsent(const Tensors& t, int index, const char* why) {
  if (t.in[index] == nullptr) return Status::Ok();
  return InvalidArgument(StrCat(kInputNames[index], ": must be absent ", why));
}

Status ValidateShapesImpl(const attnrt_sparse_mla_attributes& a, const Tensors& t, bool metadata_op,
                          attnrt_sparse_mla_problem* p) {
  *p = attnrt_sparse_mla_problem{};
  p->struct_size = sizeof(attnrt_sparse_mla_problem);
  p->attributes = a;
  const bool tnd_q = a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool pa = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  const bool tnd_kv = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_TND;

  // q.
  const attnrt_tensor* q = t.in[ATTNRT_SPARSE_MLA_INPUT_Q];
  if (q == nullptr) return InvalidArgument("q: required input is absent");
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(*q, "q"));
  ATTNRT_RETURN_IF_ERROR(CheckCompact(*q, "q"));
  if (q->device.device_type != ATTNRT_DEVICE_CPU && q->device.device_type != ATTNRT_DEVICE_CUDA) {
    return InvalidArgument(
        StrCat("q: expected a CPU or CUDA tensor, got ", DeviceString(q->device)));
  }
  const attnrt_device device = q->device;
  p->device_type = device.device_type;
  if (a.quant_mode == 3) {
    if (!DtypeEquals(q->dtype, kBFloat16) && !DtypeEquals(q->dtype, kFloat16)) {
      return InvalidArgument(StrCat("q: expected dtype bfloat16 or float16 for quant_mode 3, got ",
                                    DtypeString(q->dtype)));
    }
  } else {
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*q, "q", kBFloat16, "quant_mode 1 and 2 take bfloat16 q"));
  }
  p->q_dtype = q->dtype;
  if (tnd_q) {
    ATTNRT_RETURN_IF_ERROR(CheckShape(*q, "q", {-1, -1, kD}, "(q_t, q_n, q_d = 512) for TND"));
    p->q_rows = q->shape[0];
    p->num_heads = q->shape[1];
  } else {
    ATTNRT_RETURN_IF_ERROR(
        CheckShape(*q, "q", {-1, -1, -1, kD}, "(b, q_s, q_n, q_d = 512) for BSND"));
    p->batch_size = q->shape[0];
    p->q_rows = q->shape[1];
    p->num_heads = q->shape[2];
  }
  if (p->num_heads < 1 || p->num_heads > ATTNRT_SPARSE_MLA_MAX_HEADS) {
    return InvalidArgument(StrCat("q: q_n (number of heads) must be 1 to 128, got ", p->num_heads));
  }

  // Every present input: well-formed, compact, on q's device.
  for (int i = 1; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    if (t.in[i] != nullptr) ATTNRT_RETURN_IF_ERROR(CheckCommon(*t.in[i], kInputNames[i], device));
  }

  // cu_seqlens_q gives B for TND.
  const attnrt_tensor* cu_q = t.in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q];
  if (tnd_q) {
    if (cu_q == nullptr) return InvalidArgument("cu_seqlens_q: required with layout_q TND, absent");
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*cu_q, "cu_seqlens_q", kInt32));
    if (cu_q->ndim != 1 || cu_q->shape[0] < 1) {
      return InvalidArgument(
          StrCat("cu_seqlens_q: expected shape [b + 1] with b >= 0, got ", ShapeString(*cu_q)));
    }
    p->batch_size = cu_q->shape[0] - 1;
  } else {
    ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q,
                                        "with layout_q BSND (the batch rows come from q's shape)"));
  }
  const int64_t B = p->batch_size;

  // Scenario from presence (reference §2.3).
  const bool has_cmp = t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV] != nullptr;
  const bool has_idx = t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES] != nullptr;
  if (t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_KV] == nullptr) {
    return InvalidArgument(
        "ori_kv: required input is absent (every scenario attends the original KV)");
  }
  if (has_idx && !has_cmp) {
    return InvalidArgument("cmp_sparse_indices: given without cmp_kv (CSA needs both)");
  }
  p->scenario = !has_cmp  ? ATTNRT_SPARSE_MLA_SWA
                : has_idx ? ATTNRT_SPARSE_MLA_CSA
                          : ATTNRT_SPARSE_MLA_HCA;
  if (p->scenario == ATTNRT_SPARSE_MLA_SWA) {
    if (a.cmp_ratio != 1) {
      return InvalidArgument(
          StrCat("cmp_ratio: must be 1 when only ori_kv is given (SWA), got ", a.cmp_ratio));
    }
    if (a.topk_value_mode != 1) {
      return InvalidArgument(StrCat(
          "topk_value_mode: must be 1 when only ori_kv is given (SWA), got ", a.topk_value_mode));
    }
    for (int i :
         {ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV,
          ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
      ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, i, "without cmp_kv (SWA)"));
    }
  }

  // Reserved inputs.
  for (int i : {ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, ATTNRT_SPARSE_MLA_INPUT_ORI_TOPK_LENGTH,
                ATTNRT_SPARSE_MLA_INPUT_CMP_TOPK_LENGTH}) {
    if (!Empty(t.in[i])) {
      return InvalidArgument(StrCat(kInputNames[i],
                                    ": reserved; expected absent or empty, got shape ",
                                    ShapeString(*t.in[i])));
    }
  }

  // ori_kv and cmp_kv.
  int64_t kv_d = 0;
  const attnrt_tensor& ori = *t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_KV];
  ATTNRT_RETURN_IF_ERROR(CheckKvDtype(ori, "ori_kv", a.quant_mode, false, q->dtype, &kv_d));
  ATTNRT_RETURN_IF_ERROR(
      CheckKvShape(ori, "ori_kv", a.layout_kv, B, kv_d, &p->ori_rows, &p->ori_block_size));
  p->ori_dtype = ori.dtype;
  if (has_cmp) {
    const attnrt_tensor& cmp = *t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV];
    ATTNRT_RETURN_IF_ERROR(CheckKvDtype(cmp, "cmp_kv", a.quant_mode, true, q->dtype, &kv_d));
    ATTNRT_RETURN_IF_ERROR(
        CheckKvShape(cmp, "cmp_kv", a.layout_kv, B, kv_d, &p->cmp_rows, &p->cmp_block_size));
    p->cmp_dtype = cmp.dtype;
  }

  // cmp_sparse_indices.
  if (has_idx) {
    const attnrt_tensor& idx = *t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES];
    ATTNRT_RETURN_IF_ERROR(CheckDtype(idx, "cmp_sparse_indices", kInt32));
    if (tnd_q) {
      ATTNRT_RETURN_IF_ERROR(CheckShape(idx, "cmp_sparse_indices", {p->q_rows, 1, -1},
                                        "(q_t, kv_n = 1, cmp_kv_k) for TND q"));
      p->topk = idx.shape[2];
    } else {
      ATTNRT_RETURN_IF_ERROR(CheckShape(idx, "cmp_sparse_indices", {B, p->q_rows, 1, -1},
                                        "(b, q_s, kv_n = 1, cmp_kv_k) for BSND q"));
      p->topk = idx.shape[3];
    }
    if (p->topk < 1) {
      return InvalidArgument("cmp_sparse_indices: cmp_kv_k (last dimension) must be >= 1, got 0");
    }
  }

  // Block tables.
  if (pa) {
    const attnrt_tensor* bt = t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE];
    if (bt == nullptr)
      return InvalidArgument("ori_block_table: required with layout_kv PA_BBND, absent");
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*bt, "ori_block_table", kInt32));
    ATTNRT_RETURN_IF_ERROR(
        CheckShape(*bt, "ori_block_table", {B, -1}, "(b, max blocks per batch)"));
    p->ori_max_blocks = bt->shape[1];
    if (t.in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV] == nullptr) {
      return InvalidArgument("seqused_ori_kv: required with layout_kv PA_BBND, absent");
    }
    if (has_cmp) {
      const attnrt_tensor* cbt = t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE];
      if (cbt == nullptr) {
        return InvalidArgument(
            "cmp_block_table: required with cmp_kv and layout_kv PA_BBND, absent");
      }
      ATTNRT_RETURN_IF_ERROR(CheckDtype(*cbt, "cmp_block_table", kInt32));
      ATTNRT_RETURN_IF_ERROR(
          CheckShape(*cbt, "cmp_block_table", {B, -1}, "(b, max blocks per batch)"));
      p->cmp_max_blocks = cbt->shape[1];
    }
  } else {
    for (int i :
         {ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE}) {
      ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, i, "unless layout_kv is PA_BBND"));
    }
  }

  // cu_seqlens of the KV side.
  if (tnd_kv) {
    if (t.in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV] == nullptr) {
      return InvalidArgument("cu_seqlens_ori_kv: required with layout_kv TND, absent");
    }
    ATTNRT_RETURN_IF_ERROR(
        CheckInt32Vector(t, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV, B + 1, "(b + 1)"));
    if (has_cmp) {
      if (t.in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV] == nullptr) {
        return InvalidArgument("cu_seqlens_cmp_kv: required with cmp_kv and layout_kv TND, absent");
      }
      ATTNRT_RETURN_IF_ERROR(
          CheckInt32Vector(t, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV, B + 1, "(b + 1)"));
    }
  } else {
    for (int i :
         {ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV}) {
      ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, i, "unless layout_kv is TND"));
    }
  }

  // Per-batch vectors and sinks.
  for (int i : {ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV,
                ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
    if (t.in[i] != nullptr) ATTNRT_RETURN_IF_ERROR(CheckInt32Vector(t, i, B, "(b)"));
  }
  if (const attnrt_tensor* sinks = t.in[ATTNRT_SPARSE_MLA_INPUT_SINKS]) {
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*sinks, "sinks", kFloat32));
    ATTNRT_RETURN_IF_ERROR(CheckShape(*sinks, "sinks", {p->num_heads}, "(q_n)"));
    p->has_sinks = true;
  }

  // metadata.
  const attnrt_tensor* md = t.in[ATTNRT_SPARSE_MLA_INPUT_METADATA];
  if (metadata_op) {
    ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, ATTNRT_SPARSE_MLA_INPUT_METADATA,
                                        "for the metadata op (it produces the metadata)"));
  } else {
    if (md == nullptr) {
      return InvalidArgument(
          "metadata: required input is absent; run the sparse_mla_metadata op with the same "
          "attributes and inputs first");
    }
    ATTNRT_RETURN_IF_ERROR(CheckInt32Vector(t, ATTNRT_SPARSE_MLA_INPUT_METADATA,
                                            ATTNRT_SPARSE_MLA_METADATA_SIZE, "(2048)"));
  }

  // Outputs.
  if (metadata_op) {
    const attnrt_tensor* out = t.out[ATTNRT_SPARSE_MLA_METADATA_OUTPUT];
    if (out == nullptr) return InvalidArgument("metadata: the output is absent");
    ATTNRT_RETURN_IF_ERROR(CheckCommon(*out, "metadata", device));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*out, "metadata", kInt32));
    return CheckShape(*out, "metadata", {ATTNRT_SPARSE_MLA_METADATA_SIZE}, "(2048)");
  }
  const attnrt_tensor* out = t.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
  if (out == nullptr) return InvalidArgument("attn_out: required output is absent");
  ATTNRT_RETURN_IF_ERROR(CheckCommon(*out, "attn_out", device));
  ATTNRT_RETURN_IF_ERROR(CheckDtype(*out, "attn_out", q->dtype, "the dtype of q"));
  if (out->ndim != q->ndim || !std::equal(q->shape, q->shape + q->ndim, out->shape)) {
    return InvalidArgument(
        StrCat("attn_out: expected the shape of q ", ShapeString(*q), ", got ", ShapeString(*out)));
  }
  const attnrt_tensor* lse = t.out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE];
  if (a.return_softmax_lse == 1) {
    if (lse == nullptr) {
      return InvalidArgument("softmax_lse: required output with return_softmax_lse=1, absent");
    }
    ATTNRT_RETURN_IF_ERROR(CheckCommon(*lse, "softmax_lse", device));
    ATTNRT_RETURN_IF_ERROR(CheckDtype(*lse, "softmax_lse", kFloat32));
    if (tnd_q) {
      ATTNRT_RETURN_IF_ERROR(CheckShape(*lse, "softmax_lse", {1, p->q_rows, p->num_heads},
                                        "(kv_n = 1, q_t, q_n) for TND q"));
    } else {
      ATTNRT_RETURN_IF_ERROR(CheckShape(*lse, "softmax_lse", {B, 1, p->q_rows, p->num_heads},
                                        "(b, kv_n = 1, q_s, q_n) for BSND q"));
    }
    p->has_softmax_lse = true;
  } else if (lse != nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckCommon(*lse, "softmax_lse", device));
    if (NumElements(*lse) != 0) {
      return InvalidArgument(
          StrCat("softmax_lse: with return_softmax_lse=0 expected absent or an empty placeholder, "
                 "got shape ",
                 ShapeString(*lse)));
    }
  }
  return Status::Ok();
}

// ---- run-time values
// -------------------------------------------------------------------------------

const int32_t* Data(const attnrt_tensor* t) {
  if (t == nullptr || t->data == nullptr) return nullptr;
  return reinterpret_cast<const int32_t*>(static_cast<const char*>(t->data) + t->byte_offset);
}

// cu_seqlens: first 0, non-decreasing, last <= rows of the tensor it indexes.
Status CheckCuSeqlens(const int32_t* cu, int64_t batch, const char* name, int64_t rows,
                      const char* rows_what) {
  if (cu[0] != 0) return InvalidArgument(StrCat(name, "[0]: expected 0, got ", cu[0]));
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      return InvalidArgument(StrCat(name, ": expected non-decreasing values, got ", name, "[",
                                    b + 1, "]=", cu[b + 1], " < ", name, "[", b, "]=", cu[b]));
    }
  }
  if (cu[batch] > rows) {
    return InvalidArgument(StrCat(name, "[", batch, "]: expected at most ", rows, " (", rows_what,
                                  "), got ", cu[batch]));
  }
  return Status::Ok();
}

Status CheckLength(const char* name, int64_t b, int64_t value, int64_t capacity, const char* what) {
  if (value < 0 || value > capacity) {
    return InvalidArgument(
        StrCat(name, "[", b, "]: expected 0 to ", capacity, " (", what, "), got ", value));
  }
  return Status::Ok();
}

// The entries a batch uses lie in [0, num_blocks). `length` is already at most
// max_blocks * block_size (its capacity check), so the needed columns exist.
Status CheckBlockTable(const int32_t* table, int64_t b, int64_t max_blocks, int64_t length,
                       int64_t block_size, int64_t num_blocks, const char* name) {
  const int64_t needed = (length + block_size - 1) / block_size;
  for (int64_t k = 0; k < needed; ++k) {
    const int32_t v = table[b * max_blocks + k];
    if (v < 0 || v >= num_blocks) {
      return InvalidArgument(StrCat(name, "[", b, ", ", k, "]: expected a block id in [0, ",
                                    num_blocks, "), got ", v));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateAttributes(const void* attributes, attnrt_sparse_mla_attributes* out) {
  if (attributes == nullptr) return InvalidArgument("attributes: must not be NULL");
  const size_t size = *static_cast<const size_t*>(attributes);
  if (size < sizeof(attnrt_sparse_mla_attributes)) {
    return AbiMismatch(StrCat("attributes.struct_size: expected at least ",
                              sizeof(attnrt_sparse_mla_attributes), ", got ", size));
  }
  std::memcpy(out, attributes, sizeof(attnrt_sparse_mla_attributes));
  out->struct_size = sizeof(attnrt_sparse_mla_attributes);
  return CheckAttributeValues(*out);
}

Status ValidateShapes(const attnrt_sparse_mla_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs, bool metadata_op,
                      attnrt_sparse_mla_problem* out) {
  Tensors t;
  ATTNRT_RETURN_IF_ERROR(Gather(inputs, num_inputs, outputs, num_outputs, metadata_op, &t));
  return ValidateShapesImpl(attributes, t, metadata_op, out);
}

Status ResolveBatches(const attnrt_sparse_mla_problem& p, const attnrt_tensor* const* inputs,
                      size_t num_inputs, std::vector<attnrt_sparse_mla_batch>* out) {
  const attnrt_sparse_mla_attributes& a = p.attributes;
  auto in = [&](int i) { return static_cast<size_t>(i) < num_inputs ? inputs[i] : nullptr; };
  const int64_t B = p.batch_size;
  const bool tnd_q = a.layout_q == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool tnd_kv = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_TND;
  const bool pa = a.layout_kv == ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  const bool has_cmp = p.scenario != ATTNRT_SPARSE_MLA_SWA;
  const int32_t* cu_q = Data(in(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q));
  const int32_t* cu_ori = Data(in(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV));
  const int32_t* cu_cmp = Data(in(ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV));
  const int32_t* used_q = Data(in(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q));
  const int32_t* used_ori = Data(in(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV));
  const int32_t* used_cmp = Data(in(ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV));
  const int32_t* residual = Data(in(ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV));
  const int32_t* ori_bt = Data(in(ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE));
  const int32_t* cmp_bt = Data(in(ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE));
  if (tnd_q)
    ATTNRT_RETURN_IF_ERROR(
        CheckCuSeqlens(cu_q, B, "cu_seqlens_q", p.q_rows, "q_t, q's dimension 0"));
  if (tnd_kv) {
    ATTNRT_RETURN_IF_ERROR(
        CheckCuSeqlens(cu_ori, B, "cu_seqlens_ori_kv", p.ori_rows, "ori_kv's dimension 0"));
    if (has_cmp) {
      ATTNRT_RETURN_IF_ERROR(
          CheckCuSeqlens(cu_cmp, B, "cu_seqlens_cmp_kv", p.cmp_rows, "cmp_kv's dimension 0"));
    }
  }
  const int64_t r = a.cmp_ratio;
  out->assign(static_cast<size_t>(B), attnrt_sparse_mla_batch{});
  for (int64_t b = 0; b < B; ++b) {
    attnrt_sparse_mla_batch& x = (*out)[b];
    // Query rows.
    x.q_start = tnd_q ? cu_q[b] : b * p.q_rows;
    x.q_capacity = tnd_q ? cu_q[b + 1] - cu_q[b] : p.q_rows;
    int64_t s1 = x.q_capacity;
    if (used_q != nullptr) {
      ATTNRT_RETURN_IF_ERROR(CheckLength("seqused_q", b, used_q[b], x.q_capacity,
                                         tnd_q ? "the batch's cu_seqlens_q rows" : "q_s"));
      s1 = used_q[b];
    }
    // ori rows.
    int64_t ori_capacity = 0;
    const char* ori_what = "";
    if (pa) {
      ori_capacity = p.ori_max_blocks * p.ori_block_size;
      ori_what = "ori_block_table columns * block_size";
      x.ori_start = 0;
    } else if (tnd_kv) {
      ori_capacity = cu_ori[b + 1] - cu_ori[b];
      ori_what = "the batch's cu_seqlens_ori_kv rows";
      x.ori_start = cu_ori[b];
    } else {
      ori_capacity = p.ori_rows;
      ori_what = "ori_kv_s";
      x.ori_start = b * p.ori_rows;
    }
    int64_t s2 = ori_capacity;
    if (used_ori != nullptr) {
      ATTNRT_RETURN_IF_ERROR(CheckLength("seqused_ori_kv", b, used_ori[b], ori_capacity, ori_what));
      s2 = used_ori[b];
    }
    if (pa) {
      ATTNRT_RETURN_IF_ERROR(CheckBlockTable(ori_bt, b, p.ori_max_blocks, s2, p.ori_block_size,
                                             p.ori_rows, "ori_block_table"));
    }
    // cmp rows (reference §3.1: seqused_cmp_kv, else the TND difference, else S2 / r).
    int64_t c = 0, lc = 0;
    if (has_cmp) {
      int64_t cmp_capacity = 0;
      const char* cmp_what = "";
      if (pa) {
        cmp_capacity = p.cmp_max_blocks * p.cmp_block_size;
        cmp_what = "cmp_block_table columns * block_size";
        x.cmp_start = 0;
      } else if (tnd_kv) {
        cmp_capacity = cu_cmp[b + 1] - cu_cmp[b];
        cmp_what = "the batch's cu_seqlens_cmp_kv rows";
        x.cmp_start = cu_cmp[b];
      } else {
        cmp_capacity = p.cmp_rows;
        cmp_what = "cmp_kv_s";
        x.cmp_start = b * p.cmp_rows;
      }
      if (used_cmp != nullptr) {
        ATTNRT_RETURN_IF_ERROR(
            CheckLength("seqused_cmp_kv", b, used_cmp[b], cmp_capacity, cmp_what));
        c = used_cmp[b];
      } else if (tnd_kv) {
        c = cmp_capacity;
      } else {
        c = s2 / r;
        if (c > cmp_capacity) {
          return InvalidArgument(StrCat("cmp_kv: batch ", b,
                                        " derives cmp_len = seqused_ori_kv / cmp_ratio = ", s2,
                                        " / ", r, " = ", c, " compressed rows, but holds only ",
                                        cmp_capacity, " (", cmp_what, "); pass seqused_cmp_kv"));
        }
      }
      int64_t res = 0;
      if (residual != nullptr) {
        if (residual[b] < 0 || residual[b] >= r) {
          return InvalidArgument(StrCat("cmp_residual_kv[", b, "]: expected 0 to cmp_ratio - 1 = ",
                                        r - 1, ", got ", residual[b]));
        }
        res = residual[b];
      }
      lc = c * r + res;
      if (lc > INT32_MAX) {
        return InvalidArgument(StrCat("seqused_cmp_kv[", b, "]: cmp_len * cmp_ratio + residual = ",
                                      lc, " exceeds the int32 range"));
      }
      if (pa) {
        ATTNRT_RETURN_IF_ERROR(CheckBlockTable(cmp_bt, b, p.cmp_max_blocks, c, p.cmp_block_size,
                                               p.cmp_rows, "cmp_block_table"));
      }
    }
    x.s1 = static_cast<int32_t>(s1);
    x.s2 = static_cast<int32_t>(s2);
    x.cmp_len = static_cast<int32_t>(c);
    x.cmp_total = static_cast<int32_t>(lc);
  }
  return Status::Ok();
}

Status ValidateRun(const attnrt_sparse_mla_problem& p, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   std::vector<attnrt_sparse_mla_batch>* batches, attnrt_sparse_mla_args* args) {
  try {
    Tensors t;
    ATTNRT_RETURN_IF_ERROR(Gather(inputs, num_inputs, outputs, num_outputs, false, &t));
    ByteRange in_range[ATTNRT_SPARSE_MLA_NUM_INPUTS];
    for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
      if (t.in[i] != nullptr)
        ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.in[i], kInputNames[i], &in_range[i]));
    }
    ByteRange out_range[ATTNRT_SPARSE_MLA_NUM_OUTPUTS];
    for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_OUTPUTS; ++i) {
      if (t.out[i] != nullptr) {
        ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.out[i], kOutputNames[i], &out_range[i]));
      }
    }
    // Outputs never alias inputs or each other (the kernel reads inputs while it writes).
    for (int o = 0; o < ATTNRT_SPARSE_MLA_NUM_OUTPUTS; ++o) {
      for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
        if (Overlaps(out_range[o], in_range[i])) {
          return InvalidArgument(StrCat(kOutputNames[o], ": shares memory with input ",
                                        kInputNames[i], "; outputs must not overlap inputs"));
        }
      }
    }
    if (Overlaps(out_range[0], out_range[1])) {
      return InvalidArgument("softmax_lse: shares memory with attn_out");
    }

    ATTNRT_RETURN_IF_ERROR(ResolveBatches(p, t.in, ATTNRT_SPARSE_MLA_NUM_INPUTS, batches));

    // Indices: -1 pads; other negative values are errors; physical slots must lie in the cache.
    const attnrt_sparse_mla_attributes& a = p.attributes;
    const int32_t* idx = Data(t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES]);
    if (idx != nullptr) {
      const int64_t n = NumElements(*t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES]);
      const int64_t slots = p.cmp_rows * p.cmp_block_size;
      for (int64_t e = 0; e < n; ++e) {
        const int32_t v = idx[e];
        if (v < -1) {
          return InvalidArgument(StrCat("cmp_sparse_indices: element ", e, " (row ", e / p.topk,
                                        ", slot ", e % p.topk,
                                        ") expected -1 (padding) or an index >= 0, got ", v));
        }
        if (a.topk_value_mode == 2 && v >= slots) {
          return InvalidArgument(
              StrCat("cmp_sparse_indices: element ", e, " (row ", e / p.topk, ", slot ", e % p.topk,
                     ") is a physical token offset (topk_value_mode 2) and must be "
                     "below num_blocks * block_size = ",
                     slots, ", got ", v));
        }
      }
    }

    // Metadata.
    const int32_t* md = Data(t.in[ATTNRT_SPARSE_MLA_INPUT_METADATA]);
    ATTNRT_RETURN_IF_ERROR(
        CheckMetadata(p, *batches, Signature(a, t.in, ATTNRT_SPARSE_MLA_NUM_INPUTS), md));

    *args = attnrt_sparse_mla_args{};
    args->struct_size = sizeof(attnrt_sparse_mla_args);
    args->problem = &p;
    args->batches = batches->data();
    args->metadata = md;
    auto ptr = [&](int i) -> const void* {
      const attnrt_tensor* x = t.in[i];
      if (x == nullptr || x->data == nullptr) return nullptr;
      return static_cast<const char*>(x->data) + x->byte_offset;
    };
    args->q = ptr(ATTNRT_SPARSE_MLA_INPUT_Q);
    args->ori_kv = static_cast<const uint8_t*>(ptr(ATTNRT_SPARSE_MLA_INPUT_ORI_KV));
    args->cmp_kv = static_cast<const uint8_t*>(ptr(ATTNRT_SPARSE_MLA_INPUT_CMP_KV));
    args->cmp_sparse_indices = idx;
    args->ori_block_table = Data(t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE]);
    args->cmp_block_table = Data(t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE]);
    args->sinks = static_cast<const float*>(ptr(ATTNRT_SPARSE_MLA_INPUT_SINKS));
    const attnrt_tensor* o = t.out[ATTNRT_SPARSE_MLA_OUTPUT_ATTN_OUT];
    args->attn_out = o->data == nullptr ? nullptr : static_cast<char*>(o->data) + o->byte_offset;
    if (p.has_softmax_lse) {
      const attnrt_tensor* l = t.out[ATTNRT_SPARSE_MLA_OUTPUT_SOFTMAX_LSE];
      args->softmax_lse = reinterpret_cast<float*>(static_cast<char*>(l->data) + l->byte_offset);
    }
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return {ATTNRT_ERROR_OUT_OF_MEMORY, "sparse_mla: out of memory while validating the run"};
  }
}

Status ValidateMetadataRun(const attnrt_tensor* const* inputs, size_t num_inputs,
                           const attnrt_tensor& output) {
  ByteRange out_range;
  ATTNRT_RETURN_IF_ERROR(ResolveRange(output, "metadata", &out_range));
  for (size_t i = 0; i < num_inputs && i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    if (inputs[i] == nullptr) continue;
    ByteRange in_range;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*inputs[i], kInputNames[i], &in_range));
    if (Overlaps(out_range, in_range)) {
      return InvalidArgument(StrCat("metadata: shares memory with input ", kInputNames[i],
                                    "; outputs must not overlap inputs"));
    }
  }
  return Status::Ok();
}

const char* InputName(size_t index) {
  return index < ATTNRT_SPARSE_MLA_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) {
  return index < ATTNRT_SPARSE_MLA_NUM_OUTPUTS ? kOutputNames[index] : "?";
}

}  // namespace attnrt::core::sparse_mla
