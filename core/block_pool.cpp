#include "core/block_pool.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/paged_gqa.h"

namespace attnrt::core {
namespace {

// seqlens_k is int32, so no sequence may hold more tokens than it can count.
constexpr int64_t kMaxLength = std::numeric_limits<int32_t>::max();

std::string SequenceText(int64_t sequence) { return "sequence " + std::to_string(sequence); }

}  // namespace

BlockPool::BlockPool(int64_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {}

Status BlockPool::Create(int64_t num_blocks, int32_t block_size, std::unique_ptr<BlockPool>* out) {
  if (num_blocks < 1 || num_blocks > ATTNRT_BLOCK_POOL_MAX_BLOCKS) {
    return InvalidArgument("options->num_blocks: expected a value in [1, " +
                           std::to_string(ATTNRT_BLOCK_POOL_MAX_BLOCKS) + "], got " +
                           std::to_string(num_blocks));
  }
  if (block_size < ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE ||
      block_size > ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) {
    return InvalidArgument("options->block_size: expected a value in [" +
                           std::to_string(ATTNRT_PAGED_GQA_MIN_BLOCK_SIZE) + ", " +
                           std::to_string(ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) + "], got " +
                           std::to_string(block_size));
  }
  std::unique_ptr<BlockPool> pool(new BlockPool(num_blocks, block_size));
  pool->ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  pool->free_.resize(static_cast<size_t>(num_blocks));
  // Block 0 on top: a fresh pool hands out blocks in ascending order.
  for (int64_t i = 0; i < num_blocks; ++i) {
    pool->free_[static_cast<size_t>(i)] = static_cast<int32_t>(num_blocks - 1 - i);
  }
  *out = std::move(pool);
  return Status::Ok();
}

Status BlockPool::Find(int64_t sequence, const char* name, const Sequence** out) const {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) {
    return NotFound(std::string(name) + ": no sequence " + std::to_string(sequence) +
                    " in this pool (" + std::to_string(sequences_.size()) +
                    " sequences; removed or never added)");
  }
  *out = &it->second;
  return Status::Ok();
}

Status BlockPool::Find(int64_t sequence, const char* name, Sequence** out) {
  const Sequence* found = nullptr;
  ATTNRT_RETURN_IF_ERROR(std::as_const(*this).Find(sequence, name, &found));
  *out = &sequences_.find(sequence)->second;
  return Status::Ok();
}

int32_t BlockPool::Allocate() {
  const int32_t block = free_.back();
  free_.pop_back();
  ref_counts_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::Release(int32_t block) {
  // free_ was created with capacity num_blocks, so this push_back never reallocates.
  const int32_t refs = --ref_counts_[static_cast<size_t>(block)];
  if (refs == 0) free_.push_back(block);
  if (refs == 1) --shared_;
}

Status BlockPool::CheckNextId() const {
  if (next_id_ == std::numeric_limits<int64_t>::max()) {
    return {ATTNRT_ERROR_OUT_OF_MEMORY, "block pool: sequence ids exhausted (" +
                                            std::to_string(next_id_) +
                                            " sequences added; ids are never reused)"};
  }
  return Status::Ok();
}

Status BlockPool::AddSequence(int64_t* out_sequence) {
  ATTNRT_RETURN_IF_ERROR(CheckNextId());
  sequences_.emplace(next_id_, Sequence{});
  *out_sequence = next_id_++;
  return Status::Ok();
}

Status BlockPool::Fork(int64_t parent, int64_t* out_sequence) {
  const Sequence* source = nullptr;
  ATTNRT_RETURN_IF_ERROR(Find(parent, "parent", &source));
  ATTNRT_RETURN_IF_ERROR(CheckNextId());
  // Reference counts are int32: a block can be shared by at most INT32_MAX sequences.
  for (int32_t block : source->blocks) {
    if (ref_counts_[static_cast<size_t>(block)] == std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("parent: block " + std::to_string(block) + " of " +
                             SequenceText(parent) + " is already shared by " +
                             std::to_string(std::numeric_limits<int32_t>::max()) +
                             " sequences, the most a block can be");
    }
  }
  Sequence child = *source;  // may throw; nothing changed yet
  sequences_.emplace(next_id_, std::move(child));
  for (int32_t block : source->blocks) {
    if (++ref_counts_[static_cast<size_t>(block)] == 2) ++shared_;
  }
  tokens_held_ += source->length;
  *out_sequence = next_id_++;
  return Status::Ok();
}

Status BlockPool::Append(int64_t sequence, int64_t num_tokens, attnrt_block_copy* out_copy) {
  Sequence* found = nullptr;
  ATTNRT_RETURN_IF_ERROR(Find(sequence, "sequence", &found));
  Sequence& seq = *found;
  if (num_tokens < 0) {
    return InvalidArgument("num_tokens: expected a value >= 0, got " + std::to_string(num_tokens));
  }
  if (num_tokens > kMaxLength - seq.length) {
    return InvalidArgument("num_tokens: " + SequenceText(sequence) + " holds " +
                           std::to_string(seq.length) + " tokens; appending " +
                           std::to_string(num_tokens) + " would exceed " +
                           std::to_string(kMaxLength) + " (seqlens_k is int32)");
  }
  if (out_copy != nullptr && out_copy->struct_size < ATTNRT_BLOCK_COPY_STRUCT_SIZE) {
    return AbiMismatch("out_copy->struct_size: expected at least " +
                       std::to_string(ATTNRT_BLOCK_COPY_STRUCT_SIZE) + ", got " +
                       std::to_string(out_copy->struct_size) +
                       "; set it to ATTNRT_BLOCK_COPY_STRUCT_SIZE");
  }
  const int64_t new_length = seq.length + num_tokens;
  const int64_t have = static_cast<int64_t>(seq.blocks.size());
  const int64_t need = (new_length + block_size_ - 1) / block_size_;
  const int64_t fill = seq.length % block_size_;
  // The next token goes into a partly filled last block; another sequence still reads it.
  const bool copy_on_write =
      num_tokens > 0 && fill != 0 && ref_counts_[static_cast<size_t>(seq.blocks.back())] > 1;
  const int64_t wanted = need - have + (copy_on_write ? 1 : 0);
  if (wanted > static_cast<int64_t>(free_.size())) {
    return {ATTNRT_ERROR_OUT_OF_MEMORY,
            "block pool exhausted: appending " + std::to_string(num_tokens) + " tokens to " +
                SequenceText(sequence) + " (" + std::to_string(seq.length) + " tokens) needs " +
                std::to_string(wanted) + " free blocks" +
                (copy_on_write ? " (one for copy-on-write of its shared last block)" : "") +
                ", the pool has " + std::to_string(free_.size()) + " of " +
                std::to_string(num_blocks_)};
  }
  if (copy_on_write && out_copy == nullptr) {
    return InvalidArgument("out_copy: expected a non-NULL pointer: the last block of " +
                           SequenceText(sequence) +
                           " is shared and partly filled, so this append copies it");
  }
  seq.blocks.reserve(static_cast<size_t>(need));  // may throw; nothing changed yet
  attnrt_block_copy copy{sizeof(attnrt_block_copy), -1, -1, 0};
  if (copy_on_write) {
    const int32_t shared = seq.blocks.back();
    const int32_t fresh = Allocate();
    Release(shared);
    seq.blocks.back() = fresh;
    copy = {sizeof(attnrt_block_copy), shared, fresh, static_cast<int32_t>(fill)};
  }
  for (int64_t i = have; i < need; ++i) seq.blocks.push_back(Allocate());
  seq.length = new_length;
  tokens_held_ += num_tokens;
  if (out_copy != nullptr) {  // its struct_size kept, no byte past it written, no padding left
    attnrt_block_copy value;
    std::memset(static_cast<void*>(&value), 0, sizeof value);
    value.struct_size = out_copy->struct_size;
    value.src_block = copy.src_block;
    value.dst_block = copy.dst_block;
    value.num_tokens = copy.num_tokens;
    std::memcpy(static_cast<void*>(out_copy), &value,
                std::min(out_copy->struct_size, sizeof value));
  }
  return Status::Ok();
}

Status BlockPool::Truncate(int64_t sequence, int64_t new_length) {
  Sequence* found = nullptr;
  ATTNRT_RETURN_IF_ERROR(Find(sequence, "sequence", &found));
  Sequence& seq = *found;
  if (new_length < 0 || new_length > seq.length) {
    return InvalidArgument("new_length: expected a value in [0, " + std::to_string(seq.length) +
                           "] (the length of " + SequenceText(sequence) + "), got " +
                           std::to_string(new_length));
  }
  const size_t keep = static_cast<size_t>((new_length + block_size_ - 1) / block_size_);
  for (size_t i = keep; i < seq.blocks.size(); ++i) Release(seq.blocks[i]);
  seq.blocks.resize(keep);
  tokens_held_ -= seq.length - new_length;
  seq.length = new_length;
  return Status::Ok();
}

Status BlockPool::Remove(int64_t sequence) {
  const Sequence* found = nullptr;
  ATTNRT_RETURN_IF_ERROR(Find(sequence, "sequence", &found));
  for (int32_t block : found->blocks) Release(block);
  tokens_held_ -= found->length;
  sequences_.erase(sequence);
  return Status::Ok();
}

Status BlockPool::SequenceInfo(int64_t sequence, int64_t* out_length,
                               int64_t* out_num_blocks) const {
  const Sequence* seq = nullptr;
  ATTNRT_RETURN_IF_ERROR(Find(sequence, "sequence", &seq));
  if (out_length != nullptr) *out_length = seq->length;
  if (out_num_blocks != nullptr) *out_num_blocks = static_cast<int64_t>(seq->blocks.size());
  return Status::Ok();
}

Status BlockPool::BlockTable(const int64_t* sequences, size_t num_sequences,
                             int64_t max_blocks_per_seq, int32_t* table, int32_t* seqlens_k) const {
  // The caller's arrays must be addressable: sequences holds num_sequences int64 and table
  // num_sequences * max_blocks_per_seq int32, each at most PTRDIFF_MAX bytes.
  constexpr auto kMaxBytes = static_cast<size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  constexpr size_t kMaxSequences = kMaxBytes / sizeof(int64_t);
  if (num_sequences > kMaxSequences) {
    return InvalidArgument("num_sequences: expected a value in [0, " +
                           std::to_string(kMaxSequences) + "] (sequences holds num_sequences " +
                           "int64 ids), got " + std::to_string(num_sequences));
  }
  const size_t max_slots = kMaxBytes / sizeof(int32_t) / std::max<size_t>(num_sequences, 1);
  if (max_blocks_per_seq < 0 || static_cast<uint64_t>(max_blocks_per_seq) > max_slots) {
    return InvalidArgument(
        "max_blocks_per_seq: expected a value in [0, " + std::to_string(max_slots) +
        "] (table holds num_sequences " + std::to_string(num_sequences) +
        " x max_blocks_per_seq int32 values, at most " + std::to_string(kMaxBytes) +
        " bytes), got " + std::to_string(max_blocks_per_seq));
  }
  if (num_sequences > 0 && sequences == nullptr) {
    return InvalidArgument("sequences: expected a non-NULL pointer for num_sequences " +
                           std::to_string(num_sequences) + ", got NULL");
  }
  if (num_sequences > 0 && max_blocks_per_seq > 0 && table == nullptr) {
    return InvalidArgument("table: expected a non-NULL pointer, got NULL");
  }
  // Everything is checked before anything is written; nothing is allocated.
  for (size_t i = 0; i < num_sequences; ++i) {
    const auto name = [i] { return "sequences[" + std::to_string(i) + "]"; };
    auto it = sequences_.find(sequences[i]);
    const Sequence* row = nullptr;
    if (it == sequences_.end()) return Find(sequences[i], name().c_str(), &row);
    row = &it->second;
    const auto blocks = static_cast<int64_t>(row->blocks.size());
    if (blocks > max_blocks_per_seq) {
      return InvalidArgument("max_blocks_per_seq: " + name() + " (" + SequenceText(sequences[i]) +
                             ", " + std::to_string(row->length) + " tokens) holds " +
                             std::to_string(blocks) + " blocks, more than the " +
                             std::to_string(max_blocks_per_seq) + " slots of a table row");
    }
    if (seqlens_k != nullptr && row->length == 0) {
      return InvalidArgument("seqlens_k: " + name() + " (" + SequenceText(sequences[i]) +
                             ") is empty, so it has no seqlens_k (length - 1); append its "
                             "tokens first");
    }
  }
  for (size_t i = 0; i < num_sequences; ++i) {
    const Sequence& seq = sequences_.find(sequences[i])->second;
    int32_t* row = table + i * static_cast<size_t>(max_blocks_per_seq);
    std::copy(seq.blocks.begin(), seq.blocks.end(), row);
    std::fill(row + seq.blocks.size(), row + max_blocks_per_seq, -1);
    if (seqlens_k != nullptr) seqlens_k[i] = static_cast<int32_t>(seq.length - 1);
  }
  return Status::Ok();
}

void BlockPool::Stats(attnrt_block_pool_stats* out) const {
  // Every block of a sequence but its last is full. A block has unfilled rows only when every
  // sequence using it has it as a partly filled last block; its filled rows are then the most any
  // of them fills. So only the partly filled last blocks are looked at: O(sequences) memory.
  std::vector<std::pair<int32_t, int32_t>> partial;  // (block, rows its sequence fills)
  partial.reserve(sequences_.size());
  for (const auto& [id, seq] : sequences_) {
    const auto fill = static_cast<int32_t>(seq.length % block_size_);
    if (fill != 0) partial.emplace_back(seq.blocks.back(), fill);
  }
  std::sort(partial.begin(), partial.end());
  int64_t unfilled = 0;
  for (size_t k = 0; k < partial.size();) {
    const int32_t block = partial[k].first;
    size_t end = k;
    int32_t most = 0;
    for (; end < partial.size() && partial[end].first == block; ++end) {
      most = std::max(most, partial[end].second);
    }
    // A block appears at most once in a sequence, so its reference count is its sequences.
    if (static_cast<int64_t>(end - k) == ref_counts_[static_cast<size_t>(block)]) {
      unfilled += block_size_ - most;
    }
    k = end;
  }
  const int64_t used = num_blocks_ - static_cast<int64_t>(free_.size());
  const int64_t stored = used * block_size_ - unfilled;
  out->num_blocks = num_blocks_;
  out->block_size = block_size_;
  out->num_sequences = static_cast<int64_t>(sequences_.size());
  out->blocks_used = used;
  out->blocks_free = num_blocks_ - used;
  out->blocks_shared = shared_;
  out->tokens_held = tokens_held_;
  out->tokens_stored = stored;
  out->utilization = static_cast<double>(used) / static_cast<double>(num_blocks_);
  const double capacity = static_cast<double>(used) * block_size_;
  out->internal_fragmentation = used > 0 ? static_cast<double>(unfilled) / capacity : 0.0;
}

}  // namespace attnrt::core
