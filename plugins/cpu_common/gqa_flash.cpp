// Driver of gqa.flash (baseline ISA): eligibility, block sizes, workspace layout, tiling with the
// online softmax, flash decoding and its log-sum-exp merge; queries of every T widened to float32,
// bias widened, output rounded to T once. The block arithmetic is the ISA's
// (GqaFlashOps). Semantics: reference/gqa-semantics.md §3 (math, with the flash rule of §3.3 for
// padded rows) and §5 (flash path).
#include "gqa_flash.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_convert.h"
#include "gqa_decline.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

// Scratch areas start on cache lines so slots of different threads never share one.
constexpr size_t kAlign = 64;
// Query rows (tokens x heads of a group) per tile: seed 000's q block of ~64.
constexpr int64_t kTileRows = 64;
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
// BNSH blocks whose runs of one kv head's rows are shorter than this are read for all kv heads at
// once (measured with the paged benchmark, float32 H=128: blocks of 16 and 64 rows, 8 and 32 KiB
// per head, read 10-20 points faster grouped; blocks of 256, 128 KiB, 2-3 points faster per head).
constexpr int64_t kGroupRunBytes = 64 << 10;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t NumThreads(const attnrt_host_services& host) {
  return std::max<int64_t>(1, host.num_threads(host.host_context));
}

int64_t L2Bytes(const PluginContext& context) {
  for (const auto& [key, value] : context.cpu.facts) {
    if (key != "l2_cache_bytes") continue;
    const long long bytes = std::strtoll(value.c_str(), nullptr, 10);
    return bytes > 0 ? bytes : kFallbackL2Bytes;
  }
  return kFallbackL2Bytes;
}

}  // namespace

// ---- eligibility --------------------------------------------------------------------------------

// Empty when the flash path computes `p` as the reference's default CPU path does; else why not.
// The conditions are ONNX Runtime's for its two flash paths (reference §5), so attnrt takes the
// same path as ONNX Runtime wherever the choice can change a result: the padded rows of a prompt
// with a local window (§3.3). One extension, where it cannot:
//   float32 query, float32 cache                 flash (MlasFlashAttentionGQA), needs present
//   float32/float16 query, int8/int4 cache       flash (MlasFlashAttentionQuantizedKV)
//   float8_e4m3fn cache (no CPU reference)       flash, as the other quantized caches
//   bfloat16 query, quantized cache (no CPU ref) flash, as a float16 query
//   float16/bfloat16 query, float16/bf16 cache   ONNX Runtime: naive, in float32 (§3.7: Q and K
//                                                widened, scores, softmax and PV in float32, the
//                                                output rounded to T), which is what flash
//                                                computes; attnrt: flash (needs present) except
//                                                for a prompt with a local window, where padded
//                                                rows would take the other window rule
// and softcap, smooth_softmax=1, head_sink and qk_output send both flash paths to the naive one.
// sliding_window_cache=1 takes the same paths (ONNX Runtime runs its flash paths on the compacted
// or staged cache with cache-relative lengths).
// T > 1 is a run-time value; a run with T == 1 (one key) is computed exactly anyway, equal to the
// naive path.
std::string GqaFlashDeclineReason(const attnrt_gqa_problem& p) {
  // The naive pipeline's acceptance first (struct_size, device, dtypes, quantization attributes):
  // flash computes a subset of what it computes.
  std::string why = GqaNaiveDeclineReason(p);
  if (!why.empty()) return why;
  const attnrt_gqa_attributes& a = p.attributes;
  GqaFloatType type;
  GqaCacheType cache_type;
  GqaElementTypes(p, &type, &cache_type);
  if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE && type != GqaFloatType::kFloat32 &&
      a.local_window_size >= 0 && p.sequence_length > 1) {
    return std::string(type == GqaFloatType::kFloat16 ? "float16" : "bfloat16") +
           " query with a cache of its dtype and local_window_size=" +
           std::to_string(a.local_window_size) + " in a prompt of " +
           std::to_string(p.sequence_length) +
           " tokens uses the naive path (as in ONNX Runtime, whose padded rows follow its window "
           "rule)";
  }
  if (a.softcap > 0.0f) return "softcap requires the naive path (as in ONNX Runtime)";
  if (a.smooth_softmax == 1) return "smooth_softmax=1 requires the naive path (as in ONNX Runtime)";
  if (p.has_head_sink) return "head_sink requires the naive path (as in ONNX Runtime)";
  if (a.qk_output != ATTNRT_GQA_QK_OUTPUT_NONE) {
    return "qk_output=" + std::to_string(a.qk_output) +
           " requires the naive path (as in ONNX Runtime)";
  }
  // A quantized cache always has them (validation); a float cache may not.
  if (!p.has_present) {
    return "needs the present_key and present_value outputs (as ONNX Runtime's fp32 flash path)";
  }
  return {};
}

