// gqa.flash decoding (baseline ISA): the log-sum-exp merge of split-KV chunks (flash decoding:
// each chunk's partial max, sum and unnormalized output, merged per (b, n)), and the grouped paged
// decode (RunHeadGroup), which reads each cache block once for all kv heads of a task.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gqa_convert.h"
#include "gqa_flash.h"
#include "gqa_flash_internal.h"
#include "gqa_run.h"

namespace attnrt::cpu::flash {
namespace {

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
  size_t row_bytes;  // of one row: K rows, or V rows (the value head size's)

  GroupRows(const GqaRun& r, const KvSource& first, int64_t heads, size_t row)
      : bnsh(first.stride == row),
        // Every kv head's row of a token adjacent, and the tokens adjacent (a compact BSNH pool).
        shared(!bnsh && heads == r.kv_heads && first.head_step == row &&
               first.stride == static_cast<size_t>(r.kv_heads) * row),
        head_step(first.head_step),
        row_bytes(row) {}
};

// The prefetch shares of rows [j, j + n) of one cache block (none when n == 0): Share(i) for the
// call of the task's i-th head.
class GroupPrefetch {
 public:
  GroupPrefetch(const GroupRows& rows, int64_t heads, const KvSource& first, int64_t j, int64_t n)
      : rows_(rows),
        heads_(heads),
        base_(n > 0 ? first.Row(j) : nullptr),
        bytes_(static_cast<size_t>(n * (rows.shared ? heads : 1)) * rows.row_bytes) {}

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
        segment_keys_(GroupSegmentKeys(r.cache_row_bytes)) {
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

void PrefetchFirstRows(const unsigned char* row, size_t row_bytes, size_t stride, int64_t n) {
  for (int64_t k = 0; k < std::min(n, kNextCallRows); ++k, row += stride) {
    for (size_t offset = 0; offset < row_bytes; offset += kAlign) {
      __builtin_prefetch(row + offset, 0, 3);
    }
  }
}

}  // namespace

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
  const int64_t hv = r.v_head_size;
  const int64_t ld = job.blocks.kv_block;
  const TaskSpan span = MakeSpan(job, b, s0, count, chunk);
  HeadTile group[kMaxGroupHeads];
  for (int64_t i = 0; i < heads; ++i) group[i] = BeginHead(job, span, tiles[i], kvh0 + i);
  const KvSource& keys = group[0].keys;
  const KvSource& values = group[0].values;

  const GroupRows key_layout(r, keys, heads, r.cache_row_bytes);
  const GroupRows value_layout(r, values, heads, r.value_cache_row_bytes);
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
    const GroupRows& layout = v ? value_layout : key_layout;
    const unsigned char* row = source.Row(j);  // kv head kvh0's row j
    const GroupPrefetch next(ahead.values() ? value_layout : key_layout, heads,
                             ahead.values() ? values : keys, ahead.j(),
                             ahead.done() ? 0 : ahead.n());
    for (int64_t i = 0; i < heads; ++i, row += layout.head_step) {
      // The next head's first rows (for the next segment's first head it made no difference).
      if (i + 1 < heads) {
        PrefetchFirstRows(row + layout.head_step, layout.row_bytes, source.stride, n);
      }
      const HeadTile& head = group[i];
      const Prefetch share = next.Share(i);
      float* block_scores = head.t.scores + row_begin * ld + (j - ja);
      const GqaFlashKv rows = RowsAt(r, row, source.stride, v ? head.v_scale : head.k_scale);
      if (v) {
        ops.accumulate(block_scores, row_count, ld, rows, n, hv, head.t.acc + row_begin * hv,
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

// Flash decoding, phase 2: out = sum_c exp(m_c - M) acc_c / sum_c exp(m_c - M) l_c per (b, n).
void MergeRows(void* user, size_t begin, size_t end) {
  const FlashJob& job = *static_cast<const FlashJob*>(user);
  const GqaRun& r = *job.run;
  const int64_t h = r.v_head_size;  // partial and output rows
  for (size_t unit = begin; unit < end; ++unit) {
    float* partials = job.partials + static_cast<int64_t>(unit) * job.chunks * (2 + h);
    // S == 1: the (b, n) row, at element unit * H of the output (of a packed batch: sequence b's
    // row, when it has one).
    const int64_t b = static_cast<int64_t>(unit) / r.heads;
    if (GqaQueryLength(r, b) == 0) continue;
    const int64_t offset =
        (GqaQueryRow(r, b, 0) * r.heads + static_cast<int64_t>(unit) % r.heads) * h;
    // A chunk with a NaN sum makes the row NaN; every chunk at m = -inf, a zero row (as EndHead).
    float m = kNegInf;
    bool nan = false;
    for (int64_t c = 0; c < job.chunks; ++c) {
      m = std::max(m, partials[c * (2 + h)]);
      nan = nan || partials[c * (2 + h) + 1] != partials[c * (2 + h) + 1];
    }
    if (nan) {
      std::fill(partials + 2, partials + 2 + h, std::numeric_limits<float>::quiet_NaN());
      WriteOutput(r, *job.ops, partials + 2, 1.0f, offset);
      continue;
    }
    if (m == kNegInf) {
      std::memset(ElementAddress(r.output, r.element_bytes, offset), 0,
                  static_cast<size_t>(h) * r.element_bytes);
      continue;
    }
    // The sum builds up in the output (float32) or in chunk 0's partial (narrow T: rounded once
    // at the end); either way sum = w_0 acc_0 + w_1 acc_1 + ... in chunk order. Chunk c's terms
    // are read before anything of chunk c' > c is written, so the in-place sum is safe. A chunk
    // at m = -inf has weight 0 and adds 0 * acc: its keys took part with weight 0, as in one pass.
    float* sum =
        r.type == GqaFloatType::kFloat32 ? static_cast<float*>(r.output) + offset : partials + 2;
    float l = 0.0f;
    bool started = false;
    for (int64_t c = 0; c < job.chunks; ++c) {
      const float* partial = partials + c * (2 + h);
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
      WriteOutput(r, *job.ops, sum, 1.0f / l, offset);
    }
  }
}

}  // namespace attnrt::cpu::flash
