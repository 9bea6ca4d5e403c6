"""sliding_window_cache=1 (docs/gqa-semantics.md) against onnxruntime, step by step.

The cache buffer (capacity C = P) holds the most recent resident rows at [0, end); ONNX Runtime
(group_query_attention.cc, PlanWindowedKvCache / WindowedCacheEnd) reclaims whole blocks of
C - W + 1 rows and runs a multi-token step that would evict rows it still needs against a staging
cache. Each sequence below feeds onnxruntime's present of one step as the past of the next, to
both, so every step is compared on equal inputs. Every kernel of the family that accepts the
problem runs (naive and flash, scalar and AVX2). Compared: output, and present rows [0, end) per
batch (rows after end are left unspecified by onnxruntime); quantized caches byte for byte.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnrt_runner import AttnrtError, attnrt
from conftest import suite_seed
from gqa_cases import quant_scales, randn, rope_caches
from gqa_model import run_ort
from test_gqa_parity import TOL

N, NKV, H = 4, 2, 32  # H % 32 == 0: 4-bit windowed caches need it (ORT's checks)
C, W = 8, 5  # capacity and window: reclaimed blocks of C - W + 1 = 4 rows
M = 64  # rotary cache rows (absolute positions)
KERNELS = ("cpu_x86.gqa.naive.scalar", "cpu_x86.gqa.naive.avx2", "cpu_x86.gqa.flash.scalar",
           "cpu_x86.gqa.flash.avx2")
_runtimes: dict[str, attnrt.Runtime] = {}


def _runtime(kernel: str) -> attnrt.Runtime:
    if kernel not in _runtimes:
        _runtimes[kernel] = attnrt.Runtime(kernel=kernel)
    return _runtimes[kernel]


def window_end(length: int) -> int:
    """Rows resident after `length` tokens (ONNX Runtime's WindowedCacheEnd)."""
    if length <= C:
        return length
    gap = C - W + 1
    return length - gap * ((length - C + gap - 1) // gap)


def run_kernel(kernel: str, attrs: dict, feeds: dict, shared: bool = False):
    """attnrt on one kernel; present has the window capacity C. None when the kernel declines.
    shared: present_key/value are past_key/value's memory (compacted in place)."""
    q = feeds["query"]
    past = feeds["past_key"]
    outputs = {"output": np.full(q.shape, np.nan, q.dtype)}
    if shared:
        feeds = dict(feeds, past_key=feeds["past_key"].copy(),
                     past_value=feeds["past_value"].copy())
    for name in ("present_key", "present_value"):
        if shared:
            outputs[name] = feeds[name.replace("present", "past")]
            continue
        outputs[name] = np.empty(past.shape, past.dtype)
        outputs[name].view(np.uint8).fill(0xA5)
    with attnrt.GqaOp(_runtime(kernel), **attrs) as op:
        try:
            plan = op.plan(feeds, outputs)
        except AttnrtError as e:
            if "no kernel" in str(e).lower() or "declin" in str(e).lower():
                return None
            raise
        with plan:
            plan.run(feeds, outputs)
    return outputs


def compare(kernel, step, name, actual, expected, dtype, quantized, resident):
    if name == "output":
        mask = np.ones(expected.shape, bool)
    else:  # rows [0, end_b) of batch b
        rows = np.arange(expected.shape[2])[None, :] < resident[:, None]
        mask = np.broadcast_to(rows[:, None, :, None], expected.shape)
    where = f"[ATTNRT_TEST_SEED={suite_seed()}] {kernel} step {step} {name}"
    if name != "output" and quantized:
        bad = np.argwhere((actual != expected) & mask)
        assert len(bad) == 0, f"{where}: {len(bad)} bytes differ, first at {tuple(bad[0])}"
        return
    a, e = actual.astype(np.float64)[mask], expected.astype(np.float64)[mask]
    atol, rtol = TOL[np.dtype(dtype)]
    assert np.isfinite(a).all(), f"{where}: non-finite values"
    err = np.abs(a - e)
    assert (err <= atol + rtol * np.abs(e)).all(), f"{where}: max abs error {err.max():.3g}"


# Sequences of steps (S per step) with B = 1 (a subsequent prompt needs B = 1), starting from an
# empty cache: "short" first prompt fills less than C, then decodes that wrap the cache (compaction)
# and a 4-token step that needs staging; "long" first prompt exceeds C (staging from the start).
SEQUENCES = {"short": [5, 1, 1, 1, 1, 1, 1, 4, 1, 1], "long": [13, 1, 1, 1, 3, 1]}
CACHES = [("float", "float32"), ("float", "float16"), ("int8/PER_TENSOR", "float32"),
          ("int4/PER_CHANNEL", "float16"), ("int8/PER_CHANNEL", "float16"),
          ("int4/PER_TENSOR", "float32")]


def make_setup(cache: str, dtype: str, rng, B: int):
    dtype = np.dtype(dtype)
    bits, mode = (0, "NONE") if cache == "float" else (int(cache[3]), cache[5:])
    attrs = {"num_heads": N, "kv_num_heads": NKV, "local_window_size": W,
             "sliding_window_cache": 1, "do_rotary": 1}
    fixed = {}
    fixed["cos_cache"], fixed["sin_cache"] = rope_caches(rng, M, H, dtype)
    if bits:
        attrs.update(k_quant_type=mode, v_quant_type=mode, kv_cache_bit_width=bits)
        sample = randn(rng, (B, 4, NKV * H), np.float32)
        qmax = 127 if bits == 8 else 7
        fixed["k_scale"] = quant_scales(sample, mode, qmax, NKV, H)
        fixed["v_scale"] = quant_scales(sample, mode, qmax, NKV, H)
    cache_dtype = dtype if not bits else (np.int8 if bits == 8 else np.uint8)
    hc = H // 2 if bits == 4 else H
    return dtype, bits, attrs, fixed, cache_dtype, hc


def random_cache(rng, shape, cache_dtype, bits):
    if bits:
        lo, hi = (-128, 128) if bits == 8 else (0, 256)
        return rng.integers(lo, hi, shape).astype(cache_dtype)
    return randn(rng, shape, cache_dtype)


def run_sequence(steps, start_totals, cache, dtype, rng, first_prompt_with_past=False,
                 shared=False):
    """Runs len(steps) steps from per-batch absolute lengths `start_totals`; the initial cache is
    random (any content is a valid cache). Returns the kernels that ran. first_prompt_with_past:
    total_sequence_length = S (the first-prompt phase, whose RoPE positions are pos0 + s with pos0
    = position_ids[0]) while seqlens_k says resident rows exist, which attention still reads."""
    B = len(start_totals)
    dtype, bits, attrs, fixed, cache_dtype, hc = make_setup(cache, dtype, rng, B)
    past_k = random_cache(rng, (B, NKV, C, hc), cache_dtype, bits)
    past_v = random_cache(rng, (B, NKV, C, hc), cache_dtype, bits)
    totals = np.array(start_totals)
    ran = set()
    for i, S in enumerate(steps):
        totals = totals + S
        feeds = dict(fixed)
        feeds.update(query=randn(rng, (B, S, N * H), dtype), key=randn(rng, (B, S, NKV * H), dtype),
                     value=randn(rng, (B, S, NKV * H), dtype), past_key=past_k, past_value=past_v,
                     seqlens_k=(totals - 1).astype(np.int32),
                     total_sequence_length=np.array([totals.max()], np.int32))
        if first_prompt_with_past:
            feeds["total_sequence_length"] = np.array([S], np.int32)
            # Only position_ids[0] counts in the first prompt; the others would give other angles.
            feeds["position_ids"] = rng.integers(0, M - S, (B, S)).astype(np.int64)
        expected = run_ort(attrs, feeds)
        resident = np.array([window_end(int(t)) for t in totals])
        for kernel in KERNELS:
            ours = run_kernel(kernel, attrs, feeds, shared)
            if ours is None:
                continue
            ran.add(kernel)
            for name in ("output", "present_key", "present_value"):
                compare(kernel, i, name, ours[name], expected[name], dtype, bits > 0, resident)
        past_k, past_v = expected["present_key"], expected["present_value"]
    return ran


@pytest.mark.parametrize("sequence", list(SEQUENCES))
@pytest.mark.parametrize("cache,dtype", CACHES, ids=[f"{c}-{d}" for c, d in CACHES])
def test_sliding_window_cache_sequence(sequence, cache, dtype, rng):
    ran = run_sequence(SEQUENCES[sequence], [0], cache, dtype, rng)
    naive = {k for k in ran if ".naive." in k}
    assert naive, "no naive kernel ran"
    # ONNX Runtime's flash paths (float32 with a float32 cache, any quantized cache) take it too,
    # and attnrt's flash kernels take the decode steps of a float16 cache (its prompts have the
    # local window: naive).
    assert {k for k in ran if ".flash." in k}, "no flash kernel ran"


@pytest.mark.parametrize("cache,dtype", CACHES[:4], ids=[f"{c}-{d}" for c, d in CACHES[:4]])
def test_sliding_window_cache_ragged_decode(cache, dtype, rng):
    """B = 3 decode from absolute lengths inside, at and far beyond the capacity."""
    run_sequence([1] * 6, [3, 8, 21], cache, dtype, rng)


@pytest.mark.parametrize("cache,dtype", CACHES[1:3], ids=[f"{c}-{d}" for c, d in CACHES[1:3]])
def test_sliding_window_cache_shared_past_present(cache, dtype, rng):
    """present_key/value are past_key/value's memory: compaction and staging in place."""
    run_sequence(SEQUENCES["short"], [0], cache, dtype, rng, shared=True)
    run_sequence([1, 1, 1, 1], [8, 30], cache, dtype, rng, shared=True)


@pytest.mark.parametrize("start", [4, 12])
def test_sliding_window_cache_first_prompt_phase_with_resident_rows(start, rng):
    """S == T (first prompt: RoPE at position_ids[0] + s) with seqlens_k beyond S - 1: the resident
    rows still take part, in place (start 4) or through staging (start 12)."""
    run_sequence([3], [start], "float", "float32", rng, first_prompt_with_past=True)


def test_sliding_window_cache_declines_without_present():
    """Present is the window cache: required (ONNX Runtime rejects the node without it)."""
    attrs = {"num_heads": N, "kv_num_heads": NKV, "local_window_size": W,
             "sliding_window_cache": 1}
    rng = np.random.default_rng(0)
    feeds = {"query": randn(rng, (1, 1, N * H), np.float32),
             "key": randn(rng, (1, 1, NKV * H), np.float32),
             "value": randn(rng, (1, 1, NKV * H), np.float32),
             "past_key": randn(rng, (1, NKV, C, H), np.float32),
             "past_value": randn(rng, (1, NKV, C, H), np.float32),
             "seqlens_k": np.array([9], np.int32),
             "total_sequence_length": np.array([10], np.int32)}
    with attnrt.GqaOp(_runtime(KERNELS[0]), **attrs) as op:
        with pytest.raises(AttnrtError, match="present"):
            op.plan(feeds, {"output": np.empty((1, 1, N * H), np.float32)})
