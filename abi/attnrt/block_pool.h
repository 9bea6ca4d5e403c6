/*
 * attnrt/block_pool.h — host-side block allocator for paged KV caches (the PagedAttention
 * paper's block manager, Kwon et al. 2023, vLLM; llama.cpp PR 18747).
 *
 * A pool hands out the ids of `num_blocks` fixed-size blocks of `block_size` tokens to sequences
 * and builds the block tables the paged GroupQueryAttention op reads (attnrt/ops/paged_gqa.h). It
 * holds no K/V data: the caller owns the key/value block pools (attnrt/ops/paged_gqa.h layouts)
 * and the pool only decides which block holds which token.
 *
 *  - Allocation and release are O(1) through a free list (last freed, first reused).
 *  - A sequence is a list of blocks and a length in tokens; token j is in its block j/block_size.
 *  - Fork makes a child that shares every block of its parent (reference counts). Before a token
 *    is written into a shared block, that block is copied (copy-on-write): append allocates a fresh
 *    block for the writing sequence and reports the copy in attnrt_block_copy; the caller copies
 *    the rows before running the op. The pool never touches K/V memory, so it works for any cache
 *    dtype and device. With block_bytes = block_size * Nkv * row_bytes, rows [0, n) of block x
 *    are the bytes [x * block_bytes, + n * Nkv * row_bytes) of a BSNH pool, and for each kv head h
 *    the bytes [x * block_bytes + h * block_size * row_bytes, + n * row_bytes) of a BNSH pool;
 *    copying the whole block is correct for both.
 *  - Truncate and remove drop blocks; a block returns to the free list when no sequence uses it.
 *
 * Errors: every function validates its arguments and returns an attnrt_status with a message
 * (attnrt_last_error_message) naming the argument, the expected and the actual value. A failing
 * call leaves the pool exactly as it was (pool exhaustion included: ATTNRT_ERROR_OUT_OF_MEMORY).
 *
 * Host memory: creating a pool allocates 8 bytes per block (an int32 reference count and a
 * free-list slot), so ATTNRT_BLOCK_POOL_MAX_BLOCKS blocks take 16 GiB; each sequence then costs 4
 * bytes per block it holds (a shared block counts once per sequence) plus a small constant. No
 * other call allocates per-block memory (get_stats: O(sequences)). An allocation failure in any
 * call is ATTNRT_ERROR_OUT_OF_MEMORY with the pool unchanged.
 *
 * Thread safety: none. A pool must be used by one thread at a time (the caller serializes);
 * different pools are independent.
 *
 * Pure C11; only <stddef.h>, <stdint.h>, <stdbool.h> and attnrt.h.
 */
#ifndef ATTNRT_BLOCK_POOL_H_
#define ATTNRT_BLOCK_POOL_H_

#include "attnrt/attnrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attnrt_block_pool attnrt_block_pool;

/** Largest num_blocks: block ids are int32 in the block table. */
#define ATTNRT_BLOCK_POOL_MAX_BLOCKS 2147483647

/** Creation parameters; set struct_size = ATTNRT_BLOCK_POOL_OPTIONS_STRUCT_SIZE (sizeof is
 * accepted). */
typedef struct attnrt_block_pool_options {
  size_t struct_size;
  int64_t num_blocks; /* blocks in the pool, in [1, ATTNRT_BLOCK_POOL_MAX_BLOCKS] */
  int32_t block_size; /* tokens per block, in [1, 1024] (ATTNRT_PAGED_GQA_MAX_BLOCK_SIZE) */
} attnrt_block_pool_options;
/** ATTNRT_STRUCT_SIZE of attnrt_block_pool_options (ABI 1.13). */
#define ATTNRT_BLOCK_POOL_OPTIONS_STRUCT_SIZE \
  ATTNRT_STRUCT_SIZE(attnrt_block_pool_options, block_size)

/**
 * Creates a pool with every block free. Errors: INVALID_ARGUMENT (NULL, num_blocks or block_size
 * out of range), ABI_MISMATCH (struct_size smaller than this library's struct), OUT_OF_MEMORY.
 */
ATTNRT_API attnrt_status attnrt_block_pool_create(const attnrt_block_pool_options* options,
                                                  attnrt_block_pool** out_pool);

/** Destroys the pool and every sequence in it. NULL is ignored. */
ATTNRT_API void attnrt_block_pool_destroy(attnrt_block_pool* pool);

/** Adds an empty sequence (no blocks); its id (never reused by this pool) goes to *out_sequence.
 *  Errors: INVALID_ARGUMENT (NULL), OUT_OF_MEMORY (host memory, or all INT64_MAX ids used). */
ATTNRT_API attnrt_status attnrt_block_pool_add_sequence(attnrt_block_pool* pool,
                                                        int64_t* out_sequence);

/**
 * Adds a sequence that shares every block and the length of `parent` (each block's reference
 * count + 1). No block is allocated; writes into shared blocks are copied on append.
 * Errors: NOT_FOUND (unknown parent), INVALID_ARGUMENT (NULL; a block of parent already shared by
 * INT32_MAX sequences).
 */