namespace {

// ---- block sizes and workspace ------------------------------------------------------------------

// q_block tokens x G heads form a tile of about kTileRows query rows. kv_block keys: the K and V
// blocks (2 * kv_block cache rows as stored, plus their float32 copies when tiles are dequantized)
// plus one float score per tile row and key fill half of L2; the other half holds the Q tile, the
// accumulator and the next block being prefetched. Capped at the longest key range (max_keys).
//
// Quantized K/V are dequantized inside the block operations (fused, in registers) when a block
// meets at most kFusedRows query rows (decode: the G heads of one token), since each decoded
// vector then serves all rows at once. Taller tiles (prompts) would decode every K/V vector once
// per register block of rows, so their K and V blocks are dequantized once into float32 slot
// scratch instead and the float32 operations run on that copy (measured on a Llama-3-8B prompt of
// 512, 2 threads: 1.9x -> 3.0x the naive kernel's speed for int8, 2.4x -> 4.1x for int4).
constexpr int64_t kFusedRows = 8;

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

FlashBlocks ChooseBlocks(int64_t l2_bytes, const attnrt_gqa_problem& p, int64_t max_keys) {
  const int64_t group = p.num_heads / p.kv_num_heads;
  FlashBlocks f{};
  f.q_block = std::clamp<int64_t>(kTileRows / group, 1, std::max<int64_t>(1, p.sequence_length));
  f.rows = f.q_block * group;
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  const bool quantized = cache_type == GqaCacheType::kInt8 || cache_type == GqaCacheType::kInt4 ||
                         cache_type == GqaCacheType::kFloat8E4M3Fn;
  f.dequant_tiles = quantized && f.rows > kFusedRows;
  const int64_t per_key =
      2 * static_cast<int64_t>(GqaCacheRowBytes(cache_type, p.head_size)) +
      (f.dequant_tiles ? 2 * p.head_size * static_cast<int64_t>(sizeof(float)) : 0) +
      static_cast<int64_t>(sizeof(float)) * f.rows;
  const int64_t kv = std::max(kMinKvBlock, l2_bytes / 2 / per_key / 8 * 8);
  f.kv_block = std::clamp<int64_t>(max_keys, 1, kv);
  return f;
}

// ChooseBlocks for a run over a paged cache.
FlashBlocks ChoosePagedBlocks(int64_t l2_bytes, const attnrt_gqa_problem& p, int64_t max_keys) {
  FlashBlocks f = ChooseBlocks(l2_bytes, p, max_keys);
  f.copy_tiles = !f.dequant_tiles && f.rows > kFusedRows;
  return f;
}

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

SlotLayout LayoutSlot(const FlashBlocks& f, int64_t head_size) {
  const size_t tile = AlignUp(static_cast<size_t>(f.rows * head_size) * sizeof(float));
  const size_t row = AlignUp(static_cast<size_t>(f.rows) * sizeof(float));
  SlotLayout s{};
  s.acc = tile;
  s.scores = 2 * tile;
  s.m = s.scores + AlignUp(static_cast<size_t>(f.rows * f.kv_block) * sizeof(float));
  s.l = s.m + row;
  s.k_tile = s.l + row;
  const size_t kv_tile = f.dequant_tiles || f.copy_tiles
                             ? AlignUp(static_cast<size_t>(f.kv_block * head_size) * sizeof(float))
                             : 0;
  s.v_tile = s.k_tile + kv_tile;
  s.bytes = s.v_tile + kv_tile;
  return s;
}

// Flash-decoding partials: (m, l, unnormalized output of H floats) per (b, n, chunk).
size_t PartialBytes(const attnrt_gqa_problem& p, int64_t chunks) {
  return AlignUp(static_cast<size_t>(p.batch_size * p.num_heads * chunks * (2 + p.head_size)) *
                 sizeof(float));
}

// Most key chunks a decode may use: one per thread (the plan cannot know T).
int64_t MaxChunks(const attnrt_gqa_problem& p, int64_t threads) {
  return p.sequence_length == 1 && threads > 1 ? threads : 1;
}

// Whether a paged run of `p` reads its cache blocks for several kv heads per task (RunHeadGroup):
// decode-sized tiles (one token's G heads) whose K/V are dequantized in the block operations, over
// BSNH blocks, where a kv head's rows lie Nkv rows apart (read per kv head, each row would be a
// memory stream of its own), or over BNSH blocks whose per-head runs are shorter than
// kGroupRunBytes (all heads of a block are one run). Longer BNSH runs stream well per kv head, as
// a contiguous cache does.
bool GroupsHeads(const attnrt_gqa_problem& p, const GqaFlashPaging& paging,
                 const FlashBlocks& blocks) {
  if (p.sequence_length != 1 || blocks.dequant_tiles) return false;
  if (!paging.head_major) return true;
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  return paging.block_size * static_cast<int64_t>(GqaCacheRowBytes(cache_type, p.head_size)) <
         kGroupRunBytes;
}

// ---- tiles --------------------------------------------------------------------------------------

// Keys [lo, hi) query row s of a batch with T_b = total and causal offset `past` sees; may be
// empty. lo and hi never decrease with s. For the padded rows of a right-padded first prompt
// (s >= T_b) the window is measured from s, not from T_b: the reference's flash rule (§3.3).
struct KeyRange {
  int64_t lo;
  int64_t hi;
};

KeyRange RowKeys(const GqaRun& r, int64_t total, int64_t past, int64_t s) {
  if (!r.causal) return {r.window >= 0 ? std::max<int64_t>(0, total - r.window) : 0, total};
  const int64_t end = past + s + 1;
  return {r.window >= 0 ? std::max<int64_t>(0, end - r.window) : 0, std::min(end, total)};
}

// The K or V rows of one (b, kv head): contiguous (present, rows `stride` apart) or through the
// block table (paged, rows `stride` apart within a cache block). Rows [j, j + Segment(j, end)) are
// equally spaced from Row(j).
struct KvSource {
  const unsigned char* base;
  size_t stride;
  const int32_t* blocks;  // paged: the batch's block table row; NULL: contiguous
  int64_t block_size;
  size_t block_bytes;

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

// Rows [j, j + n) of a paged source lie in one cache block. With BNSH blocks (stride ==
// row_bytes) they are one byte range, which the block operations prefetch spread over their work
// as for a contiguous cache; with BSNH blocks the kv heads interleave, so the range to prefetch
// (the next block's rows of this head) is requested here row by row (seed 002's next-block
// prefetch).
struct Prefetch {
  const void* begin;
  size_t bytes;
};

Prefetch SegmentPrefetch(const KvSource& s, int64_t j, int64_t n, size_t row_bytes) {
  if (n <= 0) return {nullptr, 0};
  if (s.stride == row_bytes) return {s.Row(j), static_cast<size_t>(n) * row_bytes};
  for (int64_t k = j; k < j + n; ++k) {
    const unsigned char* row = s.Row(k);
    for (size_t offset = 0; offset < row_bytes; offset += kAlign) {
      __builtin_prefetch(row + offset, 0, 2);
    }
  }
  return {nullptr, 0};
}

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

// Zeroes x[from, to) (relative to the block start).
void Zero(float* x, int64_t from, int64_t to) {
  if (to > from) std::memset(x + from, 0, static_cast<size_t>(to - from) * sizeof(float));
}

// x[j] += float(bias[j]) for j in [a, e); bias is a T row.
void AddBias(const void* bias, GqaFloatType type, float* x, int64_t a, int64_t e) {
  switch (type) {
    case GqaFloatType::kFloat32: {
      const float* b = static_cast<const float*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += b[j];
      return;
    }
    case GqaFloatType::kFloat16: {
      const auto* b = static_cast<const uint16_t*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += HalfToFloat(b[j]);
      return;
    }
    case GqaFloatType::kBFloat16: {
      const auto* b = static_cast<const uint16_t*>(bias);
      for (int64_t j = a; j < e; ++j) x[j] += BFloat16ToFloat(b[j]);
      return;
    }
  }
}

// Output row at element `offset` of the output = sum[0, H) * inv, rounded to T once (to nearest
// even). For a narrow T, sum is scaled in place first.
void WriteOutput(const GqaRun& r, float* sum, float inv, int64_t offset) {
  const int64_t h = r.head_size;
  if (r.type == GqaFloatType::kFloat32) {
    float* out = static_cast<float*>(r.output) + offset;
    for (int64_t d = 0; d < h; ++d) out[d] = sum[d] * inv;
    return;
  }
  for (int64_t d = 0; d < h; ++d) sum[d] *= inv;
  NarrowRow(sum, r.type, ElementAddress(r.output, r.element_bytes, offset), h);
}

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

TaskSpan MakeSpan(const FlashJob& job, int64_t b, int64_t s0, int64_t count, int64_t chunk) {
  const GqaRun& r = *job.run;
  TaskSpan span{b, s0, count, chunk, r.seqlens_k[b] + 1, 0, 0, 0};
  span.past = r.past_from_seqlens ? span.total - r.seq : 0;
  // Keys the tile needs (lo and hi are monotone in s), then this task's chunk of them.
  span.key_begin = RowKeys(r, span.total, span.past, s0).lo;
  span.key_end = RowKeys(r, span.total, span.past, s0 + count - 1).hi;
  if (job.chunks > 1 && span.key_end > span.key_begin) {
    const int64_t per_chunk = (span.key_end - span.key_begin + job.chunks - 1) / job.chunks;
    span.key_begin = std::min(span.key_end, span.key_begin + chunk * per_chunk);
    span.key_end = std::min(span.key_end, span.key_begin + per_chunk);
  }
  return span;
}

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

KvSource SourceOf(const FlashJob& job, const void* cache, int64_t cache_rows, int64_t b,
                  int64_t kvh) {
  const GqaRun& r = *job.run;
  const size_t row_bytes = r.cache_row_bytes;
  const auto* bytes = static_cast<const unsigned char*>(cache);
  if (job.paging == nullptr) {
    return KvSource{bytes + static_cast<size_t>((b * r.kv_heads + kvh) * cache_rows) * row_bytes,
                    row_bytes, nullptr, 0, 0};
  }
  const GqaFlashPaging& pg = *job.paging;
  const size_t block_bytes = static_cast<size_t>(pg.block_size * r.kv_heads) * row_bytes;
  const int32_t* blocks = pg.block_table + b * pg.max_blocks_per_seq;
  if (pg.head_major) {  // BNSH: rows of a head consecutive within a block
    return KvSource{bytes + static_cast<size_t>(kvh * pg.block_size) * row_bytes, row_bytes, blocks,
                    pg.block_size, block_bytes};
  }
  return KvSource{bytes + static_cast<size_t>(kvh) * row_bytes,
                  static_cast<size_t>(r.kv_heads) * row_bytes, blocks, pg.block_size, block_bytes};
}

// Starts kv head kvh of a task: m = -inf, l = 0, acc = 0 and the query rows in t.q.
HeadTile BeginHead(const FlashJob& job, const TaskSpan& span, const Tile& t, int64_t kvh) {
  const GqaRun& r = *job.run;
  const int64_t h = r.head_size;
  const int64_t group = r.group;
  const int64_t rows = span.count * group;
  std::fill(t.m, t.m + rows, kNegInf);
  std::fill(t.l, t.l + rows, 0.0f);
  std::memset(t.acc, 0, static_cast<size_t>(rows * h) * sizeof(float));
  if (span.key_end > span.key_begin) {
    // Tile row i*G + g is token s0 + i of query head kvh*G + g: the G heads of one token are
    // adjacent in the query, so rows of equal masks are adjacent too.
    for (int64_t i = 0; i < span.count; ++i) {
      const int64_t s = span.s0 + i;
      const void* src = ElementAddress(r.query, r.element_bytes,
                                       (span.b * r.seq + s) * r.q_token_stride + kvh * group * h);
      float* dst = t.q + i * group * h;
      if (r.rotary) {
        const int64_t position = GqaRotaryPosition(r, span.b, s);
        for (int64_t g = 0; g < group; ++g) {
          GqaRotateRow(r, ElementAddress(src, r.element_bytes, g * h), dst + g * h, position);
        }
      } else {
        // The G heads of a token are adjacent: one widening (a copy for float32) for all of them.
        WidenRow(src, r.type, dst, group * h);
      }
    }
  }
  HeadTile head{t,
                kvh,
                SourceOf(job, r.key_cache, r.key_cache_rows, span.b, kvh),
                SourceOf(job, r.value_cache, r.value_cache_rows, span.b, kvh),
                r.k_scale != nullptr && r.scale_per_channel ? r.k_scale + kvh * h : r.k_scale,
                r.v_scale != nullptr && r.scale_per_channel ? r.v_scale + kvh * h : r.v_scale};
  return head;
}

// Tokens [i_begin, i_end) of a task whose windows meet key block [j0, j1) (a contiguous run, as
// lo and hi are monotone), and the keys [ja, je) of the block they see.
struct BlockRows {
  int64_t i_begin;
  int64_t i_end;
  int64_t ja;
  int64_t je;
};

// False when no row sees a key of [j0, j1) (outside the windows, or only padded rows past T_b).
bool RowsOfBlock(const GqaRun& r, const TaskSpan& span, int64_t j0, int64_t j1, BlockRows* out) {
  int64_t i_begin = 0;
  while (i_begin < span.count && RowKeys(r, span.total, span.past, span.s0 + i_begin).hi <= j0) {
    ++i_begin;
  }
  int64_t i_end = span.count;
  while (i_end > i_begin && RowKeys(r, span.total, span.past, span.s0 + i_end - 1).lo >= j1) {
    --i_end;
  }
  if (i_begin == i_end) return false;
  out->i_begin = i_begin;
  out->i_end = i_end;
  out->ja = std::max(j0, RowKeys(r, span.total, span.past, span.s0 + i_begin).lo);
  out->je = std::min(j1, RowKeys(r, span.total, span.past, span.s0 + i_end - 1).hi);
  return out->je > out->ja;
}

// The block-operation view of cache rows from `row` on, `stride` bytes apart.
GqaFlashKv RowsAt(const GqaRun& r, const void* row, size_t stride, const float* scale) {
  return GqaFlashKv{row, stride, r.cache_type, scale, r.scale_per_channel};
}

GqaFlashKv BlockOf(const GqaRun& r, const KvSource& src, int64_t j, const float* scale) {
  return RowsAt(r, src.Row(j), src.stride, scale);
}

// The online-softmax step of one kv head over the scores of key block [ja, je) (in t.scores,
// row stride kv_block, key ja at column 0): bias, row max, exp and sum, rescale of acc and l by
// exp(m_old - m_new); columns outside a row's window become 0 so P·V may run over [ja, je).
void SoftmaxBlock(const FlashJob& job, const TaskSpan& span, const HeadTile& head,
                  const BlockRows& br) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const Tile& t = head.t;
  const int64_t h = r.head_size;
  const int64_t group = r.group;
  const int64_t ld = job.blocks.kv_block;
  const int64_t width = br.je - br.ja;
  const int64_t bias_b = r.bias_broadcast_batch ? 0 : span.b;
  const int64_t bias_heads = r.bias_broadcast_heads ? 1 : r.heads;
  for (int64_t i = br.i_begin; i < br.i_end; ++i) {
    const int64_t s = span.s0 + i;
    const KeyRange k = RowKeys(r, span.total, span.past, s);
    const int64_t a = std::max(k.lo, br.ja) - br.ja;
    const int64_t e = std::min(k.hi, br.je) - br.ja;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t row = i * group + g;
      float* x = t.scores + row * ld;
      float row_max = kNegInf;
      if (e > a) {
        if (r.attention_bias != nullptr) {
          const int64_t n = head.kvh * group + g;
          const int64_t bias_n = r.bias_broadcast_heads ? 0 : n;
          const void* bias = ElementAddress(
              r.attention_bias, r.element_bytes,
              ((bias_b * bias_heads + bias_n) * r.seq + s) * r.bias_row_length + br.ja);
          AddBias(bias, r.type, x, a, e);
        }
        row_max = ops.max(x + a, e - a);
      }
      // Nothing to add (outside the window, or every score -inf from the bias).
      if (row_max == kNegInf) {
        Zero(x, 0, width);
        continue;
      }
      const float m_new = std::max(t.m[row], row_max);
      const float sum = ops.exp_sum(x + a, e - a, m_new);
      Zero(x, 0, a);
      Zero(x, e, width);
      if (t.m[row] != kNegInf && t.m[row] != m_new) {
        const float correction = std::exp(t.m[row] - m_new);
        ops.scale(correction, t.acc + row * h, h);
        t.l[row] *= correction;
      }
      t.l[row] += sum;
      t.m[row] = m_new;
    }
  }
}

