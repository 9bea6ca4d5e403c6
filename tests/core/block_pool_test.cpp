// Block pool of paged KV caches (attnrt/block_pool.h), black-box through libattnrt.so: creation
// errors, append/fork/truncate/remove with copy-on-write, block tables, statistics, exhaustion and
// every error leaving the pool unchanged, and a property test that runs random operation sequences
// against a simple model of the pool, moving token contents through the reported copies and
// checking every sequence's tokens and the pool's invariants after each operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnrt/block_pool.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

struct PoolDeleter {
  void operator()(attnrt_block_pool* p) const { attnrt_block_pool_destroy(p); }
};
using PoolPtr = std::unique_ptr<attnrt_block_pool, PoolDeleter>;

PoolPtr MakePool(int64_t num_blocks, int32_t block_size) {
  attnrt_block_pool_options options{sizeof(attnrt_block_pool_options), num_blocks, block_size};
  attnrt_block_pool* pool = nullptr;
  const attnrt_status status = attnrt_block_pool_create(&options, &pool);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return PoolPtr(pool);
}

int64_t Add(attnrt_block_pool* pool) {
  int64_t id = -1;
  const attnrt_status status = attnrt_block_pool_add_sequence(pool, &id);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return id;
}

attnrt_block_copy Append(attnrt_block_pool* pool, int64_t seq, int64_t n) {
  attnrt_block_copy copy{sizeof(attnrt_block_copy), -7, -7, -7};
  const attnrt_status status = attnrt_block_pool_append(pool, seq, n, &copy);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return copy;
}

std::vector<int32_t> Table(const attnrt_block_pool* pool, int64_t seq, int64_t slots) {
  std::vector<int32_t> row(static_cast<size_t>(slots), -9);
  const attnrt_status status =
      attnrt_block_pool_block_table(pool, &seq, 1, slots, row.data(), nullptr);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return row;
}

attnrt_block_pool_stats Stats(const attnrt_block_pool* pool) {
  attnrt_block_pool_stats s{};
  s.struct_size = sizeof s;
  const attnrt_status status = attnrt_block_pool_get_stats(pool, &s);
  EXPECT_EQ(status, ATTNRT_OK) << LastError(status);
  return s;
}

std::string Error() { return attnrt_last_error_message(); }