ATTNRT_API attnrt_status attnrt_block_pool_fork(attnrt_block_pool* pool, int64_t parent,
                                                int64_t* out_sequence);

/**
 * A copy the caller must make before writing the appended tokens: rows [0, num_tokens) of block
 * src_block into block dst_block, in the key and the value pool. num_tokens == 0: no copy.
 */
typedef struct attnrt_block_copy {
  size_t struct_size;
  int32_t src_block;
  int32_t dst_block;
  int32_t num_tokens;
} attnrt_block_copy;
/** ATTNRT_STRUCT_SIZE of attnrt_block_copy (ABI 1.13). */
#define ATTNRT_BLOCK_COPY_STRUCT_SIZE ATTNRT_STRUCT_SIZE(attnrt_block_copy, num_tokens)

/**
 * Grows `sequence` by num_tokens >= 0 tokens, allocating the blocks they need. When the sequence's
 * last block is partly filled and shared with another sequence, it is replaced by a fresh block
 * (copy-on-write) and *out_copy says which rows to copy; otherwise out_copy->num_tokens = 0. At
 * most one copy per call (only the last block of a sequence can be partly filled). out_copy may
 * be NULL only when no copy can be needed, else INVALID_ARGUMENT.
 * Errors: NOT_FOUND (unknown sequence), INVALID_ARGUMENT (num_tokens < 0, length overflow),
 * OUT_OF_MEMORY (fewer free blocks than needed: the message says how many are needed and free).
 */
ATTNRT_API attnrt_status attnrt_block_pool_append(attnrt_block_pool* pool, int64_t sequence,
                                                  int64_t num_tokens, attnrt_block_copy* out_copy);

/** Shortens `sequence` to new_length tokens (0 <= new_length <= length), releasing the blocks it
 *  no longer needs. Errors: NOT_FOUND, INVALID_ARGUMENT (new_length out of range). */
ATTNRT_API attnrt_status attnrt_block_pool_truncate(attnrt_block_pool* pool, int64_t sequence,
                                                    int64_t new_length);

/** Removes `sequence`, releasing its blocks. Errors: NOT_FOUND. */
ATTNRT_API attnrt_status attnrt_block_pool_remove(attnrt_block_pool* pool, int64_t sequence);

/** Length of `sequence` in tokens and the number of blocks it holds. Either out may be NULL. */
ATTNRT_API attnrt_status attnrt_block_pool_sequence_info(const attnrt_block_pool* pool,
                                                         int64_t sequence, int64_t* out_length,
                                                         int64_t* out_num_blocks);

/**
 * Writes the block table of `num_sequences` sequences, one row of max_blocks_per_seq int32 per
 * sequence in order: the sequence's block ids, then -1 in the unused slots. Also writes
 * seqlens_k[i] = length - 1 of sequence i when seqlens_k is not NULL (the op's seqlens_k for a run
 * whose new tokens are already appended). table holds num_sequences * max_blocks_per_seq values.
 * Errors: NOT_FOUND (unknown sequence, named by index), INVALID_ARGUMENT (NULL; num_sequences
 * above PTRDIFF_MAX / 8 or max_blocks_per_seq outside [0, PTRDIFF_MAX / 4 / num_sequences], the
 * sizes of arrays that cannot exist; a sequence with more blocks than max_blocks_per_seq; an empty
 * sequence when seqlens_k is requested). Nothing is written on error. Allocates no memory per
 * sequence or slot.
 */
ATTNRT_API attnrt_status attnrt_block_pool_block_table(const attnrt_block_pool* pool,
                                                       const int64_t* sequences,
                                                       size_t num_sequences,
                                                       int64_t max_blocks_per_seq, int32_t* table,
                                                       int32_t* seqlens_k);

/** Occupancy of a pool. */
typedef struct attnrt_block_pool_stats {
  size_t struct_size;
  int64_t num_blocks;
  int32_t block_size;
  int64_t num_sequences;
  int64_t blocks_used;   /* blocks with a reference count > 0 */
  int64_t blocks_free;   /* num_blocks - blocks_used */
  int64_t blocks_shared; /* blocks used by more than one sequence */
  int64_t tokens_held;   /* sum of the sequences' lengths (a shared token counts once per user) */
  int64_t tokens_stored; /* filled rows of the used blocks (a shared row counts once) */
  /* blocks_used / num_blocks */
  double utilization;
  /* unfilled rows of the used blocks / (blocks_used * block_size); 0 when no block is used */
  double internal_fragmentation;
} attnrt_block_pool_stats;
/** ATTNRT_STRUCT_SIZE of attnrt_block_pool_stats (ABI 1.13). */
#define ATTNRT_BLOCK_POOL_STATS_STRUCT_SIZE \
  ATTNRT_STRUCT_SIZE(attnrt_block_pool_stats, internal_fragmentation)

/** Fills *out_stats (set out_stats->struct_size first; it is kept). O(sequences) time and
 *  memory, independent of num_blocks. */
ATTNRT_API attnrt_status attnrt_block_pool_get_stats(const attnrt_block_pool* pool,
                                                     attnrt_block_pool_stats* out_stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNRT_BLOCK_POOL_H_ */