// Ends kv head kvh of a task: output rows acc / l (or the flash-decoding partials of the chunk).
void EndHead(const FlashJob& job, const TaskSpan& span, const HeadTile& head) {
  const GqaRun& r = *job.run;
  const Tile& t = head.t;
  const int64_t h = r.head_size;
  const int64_t group = r.group;
  for (int64_t i = 0; i < span.count; ++i) {
    const int64_t s = span.s0 + i;
    for (int64_t g = 0; g < group; ++g) {
      const int64_t row = i * group + g;
      const int64_t n = head.kvh * group + g;
      float* acc = t.acc + row * h;
      if (job.chunks > 1) {
        float* partial =
            job.partials + ((span.b * r.heads + n) * job.chunks + span.chunk) * (2 + h);
        partial[0] = t.m[row];
        partial[1] = t.l[row];
        std::memcpy(partial + 2, acc, static_cast<size_t>(h) * sizeof(float));
        continue;
      }
      // An empty window (W = 0, or a padded row whose window lies past T_b) leaves zeros.
      const float inv = t.l[row] > 0.0f ? 1.0f / t.l[row] : 0.0f;
      WriteOutput(r, acc, inv, ((span.b * r.seq + s) * r.heads + n) * h);
    }
  }
}

// One task: query tokens [s0, s0 + count) of (b, kvh), all G heads, over the keys of chunk c.
void RunTile(const FlashJob& job, const Tile& t, int64_t b, int64_t kvh, int64_t s0, int64_t count,
             int64_t chunk) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const int64_t h = r.head_size;
  const int64_t ld = job.blocks.kv_block;
  const TaskSpan span = MakeSpan(job, b, s0, count, chunk);
  const HeadTile head = BeginHead(job, span, t, kvh);
  const KvSource& keys = head.keys;
  const KvSource& values = head.values;
  const bool paged = job.paging != nullptr;
  const size_t row_bytes = r.cache_row_bytes;
  const size_t float_row = static_cast<size_t>(h) * sizeof(float);

  for (int64_t j0 = span.key_begin; j0 < span.key_end; j0 += ld) {
    const int64_t j1 = std::min(j0 + ld, span.key_end);
    BlockRows br{};
    if (!RowsOfBlock(r, span, j0, j1, &br)) continue;
    const int64_t ja = br.ja;
    const int64_t je = br.je;
    const int64_t width = je - ja;
    const int64_t row_begin = br.i_begin * r.group;
    const int64_t row_count = (br.i_end - br.i_begin) * r.group;

    // V of this block streams in while the scores are computed, the next K block while P·V is
    // (contiguous: by the block operations; paged: by PrefetchRows, one cache block ahead). A
    // contiguous cache is one segment: the block operations see [ja, je) at once.
    const void* v_prefetch = paged ? nullptr : values.Row(ja);
    const size_t v_prefetch_bytes = paged ? 0 : static_cast<size_t>(width) * row_bytes;
    // Tall tiles of a quantized cache: K (now) and V (before P·V) dequantized once into scratch.
    const bool tiles =
        (job.blocks.dequant_tiles || job.blocks.copy_tiles) && row_count > kFusedRows;
    float* block_scores = t.scores + row_begin * ld;
    if (tiles) {
      for (int64_t j = ja, n; j < je; j += n) {
        n = keys.Segment(j, je);
        ops.dequantize(BlockOf(r, keys, j, head.k_scale), n, h, t.k_tile + (j - ja) * h);
      }
      const GqaFlashKv k_rows{t.k_tile, float_row, GqaCacheType::kFloat32, nullptr, false};
      const Prefetch v_next = paged ? SegmentPrefetch(values, ja, values.Segment(ja, je), row_bytes)
                                    : Prefetch{v_prefetch, v_prefetch_bytes};
      ops.scores(t.q + row_begin * h, row_count, k_rows, width, h, r.scale, block_scores, ld,
                 v_next.begin, v_next.bytes);
    } else {
      for (int64_t j = ja, n; j < je; j += n) {
        n = keys.Segment(j, je);
        // Paged: this segment's V rows stream in while its scores are computed.
        const Prefetch v_next = paged ? SegmentPrefetch(values, j, n, row_bytes)
                                      : Prefetch{v_prefetch, v_prefetch_bytes};
        ops.scores(t.q + row_begin * h, row_count, BlockOf(r, keys, j, head.k_scale), n, h, r.scale,
                   block_scores + (j - ja), ld, v_next.begin, v_next.bytes);
      }
    }

    SoftmaxBlock(job, span, head, br);

    const int64_t next_end = std::min(span.key_end, j1 + ld);
    const void* k_prefetch = paged ? nullptr : keys.Row(j1);
    const size_t k_prefetch_bytes =
        !paged && j1 < span.key_end ? static_cast<size_t>(next_end - j1) * row_bytes : 0;
    if (tiles) {
      for (int64_t j = ja, n; j < je; j += n) {
        n = values.Segment(j, je);
        ops.dequantize(BlockOf(r, values, j, head.v_scale), n, h, t.v_tile + (j - ja) * h);
      }
      const GqaFlashKv v_rows{t.v_tile, float_row, GqaCacheType::kFloat32, nullptr, false};
      const Prefetch k_next = !paged ? Prefetch{k_prefetch, k_prefetch_bytes}
                              : j1 < span.key_end
                                  ? SegmentPrefetch(keys, j1, keys.Segment(j1, next_end), row_bytes)
                                  : Prefetch{nullptr, 0};
      ops.accumulate(block_scores, row_count, ld, v_rows, width, h, t.acc + row_begin * h,
                     k_next.begin, k_next.bytes);
    } else {
      // Paged: V in runs of rows that lie in one cache block, each run split further so that the
      // next key block's rows at the same offset (which stream in meanwhile) lie in one cache
      // block too. Keys accumulate in order whatever the split, so the sums are unchanged.
      for (int64_t j = ja, n; j < je; j += n) {
        n = values.Segment(j, je);
        const int64_t jn = j + (j1 - ja);
        Prefetch k_next{k_prefetch, k_prefetch_bytes};
        if (paged) {
          k_next = Prefetch{nullptr, 0};
          if (jn < next_end) {
            n = std::min(n, keys.Segment(jn, next_end));
            k_next = SegmentPrefetch(keys, jn, n, row_bytes);
          }
        }
        ops.accumulate(block_scores + (j - ja), row_count, ld, BlockOf(r, values, j, head.v_scale),
                       n, h, t.acc + row_begin * h, k_next.begin, k_next.bytes);
      }
    }
  }
  EndHead(job, span, head);
}

