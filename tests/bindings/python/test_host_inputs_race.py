"""attnrt.paged_attention_varlen while another Python thread rewrites one of its host integer
inputs (cu_seqlens_q, seq_lens, block_table, slot_mapping: numpy arrays the call reads with the GIL
released). The runtime reads each of them once per call, checks that copy and runs on it: every
call returns exactly the output of the values it was given or raises attnrt's InvalidArgumentError
(the other thread's out-of-range values were read), and the interpreter never dies. The race runs
in a child interpreter, so that a crash fails this test instead of ending the suite."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))

CHILD = r"""
import sys, threading
import numpy as np
import attnrt

seed, name = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(seed)
N, NKV, H, BS, BLOCKS = 8, 2, 64, 16, 64
lens = np.array([40, 7, 130, 25], np.int32)
q_lens = [1, 7, 1, 4]
cu = np.array([0, *np.cumsum(q_lens)], np.int32)
tokens = int(cu[-1])
slots_per_seq = 16
table = rng.permutation(BLOCKS)[: 4 * slots_per_seq].reshape(4, slots_per_seq).astype(np.int32)
slot_mapping = np.array([int(table[b, p // BS]) * BS + p % BS
                         for b in range(4) for p in range(lens[b] - q_lens[b], lens[b])], np.int64)
q = rng.standard_normal((tokens, N, H), dtype=np.float32)
k = rng.standard_normal((tokens, NKV, H), dtype=np.float32)
v = rng.standard_normal((tokens, NKV, H), dtype=np.float32)
k_cache = rng.standard_normal((BLOCKS, BS, NKV, H), dtype=np.float32)
v_cache = rng.standard_normal((BLOCKS, BS, NKV, H), dtype=np.float32)
arrays = {"cu_seqlens_q": cu, "seq_lens": lens, "block_table": table, "slot_mapping": slot_mapping}
good = arrays[name].copy()
bad = np.full_like(good, 1 << 40 if good.dtype == np.int64 else 1 << 24)

with attnrt.Runtime(num_threads=2) as rt:
    def call():
        return attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, lens, table, k=k, v=v,
                                             slot_mapping=slot_mapping)
    expected = call()  # writes the new rows; every later call writes the same rows again
    stop = threading.Event()
    def rewrite():
        target = arrays[name]
        while not stop.is_set():
            target[...] = bad
            target[...] = good
    thread = threading.Thread(target=rewrite)
    thread.start()
    exact = refused = 0
    try:
        for _ in range(300):
            try:
                out = call()
            except attnrt.InvalidArgumentError:
                refused += 1
                continue
            assert np.array_equal(out, expected), "a call returned another output"
            exact += 1
    finally:
        stop.set()
        thread.join()
    arrays[name][...] = good
    assert np.array_equal(call(), expected)
    print(f"{name}: {exact} exact, {refused} refused")
"""


@pytest.mark.parametrize("name", ["cu_seqlens_q", "seq_lens", "block_table", "slot_mapping"])
def test_host_input_rewritten_by_another_thread(name):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", CHILD, str(SEED), name], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        f"seed {SEED}: the child interpreter ended with {result.returncode}\n"
        f"{result.stdout}\n{result.stderr[-4000:]}")
    print(result.stdout.strip())
