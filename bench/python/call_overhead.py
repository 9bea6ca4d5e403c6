#!/usr/bin/env python3
"""Per-call floor of a tiny decode from Python, interleaved in one process (medians, ratios):

  bound    plan.bind(inputs, outputs)() — tensors borrowed once, workspace allocated once
  run      plan.run(inputs, outputs)    — tensors described on every call
  ctypes   attnrt_plan_run on the same plan through ctypes, descriptors built once (the floor of
           any Python call into the library)
  sdpa     torch.nn.functional.scaled_dot_product_attention on the same shapes (when torch is
           installed)

The decode: batch 1, one new token, num_heads 32, kv_num_heads 8, head_size 128, 16 past rows,
float32, on a shared KV buffer. Each round times `--calls` back-to-back calls of every variant in
turn; the table gives the median over rounds of the per-call time and its ratio to ctypes.

    PYTHONPATH=build/python python3 bench/python/call_overhead.py
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attnrt  # noqa: E402
import attnrt_ctypes  # noqa: E402

NUM_HEADS, KV_NUM_HEADS, HEAD_SIZE, PAST = 32, 8, 128, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1, help="attnrt and torch threads")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    total = PAST + 1
    q = rng.standard_normal((1, 1, NUM_HEADS * HEAD_SIZE), dtype=np.float32)
    k = rng.standard_normal((1, 1, KV_NUM_HEADS * HEAD_SIZE), dtype=np.float32)
    v = rng.standard_normal((1, 1, KV_NUM_HEADS * HEAD_SIZE), dtype=np.float32)
    cache_k = rng.standard_normal((1, KV_NUM_HEADS, total, HEAD_SIZE), dtype=np.float32)
    cache_v = rng.standard_normal((1, KV_NUM_HEADS, total, HEAD_SIZE), dtype=np.float32)
    inputs = [q, k, v, cache_k, cache_v, np.array([total - 1], np.int32),
              np.array([total], np.int32)]
    out_run, out_bound, out_c = (np.empty_like(q) for _ in range(3))

    rt = attnrt.Runtime(num_threads=args.threads)
    op = rt.gqa_op(num_heads=NUM_HEADS, kv_num_heads=KV_NUM_HEADS)
    plan = op.plan(inputs, [out_run, cache_k, cache_v])
    variants = {
        "bound": plan.bind(inputs, [out_bound, cache_k, cache_v]),
        "run": lambda: plan.run(inputs, [out_run, cache_k, cache_v]),
        "ctypes": attnrt_ctypes.plan_runner(attnrt_ctypes.load(), int(plan._h().this), inputs,
                                            [out_c, cache_k, cache_v]),
    }
    try:
        import torch
        torch.set_num_threads(args.threads)
        tq = torch.from_numpy(q).view(1, 1, NUM_HEADS, HEAD_SIZE).transpose(1, 2)
        tk, tv = torch.from_numpy(cache_k), torch.from_numpy(cache_v)
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def torch_sdpa():
            with torch.inference_mode():
                sdpa(tq, tk, tv, enable_gqa=True)
        variants["sdpa"] = torch_sdpa
    except ImportError:
        print("torch is not installed: no SDPA row")

    for fn in variants.values():  # warm up; the step's K/V row is rewritten in place each call
        fn()
    if not (np.array_equal(out_bound, out_c) and np.array_equal(out_run, out_c)):
        raise SystemExit("bound, run and ctypes outputs differ")
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            started = time.perf_counter()
            for _ in range(args.calls):
                fn()
            times[name].append((time.perf_counter() - started) / args.calls * 1e6)

    floor = statistics.median(times["ctypes"])
    print(f"attnrt {attnrt.version()}, kernel {plan.kernel}, {rt.num_threads} thread(s); decode "
          f"N={NUM_HEADS} Nkv={KV_NUM_HEADS} H={HEAD_SIZE} past={PAST}; {args.rounds} rounds x "
          f"{args.calls} calls, interleaved")
    print(f"{'variant':8s} {'median us':>10s} {'min us':>8s} {'max us':>8s} {'vs ctypes':>10s}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:8s} {med:10.2f} {min(values):8.2f} {max(values):8.2f} {med / floor:9.2f}x")


if __name__ == "__main__":
    main()