// ---- grouped paged decode -----------------------------------------------------------------------

// Where the rows of kv heads [kvh0, kvh0 + heads) of a task lie in a cache block, and what of
// rows [j, j + n) of one cache block the block-operation call of the task's i-th head brings in
// while it computes (its share of the segment read kReadAhead segments later). BNSH: head i's own
// rows, one byte range head_step bytes after head i-1's. BSNH: head i's row is head_step bytes
// after head i-1's in every token; with every kv head in the task the rows are one byte range,
// which the calls share in equal parts; with only some (runs of heads * row_bytes, Nkv rows
// apart) they are left to the hardware prefetchers, as a request per line of every run costs more
// than it saves. Addresses are looked up once per segment (one block-table read), not per head.
struct GroupRows {
  bool bnsh;
  bool shared;       // BSNH with every kv head: the segment's rows are one range, split in shares
  size_t head_step;  // bytes from kv head i's row to kv head i+1's

  GroupRows(const GqaRun& r, const KvSource& first, int64_t heads)
      : bnsh(first.stride == r.cache_row_bytes),
        shared(!bnsh && heads == r.kv_heads),
        head_step(bnsh ? static_cast<size_t>(first.block_size) * r.cache_row_bytes
                       : r.cache_row_bytes) {}
};

// The prefetch shares of rows [j, j + n) of one cache block (none when n == 0): Share(i) for the
// call of the task's i-th head.
class GroupPrefetch {
 public:
  GroupPrefetch(const GqaRun& r, const GroupRows& rows, int64_t heads, const KvSource& first,
                int64_t j, int64_t n)
      : rows_(rows),
        heads_(heads),
        base_(n > 0 ? first.Row(j) : nullptr),
        bytes_(static_cast<size_t>(n * (rows.shared ? heads : 1)) * r.cache_row_bytes) {}