TEST(BlockPool, CreateRejectsBadOptions) {
  attnrt_block_pool* pool = nullptr;
  attnrt_block_pool_options options{sizeof(attnrt_block_pool_options), 0, 16};
  EXPECT_EQ(attnrt_block_pool_create(&options, &pool), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options->num_blocks: expected a value in [1, 2147483647], got 0"),
            std::string::npos)
      << Error();
  options = {sizeof(attnrt_block_pool_options), 4, 1025};
  EXPECT_EQ(attnrt_block_pool_create(&options, &pool), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options->block_size: expected a value in [1, 1024], got 1025"),
            std::string::npos)
      << Error();
  options = {sizeof(attnrt_block_pool_options), 4, 0};
  EXPECT_EQ(attnrt_block_pool_create(&options, &pool), ATTNRT_ERROR_INVALID_ARGUMENT);
  options = {sizeof(size_t), 4, 16};
  EXPECT_EQ(attnrt_block_pool_create(&options, &pool), ATTNRT_ERROR_ABI_MISMATCH);
  EXPECT_NE(Error().find("options->struct_size"), std::string::npos) << Error();
  EXPECT_EQ(attnrt_block_pool_create(nullptr, &pool), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options: expected a non-NULL pointer"), std::string::npos) << Error();
  EXPECT_EQ(pool, nullptr);
  attnrt_block_pool_destroy(nullptr);  // ignored
}

TEST(BlockPool, AppendAllocatesBlocksAndReportsStats) {
  PoolPtr pool = MakePool(8, 4);
  const int64_t a = Add(pool.get());
  const attnrt_block_copy none = Append(pool.get(), a, 10);
  EXPECT_EQ(none.num_tokens, 0);
  EXPECT_EQ(Table(pool.get(), a, 4), (std::vector<int32_t>{0, 1, 2, -1}));
  int64_t length = -1, blocks = -1;
  ASSERT_EQ(attnrt_block_pool_sequence_info(pool.get(), a, &length, &blocks), ATTNRT_OK);
  EXPECT_EQ(length, 10);
  EXPECT_EQ(blocks, 3);
  attnrt_block_pool_stats s = Stats(pool.get());
  EXPECT_EQ(s.num_blocks, 8);
  EXPECT_EQ(s.block_size, 4);
  EXPECT_EQ(s.num_sequences, 1);
  EXPECT_EQ(s.blocks_used, 3);
  EXPECT_EQ(s.blocks_free, 5);
  EXPECT_EQ(s.blocks_shared, 0);
  EXPECT_EQ(s.tokens_held, 10);
  EXPECT_EQ(s.tokens_stored, 10);
  EXPECT_DOUBLE_EQ(s.utilization, 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 2.0 / 12.0);
  // Filling the partial block allocates nothing; one more token takes a new block.
  Append(pool.get(), a, 2);
  EXPECT_EQ(Stats(pool.get()).blocks_used, 3);
  Append(pool.get(), a, 1);
  EXPECT_EQ(Table(pool.get(), a, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  // seqlens_k comes with the table.
  int32_t table[4];
  int32_t seqlens = -5;
  ASSERT_EQ(attnrt_block_pool_block_table(pool.get(), &a, 1, 4, table, &seqlens), ATTNRT_OK);
  EXPECT_EQ(seqlens, 12);
}

TEST(BlockPool, ForkSharesBlocksAndCopiesOnWrite) {
  PoolPtr pool = MakePool(8, 4);
  const int64_t parent = Add(pool.get());
  Append(pool.get(), parent, 10);  // blocks 0 1 2, block 2 holds 2 rows
  int64_t child = -1;
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), parent, &child), ATTNRT_OK) << Error();
  EXPECT_EQ(Table(pool.get(), child, 4), Table(pool.get(), parent, 4));
  attnrt_block_pool_stats s = Stats(pool.get());
  EXPECT_EQ(s.blocks_used, 3);
  EXPECT_EQ(s.blocks_shared, 3);
  EXPECT_EQ(s.tokens_held, 20);
  EXPECT_EQ(s.tokens_stored, 10);

  // The child writes into the shared partial block: it gets a copy of its 2 rows.
  const attnrt_block_copy copy = Append(pool.get(), child, 1);
  EXPECT_EQ(copy.src_block, 2);
  EXPECT_EQ(copy.dst_block, 3);
  EXPECT_EQ(copy.num_tokens, 2);
  EXPECT_EQ(Table(pool.get(), child, 4), (std::vector<int32_t>{0, 1, 3, -1}));
  EXPECT_EQ(Table(pool.get(), parent, 4), (std::vector<int32_t>{0, 1, 2, -1}));
  // Block 2 is the parent's alone now: appending to it copies nothing.
  EXPECT_EQ(Append(pool.get(), parent, 2).num_tokens, 0);
  EXPECT_EQ(Stats(pool.get()).blocks_shared, 2);

  // A full shared block is never written: appending past it needs no copy.
  int64_t grandchild = -1;
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), parent, &grandchild), ATTNRT_OK);
  EXPECT_EQ(Append(pool.get(), grandchild, 1).num_tokens, 0);
  EXPECT_EQ(Table(pool.get(), grandchild, 4), (std::vector<int32_t>{0, 1, 2, 4}));

  // Without out_copy a copy-on-write append is refused, and nothing changes.
  int64_t other = -1;
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), child, &other), ATTNRT_OK);
  const attnrt_block_pool_stats before = Stats(pool.get());
  EXPECT_EQ(attnrt_block_pool_append(pool.get(), other, 1, nullptr), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("out_copy: expected a non-NULL pointer"), std::string::npos) << Error();
  EXPECT_EQ(Stats(pool.get()).blocks_used, before.blocks_used);

  // Removing the sharers returns only the blocks nobody else holds.
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), parent), ATTNRT_OK);
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), grandchild), ATTNRT_OK);
  EXPECT_EQ(Stats(pool.get()).blocks_used, 3);  // 0 1 3 of child (and other)
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), child), ATTNRT_OK);
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), other), ATTNRT_OK);
  EXPECT_EQ(Stats(pool.get()).blocks_used, 0);
  EXPECT_EQ(Stats(pool.get()).num_sequences, 0);
}

