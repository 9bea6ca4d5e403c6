#!/usr/bin/env python3
"""attnrt against vLLM's own CPU attention, side by side.

Kernel level (default): one decode step (one query token per sequence) over a paged KV cache in
vLLM's CPU cache layout — per layer [num_blocks, num_kv_heads, block_size, 2 * head_size], K rows
then V rows of a block inside each [block, head] slab — attnrt.paged_attention_varlen (BNSH views
of the slab halves) against vllm._custom_ops.cpu_attention_with_kv_cache. Each backend's cache is
filled from the same K/V rows by its own writer (vLLM packs K per ISA with
cpu_attn_reshape_and_cache; attnrt reads plain rows), the block table is a seeded permutation, and
the outputs are checked equal (tolerance per dtype) before anything is timed. Timed: the attention
call alone (vLLM's scheduler metadata is built once per step by its metadata builder and is made
outside the timing). Both run interleaved (A B A B ...), medians of --reps calls each; the ratio is
vLLM's time / attnrt's (> 1: attnrt faster); geometric means per thread count. A third callable in
the same rotation reads as many bytes as the step's K/V (an int64 sum over a copy of the cache):
the memory floor of the cell, which neither backend can beat.
Threads: torch.set_num_threads(t) for vLLM's OpenMP kernels; attnrt runs on the C++ operator's
runtime on the same torch intra-op threads (a team of t, as the vLLM backend runs it), or with
--own-pool on attnrt.Runtime(num_threads=t), threads of its own.
attnrt.paged_attention_varlen goes through the C++ torch operator (libattnrt_torch.so) when it is
built; --python-path adds its Python path (SWIG and DLPack) as a further column, interleaved.

--prefill: one chunk of a chunked prefill per cell instead (batch 1, the last 2048 tokens of the
context new and causal among themselves, contexts >= 2048), the two outputs checked against each
other.

End to end (--e2e MODEL_DIR): tokens/s of scripts/vllm_reference_run.py --in-process (engine and
worker in one process) with vLLM's backend and with attnrt (ATTNRT_VLLM=1), on the mixed workload of the end-to-end check and on a long-context
decode-heavy one (8 prompts of 4096 tokens, 128 new tokens each); needs a checkpoint with
max_position_embeddings >= 4224 (make-llama-checkpoint.py --max-pos 8192).

Usage (in the venv of scripts/setup-vllm.sh, with attnrt installed or on PYTHONPATH):
  bench/compare/vllm_vs_attnrt.py [--quick | --contexts 1024] [--reps 7] [--threads 1,2]
      [--python-path] [--prefill] [--out table.md]
  bench/compare/vllm_vs_attnrt.py --e2e build/vllm-bench/llama
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 32, 8, 128
PREFILL_CHUNK = 2048  # --prefill: new tokens per step (the chunk of the end-to-end long workload)
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 2e-2}


def vllm_isa(dtype, block_size):
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    return _get_attn_isa(dtype, block_size, HEAD_SIZE, "auto")


class Cell:
    """One step: batch sequences of `context` tokens each, the last q_len of them new (1: a decode
    step; more: a chunk of a chunked prefill, causal); both backends' caches."""

    def __init__(self, batch, context, block_size, dtype, seed=0, q_len=1):
        from vllm import _custom_ops as ops

        g = torch.Generator().manual_seed(seed)
        self.batch, self.context, self.block_size, self.dtype = batch, context, block_size, dtype
        blocks_per_seq = (context + block_size - 1) // block_size
        num_blocks = batch * blocks_per_seq + 1  # block 0 unused, as vLLM's null block
        perm = torch.randperm(num_blocks - 1, generator=g).to(torch.int32) + 1
        self.block_table = perm.view(batch, blocks_per_seq).contiguous()
        self.seq_lens = torch.full((batch,), context, dtype=torch.int32)
        self.query_start_loc = torch.arange(batch + 1, dtype=torch.int32) * q_len
        self.query = torch.randn(batch * q_len, NUM_HEADS, HEAD_SIZE, generator=g).to(dtype)
        self.scale = 1.0 / math.sqrt(HEAD_SIZE)
        shape = (num_blocks, NUM_KV_HEADS, block_size, 2 * HEAD_SIZE)
        self.vllm_kv = torch.zeros(shape, dtype=dtype)
        self.attnrt_kv = torch.zeros(shape, dtype=dtype)
        vk, vv = self.vllm_kv.view(num_blocks, NUM_KV_HEADS, 2 * block_size, HEAD_SIZE).chunk(2, 2)
        self.vllm_k, self.vllm_v = vk, vv
        pools = self.attnrt_kv.view(num_blocks, NUM_KV_HEADS, 2, block_size, HEAD_SIZE)
        self.attnrt_k, self.attnrt_v = pools[:, :, 0], pools[:, :, 1]
        self.isa = vllm_isa(dtype, block_size)
        pos = torch.arange(context)
        for b in range(batch):  # the same K/V rows, each backend's own writer
            k = torch.randn(context, NUM_KV_HEADS, HEAD_SIZE, generator=g).to(dtype)
            v = torch.randn(context, NUM_KV_HEADS, HEAD_SIZE, generator=g).to(dtype)
            blocks = self.block_table[b].long()[pos // block_size]
            slots = blocks * block_size + pos % block_size
            ops.cpu_attn_reshape_and_cache(k, v, vk, vv, slots, self.isa)
            off = (pos % block_size)
            self.attnrt_k[blocks, :, off] = k
            self.attnrt_v[blocks, :, off] = v
        self.vllm_out = torch.empty_like(self.query)
        self.attnrt_out = torch.empty_like(self.query)
        self.kv_copy = None

    def vllm_metadata(self):
        from vllm import _custom_ops as ops

        return ops.cpu_attn_get_scheduler_metadata(
            num_reqs=self.batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
            head_dim=HEAD_SIZE, seq_lens=self.seq_lens, dtype=self.dtype,
            query_start_loc=self.query_start_loc, causal=True, sliding_window_size=-1,
            isa=self.isa, enable_kv_split=False)

    def run_vllm(self, metadata):
        from vllm import _custom_ops as ops

        ops.cpu_attention_with_kv_cache(
            query=self.query, key_cache=self.vllm_k, value_cache=self.vllm_v, output=self.vllm_out,
            query_start_loc=self.query_start_loc, seq_lens=self.seq_lens, scale=self.scale,
            causal=True, alibi_slopes=None, sliding_window=-1, block_table=self.block_table,
            softcap=0.0, scheduler_metadata=metadata, s_aux=None)

    def read_kv(self):
        """Reads as many bytes as the step's K/V once (a sum, as int64 words, of a copy of attnrt's
        cache with its own memory, so that it meets the caches as cold as the two backends do):
        the time no attention over this cache can beat, the memory floor of the cell."""
        if self.kv_copy is None:
            self.kv_copy = self.attnrt_kv.clone()
        return self.kv_copy.view(torch.int64).sum()

    def run_attnrt(self, rt, python_path=False):
        """attnrt's step: rt is an attnrt.Runtime (its own threads), or the int id of a runtime of
        the C++ operator on torch's intra-op threads (as the vLLM backend runs it)."""
        import attnrt
        from attnrt import _torch_lib, _varlen

        if isinstance(rt, int):
            _torch_lib._varlen_on(rt, self.query, self.attnrt_k, self.attnrt_v,
                                  self.query_start_loc, self.seq_lens, self.block_table,
                                  self.attnrt_out, None, None, None, None, self.scale, -1, 0.0,
                                  "BNSH")
            return
        fn = _varlen.paged_attention_varlen_python if python_path else attnrt.paged_attention_varlen
        fn(rt, self.query, self.attnrt_k, self.attnrt_v, self.query_start_loc, self.seq_lens,
           self.block_table, softmax_scale=self.scale, out=self.attnrt_out, kv_layout="BNSH",
           block_size=self.block_size)


def reference(cell):
    """float64 attention over the plain rows (attnrt's cache), for the correctness check."""
    out = torch.empty(cell.batch, NUM_HEADS, HEAD_SIZE, dtype=torch.float64)
    group = NUM_HEADS // NUM_KV_HEADS
    pos = torch.arange(cell.context)
    for b in range(cell.batch):
        blocks = cell.block_table[b].long()[pos // cell.block_size]
        off = pos % cell.block_size
        k = cell.attnrt_k[blocks, :, off].double().repeat_interleave(group, 1)  # [T, N, H]
        v = cell.attnrt_v[blocks, :, off].double().repeat_interleave(group, 1)
        s = torch.einsum("nh,tnh->nt", cell.query[b].double(), k) * cell.scale
        out[b] = torch.einsum("nt,tnh->nh", torch.softmax(s, -1), v)
    return out


def time_interleaved(fns, reps):
    """Median seconds of each callable, called in turn (A B C A B C ...) after a warm-up call."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def kernel_table(args):
    import attnrt

    threads = [int(t) for t in args.threads.split(",")]
    contexts = [1024, 4096] if args.quick else [1024, 4096, 16384]
    if args.contexts:
        contexts = [int(c) for c in args.contexts.split(",")]
    batches, q_len = (1, 8), 1
    if args.prefill:  # one chunk of a chunked prefill: the last 2048 tokens of the context are new
        batches, q_len = (1,), PREFILL_CHUNK
        contexts = [c for c in contexts if c >= PREFILL_CHUNK]
    rows = []
    from attnrt import _torch_lib

    if args.own_pool or not _torch_lib.load():
        runtimes = {t: attnrt.Runtime(num_threads=t) for t in threads}
        print("attnrt: attnrt.Runtime(num_threads=t), threads of its own", flush=True)
    else:
        runtimes = {t: _torch_lib.torch_threads_runtime(t) for t in threads}
        print("attnrt: the C++ operator's runtime on torch's intra-op threads (as the vLLM "
              "backend runs it)", flush=True)
    py_runtimes = ({t: attnrt.Runtime(num_threads=t) for t in threads} if args.python_path
                   else {})
    for dtype, block_size, batch, context in itertools.product(
            (torch.float32, torch.bfloat16), (16, 128), batches, contexts):
        cell = Cell(batch, context, block_size, dtype, q_len=q_len)
        metadata_by_t = {}
        for t in threads:
            torch.set_num_threads(t)
            metadata_by_t[t] = cell.vllm_metadata()
            cell.run_vllm(metadata_by_t[t])
            cell.run_attnrt(runtimes[t])
            if q_len == 1:
                ref = reference(cell) if t == threads[0] else ref
                err_v = (cell.vllm_out.double() - ref).abs().max().item()
                err_a = (cell.attnrt_out.double() - ref).abs().max().item()
            else:  # prefill cells: the two backends against each other only
                err_v = err_a = float("nan")
            diff = (cell.vllm_out.double() - cell.attnrt_out.double()).abs().max().item()
            tol = TOLERANCE[dtype]
            if diff > tol:
                raise SystemExit(f"outputs differ: {dtype} bs {block_size} batch {batch} ctx "
                                 f"{context} threads {t}: max |vllm - attnrt| {diff:.3g} > {tol} "
                                 f"(vs float64: vllm {err_v:.3g}, attnrt {err_a:.3g})")
            if args.python_path:
                got = cell.attnrt_out.clone()
                cell.run_attnrt(py_runtimes[t], python_path=True)
                if not torch.equal(got, cell.attnrt_out):
                    raise SystemExit("attnrt's C++ operator and Python path differ")
            reps = args.reps if batch * context <= 32768 and q_len == 1 else max(3, args.reps // 2)
            rt, md = runtimes[t], metadata_by_t[t]
            fns = [lambda: cell.run_vllm(md), lambda: cell.run_attnrt(rt), cell.read_kv]
            if args.python_path:
                fns.append(lambda: cell.run_attnrt(py_runtimes[t], python_path=True))
            times = time_interleaved(fns, reps)
            tv, ta, tr = times[0], times[1], times[2]
            row = dict(dtype=str(dtype).replace("torch.", ""), block_size=block_size, batch=batch,
                       context=context, threads=t, vllm_ms=tv * 1e3, attnrt_ms=ta * 1e3,
                       ratio=tv / ta, read_ms=tr * 1e3, max_diff=diff, err_vllm=err_v,
                       err_attnrt=err_a)
            if args.python_path:
                row.update(attnrt_py_ms=times[3] * 1e3, ratio_py=tv / times[3])
            rows.append(row)
            py = (f"  attnrt (Python path) {row['attnrt_py_ms']:8.3f} ms ratio "
                  f"{row['ratio_py']:5.2f}" if args.python_path else "")
            print(f"{row['dtype']:8s} bs {block_size:3d} batch {batch} ctx {context:5d} "
                  f"t {t}: vLLM {row['vllm_ms']:8.3f} ms  attnrt {row['attnrt_ms']:8.3f} ms  "
                  f"ratio {row['ratio']:5.2f}{py}  K/V read {row['read_ms']:8.3f} ms  "
                  f"(max |diff| {diff:.2g})", flush=True)
        del cell
    return rows


def markdown(rows):
    if "ratio_py" in rows[0]:
        return markdown_paths(rows)
    threads = sorted({r["threads"] for r in rows})
    lines = ["| dtype | block | batch | context | " +
             " | ".join(f"vLLM ms ({t}t) | attnrt ms ({t}t) | ratio ({t}t) | K/V read ms ({t}t)"
                        for t in threads) + " |",
             "|---|---|---|---|" + "---|---|---|---|" * len(threads)]
    keys = []
    for r in rows:
        k = (r["dtype"], r["block_size"], r["batch"], r["context"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        cells = []
        for t in threads:
            r = next((r for r in rows if (r["dtype"], r["block_size"], r["batch"], r["context"]) == k
                      and r["threads"] == t), None)
            cells.append("| | | " if r is None else
                         f"{r['vllm_ms']:.3f} | {r['attnrt_ms']:.3f} | {r['ratio']:.2f} | "
                         f"{r['read_ms']:.3f}")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(cells) + " |")
    for t in threads:
        ratios = [r["ratio"] for r in rows if r["threads"] == t]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"\n{t} thread(s): geomean ratio {geo:.2f}, min {min(ratios):.2f}, "
                     f"max {max(ratios):.2f} over {len(ratios)} cells")
    return "\n".join(lines)


def markdown_paths(rows):
    """The --python-path table: per cell and thread count, vLLM, attnrt through the C++ operator
    and through the Python path, with both ratios."""
    lines = ["| dtype | block | batch | context | threads | vLLM ms | attnrt ms | ratio | "
             "attnrt Python path ms | ratio (Python path) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['block_size']} | {r['batch']} | {r['context']} | "
                     f"{r['threads']} | {r['vllm_ms']:.3f} | {r['attnrt_ms']:.3f} | "
                     f"{r['ratio']:.2f} | {r['attnrt_py_ms']:.3f} | {r['ratio_py']:.2f} |")
    for t in sorted({r["threads"] for r in rows}):
        for key, what in (("ratio", "C++ operator"), ("ratio_py", "Python path")):
            ratios = [r[key] for r in rows if r["threads"] == t]
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            lines.append(f"\n{t} thread(s), {what}: geomean ratio {geo:.2f}, min {min(ratios):.2f}, "
                         f"max {max(ratios):.2f} over {len(ratios)} cells")
    return "\n".join(lines)


def e2e(args):
    here = os.path.dirname(os.path.abspath(__file__))
    runner = os.path.join(here, "..", "..", "scripts", "vllm_reference_run.py")
    workloads = {
        "mixed (8 prompts 16..2048 tokens, 64 new)": [],
        "long decode (8 x 4096-token prompts, 128 new)": [
            "--min-prompt-len", "4096", "--max-prompt-len", "4096", "--gen-tokens", "128",
            "--max-batched-tokens", "2048"],
    }
    lines = ["| workload | backend | generate s | prompt tok | new tok | tokens/s (all) | new tok/s |",
             "|---|---|---|---|---|---|---|"]
    for name, extra in workloads.items():
        if args.e2e_only and not name.startswith(args.e2e_only):
            continue
        for backend in ("vLLM CPU_ATTN", "attnrt"):
            env = dict(os.environ)
            env["ATTNRT_VLLM"] = "1" if backend == "attnrt" else "0"
            out = os.path.join(args.e2e_dir, f"e2e_{len(extra)}_{env['ATTNRT_VLLM']}.json")
            cmd = [sys.executable, runner, args.e2e, "--in-process", "--no-perturb", "--out", out] + extra
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                r = json.load(f)
            gen = sum(len(x["gen_ids"]) for x in r["results"])
            t = r["timing_s"]["generate"]
            lines.append(f"| {name} | {backend} | {t:.1f} | {r['prompt_tokens']} | {gen} | "
                         f"{(r['prompt_tokens'] + gen) / t:.0f} | {gen / t:.1f} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def request_amx_permission():
    """vLLM's bfloat16 kernel uses AMX tiles without asking Linux for the tile-data state (attnrt's
    plugins ask when they load); a run of vLLM's cells alone would die of SIGILL. Ask here, once."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    libc.syscall(arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata)  # fails harmlessly without AMX


def main():
    request_amx_permission()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="contexts 1k and 4k only")
    p.add_argument("--contexts", default=None, help="comma-separated contexts (e.g. 1024)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--python-path", action="store_true",
                   help="also time attnrt's Python path (PagedGqaVarlenOp through SWIG and DLPack, "
                        "as before the C++ operator), interleaved")
    p.add_argument("--own-pool", action="store_true",
                   help="run attnrt on attnrt.Runtime(num_threads=t), threads of its own, instead "
                        "of the C++ operator's runtime on torch's intra-op threads")
    p.add_argument("--prefill", action="store_true",
                   help="one chunked-prefill step per cell instead of a decode step: the last "
                        f"{PREFILL_CHUNK} tokens of one sequence new, contexts >= {PREFILL_CHUNK}")
    p.add_argument("--out", default=None, help="append the markdown table(s) here")
    p.add_argument("--e2e", default=None, metavar="MODEL_DIR", help="end-to-end tokens/s instead")
    p.add_argument("--e2e-dir", default="/tmp", help="where the end-to-end runs write JSON")
    p.add_argument("--e2e-only", default=None, choices=["mixed", "long"], help="one workload only")
    args = p.parse_args()
    text = e2e(args) if args.e2e else markdown(kernel_table(args))
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