  Prefetch Share(int64_t i) const {
    if (base_ == nullptr || !(rows_.bnsh || rows_.shared)) return {nullptr, 0};
    if (rows_.bnsh) return {base_ + static_cast<size_t>(i) * rows_.head_step, bytes_};
    return {base_ + Part(i), Part(i + 1) - Part(i)};
  }

 private:
  size_t Part(int64_t k) const {
    if (k == heads_) return bytes_;
    return bytes_ * static_cast<size_t>(k) / static_cast<size_t>(heads_) / kAlign * kAlign;
  }

  const GroupRows& rows_;
  int64_t heads_;
  const unsigned char* base_;
  size_t bytes_;
};

// The order in which a grouped task reads its cache rows: key block by key block, the block's K
// rows then its V rows, each in segments of about kGroupSegmentBytes per kv head within one cache
// block. A second cursor running kReadAhead segments ahead of the one being computed says what to
// prefetch, so the rows arrive from memory at a steady distance whatever the block size (the
// hardware prefetchers do not follow the block table).
class ReadOrder {
 public:
  ReadOrder(const GqaRun& r, const TaskSpan& span, int64_t ld, const KvSource& keys)
      : r_(r),
        span_(span),
        ld_(ld),
        keys_(keys),
        segment_keys_(std::clamp(static_cast<int64_t>(kGroupSegmentBytes / r.cache_row_bytes),
                                 kMinGroupKeys, kMaxGroupKeys)) {
    EnterBlock(span.key_begin);
  }

