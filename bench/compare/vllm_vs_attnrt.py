#!/usr/bin/env python3
"""attnrt against vLLM's own CPU attention, side by side. This script holds the command line and
the kernel-level tables; the end-to-end runs (--e2e) are in vllm_e2e.py beside it.

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
the memory floor of the cell, which neither backend can beat. --kv-cache-dtype fp8: both caches
float8 e4m3fn (vLLM's kv_cache_dtype "fp8", per-tensor scales of 1.0 as vLLM's default; fp8_e5m2:
float8 e5m2), vLLM's
written by its writer, attnrt's holding the same bytes in its layout (attnrt.vllm's writer), read
through vLLM's fp8 kernel and attnrt's k_scale/v_scale; the floor then reads the fp8 bytes.
--alibi: both given Bloom's ALiBi slopes (2^(-8 (h + 1) / N) per query head).
Threads: torch.set_num_threads(t) for vLLM's OpenMP kernels; attnrt runs on the C++ operator's
runtime on the same torch intra-op threads (a team of t, as the vLLM backend runs it), or with
--own-pool on attnrt.Runtime(num_threads=t), threads of its own.
attnrt.paged_attention_varlen goes through the C++ torch operator (libattnrt_torch.so) when it is
built; --python-path adds its Python path (SWIG and DLPack) as a further column, interleaved.
The kernel attnrt ran (its runtimes log each plan they make, ATTNRT_DEBUG) and vLLM's ISA are
printed when they change and listed under the table.

--prefill: one chunk of a chunked prefill per cell instead (batch 1, the last 2048 tokens of the
context new and causal among themselves, contexts >= 2048), the two outputs checked against each
other. --table bf16: the bfloat16 cells in one run, a decode table (block sizes 128 and 16, batch 1
and 8, contexts 1k, 4k, 16k) and a prefill table (2048-token chunks over contexts 2048 and 4096).

--no-amx: both sides as on a host without AMX, the same command meaning the same on any host:
vLLM's ISA choice (vllm.v1.attention.backends.cpu_attn._get_attn_isa) has "amx" replaced by "vec",
its non-AMX choice for those block sizes, and attnrt runs with ATTNRT_DISABLE=*amx* (appended to
any ATTNRT_DISABLE given), set before any attnrt runtime exists. Only attention changes: torch's
own kernels (the model's dense layers end to end) use what the CPU has.
--p-precision exact,input: one attnrt column per mode of paged_attention_varlen's p_precision
("exact": P kept in float32; "input": P rounded to the query type before P·V, as vLLM does),
interleaved in the same rotation; needs an attnrt that takes the keyword (checked first).

End to end (--e2e MODEL_DIR): generate time and tokens/s (prompt and new tokens over the generate
time) of scripts/vllm_reference_run.py --in-process (engine and worker in one process), bfloat16,
vLLM's default block size (128), chunked prefill of --e2e-max-batched-tokens (2048) per step, with
vLLM's backend and with attnrt (ATTNRT_VLLM=1; one run per --p-precision mode, through
ATTNRT_VLLM_P_PRECISION), each run its own process, alternated (vLLM, attnrt, vLLM, attnrt ...)
for --rounds rounds; the ratio is vLLM's time / attnrt's, with its median per workload. Workloads
(--e2e-only a,b,c; mixed = a, long = b):
  a  8 prompts of 64..4000 tokens (seeded lengths), 64 new tokens each
  b  8 prompts of 4096 tokens, 128 new
  c  16 prompts of 1024 tokens, 256 new
The checkpoint needs max_position_embeddings >= 4224, e.g.
  scripts/make-llama-checkpoint.py build/vllm-bench/llama-h128 --dtype bfloat16 --head-dim 128 \
      --hidden 1024 --heads 8 --kv-heads 2 --max-pos 8192 --qk-std 0.08 --lm-head-std 0.1
--no-amx reaches the engine through a sitecustomize hook the script writes to --e2e-dir and puts
first on the runs' PYTHONPATH (vLLM has no setting for its CPU attention ISA); the hook reports
vLLM's ISA choices on stderr in every run. Each run's stderr goes to a .log beside its JSON.

Usage (in the venv of scripts/setup-vllm.sh, with attnrt installed or on PYTHONPATH):
  bench/compare/vllm_vs_attnrt.py [--quick | --contexts 1024] [--reps 7] [--threads 1,2]
      [--dtypes float32,bfloat16] [--block-sizes 16,128] [--python-path] [--prefill]
      [--no-amx] [--p-precision exact,input] [--out table.md]
  bench/compare/vllm_vs_attnrt.py --table bf16 [--threads 1,2] [--no-amx] [--p-precision exact,input]
  bench/compare/vllm_vs_attnrt.py --e2e build/vllm-bench/llama-h128 [--e2e-only a,b,c] [--rounds 2]
      [--no-amx] [--p-precision exact,input] [--e2e-args "--num-prompts 2 --gen-tokens 8"]
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import re
import statistics
import sys
import tempfile
import time

import torch

import vllm_e2e

NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 32, 8, 128
PREFILL_CHUNK = 2048  # --prefill: new tokens per step (the chunk of the end-to-end workloads)
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 2e-2}
P_PRECISIONS = ("exact", "input")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NO_AMX = False  # --no-amx: set in main() before anything else runs
# --kv-cache-dtype fp8: both caches float8 e4m3fn with vLLM's default scales of 1.0 (set in
# main()); vLLM writes its own, attnrt's holds the same bytes (attnrt.vllm's writer).
KV_CACHE_DTYPE = "auto"
FP8_SCALE = 1.0
ALIBI = False  # --alibi: Bloom's slopes on both sides (set in main())
AMX_GLOB = "*amx*"


def non_amx_isa(isa):
    """vLLM's ISA on a host without AMX for a choice made on this host: _get_attn_isa returns
    "amx" only for bfloat16 at block sizes that are multiples of 32, where an x86 host without AMX
    gets "vec"; every other choice is made without AMX already."""
    return "vec" if isa == "amx" else isa


def fp8():
    return KV_CACHE_DTYPE in ("fp8", "fp8_e5m2")


def vllm_isa(dtype, block_size):
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    isa = _get_attn_isa(dtype, block_size, HEAD_SIZE, KV_CACHE_DTYPE)
    return non_amx_isa(isa) if NO_AMX else isa


def disable_amx_in(env):
    """ATTNRT_DISABLE with every AMX kernel excluded (appended to the globs already there)."""
    given = env.get("ATTNRT_DISABLE", "").strip()
    globs = [g for g in given.split(",") if g.strip()]
    if AMX_GLOB not in globs:
        globs.append(AMX_GLOB)
    env["ATTNRT_DISABLE"] = ",".join(globs)
    return env["ATTNRT_DISABLE"]


PLAN_LOG = re.compile(r"attnrt \[debug\]: plan (\S+) .*? kernel=(\S+)")


@contextlib.contextmanager
def stderr_captured(sink):
    """Collects what is written to file descriptor 2 (the C++ library's log) meanwhile into
    sink[0]; the lines that are not attnrt's debug lines are written back to stderr."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sink[0] = text
            rest = "".join(ln for ln in text.splitlines(True) if not ln.startswith("attnrt [debug]: "))
            if rest:
                sys.stderr.write(rest)


@contextlib.contextmanager
def env_set(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def check_p_precision(modes, rt):
    """Fails with the reason when the installed attnrt cannot run a mode other than exact through
    the path the table uses (rt: the C++ operator's runtime id, or an attnrt.Runtime)."""
    if modes == ["exact"]:
        return
    import inspect

    import attnrt
    from attnrt import _torch_lib, _varlen

    if isinstance(rt, int):
        args = [a.name for a in _torch_lib._varlen_on._schema.arguments]
        if args[-1] == "kv_layout":
            raise SystemExit(
                f"--p-precision {','.join(modes)}: the installed attnrt's C++ operator "
                f"(torch.ops.attnrt._paged_attention_varlen_on, {_torch_lib.__file__}) takes no "
                f"argument after kv_layout (its arguments: {', '.join(args)}); install an attnrt "
                "whose operator takes the precision mode, or use --p-precision exact")
    for fn in (attnrt.paged_attention_varlen, _varlen.paged_attention_varlen_python):
        if "p_precision" not in inspect.signature(fn).parameters:
            raise SystemExit(
                f"--p-precision {','.join(modes)}: the installed attnrt's {fn.__name__} "
                f"({attnrt.__file__}) has no keyword p_precision; install an attnrt that has it, "
                "or use --p-precision exact")


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
        cache_dtype = torch.uint8 if fp8() else dtype  # vLLM keeps an fp8 cache as uint8
        self.vllm_kv = torch.zeros(shape, dtype=cache_dtype)
        self.attnrt_kv = torch.zeros(shape, dtype=cache_dtype)
        vk, vv = self.vllm_kv.view(num_blocks, NUM_KV_HEADS, 2 * block_size, HEAD_SIZE).chunk(2, 2)
        self.vllm_k, self.vllm_v = vk, vv
        pools = self.attnrt_kv.view(num_blocks, NUM_KV_HEADS, 2, block_size, HEAD_SIZE)
        if fp8():
            pools = pools.view(torch.float8_e5m2 if KV_CACHE_DTYPE == "fp8_e5m2"
                               else torch.float8_e4m3fn)
            self.k_scale = self.v_scale = torch.tensor([FP8_SCALE], dtype=torch.float32)
        self.attnrt_k, self.attnrt_v = pools[:, :, 0], pools[:, :, 1]
        self.isa = vllm_isa(dtype, block_size)
        pos = torch.arange(context)
        for b in range(batch):  # the same K/V rows, each backend's own writer
            k = torch.randn(context, NUM_KV_HEADS, HEAD_SIZE, generator=g).to(dtype)
            v = torch.randn(context, NUM_KV_HEADS, HEAD_SIZE, generator=g).to(dtype)
            blocks = self.block_table[b].long()[pos // block_size]
            slots = blocks * block_size + pos % block_size
            off = (pos % block_size)
            if fp8():
                from attnrt._vllm_backend import fp8_rows_as_vllm

                ops.cpu_attn_reshape_and_cache(k, v, vk, vv, slots, self.isa, k_scale=FP8_SCALE,
                                               v_scale=FP8_SCALE, kv_cache_dtype=KV_CACHE_DTYPE)
                pools.view(torch.uint8)[blocks, :, 0, off] = \
                    fp8_rows_as_vllm(k, FP8_SCALE, KV_CACHE_DTYPE).view(torch.uint8)
                pools.view(torch.uint8)[blocks, :, 1, off] = \
                    fp8_rows_as_vllm(v, FP8_SCALE, KV_CACHE_DTYPE).view(torch.uint8)
                continue
            ops.cpu_attn_reshape_and_cache(k, v, vk, vv, slots, self.isa)
            self.attnrt_k[blocks, :, off] = k
            self.attnrt_v[blocks, :, off] = v
        self.vllm_out = torch.empty_like(self.query)
        self.attnrt_out = torch.empty_like(self.query)
        self.kv_copy = None
        self.alibi = (torch.tensor([2.0 ** (-8.0 * (h + 1) / NUM_HEADS) for h in range(NUM_HEADS)],
                                   dtype=torch.float32) if ALIBI else None)

    def vllm_metadata(self):
        from vllm import _custom_ops as ops

        return ops.cpu_attn_get_scheduler_metadata(
            num_reqs=self.batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
            head_dim=HEAD_SIZE, seq_lens=self.seq_lens, dtype=self.dtype,
            query_start_loc=self.query_start_loc, causal=True, sliding_window_size=-1,
            isa=self.isa, enable_kv_split=False, kv_cache_dtype=KV_CACHE_DTYPE)

    def run_vllm(self, metadata):
        from vllm import _custom_ops as ops

        ops.cpu_attention_with_kv_cache(
            query=self.query, key_cache=self.vllm_k, value_cache=self.vllm_v, output=self.vllm_out,
            query_start_loc=self.query_start_loc, seq_lens=self.seq_lens, scale=self.scale,
            causal=True, alibi_slopes=self.alibi, sliding_window=-1, block_table=self.block_table,
            softcap=0.0, scheduler_metadata=metadata, s_aux=None,
            **({"k_scale": FP8_SCALE, "v_scale": FP8_SCALE, "kv_cache_dtype": KV_CACHE_DTYPE}
               if fp8() else {}))

    def read_kv(self):
        """Reads as many bytes as the step's K/V once (a sum, as int64 words, of a copy of attnrt's
        cache with its own memory, so that it meets the caches as cold as the two backends do):
        the time no attention over this cache can beat, the memory floor of the cell."""
        if self.kv_copy is None:
            self.kv_copy = self.attnrt_kv.clone()
        return self.kv_copy.view(torch.int64).sum()

    def run_attnrt(self, rt, python_path=False, p_precision="exact"):
        """attnrt's step: rt is an attnrt.Runtime (its own threads), or the int id of a runtime of
        the C++ operator on torch's intra-op threads (as the vLLM backend runs it). p_precision
        other than "exact" is passed on (the operator's argument after kv_layout; the keyword)."""
        import attnrt
        from attnrt import _torch_lib, _varlen

        if isinstance(rt, int):
            extra = () if p_precision == "exact" else (p_precision,)
            if fp8():
                extra = (p_precision, True, self.k_scale, self.v_scale)
            if ALIBI:
                scales = (self.k_scale, self.v_scale) if fp8() else (None, None)
                extra = (p_precision, True, *scales, None, self.alibi)
            _torch_lib._varlen_on(rt, self.query, self.attnrt_k, self.attnrt_v,
                                  self.query_start_loc, self.seq_lens, self.block_table,
                                  self.attnrt_out, None, None, None, None, self.scale, -1, 0.0,
                                  "BNSH", *extra)
            return
        fn = _varlen.paged_attention_varlen_python if python_path else attnrt.paged_attention_varlen
        kw = {} if p_precision == "exact" else {"p_precision": p_precision}
        if fp8():
            kw.update(k_scale=self.k_scale, v_scale=self.v_scale)
        if ALIBI:
            kw.update(alibi_slopes=self.alibi)
        fn(rt, self.query, self.attnrt_k, self.attnrt_v, self.query_start_loc, self.seq_lens,
           self.block_table, softmax_scale=self.scale, out=self.attnrt_out, kv_layout="BNSH",
           block_size=self.block_size, **kw)


def reference(cell):
    """float64 attention over the plain rows (attnrt's cache), for the correctness check."""
    out = torch.empty(cell.batch, NUM_HEADS, HEAD_SIZE, dtype=torch.float64)
    group = NUM_HEADS // NUM_KV_HEADS
    pos = torch.arange(cell.context)
    for b in range(cell.batch):
        blocks = cell.block_table[b].long()[pos // cell.block_size]
        off = pos % cell.block_size
        scale = FP8_SCALE if fp8() else 1.0  # the dequantized rows of an fp8 cache
        k = (cell.attnrt_k[blocks, :, off].double() * scale).repeat_interleave(group, 1)  # [T,N,H]
        v = (cell.attnrt_v[blocks, :, off].double() * scale).repeat_interleave(group, 1)
        s = torch.einsum("nh,tnh->nt", cell.query[b].double(), k) * cell.scale
        if cell.alibi is not None:  # the decode row sits at position context - 1
            s = s + cell.alibi.double().reshape(-1, 1) * (pos.double() - (cell.context - 1))
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


def make_runtimes(args, threads):
    """attnrt's runtimes per thread count, made with ATTNRT_DEBUG=1 so that each logs the plans it
    makes (kernel=...): a plan is made on a cell's first call, which kernel_table reads."""
    import attnrt
    from attnrt import _torch_lib

    sink = [""]
    with stderr_captured(sink), env_set("ATTNRT_DEBUG", "1"):
        if args.own_pool or not _torch_lib.load():
            runtimes = {t: attnrt.Runtime(num_threads=t, debug=True) for t in threads}
            what = "attnrt: attnrt.Runtime(num_threads=t), threads of its own"
        else:
            runtimes = {t: _torch_lib.torch_threads_runtime(t) for t in threads}
            what = ("attnrt: the C++ operator's runtime on torch's intra-op threads (as the vLLM "
                    "backend runs it)")
    print(what, flush=True)
    py_runtimes = ({t: attnrt.Runtime(num_threads=t) for t in threads} if args.python_path
                   else {})
    return runtimes, py_runtimes


def header_line(args, modes):
    amx_host = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    disabled = os.environ.get("ATTNRT_DISABLE", "")
    if NO_AMX:
        amx = (f"AMX excluded (--no-amx): vLLM's ISA amx -> vec, attnrt ATTNRT_DISABLE={disabled}"
               f" (this host {'has' if amx_host else 'has no'} AMX)")
    else:
        amx = (f"AMX as this host has it ({'AMX' if amx_host else 'no AMX'}; ATTNRT_DISABLE="
               f"{disabled or 'unset'})")
    cache = "; KV cache float8 e4m3fn (scales 1.0)" if fp8() else ""
    alibi = "; ALiBi (Bloom's slopes)" if ALIBI else ""
    return f"{amx}; attnrt p_precision: {', '.join(modes)}{cache}{alibi}"


def attnrt_call(cell, rt, mode, seen, key):
    """cell.run_attnrt, returning the kernel of the plan the call made (from the runtime's log);
    a plan from the cache made no line: the kernel last seen for the same key (thread count, mode,
    dtype, block size, new tokens), else for the same key but the new tokens."""
    sink = [""]
    with stderr_captured(sink):
        cell.run_attnrt(rt, p_precision=mode)
    found = PLAN_LOG.findall(sink[0])
    if found:
        seen[key] = seen[key[:-1]] = found[-1][1]
    return seen.get(key, seen.get(key[:-1], "? (a plan from the cache)"))


def kernel_table(args, step, contexts, runtimes, py_runtimes, seen):
    """Rows of one table: step "decode" (batch 1 and 8, one new token) or "prefill" (batch 1, a
    PREFILL_CHUNK-token chunk, contexts >= PREFILL_CHUNK)."""
    threads = [int(t) for t in args.threads.split(",")]
    modes = args.modes
    batches, q_len = (1, 8), 1
    if step == "prefill":  # one chunk of a chunked prefill: the last 2048 tokens are new
        batches, q_len = (1,), PREFILL_CHUNK
        contexts = [c for c in contexts if c >= PREFILL_CHUNK]
    rows = []
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    block_sizes = [int(b) for b in args.block_sizes.split(",")]
    shown = None
    for dtype, block_size, batch, context in itertools.product(dtypes, block_sizes, batches,
                                                               contexts):
        cell = Cell(batch, context, block_size, dtype, q_len=q_len)
        metadata_by_t, kernels_by_t = {}, {}
        for t in threads:
            torch.set_num_threads(t)
            metadata_by_t[t] = cell.vllm_metadata()
            cell.run_vllm(metadata_by_t[t])
            if q_len == 1:
                if t == threads[0]:  # the float64 reference once per cell
                    ref = reference(cell)
                err_v = (cell.vllm_out.double() - ref).abs().max().item()
            else:  # prefill cells: the two backends against each other only
                err_v = err_a = float("nan")
            kernels, diff, tol = {}, 0.0, TOLERANCE[dtype]
            for mode in modes:
                key = (t, mode, dtype, block_size, q_len)
                kernels[mode] = attnrt_call(cell, runtimes[t], mode, seen, key)
                if q_len == 1 and mode == modes[0]:
                    err_a = (cell.attnrt_out.double() - ref).abs().max().item()
                d = (cell.vllm_out.double() - cell.attnrt_out.double()).abs().max().item()
                if fp8() and q_len == 1:
                    # vLLM's bfloat16 fp8 kernel is further from float64 than its bfloat16 one
                    # (measured 0.024 at 1k tokens): the two agree within their errors.
                    tol = max(TOLERANCE[dtype], err_v + err_a)
                if not d <= tol:
                    raise SystemExit(f"outputs differ: {dtype} bs {block_size} batch {batch} ctx "
                                     f"{context} threads {t} p_precision {mode}: max |vllm - "
                                     f"attnrt| {d:.3g} > {tol} (vs float64: vllm {err_v:.3g}, "
                                     f"attnrt ({modes[0]}) {err_a:.3g})")
                diff = max(diff, d)
            kernels_by_t[t] = kernels
            if (cell.isa, kernels) != shown:
                shown = (cell.isa, kernels)
                print(f"  kernels from {str(dtype).replace('torch.', '')} bs {block_size} {step}: "
                      f"vLLM isa {cell.isa}; attnrt " +
                      ", ".join(f"{m} {k}" if len(modes) > 1 else k for m, k in kernels.items()),
                      flush=True)
            if args.python_path:
                cell.run_attnrt(runtimes[t], p_precision=modes[0])
                got = cell.attnrt_out.clone()
                cell.run_attnrt(py_runtimes[t], python_path=True, p_precision=modes[0])
                if not torch.equal(got, cell.attnrt_out):
                    raise SystemExit("attnrt's C++ operator and Python path differ")
            reps = args.reps if batch * context <= 32768 and q_len == 1 else max(3, args.reps // 2)
            rt, md = runtimes[t], metadata_by_t[t]
            fns = [lambda: cell.run_vllm(md)]
            fns += [lambda m=m: cell.run_attnrt(rt, p_precision=m) for m in modes]
            fns.append(cell.read_kv)
            if args.python_path:
                fns.append(lambda: cell.run_attnrt(py_runtimes[t], python_path=True,
                                                   p_precision=modes[0]))
            times = time_interleaved(fns, reps)
            tv, by_mode, tr = times[0], dict(zip(modes, times[1:1 + len(modes)])), \
                times[1 + len(modes)]
            row = dict(dtype=str(dtype).replace("torch.", ""), block_size=block_size, batch=batch,
                       context=context, threads=t, vllm_ms=tv * 1e3,
                       attnrt_ms=by_mode[modes[0]] * 1e3, ratio=tv / by_mode[modes[0]],
                       read_ms=tr * 1e3, max_diff=diff, err_vllm=err_v, err_attnrt=err_a,
                       ms_by_mode={m: x * 1e3 for m, x in by_mode.items()},
                       ratio_by_mode={m: tv / x for m, x in by_mode.items()},
                       step=step, isa=cell.isa, kernels=kernels)
            if args.python_path:
                row.update(attnrt_py_ms=times[-1] * 1e3, ratio_py=tv / times[-1])
            rows.append(row)
            py = (f"  attnrt (Python path) {row['attnrt_py_ms']:8.3f} ms ratio "
                  f"{row['ratio_py']:5.2f}" if args.python_path else "")
            if modes == ["exact"]:
                at = f"attnrt {row['attnrt_ms']:8.3f} ms  ratio {row['ratio']:5.2f}"
            else:
                at = "  ".join(f"attnrt {m} {row['ms_by_mode'][m]:8.3f} ms ratio "
                               f"{row['ratio_by_mode'][m]:5.2f}" for m in modes)
            print(f"{row['dtype']:8s} bs {block_size:3d} batch {batch} ctx {context:5d} "
                  f"t {t}: vLLM {row['vllm_ms']:8.3f} ms  {at}{py}  K/V read "
                  f"{row['read_ms']:8.3f} ms  (max |diff| {diff:.2g})", flush=True)
        cell = None  # its caches go before the next cell's are made
    return rows


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def markdown(rows, modes):
    if "ratio_py" in rows[0]:
        return markdown_paths(rows)
    threads = sorted({r["threads"] for r in rows})
    plain = modes == ["exact"]  # the table as it was before precision modes

    def attnrt_heads(t):
        if plain:
            return [f"attnrt ms ({t}t)", f"ratio ({t}t)"]
        return [h for m in modes for h in (f"attnrt ms ({m}, {t}t)", f"ratio ({m}, {t}t)")]

    heads = [h for t in threads
             for h in [f"vLLM ms ({t}t)"] + attnrt_heads(t) + [f"K/V read ms ({t}t)"]]
    per_t = 2 + 2 * len(modes)
    lines = ["| dtype | block | batch | context | " + " | ".join(heads) + " |",
             "|---|---|---|---|" + "---|" * (per_t * len(threads))]
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
            cells.append(" | ".join([""] * per_t) if r is None else
                         f"{r['vllm_ms']:.3f} | " +
                         "".join(f"{r['ms_by_mode'][m]:.3f} | {r['ratio_by_mode'][m]:.2f} | "
                                 for m in modes) + f"{r['read_ms']:.3f}")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(cells) + " |")
    for t in threads:
        for m in modes:
            ratios = [r["ratio_by_mode"][m] for r in rows if r["threads"] == t]
            what = f"{t} thread(s)" if plain else f"{t} thread(s), p_precision {m}"
            lines.append(f"\n{what}: geomean ratio {geomean(ratios):.2f}, min {min(ratios):.2f}, "
                         f"max {max(ratios):.2f} over {len(ratios)} cells")
    groups = {}
    for r in rows:
        g = groups.setdefault((r["dtype"], r["block_size"], r["step"]), ({}, {}))
        g[0][r["isa"]] = None
        for m, name in r["kernels"].items():
            g[1].setdefault(m, {})[name] = None
    lines.append("\nkernels: " + "; ".join(
        f"{d} block {b} {s}: vLLM isa {'/'.join(isas)}, attnrt " +
        ", ".join(("" if plain else f"{m} ") + "/".join(names) for m, names in ks.items())
        for (d, b, s), (isas, ks) in groups.items()))
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
            lines.append(f"\n{t} thread(s), {what}: geomean ratio {geomean(ratios):.2f}, "
                         f"min {min(ratios):.2f}, "
                         f"max {max(ratios):.2f} over {len(ratios)} cells")
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


TABLES = {  # --table: (dtypes, block sizes, decode contexts, prefill contexts)
    "bf16": ("bfloat16", "128,16", "1024,4096,16384", "2048,4096"),
}


def main():
    global NO_AMX, KV_CACHE_DTYPE, ALIBI
    request_amx_permission()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="contexts 1k and 4k only")
    p.add_argument("--contexts", default=None, help="comma-separated contexts (e.g. 1024)")
    p.add_argument("--dtypes", default=None, help="comma-separated, of float32 and bfloat16 "
                   "(default: both)")
    p.add_argument("--block-sizes", default=None, help="comma-separated (default: 16,128)")
    p.add_argument("--table", choices=sorted(TABLES), default=None,
                   help="bf16: bfloat16, block sizes 128 and 16; a decode table (batch 1 and 8, "
                        "contexts 1k, 4k, 16k) and a prefill table (2048-token chunks over "
                        "contexts 2048 and 4096) in one run")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--python-path", action="store_true",
                   help="also time attnrt's Python path (PagedGqaVarlenOp through SWIG and DLPack, "
                        "as before the C++ operator), interleaved (first --p-precision mode)")
    p.add_argument("--own-pool", action="store_true",
                   help="run attnrt on attnrt.Runtime(num_threads=t), threads of its own, instead "
                        "of the C++ operator's runtime on torch's intra-op threads")
    p.add_argument("--prefill", action="store_true",
                   help="one chunked-prefill step per cell instead of a decode step: the last "
                        f"{PREFILL_CHUNK} tokens of one sequence new, contexts >= {PREFILL_CHUNK}")
    p.add_argument("--no-amx", action="store_true",
                   help="both sides as on a host without AMX: vLLM's ISA amx -> vec, attnrt with "
                        f"ATTNRT_DISABLE={AMX_GLOB} (end to end too)")
    p.add_argument("--kv-cache-dtype", choices=("auto", "fp8", "fp8_e5m2"), default="auto",
                   help="fp8: both caches float8 e4m3fn (vLLM's kv_cache_dtype fp8, scales 1.0; "
                        "fp8_e5m2: float8 e5m2; kernel tables only)")
    p.add_argument("--alibi", action="store_true",
                   help="Bloom's ALiBi slopes on both sides (kernel tables only)")
    p.add_argument("--p-precision", default="exact",
                   help="comma-separated attnrt precision modes, of exact and input: one attnrt "
                        "column (end to end: one attnrt run) per mode (default: exact)")
    p.add_argument("--out", default=None, help="append the markdown table(s) here")
    vllm_e2e.add_arguments(p, dtypes=sorted(DTYPES), prefill_chunk=PREFILL_CHUNK)
    args = p.parse_args()
    args.modes = [m.strip() for m in args.p_precision.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in P_PRECISIONS]
    if bad or not args.modes or len(set(args.modes)) != len(args.modes):
        p.error(f"--p-precision: expected distinct modes among {', '.join(P_PRECISIONS)}, got "
                f"'{args.p_precision}'")
    vllm_e2e.check_arguments(p, args)
    NO_AMX = args.no_amx
    KV_CACHE_DTYPE = args.kv_cache_dtype
    ALIBI = args.alibi
    if NO_AMX:  # before attnrt makes any runtime (the C++ operator's are made on first use)
        disable_amx_in(os.environ)
    if args.e2e:
        text = vllm_e2e.e2e(args, header_line(args, args.modes), PLAN_LOG)
    else:
        text = kernel_tables(args, p)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


def kernel_tables(args, p):
    steps = ["prefill"] if args.prefill else ["decode"]
    prefill_contexts, args.contexts_given = None, args.contexts is not None
    if args.table:
        dtypes, block_sizes, decode_contexts, prefill_contexts = TABLES[args.table]
        args.dtypes = args.dtypes or dtypes
        args.block_sizes = args.block_sizes or block_sizes
        args.contexts = args.contexts or decode_contexts
        steps = ["decode", "prefill"]
    args.dtypes = args.dtypes or "float32,bfloat16"
    args.block_sizes = args.block_sizes or "16,128"
    for d in args.dtypes.split(","):
        if d not in DTYPES:
            p.error(f"--dtypes: expected float32 or bfloat16, got '{d}'")
    contexts = [1024, 4096] if args.quick else [1024, 4096, 16384]
    if args.contexts:
        contexts = [int(c) for c in args.contexts.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    runtimes, py_runtimes = make_runtimes(args, threads)
    check_p_precision(args.modes, runtimes[threads[0]])
    print(header_line(args, args.modes), flush=True)
    seen, texts = {}, []
    for step in steps:
        ctx = contexts
        if step == "prefill" and prefill_contexts and not args.contexts_given:
            ctx = [int(c) for c in prefill_contexts.split(",")]
        rows = kernel_table(args, step, ctx, runtimes, py_runtimes, seen)
        if not rows:
            p.error(f"{step}: no cell (contexts {ctx}; a prefill chunk needs >= {PREFILL_CHUNK})")
        title = ("" if len(steps) == 1 else
                 "decode (one new token per sequence):\n\n" if step == "decode" else
                 f"prefill (a {PREFILL_CHUNK}-token chunk, batch 1):\n\n")
        texts.append(title + markdown(rows, args.modes))
    return "\n\n".join(texts)


if __name__ == "__main__":
    main()
