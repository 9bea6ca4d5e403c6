// Private to the gqa.flash driver (gqa_flash.cpp, gqa_flash_tile.cpp, gqa_flash_decode.cpp): the
// tuning constants, the block sizes and slot layout, the job and per-thread tile state, and the
// tile steps the pieces share. Included only by those three baseline-ISA files, never by the ISA
// files (gqa_flash_<isa>.cpp): KvSource's two inline members are therefore compiled once, for the
// baseline ISA (see gqa_run.h for why a header the ISA files include must not define functions).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "gqa_flash.h"
#include "gqa_run.h"

namespace attnrt::cpu::flash {

// Scratch areas start on cache lines so slots of different threads never share one.
constexpr size_t kAlign = 64;
// Query rows (tokens x heads of a group) per tile: a q block of about 128 rows. Each tile reads
// (and the tall score kernel transposes) its K/V blocks once for all its rows; measured with
// BM_GqaPrefill (Llama-3-8B, one thread, S = 2048): 128 rows 0.90-0.98x the time of 64 in
// float32 and 0.94-0.95x with the AMX bfloat16 kernel.
constexpr int64_t kTileRows = 128;
// Fewest keys worth a flash-decoding task of their own: below this the merge costs more than the
// parallelism gains.
constexpr int64_t kMinChunkKeys = 256;
// L2 size when the probe could not read it (a zero would give degenerate one-key blocks, as on
// Linux aarch64 before onnxruntime PR #29621).
constexpr int64_t kFallbackL2Bytes = int64_t{1} << 20;
constexpr int64_t kMinKvBlock = 16;
// Grouped paged decode (RunHeadGroup): most kv heads one task holds; the bytes of one kv head's
// rows per block-operation call (a segment: kGroupSegmentBytes / row bytes keys, within
// [kMinGroupKeys, kMaxGroupKeys]); and how many segments ahead the rows are requested. Measured
// with the paged benchmark (Llama-3-8B, every kv head in the task, blocks of 64 and 256, same-
// process A/B) on a 2-core AVX-512 machine: float32 (512-byte rows) 16 keys 1.1-3.1% faster than
// 32 and 3.4-5.0% faster than 64 with two threads (8 keys: 5-7% slower over BNSH blocks); float16
// 32 keys 0.2-3.3% faster than 64 and 3.7-8.4% faster than 16; the AVX2 kernels, float32, 16 keys
// 3.4-10.6% faster than 64. One segment ahead: two were slower.
constexpr int64_t kMaxGroupHeads = 16;
constexpr size_t kGroupSegmentBytes = 8 << 10;
constexpr int64_t kMinGroupKeys = 8;
constexpr int64_t kMaxGroupKeys = 64;
constexpr int64_t kReadAhead = 1;
// Keys per segment of a grouped task over cache rows of `row_bytes` (K rows).
inline int64_t GroupSegmentKeys(size_t row_bytes) {
  return std::clamp(static_cast<int64_t>(kGroupSegmentBytes / row_bytes), kMinGroupKeys,
                    kMaxGroupKeys);
}
// BNSH blocks whose runs of one kv head's rows are shorter than this are read for all kv heads at
// once (measured with the paged benchmark, float32 H=128: blocks of 16 and 64 rows, 8 and 32 KiB
// per head, read 10-20 points faster grouped; blocks of 256, 128 KiB, 2-3 points faster per head).
constexpr int64_t kGroupRunBytes = 64 << 10;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Quantized K/V are dequantized inside the block operations (fused, in registers) when a block
// meets at most kFusedRows query rows (decode: the G heads of one token), since each decoded
// vector then serves all rows at once. Taller tiles (prompts) would decode every K/V vector once
// per register block of rows, so their K and V blocks are dequantized once into float32 slot
// scratch instead and the float32 operations run on that copy (measured on a Llama-3-8B prompt of
// 512, 2 threads: 1.9x -> 3.0x the naive kernel's speed for int8, 2.4x -> 4.1x for int4).
constexpr int64_t kFusedRows = 8;
// Tall tiles over a paged cache of a float type copy each key block's K/V rows into float32 slot
// scratch (FlashBlocks::copy_tiles) unless every kv head's rows lie contiguous in cache blocks of
// at least this many rows (BNSH pools, and views such as vLLM's CPU layout): the block operations
// then read the cache blocks in place, a segment per cache block. Measured on a chunked-prefill
// step (2048 new tokens over 4096, 8 heads, 2 kv heads, head size 64, float32, one thread, BNSH
// halves of vLLM's CPU layout): in place 0.88-0.91x the time of the copy at blocks of 128 rows,
// equal at 32 and 64, and 1.33x at 16 (16-key segments leave half of each 32-key transposed
// chunk of the tall score kernel empty).
constexpr int64_t kMinDirectBlockRows = 32;

struct FlashBlocks {
  int64_t q_block;
  int64_t rows;  // q_block * G
  int64_t kv_block;
  bool dequant_tiles;  // quantized cache and tiles taller than kFusedRows: float32 K/V scratch
  // A paged cache of a float type and tiles taller than kFusedRows: the K/V rows of a block,
  // gathered from the cache blocks, are copied into the same float32 scratch once per key block
  // (exact), so the many row blocks of a tall tile re-read a contiguous copy instead of rows
  // scattered over cache blocks (BSNH: a kv head's rows Nkv rows apart). kv_block is the
  // contiguous cache's, so results stay bitwise equal.
  bool copy_tiles;
};

// Per-slot scratch: the Q tile and the accumulator (rows x H), scores (rows x kv_block), the
// running max m and sum l (rows each), and with dequant_tiles the float32 K and V blocks
// (kv_block x H each).
struct SlotLayout {
  size_t acc;
  size_t scores;
  size_t m;
  size_t l;
  size_t k_tile;
  size_t v_tile;
  size_t bytes;
};

// Keys [lo, hi) query row s of a batch with T_b = total and causal offset `past` sees; may be
// empty. lo and hi never decrease with s. For the padded rows of a right-padded first prompt
// (s >= T_b) the window is measured from s, not from T_b: ONNX Runtime's flash rule
// (docs/gqa-semantics.md, "Kernel paths and the one place they differ").
struct KeyRange {
  int64_t lo;
  int64_t hi;
};

// The K or V rows of one (b, kv head): contiguous (present, rows `stride` apart) or through the
// block table (paged, rows `stride` apart within a cache block). Rows [j, j + Segment(j, end)) are
// equally spaced from Row(j).
struct KvSource {
  const unsigned char* base;
  size_t stride;
  const int32_t* blocks;  // paged: the batch's block table row; NULL: contiguous
  int64_t block_size;
  size_t block_bytes;
  size_t head_step;  // paged: bytes from kv head h's row to kv head h+1's

