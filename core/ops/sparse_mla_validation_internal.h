// Private to sparse MLA validation (sparse_mla_validation.cpp: attributes and the gathering of a
// call's tensors; sparse_mla_validation_shapes.cpp: shapes at plan; sparse_mla_validation_run.cpp:
// values at run): the input and output names and the gathered tensors.
#pragma once

#include <cstddef>

#include "attnrt/ops/sparse_mla.h"
#include "core/status.h"

namespace attnrt::core::sparse_mla::detail {

inline constexpr const char* kInputNames[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {"q",
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
inline constexpr const char* kOutputNames[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {"attn_out",
                                                                            "softmax_lse"};

struct Tensors {
  const attnrt_tensor* in[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {};
  const attnrt_tensor* out[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {};
};

// The inputs and outputs of a call into *t, after checking their counts (the metadata op has one
// output) and that the arrays are given.
Status Gather(const attnrt_tensor* const* inputs, size_t num_inputs,
              const attnrt_tensor* const* outputs, size_t num_outputs, bool metadata_op,
              Tensors* t);

}  // namespace attnrt::core::sparse_mla::detail
