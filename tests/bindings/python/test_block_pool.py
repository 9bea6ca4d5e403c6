"""attnrt.BlockPool against a plain-Python model written from abi/attnrt/block_pool.h.

The model holds, per sequence, its block list and length, a reference count per block and the
free list. The header fixes the free list's order only as "last freed, first reused": blocks
released by one call form a group whose internal order the header leaves open, groups are reused
newest first, and blocks never used yet come after every freed one in an order the header does
not give. The model accepts exactly the ids that rule allows and then follows the pool's choice.
"""
from __future__ import annotations

import os
import random
import re
import time

import numpy as np
import pytest

import attnrt

SEED = int(os.environ.get("ATTNRT_TEST_SEED", "20240601"))
SEQUENCES, OPS = 200, 60
SEEN: dict[str, int] = {}                        # what the random sequences exercised


def seen(event: str) -> None:
    SEEN[event] = SEEN.get(event, 0) + 1


class Model:
    def __init__(self, num_blocks: int, block_size: int):
        self.nb, self.bs = num_blocks, block_size
        self.seqs: dict[int, dict] = {}          # id -> {"blocks": [...], "length": n}
        self.ref = [0] * num_blocks
        self.groups: list[set[int]] = []         # freed groups, newest last
        self.fresh = set(range(num_blocks))      # never allocated yet
        self.ever: set[int] = set()              # every sequence id handed out

    # ---- free list ----
    def free_count(self) -> int:
        return self.ref.count(0)

    def take(self, ids: list[int]) -> None:
        """Checks that `ids`, allocated by one call, are what "last freed, first reused" allows."""
        assert len(set(ids)) == len(ids), f"one block handed out twice: {ids}"
        rest = set(ids)
        while rest and self.groups:
            top = self.groups[-1]
            if len(top) <= len(rest):
                assert top <= rest, f"allocated {sorted(ids)}, but {sorted(top)} were freed last"
                rest -= top
                self.groups.pop()
            else:
                assert rest <= top, f"allocated {sorted(ids)}, expected from {sorted(top)}"
                top -= rest
                rest = set()
        assert rest <= self.fresh, f"allocated {sorted(ids)}: not free ({sorted(rest - self.fresh)})"
        self.fresh -= rest
        for b in ids:
            assert self.ref[b] == 0
            self.ref[b] = 1

    def release(self, blocks: list[int]) -> None:
        freed = set()
        for b in blocks:
            self.ref[b] -= 1
            assert self.ref[b] >= 0
            if self.ref[b] == 0:
                freed.add(b)
        if freed:
            self.groups.append(freed)

    # ---- what a call needs ----
    def blocks_for(self, length: int) -> int:
        return -(-length // self.bs)

    def needs_copy(self, seq: int, n: int) -> bool:
        s = self.seqs[seq]
        return n > 0 and s["length"] % self.bs != 0 and self.ref[s["blocks"][-1]] > 1

    def blocks_needed(self, seq: int, n: int) -> int:
        length = self.seqs[seq]["length"]
        grow = self.blocks_for(length + n) - self.blocks_for(length)
        return grow + int(self.needs_copy(seq, n))

    # ---- stats ----
    def stats(self) -> dict:
        used = [b for b in range(self.nb) if self.ref[b] > 0]
        rows = {}
        for s in self.seqs.values():
            for i, b in enumerate(s["blocks"]):
                rows[b] = max(rows.get(b, 0), min(self.bs, s["length"] - i * self.bs))
        stored = sum(rows.values())
        capacity = len(used) * self.bs
        return {"num_blocks": self.nb, "block_size": self.bs, "num_sequences": len(self.seqs),
                "blocks_used": len(used), "blocks_free": self.nb - len(used),
                "blocks_shared": sum(1 for b in used if self.ref[b] > 1),
                "tokens_held": sum(s["length"] for s in self.seqs.values()),
                "tokens_stored": stored, "utilization": len(used) / self.nb,
                "internal_fragmentation": (capacity - stored) / capacity if capacity else 0.0}


def check_state(pool: attnrt.BlockPool, model: Model) -> None:
    ids = sorted(model.seqs)
    width = max([len(model.seqs[s]["blocks"]) for s in ids] + [1])
    table, seqlens = pool.block_table(ids, width, with_seqlens_k=False)
    assert seqlens is None and table.dtype == np.int32 and table.shape == (len(ids), width)
    for row, s in zip(table, ids):
        blocks = model.seqs[s]["blocks"]
        assert list(row) == blocks + [-1] * (width - len(blocks)), f"sequence {s}"
        assert pool.length(s) == model.seqs[s]["length"]
        assert pool.num_blocks_of(s) == len(blocks)
    got, want = pool.stats(), model.stats()
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=0), name