  bool done() const { return j0_ >= span_.key_end; }
  bool values() const { return values_; }
  int64_t j() const { return j_; }
  int64_t n() const { return std::min(keys_.Segment(j_, rows_.je), segment_keys_); }
  const BlockRows& rows() const { return rows_; }
  int64_t block_end() const { return std::min(j0_ + ld_, span_.key_end); }

  void Advance() {
    j_ += n();
    if (j_ < rows_.je) return;
    if (!values_) {
      values_ = true;
      j_ = rows_.ja;
      return;
    }
    EnterBlock(j0_ + ld_);
  }

 private:
  // The first key block from `from` that some row of the task sees.
  void EnterBlock(int64_t from) {
    values_ = false;
    for (j0_ = from; j0_ < span_.key_end; j0_ += ld_) {
      if (RowsOfBlock(r_, span_, j0_, block_end(), &rows_)) break;
    }
    j_ = rows_.ja;
  }

  const GqaRun& r_;
  const TaskSpan& span_;
  int64_t ld_;
  const KvSource& keys_;  // cache block boundaries (the same for K and V)
  int64_t segment_keys_;
  int64_t j0_ = 0;
  bool values_ = false;
  int64_t j_ = 0;
  BlockRows rows_{};
};

// Rows [0, min(n, kNextCallRows)) from `row` on, `stride` apart, requested into L1. A block
// operation requests its rows into L1 some way ahead of the ones it reads (8 KiB ahead in the
// AVX-512 score kernel), which starts too late for its first rows, and the short calls of a
// grouped decode are mostly first rows; so the driver requests the next head's first rows while
// the call before it computes. Measured with the paged benchmark (float32, 16-key segments,
// same-process A/B, two threads): without it 2.4-3.4% slower over blocks of 16, 64 and 256; 2
// rows 1.4-4.6% and 8 rows 1.0-2.9% slower than 4.
constexpr int64_t kNextCallRows = 4;

void PrefetchFirstRows(const GqaRun& r, const unsigned char* row, size_t stride, int64_t n) {
  for (int64_t k = 0; k < std::min(n, kNextCallRows); ++k, row += stride) {
    for (size_t offset = 0; offset < r.cache_row_bytes; offset += kAlign) {
      __builtin_prefetch(row + offset, 0, 3);
    }
  }
}

// One task of a paged decode over kv heads [kvh0, kvh0 + heads): what RunTile computes for each of
// them, with key blocks outer and kv heads inner, so that a cache block is read in address order
// in one pass (BSNH: the heads of a token are adjacent; BNSH: the heads' row ranges are) instead
// of once per kv head at a stride. Segments of ReadOrder go to the block operations every head in
// turn, each call prefetching its share of the segment kReadAhead segments further on. Per head
// the key blocks, the scores and the order of accumulation are RunTile's, so outputs are bitwise
// equal to the per-head order (and to the contiguous cache). Tall tiles of a quantized cache
// (dequant_tiles) never come here.
void RunHeadGroup(const FlashJob& job, const Tile* tiles, int64_t b, int64_t kvh0, int64_t heads,
                  int64_t s0, int64_t count, int64_t chunk) {
  const GqaRun& r = *job.run;
  const GqaFlashOps& ops = *job.ops;
  const int64_t h = r.head_size;
  const int64_t ld = job.blocks.kv_block;
  const TaskSpan span = MakeSpan(job, b, s0, count, chunk);
  HeadTile group[kMaxGroupHeads];
  for (int64_t i = 0; i < heads; ++i) group[i] = BeginHead(job, span, tiles[i], kvh0 + i);
  const KvSource& keys = group[0].keys;
  const KvSource& values = group[0].values;

  const GroupRows layout(r, keys, heads);
  ReadOrder at(r, span, ld, keys);
  ReadOrder ahead(r, span, ld, keys);
  for (int64_t k = 0; k < kReadAhead && !ahead.done(); ++k) ahead.Advance();
  while (!at.done()) {
    const BlockRows br = at.rows();
    const int64_t ja = br.ja;
    const int64_t row_begin = br.i_begin * r.group;
    const int64_t row_count = (br.i_end - br.i_begin) * r.group;
    const int64_t j = at.j();
    const int64_t n = at.n();
    const bool v = at.values();
    if (v && j == ja) {
      for (int64_t i = 0; i < heads; ++i) SoftmaxBlock(job, span, group[i], br);
    }
    const KvSource& source = v ? values : keys;
    const unsigned char* row = source.Row(j);  // kv head kvh0's row j
    const GroupPrefetch next(r, layout, heads, ahead.values() ? values : keys, ahead.j(),
                             ahead.done() ? 0 : ahead.n());
    for (int64_t i = 0; i < heads; ++i, row += layout.head_step) {
      // The next head's first rows (for the next segment's first head it made no difference).
      if (i + 1 < heads) PrefetchFirstRows(r, row + layout.head_step, source.stride, n);
      const HeadTile& head = group[i];
      const Prefetch share = next.Share(i);
      float* block_scores = head.t.scores + row_begin * ld + (j - ja);
      const GqaFlashKv rows = RowsAt(r, row, source.stride, v ? head.v_scale : head.k_scale);
      if (v) {
        ops.accumulate(block_scores, row_count, ld, rows, n, h, head.t.acc + row_begin * h,
                       share.begin, share.bytes);
      } else {
        ops.scores(head.t.q + row_begin * h, row_count, rows, n, h, r.scale, block_scores, ld,
                   share.begin, share.bytes);
      }
    }
    at.Advance();
    if (!ahead.done()) ahead.Advance();
  }
  for (int64_t i = 0; i < heads; ++i) EndHead(job, span, group[i]);
}

