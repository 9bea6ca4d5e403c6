#!/usr/bin/env python3
"""One Llama-3-8B attention layer through attnrt from Python: a prompt, then decode steps.

GroupQueryAttention with num_heads 32, kv_num_heads 8, head_size 128 (hidden 4096), float32, on a
shared past/present KV buffer updated in place (as ONNX Runtime's IO binding does), so the decode
loop plans once. Inputs are random; the point is the API and the timing.

    PYTHONPATH=build/python python3 examples/python/decode.py --prompt 512 --steps 16
    (or after `pip install .`: python3 examples/python/decode.py)
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import attnrt

NUM_HEADS, KV_NUM_HEADS, HEAD_SIZE = 32, 8, 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=16, help="decode steps")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: all)")
    args = parser.parse_args()
    capacity = args.prompt + args.steps
    rng = np.random.default_rng(0)

    def tokens(count: int, heads: int) -> np.ndarray:
        return rng.standard_normal((1, count, heads * HEAD_SIZE), dtype=np.float32)

    # The shared KV buffer: past_key and present_key are the same array (B, Nkv, capacity, H).
    cache_k = np.zeros((1, KV_NUM_HEADS, capacity, HEAD_SIZE), np.float32)
    cache_v = np.zeros_like(cache_k)

    with attnrt.Runtime(num_threads=args.threads) as rt:
        op = rt.gqa_op(num_heads=NUM_HEADS, kv_num_heads=KV_NUM_HEADS)
        print(f"attnrt {attnrt.version()}, {rt.num_threads} threads; Llama-3-8B layer: "
              f"N={NUM_HEADS} Nkv={KV_NUM_HEADS} H={HEAD_SIZE}, KV buffer {capacity} rows")

        def step(q, k, v, total):
            inputs = {"query": q, "key": k, "value": v, "past_key": cache_k,
                      "past_value": cache_v, "seqlens_k": np.array([total - 1], np.int32),
                      "total_sequence_length": np.array([total], np.int32)}
            outputs = {"output": np.empty_like(q), "present_key": cache_k,
                       "present_value": cache_v}
            with op.plan(inputs, outputs) as plan:
                started = time.perf_counter()
                plan.run(inputs, outputs)
                return time.perf_counter() - started, plan.kernel, outputs["output"]

        seconds, kernel, _ = step(tokens(args.prompt, NUM_HEADS), tokens(args.prompt, KV_NUM_HEADS),
                                  tokens(args.prompt, KV_NUM_HEADS), args.prompt)
        print(f"prompt  {args.prompt:5d} tokens  {seconds * 1e3:9.2f} ms  "
              f"({args.prompt / seconds:,.0f} tokens/s)  kernel {kernel}")

        times = []
        for i in range(args.steps):
            total = args.prompt + i + 1
            seconds, kernel, out = step(tokens(1, NUM_HEADS), tokens(1, KV_NUM_HEADS),
                                        tokens(1, KV_NUM_HEADS), total)
            times.append(seconds)
            assert np.isfinite(out).all()
        if times:
            print(f"decode  {args.steps:5d} steps   {np.mean(times) * 1e3:9.3f} ms/step mean, "
                  f"{np.min(times) * 1e3:.3f} min  ({1 / np.mean(times):,.0f} steps/s)  "
                  f"kernel {kernel}")
        stats = op.plan_cache_stats
        print(f"plan cache: {stats['misses']} plans made, {stats['hits']} reused")


if __name__ == "__main__":
    main()