def unknown_id(model: Model, rnd: random.Random) -> int:
    removed = sorted(model.ever - set(model.seqs))
    if removed and rnd.random() < 0.5:
        return rnd.choice(removed)               # ids are never reused
    return max(model.ever, default=0) + rnd.randint(1, 1000)


def step(pool: attnrt.BlockPool, model: Model, rnd: random.Random, log: list) -> None:
    ops = ["add", "fork", "append", "append", "append", "truncate", "remove", "table", "stats"]
    op = rnd.choice(ops) if model.seqs else "add"
    live = sorted(model.seqs)
    bad = rnd.random() < 0.08                     # an unknown id: NOT_FOUND, pool unchanged
    seq = unknown_id(model, rnd) if bad else (rnd.choice(live) if live else 0)
    log.append((op, seq))
    seen(f"{op}-unknown" if bad and op not in ("add", "stats") else op)

    if op == "add":
        new = pool.add_sequence()
        assert new not in model.ever, f"sequence id {new} reused"
        model.ever.add(new)
        model.seqs[new] = {"blocks": [], "length": 0}
    elif op == "fork":
        if bad:
            with pytest.raises(attnrt.NotFoundError, match="parent"):
                pool.fork(seq)
            return
        child = pool.fork(seq)
        assert child not in model.ever
        model.ever.add(child)
        parent = model.seqs[seq]
        model.seqs[child] = {"blocks": list(parent["blocks"]), "length": parent["length"]}
        for b in parent["blocks"]:
            model.ref[b] += 1
    elif op == "append":
        if bad:
            with pytest.raises(attnrt.NotFoundError, match="sequence"):
                pool.append(seq, 1)
            return
        s = model.seqs[seq]
        to_boundary = (-s["length"]) % model.bs
        n = rnd.choice([0, 1, 1, to_boundary, to_boundary + 1, rnd.randint(1, 3 * model.bs),
                        rnd.randint(0, model.nb * model.bs)])
        log[-1] = (op, seq, n)
        if rnd.random() < 0.03:
            with pytest.raises(attnrt.InvalidArgumentError, match="num_tokens"):
                pool.append(seq, -rnd.randint(1, 5))
            return
        need, free = model.blocks_needed(seq, n), model.free_count()
        if need > free:
            seen("out-of-memory")
            with pytest.raises(attnrt.OutOfMemoryError) as info:
                pool.append(seq, n)
            numbers = re.findall(r"\d+", info.value.message)  # says what is needed and free
            assert str(need) in numbers and str(free) in numbers, info.value.message
            return
        cow = model.needs_copy(seq, n)
        copy = pool.append(seq, n)
        length = s["length"] + n
        new_count = model.blocks_for(length)
        table, _ = pool.block_table([seq], max(new_count, 1), with_seqlens_k=False)
        row = [int(x) for x in table[0][:new_count]]
        kept = len(s["blocks"]) - int(cow)
        assert row[:kept] == s["blocks"][:kept], "append changed blocks it did not need to"
        allocated = row[kept:]
        seen("append-0" if n == 0 else "append-crossing" if new_count > len(s["blocks"])
             else "append-within")
        if cow:
            seen("copy-on-write")
            old = s["blocks"][-1]
            assert copy == attnrt.BlockCopy(old, row[kept], s["length"] % model.bs)
            model.ref[old] -= 1                   # still shared: never freed here
        else:
            assert copy is None
        model.take(allocated)
        s["blocks"], s["length"] = row, length
    elif op == "truncate":
        if bad:
            with pytest.raises(attnrt.NotFoundError, match="sequence"):
                pool.truncate(seq, 0)
            return
        s = model.seqs[seq]
        if rnd.random() < 0.1:
            wrong = rnd.choice([-1, s["length"] + 1 + rnd.randint(0, 5)])
            with pytest.raises(attnrt.InvalidArgumentError, match="new_length"):
                pool.truncate(seq, wrong)
            return
        new_length = rnd.choice([0, s["length"], rnd.randint(0, s["length"]),
                                 max(0, s["length"] - 1)])
        log[-1] = (op, seq, new_length)
        pool.truncate(seq, new_length)
        keep = model.blocks_for(new_length)
        model.release(s["blocks"][keep:])
        s["blocks"], s["length"] = s["blocks"][:keep], new_length
    elif op == "remove":
        if bad:
            with pytest.raises(attnrt.NotFoundError, match="sequence"):
                pool.remove(seq)
            return
        pool.remove(seq)
        model.release(model.seqs.pop(seq)["blocks"])
    elif op == "table":
        chosen = rnd.sample(live, rnd.randint(1, len(live)))
        if bad:
            position = rnd.randrange(len(chosen) + 1)
            chosen.insert(position, seq)
            with pytest.raises(attnrt.NotFoundError, match=rf"sequences\[{position}\]"):
                pool.block_table(chosen, 64, with_seqlens_k=False)
            return
        widest = max(len(model.seqs[s]["blocks"]) for s in chosen)
        if widest > 0 and rnd.random() < 0.15:
            with pytest.raises(attnrt.InvalidArgumentError, match="max_blocks_per_seq"):
                pool.block_table(chosen, widest - 1, with_seqlens_k=False)
            return
        empty = [i for i, s in enumerate(chosen) if model.seqs[s]["length"] == 0]
        if empty:
            with pytest.raises(attnrt.InvalidArgumentError, match="seqlens_k"):
                pool.block_table(chosen)
            return
        table, seqlens = pool.block_table(chosen)
        assert table.shape == (len(chosen), max(widest, 1)) and seqlens.dtype == np.int32
        for i, s in enumerate(chosen):
            blocks = model.seqs[s]["blocks"]
            assert list(table[i]) == blocks + [-1] * (table.shape[1] - len(blocks))
            assert seqlens[i] == model.seqs[s]["length"] - 1
    else:
        assert pool.stats() == pytest.approx(model.stats(), rel=1e-12, abs=0)


