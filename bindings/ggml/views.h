// How attnrt may read a FLASH_ATTN_EXT node's K/V views in place (docs/llama-cpp.md, "Declined"):
// ggml lets a view start at any byte and lets its strides put two elements in one place; attnrt
// reads its pools through typed pointers and requires their elements distinct.
#ifndef ATTNRT_GGML_VIEWS_H_
#define ATTNRT_GGML_VIEWS_H_

#include <cstddef>
#include <cstdint>

#include "ggml.h"

namespace attnrt_ggml {

// Bytes by which t's first element lies past an element boundary (0: aligned). Before ggml
// allocates the graph (when its scheduler asks supports_op) data is NULL; the view's offset into
// its source, whose buffer ggml aligns, then decides.
size_t Misalignment(const ggml_tensor* t);

// Whether rows of head_size contiguous elements, `tokens` of them token_stride elements apart and
// `heads` of those head_stride apart, never put two elements in one place. Sufficient condition:
// each stride, in increasing order, spans every row below it.
bool DistinctElements(int64_t token_stride, int64_t tokens, int64_t head_stride, int64_t heads,
                      int64_t head_size);

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_VIEWS_H_
