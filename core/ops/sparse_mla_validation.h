// Sparse MLA (CANN MixedQuantSparseFlashMla) validation: attributes at op creation, shapes at plan,
// values at run. The constraints are those of CANN's MixedQuantSparseFlashMla README (inputs,
// restrictions, masks, top-k rules; docs/sparse-mla.md); every message names the input or
// attribute, the expected and the actual value.
#pragma once

#include <cstddef>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "core/status.h"

namespace attnrt::core::sparse_mla {

// Checks struct_size and every attribute on its own and in combination (layout pairs, quant mode
// against layout, windows against ori_mask_mode); writes a normalized copy to *out.
Status ValidateAttributes(const void* attributes, attnrt_sparse_mla_attributes* out);

// Shape-only checks of every input and output: presence by scenario and layout, ranks, extents,
// dtypes, devices, compact strides (a PA_BBND cache may have a block stride: *block_strided says
// whether one does). `metadata_op` validates the inputs for the metadata op (the metadata input
// must be absent; its output is int32 [2048]). Never reads data.
Status ValidateShapes(const attnrt_sparse_mla_attributes& attributes,
                      const attnrt_tensor* const* inputs, size_t num_inputs,
                      const attnrt_tensor* const* outputs, size_t num_outputs, bool metadata_op,
                      attnrt_sparse_mla_problem* out, bool* block_strided = nullptr);

// Run-time values shared by both ops: cu_seqlens_* (start at 0, non-decreasing, within the
// tensor), seqused_* and cmp_residual_kv ranges, the per-batch effective lengths against
// the tensors' capacities, and every block-table entry a batch uses. Fills one entry per batch.
// Reads only the int32 length inputs and block tables.
Status ResolveBatches(const attnrt_sparse_mla_problem& problem, const attnrt_tensor* const* inputs,
                      size_t num_inputs, std::vector<attnrt_sparse_mla_batch>* out);

// The main op's run checks: ResolveBatches, cmp_sparse_indices values (>= -1; physical slots of
// topk_value_mode 2 within the cache), the metadata (magic, version, signature of attributes,
// shapes and lengths, then every word of the layout), data pointers and aliasing between outputs
// and inputs. Fills *args (problem, batches, pointers); nothing is written to any output.
Status ValidateRun(const attnrt_sparse_mla_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   std::vector<attnrt_sparse_mla_batch>* batches, attnrt_sparse_mla_args* args);

// The metadata op's run check: its output shares no memory with any input.
Status ValidateMetadataRun(const attnrt_tensor* const* inputs, size_t num_inputs,
                           const attnrt_tensor& output);

// The reference's names by position ("q", ..., "metadata"; "attn_out", "softmax_lse"); "?" out of
// range.
const char* InputName(size_t index);
const char* OutputName(size_t index);

}  // namespace attnrt::core::sparse_mla
