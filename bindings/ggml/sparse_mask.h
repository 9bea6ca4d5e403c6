// A FLASH_ATTN_EXT node with a sparse mask (ggml_flash_attn_ext_set_n_kv_max: each mask row has at
// most n_kv_max entries that are not -inf, as DeepSeek's sparse attention and Qwen's QSA make) run
// as a batch of one-row sequences over pages of one token (docs/llama-cpp.md, "What it serves").
//
// Query row i becomes sequence i of attnrt's paged GroupQueryAttention with block_size 1: its
// block_table lists the keys its mask row does not hide (ascending), its seqlens_k is their count
// minus one, its attention_bias row holds their mask entries (times ALiBi's slope). attnrt then
// reads the keys ggml's CPU backend reads (it skips a key whose mask entry is -inf) and no other.
#ifndef ATTNRT_GGML_SPARSE_MASK_H_
#define ATTNRT_GGML_SPARSE_MASK_H_

#include <cstdint>
#include <vector>

#include "attnrt/attnrt.h"
#include "ggml.h"

namespace attnrt_ggml {

// The attnrt inputs of mask rows [r0, r0 + rows) of stream b.
struct SparseRows {
  int64_t keys = 0;                // block_table's width: the most visible keys of a row (>= 1)
  std::vector<int32_t> table;      // rows x keys key indices (block ids of one-token blocks)
  std::vector<int32_t> seqlens_k;  // rows: visible keys - 1
  std::vector<char> bias;          // rows x bias_heads x 1 x keys elements of the cache's type
  std::vector<uint8_t> inexact;    // rows: 1 where MaskRow's rounding moved an entry too far
};

// Gathers the visible keys of mask rows [r0, r0 + rows) of stream b (a mask shared by the heads,
// ne[2] == 1) over the first `total` keys. A row that sees no key is given key 0 under a -inf bias
// (the row attnrt then leaves is computed again as ggml does, ggml_rows.h). bias_heads 1 or
// num_heads (ALiBi: each head's slope times the entries); `shift` as MaskRow's (convert.h). Rows
// are gathered on a team of `team` threads.
void GatherSparseRows(const ggml_tensor* mask, int64_t b, int64_t r0, int64_t rows, int64_t total,
                      int64_t bias_heads, int64_t num_heads, float max_bias,
                      const attnrt_dtype& dtype, bool shift, int team, SparseRows* out);

}  // namespace attnrt_ggml

#endif  // ATTNRT_GGML_SPARSE_MASK_H_