// Tasks are handed out from a shared counter: (b, kv head group, chunk) by (b, kv head group,
// chunk), each one's query blocks from the last (costliest in a causal prompt) to the first, so
// the threads work on neighbouring query blocks of one kv head at a time and share its K/V blocks
// in the last-level cache (query block outermost re-read every kv head's K/V from memory for each
// query block: 2 MiB per tile for Llama-3-8B at 2k, 64 tiles at batch 8). parallel_for gives no
// thread index, hence one parallel_for index per slot. A slot holds the tiles of group_heads kv
// heads.
void TileSlots(void* user, size_t begin, size_t end) {
  FlashJob& job = *static_cast<FlashJob*>(user);
  const GqaRun& r = *job.run;
  const int64_t head_groups = (r.kv_heads + job.group_heads - 1) / job.group_heads;
  Tile tiles[kMaxGroupHeads];
  for (size_t slot = begin; slot < end; ++slot) {
    for (int64_t i = 0; i < job.group_heads; ++i) {
      std::byte* base =
          job.slots +
          (slot * static_cast<size_t>(job.group_heads) + static_cast<size_t>(i)) * job.slot.bytes;
      tiles[i] = Tile{reinterpret_cast<float*>(base),
                      reinterpret_cast<float*>(base + job.slot.acc),
                      reinterpret_cast<float*>(base + job.slot.scores),
                      reinterpret_cast<float*>(base + job.slot.m),
                      reinterpret_cast<float*>(base + job.slot.l),
                      reinterpret_cast<float*>(base + job.slot.k_tile),
                      reinterpret_cast<float*>(base + job.slot.v_tile)};
    }
    for (;;) {
      const int64_t task = job.next.fetch_add(1, std::memory_order_relaxed);
      if (task >= job.tasks) break;
      const int64_t q_block = job.q_blocks - 1 - task % job.q_blocks;
      const int64_t rest = task / job.q_blocks;
      const int64_t chunk = rest % job.chunks;
      const int64_t b = rest / job.chunks / head_groups;
      const int64_t kvh0 = rest / job.chunks % head_groups * job.group_heads;
      const int64_t s0 = q_block * job.blocks.q_block;
      const int64_t count = std::min(job.blocks.q_block, r.seq - s0);
      if (job.group_heads == 1) {
        RunTile(job, tiles[0], b, kvh0, s0, count, chunk);
      } else {
        RunHeadGroup(job, tiles, b, kvh0, std::min(job.group_heads, r.kv_heads - kvh0), s0, count,
                     chunk);
      }
    }
  }
}

// Flash decoding, phase 2: out = sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) l_c per (b, n).
void MergeRows(void* user, size_t begin, size_t end) {
  const FlashJob& job = *static_cast<const FlashJob*>(user);
  const GqaRun& r = *job.run;
  const int64_t h = r.head_size;
  for (size_t unit = begin; unit < end; ++unit) {
    float* partials = job.partials + static_cast<int64_t>(unit) * job.chunks * (2 + h);
    // S == 1: the (b, n) row, at element unit * H of the output.
    const int64_t offset = static_cast<int64_t>(unit) * h;
    float m = kNegInf;
    for (int64_t c = 0; c < job.chunks; ++c) m = std::max(m, partials[c * (2 + h)]);
    if (m == kNegInf) {
      std::memset(ElementAddress(r.output, r.element_bytes, offset), 0,
                  static_cast<size_t>(h) * r.element_bytes);
      continue;
    }
    // The sum builds up in the output (float32) or in chunk 0's partial (narrow T: rounded once
    // at the end); either way sum = w_0 acc_0 + w_1 acc_1 + ... in chunk order. Chunk c's terms
    // are read before anything of chunk c' > c is written, so the in-place sum is safe.
    float* sum =
        r.type == GqaFloatType::kFloat32 ? static_cast<float*>(r.output) + offset : partials + 2;
    float l = 0.0f;
    bool started = false;
    for (int64_t c = 0; c < job.chunks; ++c) {
      const float* partial = partials + c * (2 + h);
      if (partial[0] == kNegInf) continue;
      const float weight = std::exp(partial[0] - m);
      l += weight * partial[1];
      if (started) {
        for (int64_t d = 0; d < h; ++d) sum[d] += weight * partial[2 + d];
      } else {
        for (int64_t d = 0; d < h; ++d) sum[d] = weight * partial[2 + d];
        started = true;
      }
    }
    if (r.type == GqaFloatType::kFloat32) {
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < h; ++d) sum[d] *= inv;
    } else {
      WriteOutput(r, sum, 1.0f / l, offset);
    }
  }
}

