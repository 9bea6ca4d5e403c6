// Output rows of a FLASH_ATTN_EXT node that attnrt's answer cannot stand for, computed as ggml
// defines them (docs/llama-cpp.md, "Non-finite values").
//
// attnrt reads every key of a stream and adds the mask as a bias, so a key the mask hides (-inf)
// still has its K row multiplied and its V row scaled by 0: a NaN or Inf there turns the row NaN,
// where ggml skips the key and never reads it (another sequence's cells in llama.cpp's unified
// cache, a sliding window's old cells, padding). Such a row, like every row attnrt leaves
// non-finite, is computed again here by ggml's own per-row algorithm (ggml-cpu's
// ggml_compute_forward_flash_attn_ext_f16_one_chunk), which also gives ggml's answers where a sink
// or a mask entry is infinite. A row attnrt leaves finite is ggml's answer already: a non-finite
// K or V value of a hidden key either makes the row non-finite or has no effect (a -inf score over
// a finite V row), so the check costs one pass over the output.
#ifndef ATTNRT_GGML_GGML_ROWS_H_
#define ATTNRT_GGML_GGML_ROWS_H_

#include <cstdint>

#include "ggml.h"

namespace attnrt_ggml {

// Rows [r0, r0 + rows) of stream b of `node` (a FLASH_ATTN_EXT node with f32, f16, bf16, Q8_0 or
// Q4_0 K and V) as attnrt left them at dst (f32 [D, H, rows]): each row with a non-finite element,
// or all zeros under a -inf sink (a row that sees no key is NaN in ggml), and every row i with
// redo[i] != 0 (a mask that lost too much in its conversion), is computed again as ggml computes
// it. Returns how many rows (of one head) were.
uint64_t RedoRowsAsGgml(const ggml_tensor* node, int64_t b, int64_t r0, int64_t rows, char* dst,
                        const uint8_t* redo);

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_GGML_ROWS_H_