TEST(BlockPool, TruncateReleasesBlocks) {
  PoolPtr pool = MakePool(4, 4);
  const int64_t a = Add(pool.get());
  Append(pool.get(), a, 16);
  ASSERT_EQ(attnrt_block_pool_truncate(pool.get(), a, 5), ATTNRT_OK) << Error();
  EXPECT_EQ(Table(pool.get(), a, 4), (std::vector<int32_t>{0, 1, -1, -1}));
  EXPECT_EQ(Stats(pool.get()).blocks_free, 2);
  ASSERT_EQ(attnrt_block_pool_truncate(pool.get(), a, 0), ATTNRT_OK);
  EXPECT_EQ(Stats(pool.get()).blocks_free, 4);
  EXPECT_EQ(attnrt_block_pool_truncate(pool.get(), a, 1), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("new_length: expected a value in [0, 0]"), std::string::npos) << Error();
  // The block freed last (block 1, after block 0) is reused first: the free list is a stack.
  Append(pool.get(), a, 1);
  EXPECT_EQ(Table(pool.get(), a, 1), (std::vector<int32_t>{1}));
}

TEST(BlockPool, ErrorsNameTheArgumentAndLeaveThePoolUnchanged) {
  PoolPtr pool = MakePool(3, 4);
  const int64_t a = Add(pool.get());
  Append(pool.get(), a, 9);  // 3 blocks: the pool is full
  const attnrt_block_pool_stats before = Stats(pool.get());
  const std::vector<int32_t> table_before = Table(pool.get(), a, 3);

  attnrt_block_copy copy{sizeof(attnrt_block_copy), 0, 0, 0};
  EXPECT_EQ(attnrt_block_pool_append(pool.get(), a, 4, &copy), ATTNRT_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(
      Error().find("block pool exhausted: appending 4 tokens to sequence " + std::to_string(a) +
                   " (9 tokens) needs 1 free blocks, the pool has 0 of 3"),
      std::string::npos)
      << Error();
  // Exhaustion by copy-on-write alone.
  int64_t child = -1;
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), a, &child), ATTNRT_OK);
  EXPECT_EQ(attnrt_block_pool_append(pool.get(), child, 1, &copy), ATTNRT_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(Error().find("one for copy-on-write"), std::string::npos) << Error();
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), child), ATTNRT_OK);

  EXPECT_EQ(attnrt_block_pool_append(pool.get(), a, -1, &copy), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("num_tokens: expected a value >= 0, got -1"), std::string::npos);
  EXPECT_EQ(attnrt_block_pool_append(pool.get(), a, int64_t{1} << 40, &copy),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("would exceed 2147483647"), std::string::npos) << Error();
  EXPECT_EQ(attnrt_block_pool_append(pool.get(), 12345, 1, &copy), ATTNRT_ERROR_NOT_FOUND);
  EXPECT_NE(Error().find("sequence: no sequence 12345 in this pool"), std::string::npos);
  EXPECT_EQ(attnrt_block_pool_fork(pool.get(), 12345, &child), ATTNRT_ERROR_NOT_FOUND);
  EXPECT_NE(Error().find("parent: no sequence 12345"), std::string::npos);
  EXPECT_EQ(attnrt_block_pool_remove(pool.get(), 12345), ATTNRT_ERROR_NOT_FOUND);
  EXPECT_EQ(attnrt_block_pool_truncate(pool.get(), a, 10), ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("new_length: expected a value in [0, 9]"), std::string::npos);
  int32_t small[2] = {77, 77};
  EXPECT_EQ(attnrt_block_pool_block_table(pool.get(), &a, 1, 2, small, nullptr),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("holds 3 blocks, more than the 2 slots of a table row"), std::string::npos)
      << Error();
  EXPECT_EQ(small[0], 77);  // nothing written
  const int64_t empty = Add(pool.get());
  int32_t row[3];
  int32_t seqlens[2];
  const int64_t both[2] = {a, empty};
  EXPECT_EQ(attnrt_block_pool_block_table(pool.get(), both, 2, 3, row, seqlens),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("sequences[1]"), std::string::npos) << Error();
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), empty), ATTNRT_OK);
  EXPECT_EQ(attnrt_block_pool_add_sequence(nullptr, &child), ATTNRT_ERROR_INVALID_ARGUMENT);
  attnrt_block_pool_stats tiny{};
  tiny.struct_size = 8;
  EXPECT_EQ(attnrt_block_pool_get_stats(pool.get(), &tiny), ATTNRT_ERROR_ABI_MISMATCH);

  const attnrt_block_pool_stats after = Stats(pool.get());
  EXPECT_EQ(after.blocks_used, before.blocks_used);
  EXPECT_EQ(after.tokens_held, before.tokens_held);
  EXPECT_EQ(after.num_sequences, before.num_sequences);
  EXPECT_EQ(Table(pool.get(), a, 3), table_before);
}

