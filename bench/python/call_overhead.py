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

Then the same for attnrt.paged_attention_varlen (a decode of batch 1 over 16 cached rows in BNSH
block pools of 16, the shapes above), when torch is installed:

  python    the Python path (PagedGqaVarlenOp through SWIG and DLPack, as before the C++ operator)
  function  attnrt.paged_attention_varlen(runtime, ...): the C++ operator when it is built
  torch_op  torch.ops.attnrt.paged_attention_varlen(...) (the runtime set by attnrt.torch)
  op_direct torch.ops.attnrt._paged_attention_varlen_on.default(id, ...), positional (how the vLLM
            backend calls it)
  ctypes    attnrt_plan_run on the same plan through ctypes, descriptors built once
  vllm      vllm._custom_ops.cpu_attention_with_kv_cache on the same decode in its own cache
            (when vLLM is installed; its scheduler metadata made once)

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

    # The step's K/V row is rewritten in place each call.
    times = timed(variants, args.rounds, args.calls)
    if not (np.array_equal(out_bound, out_c) and np.array_equal(out_run, out_c)):
        raise SystemExit("bound, run and ctypes outputs differ")

    print(f"attnrt {attnrt.version()}, kernel {plan.kernel}, {rt.num_threads} thread(s); decode "
          f"N={NUM_HEADS} Nkv={KV_NUM_HEADS} H={HEAD_SIZE} past={PAST}; {args.rounds} rounds x "
          f"{args.calls} calls, interleaved")
    table(times)
    if "sdpa" in variants:
        print()
        varlen(rt, args)


def table(times: dict[str, list[float]]) -> None:
    """Medians, extremes and the ratio to the ctypes floor, one row per variant."""
    floor = statistics.median(times["ctypes"])
    print(f"{'variant':9s} {'median us':>10s} {'min us':>8s} {'max us':>8s} {'vs ctypes':>10s} "
          f"{'- ctypes us':>12s}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:9s} {med:10.2f} {min(values):8.2f} {max(values):8.2f} {med / floor:9.2f}x "
              f"{med - floor:12.2f}")


def timed(variants, rounds: int, calls: int) -> dict[str, list[float]]:
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - started) / calls * 1e6)
    return times


def varlen(rt, args) -> None:
    """attnrt.paged_attention_varlen's paths on one tiny decode (see the module docstring)."""
    import torch
    import attnrt.torch
    from attnrt import _torch_lib, _varlen

    block, total = 16, PAST + 1
    g = torch.Generator().manual_seed(0)
    k_pool = torch.randn(2, KV_NUM_HEADS, block, HEAD_SIZE, generator=g)
    v_pool = torch.randn(2, KV_NUM_HEADS, block, HEAD_SIZE, generator=g)
    q = torch.randn(1, NUM_HEADS, HEAD_SIZE, generator=g)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    lens = torch.tensor([total], dtype=torch.int32)
    table_ = torch.tensor([[0, 1]], dtype=torch.int32)
    outs = {n: torch.empty_like(q) for n in ("python", "function", "torch_op", "op_direct",
                                             "ctypes", "vllm")}
    common = (q, k_pool, v_pool, cu, lens, table_)
    variants = {
        "python": lambda: _varlen.paged_attention_varlen_python(
            rt, *common, out=outs["python"], kv_layout="BNSH"),
        "function": lambda: attnrt.paged_attention_varlen(rt, *common, out=outs["function"],
                                                          kv_layout="BNSH"),
    }
    if _torch_lib.load():
        attnrt.torch.set_runtime(rt)
        op = torch.ops.attnrt.paged_attention_varlen
        variants["torch_op"] = lambda: op(*common, outs["torch_op"], kv_layout="BNSH")
        rid, direct = _torch_lib.runtime_id(rt), torch.ops.attnrt._paged_attention_varlen_on.default
        variants["op_direct"] = lambda: direct(rid, *common, outs["op_direct"], None, None, None,
                                               None, 0.0, -1, 0.0, "BNSH")
    else:
        print("libattnrt_torch.so is not built: no C++ operator rows")
    op_py = rt.cached_op(_varlen.PagedGqaVarlenOp, num_heads=NUM_HEADS, kv_num_heads=KV_NUM_HEADS,
                         block_size=block, kv_layout="BNSH", local_window_size=-1, softcap=0.0)
    arrays = [x.numpy() for x in common]
    inputs = [arrays[0], None, None, arrays[1], arrays[2], arrays[3], arrays[4], arrays[5], None,
              None, None, None]
    plan = op_py.plan(inputs, [outs["ctypes"].numpy()])
    variants["ctypes"] = attnrt_ctypes.plan_runner(attnrt_ctypes.load(), int(plan._h().this),
                                                   inputs, [outs["ctypes"].numpy()])
    try:
        variants["vllm"] = vllm_decode(q, k_pool, v_pool, cu, lens, table_, outs["vllm"])
    except ImportError:
        print("vLLM is not installed: no vllm row")
    times = timed(variants, args.rounds, args.calls)
    for name in variants:
        if not torch.allclose(outs[name], outs["ctypes"], atol=2e-5, rtol=0):
            raise SystemExit(f"varlen: {name} differs from ctypes")
    print(f"attnrt.paged_attention_varlen, kernel {plan.kernel}: decode batch 1, {total} keys in "
          f"BNSH pools of {block}; {args.rounds} rounds x {args.calls} calls, interleaved")
    table(times)


def vllm_decode(q, k_pool, v_pool, cu, lens, table_, out):
    """vLLM's CPU attention on the same decode, its cache written by its own writer."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    block = k_pool.shape[2]
    isa = _get_attn_isa(q.dtype, block, HEAD_SIZE, "auto")
    kv = torch.zeros(k_pool.shape[0], KV_NUM_HEADS, 2 * block, HEAD_SIZE, dtype=q.dtype)
    vk, vv = kv.chunk(2, 2)
    total = int(lens[0])
    pos = torch.arange(total)
    slots = table_[0].long()[pos // block] * block + pos % block
    def rows(pool):  # [blocks, Nkv, block, H] -> the rows of the slots, [tokens, Nkv, H]
        return pool.permute(0, 2, 1, 3).reshape(-1, KV_NUM_HEADS, HEAD_SIZE)[slots]

    ops.cpu_attn_reshape_and_cache(rows(k_pool), rows(v_pool), vk, vv, slots, isa)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=1, num_heads=NUM_HEADS, num_kv_heads=KV_NUM_HEADS, head_dim=HEAD_SIZE,
        seq_lens=lens, dtype=q.dtype, query_start_loc=cu, causal=True, sliding_window_size=-1,
        isa=isa, enable_kv_split=False)
    scale = 1.0 / HEAD_SIZE ** 0.5
    return lambda: ops.cpu_attention_with_kv_cache(
        query=q, key_cache=vk, value_cache=vv, output=out, query_start_loc=cu, seq_lens=lens,
        scale=scale, causal=True, alibi_slopes=None, sliding_window=-1, block_table=table_,
        softcap=0.0, scheduler_metadata=metadata, s_aux=None)


if __name__ == "__main__":
    main()
