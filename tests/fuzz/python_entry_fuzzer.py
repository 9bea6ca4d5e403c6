"""atheris fuzzer for attnrt's Python entry points: attnrt.gqa, attnrt.paged_gqa,
attnrt.paged_attention_varlen (numpy, and torch through the C++ operator when it is built) and
attnrt.sparse_mla_encode, each called with shapes, ranks, dtypes, lengths, tables and attributes
decoded from the input: mostly close to a valid call, often not.

Invariant: a call returns, or raises attnrt.Error (whose message is not empty). Any other
exception (IndexError, ZeroDivisionError, a bare ValueError, ...) and any crash of the interpreter
is a finding: atheris saves the input and exits non-zero.

  python tests/fuzz/python_entry_fuzzer.py -max_total_time=60 CORPUS_DIR   (scripts/fuzz.sh)
  python tests/fuzz/python_entry_fuzzer.py -runs=0 tests/fuzz/python_corpus  (regressions)
PYTHON_FUZZER_VERBOSE=1 prints each call and its outcome.
"""
from __future__ import annotations

import os
import sys

import atheris

with atheris.instrument_imports(include=["attnrt"]):
    import attnrt

import numpy as np

try:
    import torch
except ImportError:  # the numpy paths are fuzzed alone
    torch = None

VERBOSE = os.environ.get("PYTHON_FUZZER_VERBOSE") == "1"
RUNTIME = attnrt.Runtime(num_threads=1)
DTYPES = [np.float32, np.float16, np.int32, np.int64, np.float64, np.uint8]


class Input:
    """Values decoded from the fuzzer's bytes."""

    def __init__(self, data: bytes):
        self.fdp = atheris.FuzzedDataProvider(data)

    def int(self, low: int, high: int) -> int:
        return self.fdp.ConsumeIntInRange(low, high)

    def pick(self, values):
        return values[self.int(0, len(values) - 1)]

    def maybe(self, probability_in_16: int = 2) -> bool:
        # Exhausted input reads 0: no deviation, so short inputs make valid calls.
        return self.int(0, 15) >= 16 - probability_in_16

    def near(self, value: int, spread: int = 2) -> int:
        """`value` most of the time, else within `spread` of it (negative included)."""
        return value if not self.maybe(3) else value + self.int(-spread, spread)

    def shape(self, shape):
        """`shape`, sometimes with an extent changed, a dimension dropped or one added."""
        shape = [max(0, self.near(d)) if self.maybe(2) else d for d in shape]
        if self.maybe(1) and shape:
            del shape[self.int(0, len(shape) - 1)]
        if self.maybe(1):
            shape.insert(self.int(0, len(shape)), self.int(0, 3))
        return tuple(shape)

    def array(self, shape, dtype=np.float32, integers=None):
        """An array of (mostly) `shape` and `dtype`: integers in [lo, hi] or values ~ N(0, 1)."""
        shape = self.shape(shape)
        if self.maybe(1):
            dtype = self.pick(DTYPES)
        count = int(np.prod(shape)) if shape else 1
        if count > 1 << 16:
            shape, count = (4,), 4
        seed = self.int(0, 2**31 - 1)
        rng = np.random.default_rng(seed)
        if integers is not None:
            values = rng.integers(integers[0], integers[1] + 1, size=count)
        else:
            values = rng.standard_normal(count)
        return values.astype(dtype).reshape(shape)

    def torch_or_numpy(self, arrays):
        if torch is None or not self.maybe(6):
            return arrays
        converted = []
        for a in arrays:
            if isinstance(a, np.ndarray) and a.dtype != np.uint8 and a.dtype != np.float64:
                converted.append(torch.from_numpy(np.ascontiguousarray(a)))
            else:
                converted.append(a)
        return converted


