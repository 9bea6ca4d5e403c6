"""10,000 create/plan/run/destroy cycles keep the resident set flat."""
from __future__ import annotations

import gc
import os

import numpy as np

import attnrt

N, NKV, H = 4, 2, 16


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cycle(q, k, v, out, pk, pv):
    with attnrt.Runtime(num_threads=1) as runtime, runtime.gqa_op(N, NKV) as op:
        inputs = {"query": q, "key": k, "value": v, "seqlens_k": np.array([7], np.int32),
                  "total_sequence_length": np.array([8], np.int32)}
        outputs = {"output": out, "present_key": pk, "present_value": pv}
        with op.plan(inputs, outputs) as plan:
            plan.run(inputs, outputs)
        op.explain(inputs, outputs)
        runtime.list()


def test_rss_stays_flat_over_10000_cycles():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, N * H), dtype=np.float32)
    k = rng.standard_normal((1, 8, NKV * H), dtype=np.float32)
    v = rng.standard_normal((1, 8, NKV * H), dtype=np.float32)
    out = np.empty((1, 8, N * H), np.float32)
    pk = np.empty((1, NKV, 8, H), np.float32)
    pv = np.empty_like(pk)
    for _ in range(1000):
        cycle(q, k, v, out, pk, pv)
    gc.collect()
    after_1000 = rss_mib()
    for _ in range(9000):
        cycle(q, k, v, out, pk, pv)
    gc.collect()
    after_10000 = rss_mib()
    print(f"python RSS after 1,000 cycles: {after_1000:.1f} MiB; after 10,000: {after_10000:.1f} MiB;"
          f" growth {after_10000 - after_1000:+.2f} MiB")
    assert after_10000 - after_1000 < 3.0