// ---- property test ------------------------------------------------------------------------------

// The model: each live sequence is its list of token values. The "memory" is one value per pool
// slot (block * block_size + row); the test moves values as an op would: it performs each
// reported copy and writes appended tokens into the slots the table names.
class PoolModel {
 public:
  PoolModel(int64_t num_blocks, int32_t block_size)
      : num_blocks_(num_blocks),
        block_size_(block_size),
        memory_(static_cast<size_t>(num_blocks * block_size), -1) {}

  int64_t num_blocks_;
  int32_t block_size_;
  std::vector<int64_t> memory_;
  std::map<int64_t, std::vector<int64_t>> sequences_;  // id -> token values
  int64_t next_value_ = 1;
};

int64_t Slots(const PoolModel& m) { return m.num_blocks_; }

void CheckInvariants(attnrt_block_pool* pool, const PoolModel& m) {
  std::map<int32_t, int64_t> refs;
  std::map<int32_t, int64_t> filled;
  int64_t held = 0;
  for (const auto& [id, tokens] : m.sequences_) {
    const auto length = static_cast<int64_t>(tokens.size());
    int64_t pool_length = -1, blocks = -1;
    ASSERT_EQ(attnrt_block_pool_sequence_info(pool, id, &pool_length, &blocks), ATTNRT_OK);
    ASSERT_EQ(pool_length, length);
    ASSERT_EQ(blocks, (length + m.block_size_ - 1) / m.block_size_);
    const std::vector<int32_t> row = Table(pool, id, Slots(m));
    for (int64_t i = 0; i < Slots(m); ++i) {
      if (i >= blocks) {
        ASSERT_EQ(row[static_cast<size_t>(i)], -1);
        continue;
      }
      const int32_t block = row[static_cast<size_t>(i)];
      ASSERT_GE(block, 0);
      ASSERT_LT(block, m.num_blocks_);
      ++refs[block];
      const int64_t rows = std::min<int64_t>(m.block_size_, length - i * m.block_size_);
      filled[block] = std::max(filled[block], rows);
    }
    // Every token reads back through the table: copies and appends kept sequences apart.
    for (int64_t j = 0; j < length; ++j) {
      const int32_t block = row[static_cast<size_t>(j / m.block_size_)];
      ASSERT_EQ(m.memory_[static_cast<size_t>(block * m.block_size_ + j % m.block_size_)],
                tokens[static_cast<size_t>(j)])
          << "sequence " << id << " token " << j;
    }
    held += length;
  }
  const attnrt_block_pool_stats s = Stats(pool);
  int64_t stored = 0, shared = 0;
  for (const auto& [block, count] : refs) {
    stored += filled[block];
    shared += count > 1 ? 1 : 0;
  }
  ASSERT_EQ(s.num_sequences, static_cast<int64_t>(m.sequences_.size()));
  ASSERT_EQ(s.blocks_used, static_cast<int64_t>(refs.size()));
  ASSERT_EQ(s.blocks_used + s.blocks_free, m.num_blocks_);
  ASSERT_EQ(s.blocks_shared, shared);
  ASSERT_EQ(s.tokens_held, held);
  ASSERT_EQ(s.tokens_stored, stored);
}