def varlen(inp: Input):
    heads_kv = inp.int(1, 3)
    heads = heads_kv * inp.int(1, 3)
    head_size = inp.pick([8, 16, 32, 12])
    block = inp.pick([1, 4, 16])
    batch = inp.int(0, 4)
    q_lens = [inp.int(0, 5) for _ in range(batch)]
    seq = [q + inp.int(0, 20) for q in q_lens]
    slots = max([(s + block - 1) // block for s in seq] + [1])
    blocks = batch * slots + 2
    tokens = sum(q_lens)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    if inp.maybe(3):  # any values, shape or dtype
        cu = inp.array(cu.shape, np.int32, (-2, tokens + 2))
    lens = np.array([inp.near(s) for s in seq], np.int32)
    if inp.maybe(2):
        lens = inp.array(lens.shape, np.int32, (-1, slots * block + 2))
    table = inp.array((batch, slots), np.int32, (-1, blocks))
    q = inp.array((tokens, heads, head_size))
    k_cache = inp.array((blocks, block, heads_kv, head_size))
    v_cache = k_cache.copy() if not inp.maybe(2) else inp.array((blocks, block, heads_kv, head_size))
    kwargs = {}
    if inp.maybe(6):
        kwargs["k"] = inp.array((tokens, heads_kv, head_size))
        kwargs["v"] = inp.array((tokens, heads_kv, head_size))
        if inp.maybe(6):
            kwargs["slot_mapping"] = inp.array((tokens,), np.int64, (-1, blocks * block))
    if inp.maybe(3):
        kwargs["window_size"] = (inp.int(-2, 8), inp.int(-1, 1))
    if inp.maybe(3):
        kwargs["softcap"] = float(inp.int(-1, 50))
    if inp.maybe(2):
        kwargs["sinks"] = inp.array((heads,))
    q, k_cache, v_cache, cu, lens, table = inp.torch_or_numpy([q, k_cache, v_cache, cu, lens, table])
    return attnrt.paged_attention_varlen(RUNTIME, q, k_cache, v_cache, cu, lens, table, **kwargs)


def gqa(inp: Input):
    heads_kv = inp.int(1, 3)
    heads = heads_kv * inp.int(1, 3) + (1 if inp.maybe(1) else 0)
    head_size = inp.pick([8, 16, 32, 6])
    batch = inp.int(0, 3)
    seq = inp.int(1, 6)
    past = inp.int(0, 12)
    total = inp.near(past + seq)
    q = inp.array((batch, seq, heads * head_size))
    k = inp.array((batch, seq, heads_kv * head_size))
    v = inp.array((batch, seq, heads_kv * head_size))
    kwargs = {}
    if past:
        kwargs["past_key"] = inp.array((batch, heads_kv, past + seq, head_size))
        kwargs["past_value"] = inp.array((batch, heads_kv, past + seq, head_size))
    lens = [inp.near(total - 1) for _ in range(batch)]
    if inp.maybe(3):
        kwargs["softcap"] = float(inp.int(0, 30))
    if inp.maybe(2):
        kwargs["local_window_size"] = inp.int(-2, 8)
    q, k, v = inp.torch_or_numpy([q, k, v])
    return attnrt.gqa(RUNTIME, q, k, v, seqlens_k=lens, total_sequence_length=total,
                      num_heads=heads, kv_num_heads=heads_kv, **kwargs)


def paged_gqa(inp: Input):
    heads_kv = inp.int(1, 2)
    heads = heads_kv * inp.int(1, 2)
    head_size = inp.pick([8, 16])
    block = inp.pick([2, 4, 8])
    batch = inp.int(0, 3)
    total = inp.int(1, 16)
    slots = (total + block - 1) // block + inp.int(0, 1)
    blocks = batch * slots + 1
    q = inp.array((batch, 1, heads * head_size))
    k = inp.array((batch, 1, heads_kv * head_size))
    v = inp.array((batch, 1, heads_kv * head_size))
    k_cache = inp.array((blocks, block, heads_kv, head_size))
    v_cache = inp.array((blocks, block, heads_kv, head_size))
    lens = [inp.near(total - 1, 3) for _ in range(batch)]
    table = inp.array((batch, slots), np.int32, (-1, blocks))
    table_arg = table.tolist() if inp.maybe(4) and isinstance(table, np.ndarray) else table
    return attnrt.paged_gqa(RUNTIME, q, k, v, k_cache, v_cache, lens, inp.near(total), table_arg,
                            num_heads=heads, kv_num_heads=heads_kv)


def encode(inp: Input):
    mode = inp.int(0, 4)
    tokens = inp.int(0, 3)
    kv = inp.array((tokens, 512))
    if inp.maybe(3):
        kv[...] = kv * 10.0 ** inp.int(-3, 40) if kv.dtype.kind == "f" else kv
    if mode == 2:
        block_size = inp.int(1, 4)
        block = inp.array((block_size * 584,), np.uint8, (0, 255))
        return attnrt.sparse_mla_encode(mode, kv, block=block, slot=inp.int(-1, 4))
    return attnrt.sparse_mla_encode(mode, kv)


ENTRY_POINTS = [varlen, gqa, paged_gqa, encode]


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris's name)
    inp = Input(data)
    entry = ENTRY_POINTS[inp.int(0, len(ENTRY_POINTS) - 1)]
    try:
        entry(inp)
        outcome = "ok"
    except attnrt.Error as error:
        if not str(error):
            raise AssertionError(f"{entry.__name__}: attnrt.Error without a message") from error
        outcome = f"{type(error).__name__}: {str(error)[:160]}"
    if VERBOSE:
        print(f"python_entry_fuzzer: {entry.__name__}: {outcome}", file=sys.stderr)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