def test_random_operation_sequences_match_the_model():
    print(f"seed {SEED} (set ATTNRT_TEST_SEED to replay)")
    rnd = random.Random(SEED)
    started = time.perf_counter()
    for index in range(SEQUENCES):
        num_blocks, block_size = rnd.randint(1, 24), rnd.choice([1, 2, 3, 4, 8, 16])
        pool, model, log = attnrt.BlockPool(num_blocks, block_size), Model(num_blocks, block_size), []
        try:
            check_state(pool, model)
            for _ in range(OPS):
                step(pool, model, rnd, log)
                check_state(pool, model)        # failing calls must leave the pool as it was
        except AssertionError as error:
            raise AssertionError(f"seed {SEED}, sequence {index} (pool {num_blocks} x "
                                 f"{block_size}), ops {log}: {error}") from error
        finally:
            pool.close()
    print(f"{SEQUENCES} sequences x {OPS} ops in {time.perf_counter() - started:.1f} s: {SEEN}")
    for event in ("fork", "remove", "truncate", "table", "stats", "out-of-memory", "copy-on-write",
                  "append-0", "append-crossing", "append-within", "fork-unknown",
                  "append-unknown", "truncate-unknown", "remove-unknown", "table-unknown"):
        assert SEEN.get(event, 0) >= 10, f"{event} exercised {SEEN.get(event, 0)} times"


def test_freed_blocks_are_reused_last_freed_first():
    with attnrt.BlockPool(8, 2) as pool:
        a, b, c = (pool.add_sequence() for _ in range(3))
        for s in (a, b, c):
            pool.append(s, 2)                     # one full block each
        blocks = {s: int(pool.block_table([s])[0][0, 0]) for s in (a, b, c)}
        pool.remove(a)
        pool.remove(c)                            # c's block is now the last freed
        d = pool.add_sequence()
        pool.append(d, 1)
        assert pool.block_table([d])[0][0, 0] == blocks[c]
        pool.append(d, 2)                         # crosses into a second block
        assert list(pool.block_table([d])[0][0]) == [blocks[c], blocks[a]]


