// Block pool of paged KV caches (attnrt/block_pool.h; vLLM's block manager): block ids
// handed to sequences through a free list, reference counts for blocks shared after a fork, and
// copy-on-write of a shared partly filled last block. Holds no K/V data. Single-threaded: the C
// ABI documents that the caller serializes calls on one pool.
//
// Every mutating method validates everything and reserves every container capacity it needs
// before it changes anything, so an error (including std::bad_alloc) leaves the pool unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "attnrt/block_pool.h"
#include "core/status.h"

namespace attnrt::core {

class BlockPool {
 public:
  // num_blocks in [1, ATTNRT_BLOCK_POOL_MAX_BLOCKS], block_size in [1, 1024] (checked by Create).
  static Status Create(int64_t num_blocks, int32_t block_size, std::unique_ptr<BlockPool>* out);

  Status AddSequence(int64_t* out_sequence);
  Status Fork(int64_t parent, int64_t* out_sequence);
  Status Append(int64_t sequence, int64_t num_tokens, attnrt_block_copy* out_copy);
  Status Truncate(int64_t sequence, int64_t new_length);
  Status Remove(int64_t sequence);
  Status SequenceInfo(int64_t sequence, int64_t* out_length, int64_t* out_num_blocks) const;
  Status BlockTable(const int64_t* sequences, size_t num_sequences, int64_t max_blocks_per_seq,
                    int32_t* table, int32_t* seqlens_k) const;
  void Stats(attnrt_block_pool_stats* out) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };

  BlockPool(int64_t num_blocks, int32_t block_size);
  Status Find(int64_t sequence, const char* name, const Sequence** out) const;
  Status Find(int64_t sequence, const char* name, Sequence** out);
  // Pops a free block (free_ non-empty) with reference count 1.
  int32_t Allocate();
  // Drops one reference; the block returns to the free list at zero.
  void Release(int32_t block);
  // OUT_OF_MEMORY once every sequence id has been handed out.
  Status CheckNextId() const;

  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<int32_t> ref_counts_;  // per block
  std::vector<int32_t> free_;        // free list (a stack)
  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_id_ = 0;
  int64_t shared_ = 0;       // blocks with a reference count > 1
  int64_t tokens_held_ = 0;  // sum of the sequences' lengths
};

}  // namespace attnrt::core

struct attnrt_block_pool {
  std::unique_ptr<attnrt::core::BlockPool> impl;
};
