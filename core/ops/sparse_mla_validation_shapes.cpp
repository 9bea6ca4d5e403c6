// Sparse MLA validation at plan. Order: per input, presence for the scenario and layout, rank and
// extents, dtype, device and strides; outputs last (CANN's MixedQuantSparseFlashMla README's
// constraints; docs/sparse-mla.md). Fills the attnrt_sparse_mla_problem; never reads data.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/ops/sparse_mla_validation.h"
#include "core/ops/sparse_mla_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::sparse_mla {
namespace detail {
namespace {

constexpr int64_t kD = ATTNRT_SPARSE_MLA_HEAD_DIM;

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

// `strided`: a PA_BBND cache, whose strides CheckBlockStride checks once kv_d is known.
Status CheckCommon(const attnrt_tensor& t, const char* name, attnrt_device device,
                   bool strided = false) {
  ATTNRT_RETURN_IF_ERROR(CheckWellFormed(t, name));
  if (!strided) ATTNRT_RETURN_IF_ERROR(CheckCompact(t, name));
  if (!SameDevice(t.device, device)) {
    return InvalidArgument(StrCat(name, ": expected the device of q (", DeviceString(device),
                                  "), got ", DeviceString(t.device)));
  }
  return Status::Ok();
}

bool ByteView(attnrt_dtype d) { return DtypeEquals(d, kUInt8) || DtypeEquals(d, kFloat8E4M3FN); }

// dtype and last dim of ori_kv / cmp_kv per quant mode (CANN's MixedQuantSparseFlashMla README,
// quant_mode).
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

// A PA_BBND cache (num_blocks, block_size, 1, kv_d) may have a block stride: strides
// (block_stride, kv_d, kv_d, 1) elements with block_stride >= block_size * kv_d, so that blocks
// never overlap (one layer's view of a cache buffer shared by layers). Extents of 1 may carry any
// stride. Writes the bytes from one block to the next, and sets *strided when they are not the
// compact block_size * kv_d elements.
Status CheckBlockStride(const attnrt_tensor& t, const char* name, int64_t kv_d,
                        int64_t* block_stride_bytes, bool* strided) {
  const int64_t bs = t.shape[1];
  const int64_t element_bytes = t.dtype.bits / 8;
  int64_t stride = bs * kv_d;
  if (t.strides != nullptr && NumElements(t) > 0) {
    const int64_t inner[3] = {kv_d, kv_d, 1};
    bool ok = t.shape[0] == 1 || t.strides[0] >= bs * kv_d;
    for (int d = 1; d < 4; ++d) {
      if (t.shape[d] != 1 && t.strides[d] != inner[d - 1]) ok = false;
    }
    if (!ok) {
      return InvalidArgument(StrCat(
          name, ": a PA_BBND cache may be strided in its block dimension only: expected strides [",
          "block_stride >= block_size * kv_d = ", bs * kv_d, ", ", kv_d, ", ", kv_d,
          ", 1] (elements), got ", StridesString(t), " for shape ", ShapeString(t)));
    }
    if (t.shape[0] != 1) stride = t.strides[0];
  }
  *block_stride_bytes = stride * element_bytes;
  if (stride != bs * kv_d) *strided = true;
  return Status::Ok();
}

// topk_value_mode 3: ori_sparse_indices int32 (q rows, 1, W), W >= 1, in q's layout.
Status CheckOriSlots(const Tensors& t, bool tnd_q, int64_t batch, attnrt_sparse_mla_problem* p) {
  const attnrt_tensor* idx = t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES];
  if (idx == nullptr) {
    return InvalidArgument(
        "ori_sparse_indices: required with topk_value_mode 3 (each query row's ori keys as global "
        "slot ids), absent");
  }
  ATTNRT_RETURN_IF_ERROR(CheckDtype(*idx, "ori_sparse_indices", kInt32));
  if (tnd_q) {
    ATTNRT_RETURN_IF_ERROR(
        CheckShape(*idx, "ori_sparse_indices", {p->q_rows, 1, -1}, "(q_t, kv_n = 1, W) for TND q"));
  } else {
    ATTNRT_RETURN_IF_ERROR(CheckShape(*idx, "ori_sparse_indices", {batch, p->q_rows, 1, -1},
                                      "(b, q_s, kv_n = 1, W) for BSND q"));
  }
  p->ori_topk = idx->shape[idx->ndim - 1];
  if (p->ori_topk < 1) {
    return InvalidArgument("ori_sparse_indices: W (last dimension) must be >= 1, got 0");
  }
  return Status::Ok();
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
                          attnrt_sparse_mla_problem* p, bool* block_strided) {
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

  // Every present input: well-formed, compact (PA_BBND caches: see CheckBlockStride), on q's
  // device.
  for (int i = 1; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    const bool cache = i == ATTNRT_SPARSE_MLA_INPUT_ORI_KV || i == ATTNRT_SPARSE_MLA_INPUT_CMP_KV;
    if (t.in[i] != nullptr) {
      ATTNRT_RETURN_IF_ERROR(CheckCommon(*t.in[i], kInputNames[i], device, pa && cache));
    }
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

  // Scenario from presence, as in CANN's MixedQuantSparseFlashMla README: SWA ori_kv only, HCA
  // cmp_kv without cmp_sparse_indices, CSA both.
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
    if (a.topk_value_mode == 2) {
      return InvalidArgument(
          StrCat("topk_value_mode: must be 1 or 3 when only ori_kv is given (SWA), got ",
                 a.topk_value_mode));
    }
    for (int i :
         {ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV,
          ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
      ATTNRT_RETURN_IF_ERROR(MustBeAbsent(t, i, "without cmp_kv (SWA)"));
    }
  }

  // Global slot ids (topk_value_mode 3): the lists are the keys; nothing else addresses the caches.
  const bool slots = a.topk_value_mode == 3;
  if (slots) {
    ATTNRT_RETURN_IF_ERROR(CheckOriSlots(t, tnd_q, B, p));
    if (p->scenario == ATTNRT_SPARSE_MLA_HCA) {
      return InvalidArgument(
          "cmp_sparse_indices: required with cmp_kv when topk_value_mode is 3 (global slot ids: "
          "the compressed keys are listed, there is no HCA prefix), absent");
    }
    for (int i : {ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
                  ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV,
                  ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV}) {
      ATTNRT_RETURN_IF_ERROR(MustBeAbsent(
          t, i, "with topk_value_mode 3 (global slot ids address the caches directly)"));
    }
  }

  // Reserved inputs.
  for (int i : {ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, ATTNRT_SPARSE_MLA_INPUT_ORI_TOPK_LENGTH,
                ATTNRT_SPARSE_MLA_INPUT_CMP_TOPK_LENGTH}) {
    if (slots && i == ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES) continue;
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
  if (pa)
    ATTNRT_RETURN_IF_ERROR(
        CheckBlockStride(ori, "ori_kv", kv_d, &p->ori_block_stride, block_strided));
  p->ori_dtype = ori.dtype;
  if (has_cmp) {
    const attnrt_tensor& cmp = *t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_KV];
    ATTNRT_RETURN_IF_ERROR(CheckKvDtype(cmp, "cmp_kv", a.quant_mode, true, q->dtype, &kv_d));
    ATTNRT_RETURN_IF_ERROR(
        CheckKvShape(cmp, "cmp_kv", a.layout_kv, B, kv_d, &p->cmp_rows, &p->cmp_block_size));
    if (pa)
      ATTNRT_RETURN_IF_ERROR(
          CheckBlockStride(cmp, "cmp_kv", kv_d, &p->cmp_block_stride, block_strided));
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
  if (pa && !slots) {
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
  } else if (!pa) {
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

}  // namespace
}  // namespace detail

using namespace detail;

Status ValidateShapes(const attnrt_sparse_mla_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs, bool metadata_op,
                      attnrt_sparse_mla_problem* out, bool* block_strided) {
  Tensors t;
  ATTNRT_RETURN_IF_ERROR(Gather(inputs, num_inputs, outputs, num_outputs, metadata_op, &t));
  bool strided = false;
  ATTNRT_RETURN_IF_ERROR(ValidateShapesImpl(attributes, t, metadata_op, out, &strided));
  if (block_strided != nullptr) *block_strided = strided;
  return Status::Ok();
}

}  // namespace attnrt::core::sparse_mla