  const unsigned char* Row(int64_t j) const {
    if (blocks == nullptr) return base + static_cast<size_t>(j) * stride;
    return base + static_cast<size_t>(blocks[j / block_size]) * block_bytes +
           static_cast<size_t>(j % block_size) * stride;
  }
  int64_t Segment(int64_t j, int64_t end) const {
    if (blocks == nullptr) return end - j;
    return std::min(end, (j / block_size + 1) * block_size) - j;
  }
};

// A byte range the block operations bring towards the cache while they compute; {nullptr, 0}: none.
struct Prefetch {
  const void* begin;
  size_t bytes;
};

struct FlashJob {
  const GqaFlashPaging* paging;  // NULL: contiguous present caches
  const GqaRun* run;
  const GqaFlashOps* ops;
  FlashBlocks blocks;
  SlotLayout slot;
  std::byte* slots;
  int64_t q_blocks;     // ceil(S / q_block)
  int64_t chunks;       // key chunks per (b, kv head): > 1 only for flash decoding
  float* partials;      // (B, N, chunks, 2 + H) when chunks > 1
  int64_t group_heads;  // kv heads per task (1, or more for a grouped paged decode)
  int64_t tasks;
  std::atomic<int64_t> next{0};
};

// Per-thread state of one tile.
struct Tile {
  float* q;
  float* acc;
  float* scores;
  float* m;
  float* l;
  float* k_tile;  // with dequant_tiles
  float* v_tile;
};

// What one task covers, for each of its kv heads: query tokens [s0, s0 + count) of batch b (the G
// heads of the kv head) over the keys [key_begin, key_end) of chunk `chunk`.
struct TaskSpan {
  int64_t b;
  int64_t s0;
  int64_t count;
  int64_t chunk;
  int64_t total;  // T_b
  int64_t past;   // causal offset of token 0
  int64_t key_begin;
  int64_t key_end;
};

// One kv head of a task: its scratch, its K/V rows as stored (T_CACHE; the block operations
// dequantize them) and its scales.
struct HeadTile {
  Tile t;
  int64_t kvh;
  KvSource keys;
  KvSource values;
  const float* k_scale;
  const float* v_scale;
};

// Tokens [i_begin, i_end) of a task whose windows meet key block [j0, j1) (a contiguous run, as
// lo and hi are monotone), and the keys [ja, je) of the block they see.
struct BlockRows {
  int64_t i_begin;
  int64_t i_end;
  int64_t ja;
  int64_t je;
};

// ---- tiles (gqa_flash_tile.cpp) -----------------------------------------------------------------

// Output row at element `offset` of the output = sum[0, H) * inv, rounded to T once (to nearest
// even), through ops.narrow when the ISA has one. For a narrow T, sum may be scaled in place first.
void WriteOutput(const GqaRun& r, const GqaFlashOps& ops, float* sum, float inv, int64_t offset);

// The keys of chunk `chunk` that query tokens [s0, s0 + count) of batch b see.
TaskSpan MakeSpan(const FlashJob& job, int64_t b, int64_t s0, int64_t count, int64_t chunk);

// Starts kv head kvh of a task: m = -inf, l = 0, acc = 0 and the query rows in t.q.
HeadTile BeginHead(const FlashJob& job, const TaskSpan& span, const Tile& t, int64_t kvh);

// Tokens of a task whose windows meet key block [j0, j1); false when no row sees a key of it.
bool RowsOfBlock(const GqaRun& r, const TaskSpan& span, int64_t j0, int64_t j1, BlockRows* out);

// The block-operation view of cache rows from `row` on, `stride` bytes apart.
GqaFlashKv RowsAt(const GqaRun& r, const void* row, size_t stride, const float* scale);

// The online-softmax step of one kv head over the scores of key block [br.ja, br.je).
void SoftmaxBlock(const FlashJob& job, const TaskSpan& span, const HeadTile& head,
                  const BlockRows& br);

// Ends kv head kvh of a task: output rows acc / l (or the flash-decoding partials of the chunk).
void EndHead(const FlashJob& job, const TaskSpan& span, const HeadTile& head);

// One task: query tokens [s0, s0 + count) of (b, kvh), all G heads, over the keys of chunk c.
void RunTile(const FlashJob& job, const Tile& t, int64_t b, int64_t kvh, int64_t s0, int64_t count,
             int64_t chunk);

// ---- flash decoding (gqa_flash_decode.cpp) ------------------------------------------------------

// One task of a paged decode over kv heads [kvh0, kvh0 + heads): RunTile's results for each of
// them, reading each cache block once for all of them.
void RunHeadGroup(const FlashJob& job, const Tile* tiles, int64_t b, int64_t kvh0, int64_t heads,
                  int64_t s0, int64_t count, int64_t chunk);

// Flash decoding, phase 2 (a host parallel_for body over (b, n) units; user is the FlashJob): the
// log-sum-exp merge of the chunks' partials into the output.
void MergeRows(void* user, size_t begin, size_t end);

}  // namespace attnrt::cpu::flash
