// Sparse MLA validation at run: the per-batch lengths (cu_seqlens_*, seqused_*, cmp_residual_kv)
// against the tensors' capacities and every block-table entry a batch uses (ResolveBatches), then
// for the main op cmp_sparse_indices values, the metadata, data pointers and aliasing; for the
// metadata op the aliasing of its output. Reads only the int32 inputs.
#include <cstdint>
#include <new>
#include <vector>

#include "core/ops/memory_overlap.h"
#include "core/ops/sparse_mla_metadata.h"
#include "core/ops/sparse_mla_validation.h"
#include "core/ops/sparse_mla_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::sparse_mla {
namespace detail {
namespace {

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

// Global slot ids (topk_value_mode 3): -1 skips an entry; every other entry names a token of the
// cache, block * block_size + offset.
Status CheckSlots(const int32_t* idx, int64_t n, int64_t width, int64_t slots, const char* name,
                  const char* cache) {
  for (int64_t e = 0; e < n; ++e) {
    const int32_t v = idx[e];
    if (v < -1 || v >= slots) {
      return InvalidArgument(StrCat(name, "[", e / width, "][", e % width,
                                    "]: expected -1 (skip) or a global slot id of ", cache,
                                    " in [0, num_blocks * block_size = ", slots, "), got ", v));
    }
  }
  return Status::Ok();
}

// The bytes an input or output spans; a PA_BBND cache with a block stride spans its blocks and
// the gaps between them.
Status SpanOfTensor(const attnrt_tensor& t, const char* name, ByteRange* out) {
  if (t.strides == nullptr) return ResolveRange(t, name, out);
  StridedBytes view;
  ATTNRT_RETURN_IF_ERROR(DescribeStrided(t, name, &view));
  *out = SpanOf(view);
  return Status::Ok();
}

}  // namespace
}  // namespace detail

using namespace detail;

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
  // Global slot ids (topk_value_mode 3) address the caches directly: the batches have no ori or cmp
  // rows of their own (the capacities below are 0 without block tables or lengths).
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
    // cmp rows (as CANN's kernel derives them: seqused_cmp_kv, else the TND difference, else
    // S2 / r).
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
        ATTNRT_RETURN_IF_ERROR(SpanOfTensor(*t.in[i], kInputNames[i], &in_range[i]));
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
    const int32_t* ori_idx = nullptr;
    if (a.topk_value_mode == 3) {
      ori_idx = Data(t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES]);
      ATTNRT_RETURN_IF_ERROR(
          CheckSlots(ori_idx, NumElements(*t.in[ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES]),
                     p.ori_topk, p.ori_rows * p.ori_block_size, "ori_sparse_indices", "ori_kv"));
      if (idx != nullptr) {
        ATTNRT_RETURN_IF_ERROR(
            CheckSlots(idx, NumElements(*t.in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES]), p.topk,
                       p.cmp_rows * p.cmp_block_size, "cmp_sparse_indices", "cmp_kv"));
      }
    } else if (idx != nullptr) {
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
    args->batch_stride = sizeof(attnrt_sparse_mla_batch);
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
    args->ori_sparse_indices = ori_idx;
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

}  // namespace attnrt::core::sparse_mla
