// GroupQueryAttention validation: attributes at op creation, shapes at plan, values at run.
// Semantics and message texts follow ONNX Runtime's com.microsoft.GroupQueryAttention (1.30, CPU
// EP; its group_query_attention_helper.h checks, in their order; docs/gqa-semantics.md). Every
// message names the input or attribute, the expected and the actual value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnrt/ops/gqa.h"
#include "core/status.h"

namespace attnrt::core::gqa {

// Checks struct_size and every attribute (ONNX Runtime's attribute checks and the attribute-only
// parts of its shape checks); writes a normalized copy (struct_size set to
// sizeof(attnrt_gqa_attributes)) to *out.
Status ValidateAttributes(const void* attributes, attnrt_gqa_attributes* out);

// Shape-only checks (ONNX Runtime's checks that depend on shapes only, in its order):
// presence, rank, dims, dtypes, device, compact strides of every input and output. Never reads
// data. Fills *out (struct_size set) on success.
Status ValidateShapes(const attnrt_gqa_attributes& attributes, const attnrt_tensor* const* inputs,
                      size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                      attnrt_gqa_problem* out);

// The paged ops' rows (attnrt/ops/paged_gqa.h): the value head size Hv (ABI 1.8; 0 means
// head_size, GroupQueryAttention's one head size); whether value_cache has a type of its own (ABI
// 1.9): then the caller checked the rules of that type, and past_value/present_value stand for
// value rows of the key cache's type (attributes with v_quant_type = k_quant_type); and whether an
// unquantized cache's head sizes may be any positive number (ABI 1.9; else multiples of 8).
struct ValueRows {
  int64_t head_size = 0;
  bool own_type = false;
  bool any_head_size = false;
};

// ValidateShapes with the paged ops' value rows: value, past_value/present_value (dimension 3),
// output and a per-channel v_scale are checked against value.head_size instead of head_size.
Status ValidateShapes(const attnrt_gqa_attributes& attributes, const attnrt_tensor* const* inputs,
                      size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                      ValueRows value, attnrt_gqa_problem* out);

// The head size whose cache row has last dimension `width` under the attributes' cache type
// (CacheRowWidth's inverse: width elements, 2 * width int4 values, width / 34 (Q8_0) or / 18 (Q4_0)
// blocks of 32), or INVALID_ARGUMENT naming `name` when `width` holds no whole number of them.
Status HeadSizeOfCacheRow(const attnrt_gqa_attributes& attributes, int64_t width, const char* name,
                          int64_t* head_size);

// The last dimension of a cache row of head_size elements under the attributes' key cache type:
// head_size elements, head_size / 2 bytes for int4, head_size / 32 Q8_0/Q4_0 blocks' bytes.
int64_t CacheRowWidth(const attnrt_gqa_attributes& attributes, int64_t head_size);

// Run-time checks on values (ONNX Runtime's checks that read data): total_sequence_length,
// phase, every seqlens_k[b], rotary positions, present length == max(T, P), past/present aliasing
// (identical or disjoint; a partial overlap is an error). Resolves data pointers (byte_offset
// applied) into *out; out->problem = &problem. Nothing is written to any output.
// Rules beyond the reference, for memory safety: present_key/value that are past_key/value's memory
// (same start address) must have past's length P, and then T <= P; with attention_bias or
// output_qk (T columns) every seqlens_k[b] < T. Without a past input, outside the first prompt
// the reference accepts P_b = T_b - S > 0: kernels treat past rows as absent (causal offset 0,
// present rows not written by this step stay zero), they never read a past buffer.
Status ValidateRun(const attnrt_gqa_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_gqa_args* out);

// ONNX Runtime's names of the inputs and outputs by position ("query", ..., "output_qk"); "?" out
// of range.
const char* InputName(size_t index);
const char* OutputName(size_t index);

}  // namespace attnrt::core::gqa
