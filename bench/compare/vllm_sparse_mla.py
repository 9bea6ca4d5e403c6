#!/usr/bin/env python3
"""DeepSeek-V4 sparse attention on CPU: vLLM 0.32's kernel (torch.ops._C.flash_mla_with_kvcache_cpu,
what DeepseekV4CPUAttention.forward_mqa calls) against attnrt's sparse MLA through the adapter
(attnrt._vllm_deepseek_v4.flash_mla_with_kvcache, the same arguments), side by side in one process.

Both read the same caches in vLLM's engine layout: fp8_ds_mla pages (584 bytes a token, pages
padded to a multiple of 576 bytes) in buffers shared by several layers (block-major: block b of
layer l at (b * layers + l) * padded page), each layer the strided 2-D page view forward_mqa
passes; the bytes are written by vLLM's own writer (torch.ops._C.fused_qnorm_rope_kv_insert_cpu),
the slot ids made by vLLM's block-table mapping (map_local_to_global_slots_cpu). SWA pages hold 64
tokens (window 128); compressed pages 256 / ratio entries (vLLM's CPU block of 256 tokens: C4A 64,
C128A 2). Contexts of 16384 tokens (decode: one token per request at position 16383).

The 19 cases: CSA (C4A) decode H 64/128 x B 1/4/16 x top-k 512/2048; CSA prefill, 128 rows of one
request (H 64, 128; top-k 512); HCA (C128A) decode H 64/128, B 4 (dense compressed slots: 128);
SWA-only decode H 64 B 4, H 128 B 4, H 128 B 16. Both outputs are compared before timing
(max |diff| / max |vLLM out| <= 8e-3, the bound of
tests/bindings/python/test_vllm_deepseek_v4.py).
Timed: the call alone, vLLM and attnrt interleaved (A B A B ...), medians of --reps calls after a
warm-up call, wall time and the process's CPU time (time.process_time: every thread's, spinning
included; on a shared host the CPU time of a one-thread call is the figure other processes disturb
least); ratio = vLLM's time / attnrt's (> 1: attnrt faster); geomeans per thread count.

Threads: torch.set_num_threads(t) for vLLM's OpenMP kernel. attnrt runs as the engine runs it:
through the C++ operator torch.ops.attnrt.flash_mla_with_kvcache on the vLLM backend's runtime on
torch's intra-op threads (the same OpenMP team as vLLM's kernel; `attnrt ms`), and, for comparison,
through the adapter's Python path on an attnrt.Runtime with torch.get_num_threads() threads of its
own (`attnrt-own ms`: what ran before the C++ operator; a second pool of threads beside torch's).
The three are interleaved; the ratios are vLLM's time / attnrt's. The kernel attnrt ran (its
plan's kernel) is printed per case.

Usage (in the venv of scripts/setup-vllm.sh, attnrt installed or on PYTHONPATH):
  bench/compare/vllm_sparse_mla.py [--threads 1,2] [--reps 5] [--only csa-decode,hca,...]
      [--heads 64,128] [--out table.md]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

TOKEN = 584
HEAD = 512
WINDOW = 128
SWA_BLOCK = 64
CACHE_BLOCK = 256
CONTEXT = 16384
REL_TOLERANCE = 8e-3


def padded_page(block_size):
    return -(-block_size * TOKEN // 576) * 576


def vllm_ops():
    import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
    from vllm.models.deepseek_v4.cpu.cpu_utils import map_local_to_global_slots_cpu

    return torch.ops._C, map_local_to_global_slots_cpu


def rope_cos_sin():
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
    freqs = torch.outer(torch.arange(CONTEXT, dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


class SharedPages:
    """`layers` layers' pages of one page size in one buffer, block-major, as vLLM lays them out."""

    def __init__(self, num_blocks, block_size, layers):
        self.num_blocks, self.block_size, self.layers = num_blocks, block_size, layers
        self.page = padded_page(block_size)
        self.buffer = torch.zeros(num_blocks * layers * self.page, dtype=torch.uint8)

    def page_view(self, layer):
        kv = self.buffer.as_strided((self.num_blocks, self.block_size, TOKEN),
                                    (self.layers * self.page, TOKEN, 1), layer * self.page)
        return kv.view(self.num_blocks, -1)


def fill(cache_2d, block_size, g, cos_sin):
    """Every slot of the layer written by vLLM's fp8_ds_mla writer from seeded KV rows."""
    ops, _ = vllm_ops()
    n = cache_2d.shape[0] * block_size
    kv = torch.randn(n, HEAD, generator=g).to(torch.bfloat16)
    positions = torch.randint(0, CONTEXT, (n,), generator=g, dtype=torch.int64)
    ops.fused_qnorm_rope_kv_insert_cpu(torch.zeros(n, 1, HEAD, dtype=torch.bfloat16), kv,
                                       positions, cache_2d, torch.arange(n, dtype=torch.int64),
                                       cos_sin, 1, 1e-6, block_size)


