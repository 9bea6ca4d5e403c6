"""BlockPool: the host-side block allocator of paged KV caches (attnrt/block_pool.h)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from . import attnrt_c as _c
from . import _arrays
from ._errors import InvalidArgumentError, NotFoundError
from ._op import closed


class BlockCopy(NamedTuple):
    """A copy-on-write the caller makes before writing appended tokens: rows [0, num_tokens) of
    block src_block into block dst_block, in the key and the value pool."""
    src_block: int
    dst_block: int
    num_tokens: int

    def apply(self, *pools: Any) -> None:
        """Copies the block in each pool (numpy arrays or torch tensors whose dimension 0 is the
        block id). Copying the whole block is correct for the BSNH and the BNSH layout."""
        for pool in pools:
            pool[self.dst_block] = pool[self.src_block]


_STATS = ("num_blocks", "block_size", "num_sequences", "blocks_used", "blocks_free",
          "blocks_shared", "tokens_held", "tokens_stored")


class BlockPool:
    """A pool of `num_blocks` fixed-size blocks of `block_size` tokens handed out to sequences, with
    per-sequence block tables for the paged op (attnrt.paged_gqa / PagedGqaOp). It holds no K/V
    data: the caller owns the key/value pools; the pool decides which block holds which token.

    O(1) allocation and release (a free list), fork with copy-on-write for shared prefixes,
    truncate and remove, occupancy statistics. Not thread-safe: use one pool from one thread at a
    time. Every failing call raises an attnrt.Error naming the argument and leaves the pool as it
    was (pool exhaustion: attnrt.OutOfMemoryError, the message gives the blocks needed and free).

    Raises:
        InvalidArgumentError: num_blocks outside [1, 2^31 - 1] or block_size outside [1, 1024].
    """

    def __init__(self, num_blocks: int, block_size: int):
        self._handle = _c.BlockPool(_arrays.integer(num_blocks, "num_blocks"),
                                    _arrays.integer(block_size, "block_size", 32))
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)

    def _h(self) -> "_c.BlockPool":
        if self._handle is None:
            raise closed("block pool")
        return self._handle

    def close(self) -> None:
        """Destroys the pool and its sequences. Idempotent."""
        self._handle = None

    def __enter__(self) -> "BlockPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add_sequence(self) -> int:
        """Adds an empty sequence (no blocks); returns its id (never reused by this pool)."""
        return self._h().add_sequence()

    def fork(self, parent: int) -> int:
        """Adds a sequence sharing every block and the length of `parent`; returns its id. No block
        is allocated: writes into shared blocks are copied on append.

        Raises:
            NotFoundError: unknown parent."""
        return self._h().fork(_arrays.integer(parent, "parent"))

    def append(self, sequence: int, num_tokens: int = 1) -> BlockCopy | None:
        """Grows `sequence` by `num_tokens` >= 0 tokens, allocating the blocks they need. Returns the
        copy-on-write to make before writing the new rows (BlockCopy; when the sequence's partly
        filled last block was shared, it was replaced by a fresh block), or None.

        Raises:
            NotFoundError: unknown sequence. InvalidArgumentError: num_tokens < 0.
            OutOfMemoryError: fewer free blocks than needed (the pool is unchanged)."""
        copy = _c.BlockCopy()
        self._h().append(_arrays.integer(sequence, "sequence"),
                        _arrays.integer(num_tokens, "num_tokens"), copy)
        if copy.num_tokens == 0:
            return None
        return BlockCopy(copy.src_block, copy.dst_block, copy.num_tokens)

    def truncate(self, sequence: int, new_length: int) -> None:
        """Shortens `sequence` to `new_length` tokens, releasing the blocks it no longer needs."""
        self._h().truncate(_arrays.integer(sequence, "sequence"),
                          _arrays.integer(new_length, "new_length"))

    def remove(self, sequence: int) -> None:
        """Removes `sequence`, releasing its blocks (a block is free once no sequence uses it)."""
        self._h().remove(_arrays.integer(sequence, "sequence"))

    def length(self, sequence: int) -> int:
        """Length of `sequence` in tokens."""
        return self._h().sequence_length(_arrays.integer(sequence, "sequence"))

    def num_blocks_of(self, sequence: int) -> int:
        """Number of blocks `sequence` holds."""
        return self._h().sequence_num_blocks(_arrays.integer(sequence, "sequence"))

    def block_table(self, sequences: Iterable[int], max_blocks_per_seq: int | None = None, *,
                    with_seqlens_k: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """The block table of `sequences` (int32 [n, max_blocks_per_seq]: each sequence's block ids,
        then -1) and seqlens_k (int32 [n], length - 1 of each: the op's seqlens_k once the step's
        tokens are appended; None with with_seqlens_k=False). max_blocks_per_seq defaults to the
        most blocks any of them holds (at least 1).

        Raises:
            NotFoundError: an unknown sequence (named by index). InvalidArgumentError: a sequence
            with more blocks than max_blocks_per_seq; an empty sequence with with_seqlens_k."""
        if not isinstance(sequences, Iterable):
            raise InvalidArgumentError(
                f"sequences: expected an iterable of sequence ids, got {type(sequences).__name__}")
        ids = np.array([_arrays.integer(s, f"sequences[{i}]") for i, s in enumerate(sequences)],
                       dtype=np.int64)
        if max_blocks_per_seq is None:
            widths = [1]
            for i, s in enumerate(ids):
                try:
                    widths.append(self.num_blocks_of(s))
                except NotFoundError as e:
                    raise NotFoundError(f"sequences[{i}]: {e.message.removeprefix('sequence: ')}") from None
            max_blocks_per_seq = max(widths)
        max_blocks_per_seq = _arrays.integer(max_blocks_per_seq, "max_blocks_per_seq")
        # A table far wider than the pool could fill is a mistake, not a request for memory.
        limit = max(self.num_blocks, 1 << 16)
        if not 0 <= max_blocks_per_seq <= limit:
            raise InvalidArgumentError(
                f"max_blocks_per_seq: expected 0 to {limit}, got {max_blocks_per_seq}")
        table = np.empty((ids.shape[0], max_blocks_per_seq), np.int32)
        seqlens = np.empty(ids.shape[0], np.int32) if with_seqlens_k else None
        arrays = _c.Tensors(3)
        arrays.assign([ids, table, seqlens], True, 0, False)
        try:
            self._h().block_table(arrays)
        finally:
            arrays.clear_all()
        return table, seqlens

    def stats(self) -> dict[str, Any]:
        """Occupancy: num_blocks, block_size, num_sequences, blocks_used, blocks_free,
        blocks_shared, tokens_held (a shared token counts once per sequence), tokens_stored
        (a shared row counts once), utilization (blocks_used / num_blocks) and
        internal_fragmentation (unfilled rows of used blocks / their capacity)."""
        h = self._h()
        out: dict[str, Any] = {name: h.stat(i) for i, name in enumerate(_STATS)}
        out["utilization"] = h.ratio(0)
        out["internal_fragmentation"] = h.ratio(1)
        return out
