// Driver of gqa.flash (baseline ISA): eligibility, block sizes, workspace layout and the task
// scheduler; the tiles with the online softmax are in gqa_flash_tile.cpp, the flash-decoding merge
// and the grouped paged decode in gqa_flash_decode.cpp. Queries of every T widened to float32,
// bias widened, output rounded to T once. The block arithmetic is the ISA's (GqaFlashOps).
// Semantics: docs/gqa-semantics.md ("Kernel paths and the one place they differ": the flash
// window rule for padded rows and the eligibility rules), after ONNX Runtime's GroupQueryAttention
// CPU flash path (MlasFlashAttention).
#include "gqa_flash.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnrt/ops/gqa.h"
#include "gqa_convert.h"
#include "gqa_decline.h"
#include "gqa_flash_internal.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {

// The driver's pieces in gqa_flash_tile.cpp and gqa_flash_decode.cpp (gqa_flash_internal.h).
using namespace flash;

namespace {

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

// Empty when the flash path computes `p` as ONNX Runtime's default CPU path does; else why not.
// The conditions are ONNX Runtime's for the two flash paths of its GroupQueryAttention CPU kernel,
// so attnrt takes the same path as ONNX Runtime wherever the choice can change a result: the
// padded rows of a prompt with a local window (docs/gqa-semantics.md, "Kernel paths and the one
// place they differ"). One extension, where it cannot:
//   float32 query, float32 cache                 flash (MlasFlashAttentionGQA), needs present
//   float32/float16 query, int8/int4 cache       flash (MlasFlashAttentionQuantizedKV)
//   float8_e4m3fn/e5m2 cache (no CPU reference)  flash, as the other quantized caches
//   bfloat16 query, quantized cache (no CPU ref) flash, as a float16 query
//   float16/bfloat16 query, float16/bf16 cache   ONNX Runtime: naive, in float32 (Q and K
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
FlashBlocks ChooseBlocks(int64_t l2_bytes, const attnrt_gqa_problem& p, int64_t max_keys,
                         int64_t v_head_size) {
  const int64_t group = p.num_heads / p.kv_num_heads;
  FlashBlocks f{};
  f.q_block = std::clamp<int64_t>(kTileRows / group, 1, std::max<int64_t>(1, p.sequence_length));
  f.rows = f.q_block * group;
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  const bool quantized = cache_type == GqaCacheType::kInt8 || cache_type == GqaCacheType::kInt4 ||
                         cache_type == GqaCacheType::kFloat8E4M3Fn ||
                         cache_type == GqaCacheType::kFloat8E5M2 || IsBlockCache(cache_type);
  f.dequant_tiles = quantized && f.rows > kFusedRows;
  const int64_t per_key =
      static_cast<int64_t>(GqaCacheRowBytes(cache_type, p.head_size) +
                           GqaCacheRowBytes(cache_type, v_head_size)) +
      (f.dequant_tiles ? (p.head_size + v_head_size) * static_cast<int64_t>(sizeof(float)) : 0) +
      static_cast<int64_t>(sizeof(float)) * f.rows;
  const int64_t kv = std::max(kMinKvBlock, l2_bytes / 2 / per_key / 8 * 8);
  f.kv_block = std::clamp<int64_t>(max_keys, 1, kv);
  return f;
}

// Whether tall tiles whose key blocks are read a call per cache block of `block_size` rows get the
// bits of a call per key block (GqaFlashOps::tall_split_keys): always when any split keeps them;
// else when every split falls a multiple of tall_split_keys keys after the start of a call: cache
// blocks of such a multiple, key blocks that start at one (one key block, or kv_block such a
// multiple), no local window (its lower edge starts calls at any key), and groups of at most
// kFusedRows heads (the per-token calls of the causal diagonal are then decode-sized).
bool SplitsKeepBits(const attnrt_gqa_problem& p, const FlashBlocks& f, int64_t max_keys,
                    int64_t block_size, const GqaFlashOps& ops) {
  const int64_t keys = ops.tall_split_keys;
  if (keys == 1) return true;
  return block_size % keys == 0 && (f.kv_block >= max_keys || f.kv_block % keys == 0) &&
         p.attributes.local_window_size < 0 && p.num_heads / p.kv_num_heads <= kFusedRows;
}

// ChooseBlocks for a run over a paged cache with the block operations `ops`: tall tiles copy their
// key blocks into scratch unless the rows of a kv head lie contiguous in cache blocks of at least
// kMinDirectBlockRows rows and reading them a call per cache block keeps the bits
// (SplitsKeepBits). A run's max_keys is at most its plan's, so a plan that copies covers it.
FlashBlocks ChoosePagedBlocks(int64_t l2_bytes, const attnrt_gqa_problem& p, int64_t max_keys,
                              const GqaFlashPaging& paging, const GqaFlashOps& ops) {
  FlashBlocks f = ChooseBlocks(l2_bytes, p, max_keys, paging.v_head_size);
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  const size_t row = GqaCacheRowBytes(cache_type, p.head_size);
  const size_t value_row = GqaCacheRowBytes(cache_type, paging.v_head_size);
  const bool direct = paging.block_size >= kMinDirectBlockRows && paging.key.token == row &&
                      paging.value.token == value_row &&
                      SplitsKeepBits(p, f, max_keys, paging.block_size, ops);
  f.copy_tiles = !f.dequant_tiles && f.rows > kFusedRows && !direct;
  return f;
}

// The value head size of a run: the paged problem's (GqaFlashPaging), else head_size.
int64_t ValueHeadSize(const attnrt_gqa_problem& p, const GqaFlashPaging* paging) {
  return paging != nullptr ? paging->v_head_size : p.head_size;
}

// The Q tile and K tile hold rows of head_size floats, the accumulator and V tile rows of
// v_head_size.
SlotLayout LayoutSlot(const FlashBlocks& f, int64_t head_size, int64_t v_head_size) {
  const size_t q_tile = AlignUp(static_cast<size_t>(f.rows * head_size) * sizeof(float));
  const size_t acc_tile = AlignUp(static_cast<size_t>(f.rows * v_head_size) * sizeof(float));
  const size_t row = AlignUp(static_cast<size_t>(f.rows) * sizeof(float));
  SlotLayout s{};
  s.acc = q_tile;
  s.scores = s.acc + acc_tile;
  s.m = s.scores + AlignUp(static_cast<size_t>(f.rows * f.kv_block) * sizeof(float));
  s.l = s.m + row;
  s.k_tile = s.l + row;
  const bool kv_tiles = f.dequant_tiles || f.copy_tiles;
  const size_t k_tile =
      kv_tiles ? AlignUp(static_cast<size_t>(f.kv_block * head_size) * sizeof(float)) : 0;
  const size_t v_tile =
      kv_tiles ? AlignUp(static_cast<size_t>(f.kv_block * v_head_size) * sizeof(float)) : 0;
  s.v_tile = s.k_tile + k_tile;
  s.bytes = s.v_tile + v_tile;
  return s;
}

// Flash-decoding partials: (m, l, unnormalized output of Hv floats) per (b, n, chunk).
size_t PartialBytes(const attnrt_gqa_problem& p, int64_t chunks, int64_t v_head_size) {
  return AlignUp(static_cast<size_t>(p.batch_size * p.num_heads * chunks * (2 + v_head_size)) *
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
// a contiguous cache does. Not for tiles of more than kFusedRows heads with operations whose calls
// a split at any key changes (GqaFlashOps::tall_split_keys > 1): those read each key block in one
// call, as over a contiguous cache. Nor for such tiles when a call would take fewer than
// kMinDirectBlockRows keys (short cache blocks, or segments of long rows): the tall score
// operations work on chunks of 32 keys, which such calls leave partly empty (a block of one key:
// 1/32 full), so those tiles gather each key block's rows into scratch (FlashBlocks::copy_tiles)
// and read it in one call. Measured (decode, 24 heads over 2 kv heads, 2 threads): float32, head
// size 256 (8-key segments) over BSNH blocks of 1, 16 and 256 keys 4.09 -> 0.89, 0.92 -> 0.73,
// 0.97 -> 0.71 ms; float16, head size 128, blocks of 1 key 4.12 -> 0.84 ms, while blocks of 128
// (32-key segments) stay grouped (0.52 ms; gathered 0.73).
bool GroupsHeads(const attnrt_gqa_problem& p, const GqaFlashPaging& paging,
                 const FlashBlocks& blocks, const GqaFlashOps& ops) {
  if (p.sequence_length != 1 || blocks.dequant_tiles) return false;
  if (blocks.rows > kFusedRows && ops.tall_split_keys != 1) return false;
  GqaFloatType type;
  GqaCacheType cache_type = GqaCacheType::kFloat32;
  GqaElementTypes(p, &type, &cache_type);
  const size_t row_bytes = GqaCacheRowBytes(cache_type, p.head_size);
  const size_t value_row_bytes = GqaCacheRowBytes(cache_type, paging.v_head_size);
  if (blocks.rows > kFusedRows &&
      std::min(paging.block_size, GroupSegmentKeys(row_bytes)) < kMinDirectBlockRows) {
    return false;
  }
  // Rows of a kv head not consecutive in a block (BSNH, or a strided view): read grouped.
  if (paging.key.token != row_bytes || paging.value.token != value_row_bytes) return true;
  return paging.block_size * static_cast<int64_t>(row_bytes) < kGroupRunBytes;
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
      // A packed sequence shorter than the longest has no rows in its last blocks.
      const int64_t count = std::min(job.blocks.q_block, GqaQueryLength(r, b) - s0);
      if (count <= 0) continue;
      if (job.group_heads == 1) {
        RunTile(job, tiles[0], b, kvh0, s0, count, chunk);
      } else {
        RunHeadGroup(job, tiles, b, kvh0, std::min(job.group_heads, r.kv_heads - kvh0), s0, count,
                     chunk);
      }
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
  const int64_t v_head_size = ValueHeadSize(p, paging);
  const FlashBlocks blocks = paging != nullptr
                                 ? ChoosePagedBlocks(L2Bytes(context), p, max_total, *paging, ops)
                                 : ChooseBlocks(L2Bytes(context), p, max_total, v_head_size);
  const SlotLayout slot = LayoutSlot(blocks, p.head_size, v_head_size);

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

  // Flash decoding (docs/gqa-semantics.md: split-KV with a log-sum-exp merge): with S == 1 the
  // tiles are only B x Nkv; when that leaves threads idle, the key range is split into chunks as
  // well, and merged afterwards. The chunks depend on B x Nkv and the threads only, never on how
  // a paged decode reads its blocks: a grouped one (RunHeadGroup, blocks read for several kv heads
  // at once) splits its heads into as many groups as keep the threads busy instead, so that paged
  // and contiguous caches, and blocks of any size, give the same bits (a grouped decode once split
  // its keys as soon as the sequences were fewer than the threads: other bits than a contiguous
  // cache at batch 1 with 2 kv heads on 2 threads).
  const bool grouped = paging != nullptr && GroupsHeads(p, *paging, blocks, ops);
  int64_t chunks = 1;
  const int64_t tiles = p.batch_size * p.kv_num_heads;
  if (p.sequence_length == 1 && tiles < threads) {
    chunks =
        std::min({(threads + tiles - 1) / tiles, max_total / kMinChunkKeys, MaxChunks(p, threads)});
    if (chunks < 2 || available < PartialBytes(p, chunks, v_head_size) + slot.bytes) chunks = 1;
  }
  const size_t partial_bytes = chunks > 1 ? PartialBytes(p, chunks, v_head_size) : 0;

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
  job.q_blocks = (run.seq + blocks.q_block - 1) / blocks.q_block;
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
// whose decode may hold the tiles of several kv heads per slot, with the block operations `ops`
// (read only over a paged cache).
size_t WorkspaceBytes(const PluginContext& context, const attnrt_gqa_problem& p,
                      const GqaFlashPaging* paging, const GqaFlashOps& ops) {
  const bool paged = paging != nullptr;
  // supports() declined such a problem; nothing larger than what it read may be touched.
  if (p.struct_size < sizeof(attnrt_gqa_problem)) return 0;
  // T is known only at run time; T_b never exceeds the present length (flash requires present),
  // nor these other bounds.
  const int64_t max_keys =
      std::max({p.present_sequence_length, p.past_sequence_length + p.kv_sequence_length,
                p.sequence_length});
  const int64_t threads = NumThreads(context.host);
  // A run splits keys only while its tiles (at least one per sequence) are fewer than the threads,
  // into at most ceil(threads / tiles) chunks: the partials never outgrow that, however many
  // sequences the problem has (B chunks of every head would be B x threads partial rows).
  const int64_t sequences = std::max<int64_t>(1, p.batch_size);
  const int64_t chunks =
      sequences >= threads ? 1
                           : std::min(MaxChunks(p, threads), (threads + sequences - 1) / sequences);
  const int64_t v_head_size = ValueHeadSize(p, paging);
  const FlashBlocks blocks = paged ? ChoosePagedBlocks(L2Bytes(context), p, max_keys, *paging, ops)
                                   : ChooseBlocks(L2Bytes(context), p, max_keys, v_head_size);
  const SlotLayout slot = LayoutSlot(blocks, p.head_size, v_head_size);
  const int64_t heads_per_slot =
      paged && GroupsHeads(p, *paging, blocks, ops) ? std::min(p.kv_num_heads, kMaxGroupHeads) : 1;
  return kAlign + GqaWindowWorkspaceBytes(p) +
         (chunks > 1 ? PartialBytes(p, chunks, v_head_size) : 0) +
         static_cast<size_t>(threads * heads_per_slot) * slot.bytes;
}

}  // namespace

size_t GqaFlashWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  return WorkspaceBytes(*static_cast<const PluginContext*>(plugin_context),
                        *static_cast<const attnrt_gqa_problem*>(problem), nullptr,
                        kGqaFlashOpsScalar);  // not read without paging
}

size_t GqaFlashPagedWorkspaceSize(void* plugin_context, const attnrt_gqa_problem& p,
                                  const GqaFlashPaging& paging, const GqaFlashOps& ops) noexcept {
  return WorkspaceBytes(*static_cast<const PluginContext*>(plugin_context), p, &paging, ops);
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