def table_for(num_reqs, first, last, width, g):
    """Block table [num_reqs, width]: distinct random physical blocks (0 is the null block) at
    logical blocks first..last of every request, the null block elsewhere."""
    count = last - first + 1
    perm = torch.randperm(num_reqs * count, generator=g) + 1
    table = torch.zeros(num_reqs, width, dtype=torch.int32)
    table[:, first:last + 1] = perm.view(num_reqs, count).to(torch.int32)
    return table, num_reqs * count + 1


class Case:
    def __init__(self, name, kind, num_heads, num_tokens, topk=0, prefill=False, seed=0):
        _, to_global = vllm_ops()
        g = torch.Generator().manual_seed(seed)
        cos_sin = rope_cos_sin()
        self.name, self.kind, self.num_heads, self.num_tokens = name, kind, num_heads, num_tokens
        if prefill:  # one request, its last num_tokens positions new
            pos = torch.arange(CONTEXT - num_tokens, CONTEXT)
            req = torch.zeros(num_tokens, dtype=torch.int64)
        else:  # one token per request at the context's last position
            pos = torch.full((num_tokens,), CONTEXT - 1)
            req = torch.arange(num_tokens)
        num_reqs = int(req.max()) + 1
        first = (int(pos.min()) - WINDOW + 1) // SWA_BLOCK
        table, nb = table_for(num_reqs, first, int(pos.max()) // SWA_BLOCK,
                              CONTEXT // SWA_BLOCK, g)
        self.swa = SharedPages(nb, SWA_BLOCK, 3)  # ours is layer 1 of 3
        self.window_cache_2d = self.swa.page_view(1)
        fill(self.window_cache_2d, SWA_BLOCK, g, cos_sin)
        local = (pos - WINDOW + 1).unsqueeze(-1) + torch.arange(WINDOW)
        self.window_slots = to_global(local, req, table, SWA_BLOCK)
        if kind == "swa":
            self.compressed_cache_2d = self.window_cache_2d
            self.compressed_slots = self.window_slots.new_full((num_tokens, 0), -1)
            self.compressed_block_size = 1
        else:
            ratio = 4 if kind == "csa" else 128
            cbs = CACHE_BLOCK // ratio
            ncmp = CONTEXT // ratio
            ctable, nb = table_for(num_reqs, 0, (ncmp - 1) // cbs, CONTEXT // CACHE_BLOCK, g)
            self.cmp = SharedPages(nb, cbs, 2)  # ours is layer 0 of 2
            self.compressed_cache_2d = self.cmp.page_view(0)
            fill(self.compressed_cache_2d, cbs, g, cos_sin)
            if kind == "csa":  # the indexer's top-k of the row's compressed entries
                limit = (pos + 1) // ratio
                local = torch.stack([torch.randperm(int(n), generator=g)[:topk] for n in limit])
            else:  # HCA: the dense prefix, as forward_mqa builds it for C128A
                local = torch.arange(ncmp).expand(num_tokens, ncmp)
            self.compressed_slots = to_global(local.contiguous(), req, ctable, cbs)
            self.compressed_block_size = cbs
        self.q = (torch.randn(num_tokens, num_heads, HEAD, generator=g) * 4).to(torch.bfloat16)
        self.attn_sink = torch.randn(num_heads, generator=g)
        self.scale = HEAD ** -0.5
        self.vllm_out = torch.empty(self.q.shape, dtype=torch.bfloat16)
        self.attnrt_out = torch.full(self.q.shape, math.nan, dtype=torch.bfloat16)

    def args(self, out):
        return (out, self.q, self.window_cache_2d, self.window_slots, SWA_BLOCK,
                self.compressed_cache_2d, self.compressed_slots, self.compressed_block_size,
                self.attn_sink, self.scale)

    def run_vllm(self):
        torch.ops._C.flash_mla_with_kvcache_cpu(*self.args(self.vllm_out))

    def run_attnrt(self):
        from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache

        flash_mla_with_kvcache(*self.args(self.attnrt_out))

    def run_attnrt_own_threads(self):
        from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

        flash_mla_with_kvcache_python(*self.args(self.attnrt_out))

    def check(self):
        self.run_vllm()
        b = self.vllm_out.float()
        rels = []
        for run in (self.run_attnrt, self.run_attnrt_own_threads):
            self.attnrt_out.fill_(math.nan)
            run()
            a = self.attnrt_out.float()
            rel = ((a - b).abs().max() / b.abs().max()).item()
            if not rel <= REL_TOLERANCE:
                raise SystemExit(f"{self.name}: attnrt ({run.__name__}) differs from vLLM: max "
                                 f"|diff| / max |out| {rel:.3g} > {REL_TOLERANCE}")
            rels.append(rel)
        return max(rels)

    def attnrt_kernel(self):
        """The kernel of the plan attnrt runs for this case (on the adapter's runtime)."""
        from attnrt import _vllm_backend
        from attnrt._sparse_mla import SparseMlaOp, sparse_mla_metadata
        from attnrt._vllm_deepseek_v4 import sparse_mla_arguments

        kw = sparse_mla_arguments(*self.args(self.attnrt_out))
        out = kw.pop("attn_out")
        inputs = {k: kw.pop(k) for k in list(kw) if k in SparseMlaOp.INPUTS}
        rt = _vllm_backend.runtime()
        inputs["metadata"] = sparse_mla_metadata(rt, **inputs, **kw)
        inputs = {k: v for k, v in inputs.items() if v is not None}
        return rt.cached_op(SparseMlaOp, **kw).plan(inputs, {"attn_out": out}).kernel


def cases(heads=(64, 128)):
    """The 19 cases for heads (64, 128); other head counts (--heads) give the same kinds."""
    out = []
    for h in heads:
        for b in (1, 4, 16):
            for k in (512, 2048):
                out.append((f"CSA decode H{h} B{b} top-k {k}", "csa", h, b, k, False))
    for h in heads:
        out.append((f"CSA prefill H{h} 128 rows top-k 512", "csa", h, 128, 512, True))
    for h in heads:
        out.append((f"HCA decode H{h} B4 (128 dense)", "hca", h, 4, 0, False))
    for h, b in [(h, 4) for h in heads] + [(heads[-1], 16)]:
        out.append((f"SWA decode H{h} B{b}", "swa", h, b, 0, False))
    return out


def time_interleaved(fns, reps):
    """Per callable, called in turn (A B A B ...) after a warm-up call: the median wall seconds
    and the median CPU seconds of the process (every thread's, time.process_time) of a call."""
    for fn in fns:
        fn()
    wall = [[] for _ in fns]
    cpu = [[] for _ in fns]
    for _ in range(reps):
        for fn, w, c in zip(fns, wall, cpu):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            w.append(time.perf_counter() - t0)
            c.append(time.process_time() - c0)
    return [statistics.median(t) for t in wall], [statistics.median(t) for t in cpu]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--only", default="", help="comma-separated substrings of case names")
    p.add_argument("--out", default="", help="also write the markdown table here")
    p.add_argument("--heads", default="64,128",
                   help="comma-separated head counts of the cases (DeepSeek-V4: 64, 128; fewer "
                        "heads per rank under tensor parallelism)")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    only = [s.strip().lower() for s in args.only.split(",") if s.strip()]
    amx = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    print(f"torch {torch.__version__}; host {'with' if amx else 'without'} AMX; "
          f"threads {threads}; medians of {args.reps} interleaved calls; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows = []
    heads = tuple(int(h) for h in args.heads.split(","))
    for i, (name, kind, h, t, k, prefill) in enumerate(cases(heads)):
        if only and not any(s in name.lower() for s in only):
            continue
        case = Case(name, kind, h, t, k, prefill, seed=1000 + i)
        for nt in threads:
            torch.set_num_threads(nt)
            rel = case.check()
            kernel = case.attnrt_kernel()
            (tv, ta, to), (cv, ca, _) = time_interleaved(
                [case.run_vllm, case.run_attnrt, case.run_attnrt_own_threads], args.reps)
            rows.append(dict(case=name, threads=nt, vllm_ms=tv * 1e3, attnrt_ms=ta * 1e3,
                             ratio=tv / ta, own_ms=to * 1e3, own_ratio=tv / to,
                             vllm_cpu=cv * 1e3, attnrt_cpu=ca * 1e3, cpu_ratio=cv / ca,
                             kernel=kernel, rel=rel))
            print(f"{name:38s} threads {nt}: vLLM {tv * 1e3:9.3f} ms  attnrt {ta * 1e3:9.3f} ms  "
                  f"ratio {tv / ta:5.2f}  CPU ratio {cv / ca:5.2f}  own threads {to * 1e3:9.3f} "
                  f"ms ratio {tv / to:5.2f}  ({kernel}; max|diff|/max|out| {rel:.2g})",
                  flush=True)
        del case
    lines = ["| case | threads | vLLM ms | attnrt ms | ratio | vLLM CPU ms | attnrt CPU ms | "
             "CPU ratio | attnrt-own ms | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['threads']} | {r['vllm_ms']:.3f} | {r['attnrt_ms']:.3f} "
                     f"| {r['ratio']:.2f} | {r['vllm_cpu']:.3f} | {r['attnrt_cpu']:.3f} | "
                     f"{r['cpu_ratio']:.2f} | {r['own_ms']:.3f} | {r['own_ratio']:.2f} |")
    lines.append("")
    for nt in threads:
        for key, what in (("ratio", "wall"), ("cpu_ratio", "CPU"),
                          ("own_ratio", "wall, attnrt on its own threads")):
            ratios = [r[key] for r in rows if r["threads"] == nt]
            if ratios:
                lines.append(f"{nt} thread(s), {what} time: geomean ratio {geomean(ratios):.2f} "
                             f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} "
                             f"cases)")
    kernels = sorted({r["kernel"] for r in rows})
    lines.append(f"attnrt kernel(s): {', '.join(kernels)}; load average at the end "
                 f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