TEST(BlockPool, BlockTableSizesThatCannotExistAreRejected) {
  PoolPtr pool = MakePool(8, 4);
  const int64_t a = Add(pool.get());
  Append(pool.get(), a, 6);
  const attnrt_block_pool_stats before = Stats(pool.get());
  const std::string max_seqs = std::to_string(PTRDIFF_MAX / 8);
  int32_t table[4] = {77, 77, 77, 77};
  int32_t seqlens = 77;
  // num_sequences x max_blocks_per_seq x 4 bytes overflows: rejected, not a huge memset.
  EXPECT_EQ(attnrt_block_pool_block_table(pool.get(), &a, 1, INT64_MAX, table, &seqlens),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("max_blocks_per_seq: expected a value in [0, " +
                         std::to_string(PTRDIFF_MAX / 4) + "]"),
            std::string::npos)
      << Error();
  EXPECT_NE(Error().find("got " + std::to_string(INT64_MAX)), std::string::npos) << Error();
  const int64_t both[2] = {a, a};
  EXPECT_EQ(
      attnrt_block_pool_block_table(pool.get(), both, 2, PTRDIFF_MAX / 4 / 2 + 1, table, nullptr),
      ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("max_blocks_per_seq: expected a value in [0, " +
                         std::to_string(PTRDIFF_MAX / 4 / 2) + "]"),
            std::string::npos)
      << Error();
  EXPECT_EQ(attnrt_block_pool_block_table(pool.get(), &a, 1, -1, table, nullptr),
            ATTNRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("max_blocks_per_seq: expected a value in [0, "), std::string::npos)
      << Error();
  // A num_sequences no int64 array can hold: INVALID_ARGUMENT, not an allocation failure.
  for (size_t n : {SIZE_MAX / 2, SIZE_MAX, size_t{1} << 61}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(attnrt_block_pool_block_table(pool.get(), &a, n, 4, table, nullptr),
              ATTNRT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(Error().find("num_sequences: expected a value in [0, " + max_seqs + "]"),
              std::string::npos)
        << Error();
    EXPECT_NE(Error().find("got " + std::to_string(n)), std::string::npos) << Error();
  }
  EXPECT_EQ(table[0], 77);
  EXPECT_EQ(seqlens, 77);
  const attnrt_block_pool_stats after = Stats(pool.get());
  EXPECT_EQ(after.blocks_used, before.blocks_used);
  EXPECT_EQ(after.tokens_held, before.tokens_held);
  EXPECT_EQ(Table(pool.get(), a, 4), (std::vector<int32_t>{0, 1, -1, -1}));
}

TEST(BlockPool, StatsCountRowsStillHeldByAnotherSequence) {
  PoolPtr pool = MakePool(8, 4);
  const int64_t a = Add(pool.get());
  Append(pool.get(), a, 4);  // block 0 full
  int64_t b = -1;
  ASSERT_EQ(attnrt_block_pool_fork(pool.get(), a, &b), ATTNRT_OK);
  ASSERT_EQ(attnrt_block_pool_truncate(pool.get(), a, 2), ATTNRT_OK);
  Append(pool.get(), b, 1);  // b: block 0 full, then block 1; a: 2 rows of block 0
  attnrt_block_pool_stats s = Stats(pool.get());
  EXPECT_EQ(s.blocks_used, 2);
  EXPECT_EQ(s.blocks_shared, 1);
  EXPECT_EQ(s.tokens_held, 7);
  EXPECT_EQ(s.tokens_stored, 5);  // block 0 holds b's 4 rows, block 1 one
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 3.0 / 8.0);
  // Both see block 0 partly filled: the fuller one counts.
  ASSERT_EQ(attnrt_block_pool_truncate(pool.get(), b, 3), ATTNRT_OK);
  s = Stats(pool.get());
  EXPECT_EQ(s.blocks_used, 1);
  EXPECT_EQ(s.tokens_held, 5);
  EXPECT_EQ(s.tokens_stored, 3);
  ASSERT_EQ(attnrt_block_pool_remove(pool.get(), b), ATTNRT_OK);
  s = Stats(pool.get());
  EXPECT_EQ(s.blocks_shared, 0);
  EXPECT_EQ(s.tokens_held, 2);
  EXPECT_EQ(s.tokens_stored, 2);
}