int32_t RunFlash(const PluginContext& context, const attnrt_gqa_args& args, const GqaFlashOps& ops,
                 const GqaFlashPaging* paging, char* error, size_t error_capacity) {
  const attnrt_host_services& host = context.host;
  const attnrt_gqa_problem& p = *args.problem;
  const int64_t threads = NumThreads(host);

  // Workspace: [window plan and staging][flash-decoding partials][slot scratch]..., each 64-byte
  // aligned.
  const auto base = reinterpret_cast<uintptr_t>(args.workspace);
  const uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
  const size_t lead = args.workspace != nullptr ? static_cast<size_t>(aligned - base) : 0;
  const size_t total_available = args.workspace_size > lead ? args.workspace_size - lead : 0;
  auto* window_area = reinterpret_cast<std::byte*>(aligned);
  const size_t window_bytes = GqaWindowWorkspaceBytes(p);
  const bool window_fits = args.workspace != nullptr && total_available >= window_bytes;
  // Attention's T_b: cache-relative with sliding_window_cache=1.
  const int32_t* seqlens = p.attributes.sliding_window_cache == 1 && window_fits
                               ? GqaWindowPlan(args, window_area)
                               : args.seqlens_k;
  const size_t available = window_fits ? total_available - window_bytes : 0;

  int64_t max_total = 1;
  for (int64_t b = 0; b < p.batch_size; ++b) {
    max_total = std::max<int64_t>(max_total, seqlens[b] + 1);
  }
  const FlashBlocks blocks = paging != nullptr ? ChoosePagedBlocks(L2Bytes(context), p, max_total)
                                               : ChooseBlocks(L2Bytes(context), p, max_total);
  const SlotLayout slot = LayoutSlot(blocks, p.head_size);

  if (args.workspace == nullptr || available < slot.bytes) {
    if (error != nullptr && error_capacity > 0) {
      std::snprintf(error, error_capacity,
                    "workspace of %zu bytes is too small: this run (longest key row T_b = %lld) "
                    "needs at least %zu bytes",
                    args.workspace_size, static_cast<long long>(max_total),
                    kAlign + window_bytes + slot.bytes);
    }
    return ATTNRT_ERROR_INVALID_ARGUMENT;
  }

  // Flash decoding (reference §5): with S == 1 the tiles are only B x Nkv; when that leaves threads
  // idle, the key range is split into chunks as well, and merged afterwards.
  // A grouped paged decode's tile is a sequence with all its kv heads (RunHeadGroup), so its key
  // range is split as soon as the sequences are fewer than the threads.
  const bool grouped = paging != nullptr && GroupsHeads(p, *paging, blocks);
  int64_t chunks = 1;
  const int64_t tiles = grouped ? p.batch_size : p.batch_size * p.kv_num_heads;
  if (p.sequence_length == 1 && tiles < threads) {
    chunks =
        std::min({(threads + tiles - 1) / tiles, max_total / kMinChunkKeys, MaxChunks(p, threads)});
    if (chunks < 2 || available < PartialBytes(p, chunks) + slot.bytes) chunks = 1;
  }
  const size_t partial_bytes = chunks > 1 ? PartialBytes(p, chunks) : 0;

  // The caches get this step's rows first; every tile then reads present (or the pools) only.
  const GqaRun run = paging != nullptr ? paging->stage(host, paging->user)
                                       : GqaStagePresentKv(host, args, window_area);

  std::byte* area = window_area + window_bytes;
  FlashJob job;
  job.paging = paging;
  job.run = &run;
  job.ops = &ops;
  job.blocks = blocks;
  job.slot = slot;
  job.partials = chunks > 1 ? reinterpret_cast<float*>(area) : nullptr;
  job.slots = area + partial_bytes;
  job.q_blocks = (p.sequence_length + blocks.q_block - 1) / blocks.q_block;
  job.chunks = chunks;
  // A paged decode reads each cache block once for all kv heads of a task (RunHeadGroup): as few
  // tasks per sequence as keep every thread busy, each with the tiles of its heads in its slot.
  job.group_heads = 1;
  if (grouped) {
    const int64_t per_batch =
        std::max<int64_t>(1, (threads + p.batch_size * chunks - 1) / (p.batch_size * chunks));
    const int64_t groups = std::max(std::min(p.kv_num_heads, per_batch),
                                    (p.kv_num_heads + kMaxGroupHeads - 1) / kMaxGroupHeads);
    job.group_heads = (p.kv_num_heads + groups - 1) / groups;
  }
  int64_t slots_fit = static_cast<int64_t>((available - partial_bytes) /
                                           (slot.bytes * static_cast<size_t>(job.group_heads)));
  // A workspace sized for one head per slot still runs (the per-head order, same results).
  if (slots_fit == 0) {
    job.group_heads = 1;
    slots_fit = static_cast<int64_t>((available - partial_bytes) / slot.bytes);
  }
  job.tasks = job.q_blocks * p.batch_size *
              ((p.kv_num_heads + job.group_heads - 1) / job.group_heads) * chunks;
  const int64_t slots = std::min({threads, job.tasks, slots_fit});
  host.parallel_for(host.host_context, static_cast<size_t>(slots), 1, TileSlots, &job);
  if (chunks > 1) {
    host.parallel_for(host.host_context, static_cast<size_t>(p.batch_size * p.num_heads), 1,
                      MergeRows, &job);
  }
  GqaWindowFinish(host, run);
  return ATTNRT_OK;
}

}  // namespace

int32_t GqaFlashRun(void* plugin_context, const void* args, char* error, size_t error_capacity,
                    const GqaFlashOps& ops) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_gqa_args*>(args);
    if (a.struct_size < sizeof(attnrt_gqa_args)) {
      WriteMessage(error, error_capacity,
                   "attnrt_gqa_args struct_size " + std::to_string(a.struct_size) +
                       " is smaller than the " + std::to_string(sizeof(attnrt_gqa_args)) +
                       " bytes this kernel was built with");
      return ATTNRT_ERROR_ABI_MISMATCH;
    }
    return RunFlash(context, a, ops, nullptr, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "gqa.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

namespace {

// Workspace of a gqa.flash run of `p`; `paging` (its layout and block size): over a paged cache,
// whose decode may hold the tiles of several kv heads per slot.
size_t WorkspaceBytes(const PluginContext& context, const attnrt_gqa_problem& p,
                      const GqaFlashPaging* paging) {
  const bool paged = paging != nullptr;
  // supports() declined such a problem; nothing larger than what it read may be touched.
  if (p.struct_size < sizeof(attnrt_gqa_problem)) return 0;
  // T is known only at run time; T_b never exceeds the present length (flash requires present),
  // nor these other bounds.
  const int64_t max_keys =
      std::max({p.present_sequence_length, p.past_sequence_length + p.kv_sequence_length,
                p.sequence_length});
  const int64_t threads = NumThreads(context.host);
  const int64_t chunks = MaxChunks(p, threads);
  const FlashBlocks blocks = paged ? ChoosePagedBlocks(L2Bytes(context), p, max_keys)
                                   : ChooseBlocks(L2Bytes(context), p, max_keys);
  const SlotLayout slot = LayoutSlot(blocks, p.head_size);
  const int64_t heads_per_slot =
      paged && GroupsHeads(p, *paging, blocks) ? std::min(p.kv_num_heads, kMaxGroupHeads) : 1;
  return kAlign + GqaWindowWorkspaceBytes(p) + (chunks > 1 ? PartialBytes(p, chunks) : 0) +
         static_cast<size_t>(threads * heads_per_slot) * slot.bytes;
}

}  // namespace

size_t GqaFlashWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  return WorkspaceBytes(*static_cast<const PluginContext*>(plugin_context),
                        *static_cast<const attnrt_gqa_problem*>(problem), nullptr);
}

size_t GqaFlashPagedWorkspaceSize(void* plugin_context, const attnrt_gqa_problem& p,
                                  const GqaFlashPaging& paging) noexcept {
  return WorkspaceBytes(*static_cast<const PluginContext*>(plugin_context), p, &paging);
}

int32_t GqaFlashRunPaged(void* plugin_context, const attnrt_gqa_args& args,
                         const GqaFlashPaging& paging, const GqaFlashOps& ops, char* error,
                         size_t error_capacity) noexcept {
  try {
    return RunFlash(*static_cast<const PluginContext*>(plugin_context), args, ops, &paging, error,
                    error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

}  // namespace attnrt::cpu