def test_copy_on_write_reports_the_partly_filled_shared_block():
    with attnrt.BlockPool(6, 4) as pool:
        parent = pool.add_sequence()
        assert pool.append(parent, 6) is None     # blocks x (4 rows), y (2 rows)
        x, y = (int(v) for v in pool.block_table([parent])[0][0])
        child = pool.fork(parent)
        assert pool.stats()["blocks_shared"] == 2 and pool.stats()["tokens_stored"] == 6
        assert pool.append(child, 0) is None      # nothing written: nothing copied
        copy = pool.append(child, 3)              # into y (shared, 2 rows filled): copy first
        assert copy is not None and (copy.src_block, copy.num_tokens) == (y, 2)
        row = list(pool.block_table([child])[0][0])
        assert row[:2] == [x, copy.dst_block] and len(row) == 3 and copy.dst_block not in (x, y)
        assert pool.append(parent, 2) is None     # y is no longer shared: written in place
        full = pool.fork(parent)                  # parent: 8 tokens, last block full
        assert pool.append(full, 1) is None       # a new block; no copy
        stats = pool.stats()
        assert stats["tokens_held"] == 9 + 8 + 9 and stats["blocks_used"] == 5


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_block_copy_apply_copies_the_block_in_every_pool(framework):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    num_blocks, block_size, nkv, h = 5, 4, 2, 8
    key_bsnh = rng.standard_normal((num_blocks, block_size, nkv, h)).astype(np.float32)
    value_bnsh = rng.standard_normal((num_blocks, nkv, block_size, h)).astype(np.float32)
    with attnrt.BlockPool(num_blocks, block_size) as pool:
        parent = pool.add_sequence()
        pool.append(parent, 3)
        child = pool.fork(parent)
        copy = pool.append(child, 1)
    assert isinstance(copy, attnrt.BlockCopy) and copy.num_tokens == 3
    before = [key_bsnh.copy(), value_bnsh.copy()]
    pools = [key_bsnh, value_bnsh]
    if framework == "torch":
        torch = pytest.importorskip("torch")
        pools = [torch.from_numpy(p) for p in pools]  # share memory with the numpy arrays
    copy.apply(*pools)
    for after, old in zip((key_bsnh, value_bnsh), before):
        expected = old.copy()
        expected[copy.dst_block] = old[copy.src_block]
        np.testing.assert_array_equal(after, expected)  # every element of every block
    # The rows the header names: [0, num_tokens) of src, in both layouts.
    np.testing.assert_array_equal(key_bsnh[copy.dst_block, :copy.num_tokens],
                                  before[0][copy.src_block, :copy.num_tokens])
    np.testing.assert_array_equal(value_bnsh[copy.dst_block, :, :copy.num_tokens],
                                  before[1][copy.src_block, :, :copy.num_tokens])


def test_errors_name_the_argument():
    with pytest.raises(attnrt.InvalidArgumentError, match="num_blocks"):
        attnrt.BlockPool(0, 4)
    with pytest.raises(attnrt.InvalidArgumentError, match="block_size"):
        attnrt.BlockPool(4, 1025)
    with pytest.raises(attnrt.InvalidArgumentError, match="block_size"):
        attnrt.BlockPool(4, 0)
    with attnrt.BlockPool(3, 2) as pool:
        s = pool.add_sequence()
        pool.append(s, 3)
        for call, name in [(lambda: pool.append(s, -1), "num_tokens"),
                           (lambda: pool.truncate(s, 4), "new_length"),
                           (lambda: pool.truncate(s, -1), "new_length"),
                           (lambda: pool.block_table([s], 1), "max_blocks_per_seq")]:
            with pytest.raises(attnrt.InvalidArgumentError) as info:
                call()
            assert name in info.value.message and isinstance(info.value, ValueError)
        for call, name in [(lambda: pool.fork(s + 7), "parent"),
                           (lambda: pool.append(s + 7, 1), "sequence"),
                           (lambda: pool.truncate(s + 7, 0), "sequence"),
                           (lambda: pool.remove(s + 7), "sequence"),
                           (lambda: pool.length(s + 7), "sequence"),
                           (lambda: pool.block_table([s, s + 7], 4), "sequences[1]")]:
            with pytest.raises(attnrt.NotFoundError) as info:
                call()
            assert name in info.value.message and isinstance(info.value, LookupError)
            assert str(s + 7) in info.value.message
        with pytest.raises(attnrt.OutOfMemoryError) as info:
            pool.append(s, 4)                     # needs 2 more blocks, 1 free
        assert isinstance(info.value, MemoryError)
        numbers = re.findall(r"\d+", info.value.message)
        assert "2" in numbers and "1" in numbers, info.value.message  # needed, free
        assert pool.length(s) == 3 and pool.stats()["blocks_free"] == 1
    with pytest.raises(attnrt.InvalidArgumentError, match="block pool is closed"):
        pool.add_sequence()


def test_block_table_names_an_unknown_sequence_by_index_with_the_default_width():
    # BlockPool.block_table documents "NotFoundError: an unknown sequence (named by index)"; with
    # max_blocks_per_seq left to its default the same must hold.
    with attnrt.BlockPool(4, 2) as pool:
        s = pool.add_sequence()
        pool.append(s, 1)
        with pytest.raises(attnrt.NotFoundError) as info:
            pool.block_table([s, s + 5])
        assert "sequences[1]" in info.value.message, info.value.message