TEST(BlockPool, RandomOperationsMatchTheModel) {
  SCOPED_TRACE(SeedTrace());
  std::mt19937_64 rng(TestSeed());
  for (int32_t block_size : {1, 3, 4, 16}) {
    SCOPED_TRACE("block_size " + std::to_string(block_size));
    const int64_t num_blocks = 24;
    PoolPtr pool = MakePool(num_blocks, block_size);
    PoolModel m(num_blocks, block_size);
    int exhausted = 0, copies = 0;
    // A scripted start reaches the states a random walk may miss: a partly filled block shared
    // by a fork and then written (copy-on-write), and an append larger than the pool. Ops: 0 add,
    // 1 fork, 2-6 append, 7-8 truncate, 9 remove; target = the k-th live sequence by id.
    struct Scripted {
      int op;
      size_t target;
      int64_t tokens;
    };
    const std::vector<Scripted> script = {
        {0, 0, 0}, {2, 0, 1}, {1, 0, 0}, {2, 1, 1}, {2, 0, num_blocks * block_size + 1}};
    for (int step = 0; step < 600; ++step) {
      const bool scripted = static_cast<size_t>(step) < script.size();
      const auto pick = [&]() -> int64_t {
        auto it = m.sequences_.begin();
        std::advance(it, static_cast<long>(scripted ? script[static_cast<size_t>(step)].target
                                                    : rng() % m.sequences_.size()));
        return it->first;
      };
      const attnrt_block_pool_stats before = Stats(pool.get());
      const int op = scripted ? script[static_cast<size_t>(step)].op : static_cast<int>(rng() % 10);
      if (op == 0 || m.sequences_.empty()) {
        int64_t id = -1;
        ASSERT_EQ(attnrt_block_pool_add_sequence(pool.get(), &id), ATTNRT_OK);
        ASSERT_EQ(m.sequences_.count(id), 0u);
        m.sequences_[id] = {};
      } else if (op == 1) {
        const int64_t parent = pick();
        int64_t id = -1;
        ASSERT_EQ(attnrt_block_pool_fork(pool.get(), parent, &id), ATTNRT_OK);
        m.sequences_[id] = m.sequences_[parent];
      } else if (op <= 6) {
        const int64_t id = pick();
        const auto n =
            scripted ? script[static_cast<size_t>(step)].tokens
                     : static_cast<int64_t>(rng() % (3 * static_cast<uint64_t>(block_size) + 2));
        attnrt_block_copy copy{sizeof(attnrt_block_copy), -1, -1, -1};
        const attnrt_status status = attnrt_block_pool_append(pool.get(), id, n, &copy);
        if (status == ATTNRT_ERROR_OUT_OF_MEMORY) {
          ++exhausted;
          const attnrt_block_pool_stats after = Stats(pool.get());
          ASSERT_EQ(after.blocks_used, before.blocks_used);
          ASSERT_EQ(after.tokens_held, before.tokens_held);
        } else {
          ASSERT_EQ(status, ATTNRT_OK) << LastError(status);
          if (copy.num_tokens > 0) {
            ++copies;
            for (int32_t r = 0; r < copy.num_tokens; ++r) {
              m.memory_[static_cast<size_t>(copy.dst_block * block_size + r)] =
                  m.memory_[static_cast<size_t>(copy.src_block * block_size + r)];
            }
          }
          std::vector<int64_t>& tokens = m.sequences_[id];
          const std::vector<int32_t> row = Table(pool.get(), id, Slots(m));
          for (int64_t k = 0; k < n; ++k) {
            const auto j = static_cast<int64_t>(tokens.size());
            const int32_t block = row[static_cast<size_t>(j / block_size)];
            m.memory_[static_cast<size_t>(block * block_size + j % block_size)] = m.next_value_;
            tokens.push_back(m.next_value_++);
          }
        }
      } else if (op <= 8) {
        const int64_t id = pick();
        std::vector<int64_t>& tokens = m.sequences_[id];
        const auto new_length = static_cast<int64_t>(rng() % (tokens.size() + 1));
        ASSERT_EQ(attnrt_block_pool_truncate(pool.get(), id, new_length), ATTNRT_OK);
        tokens.resize(static_cast<size_t>(new_length));
      } else {
        const int64_t id = pick();
        ASSERT_EQ(attnrt_block_pool_remove(pool.get(), id), ATTNRT_OK);
        m.sequences_.erase(id);
        // A removed id is unknown from now on.
        ASSERT_EQ(attnrt_block_pool_remove(pool.get(), id), ATTNRT_ERROR_NOT_FOUND);
      }
      ASSERT_NO_FATAL_FAILURE(CheckInvariants(pool.get(), m)) << "after step " << step;
    }
    // The walk reached the interesting states (the script guarantees one of each).
    EXPECT_GT(exhausted, 0);
    // With one token per block no block is ever partly filled, so nothing is copied.
    if (block_size > 1) {
      EXPECT_GT(copies, 0);
    }
  }
}

}  // namespace
}  // namespace attnrt_test
