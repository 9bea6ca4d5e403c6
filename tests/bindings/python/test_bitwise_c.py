"""Every op through Python equals the same plan run from C, bitwise.

One plan is made through the Python API, then run four ways on separate copies of the outputs and
of every input the op writes (gqa's shared past/present buffers, paged_gqa's block pools):
plan.run on numpy arrays, plan.bind(...)(), plan.run on torch tensors, and attnrt_plan_run through
bench/python/attnrt_ctypes.py (descriptors the binding did not make). Outputs start with a
different fill per way, so an element one way leaves unwritten cannot compare equal.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import attnrt
from test_sparse_mla import make_case

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "python"))
import attnrt_ctypes  # noqa: E402

torch = pytest.importorskip("torch")

SEED = int(os.environ.get("ATTNRT_TEST_SEED", "4242"))
BF16 = np.dtype(ml_dtypes.bfloat16)
WAYS = ("run", "bind", "torch", "ctypes")


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


@pytest.fixture(scope="module")
def lib():
    return attnrt_ctypes.load()


def to_torch(a):
    if a is None:
        return None
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)  # same memory
    return torch.from_numpy(a)


def by_position(names, arrays):
    return [arrays.get(n) for n in names]


def run_every_way(lib, op, inputs, outputs, written=()):
    """Plans `op` once for `inputs`/`outputs` (dicts by name) and runs it each way on copies of
    the outputs and of the inputs named in `written` (an output that is the same array as a
    written input stays that same array in each copy). Returns {way: {name: array}}."""
    plan = op.plan(inputs, outputs)
    results = {}
    for fill, way in enumerate(WAYS):
        ins = dict(inputs)
        copies = {}
        for name in written:
            copies[id(inputs[name])] = ins[name] = inputs[name].copy()
        outs = {}
        for name, array in outputs.items():
            if id(array) in copies:
                outs[name] = copies[id(array)]
            else:
                outs[name] = np.empty_like(array)
                outs[name].view(np.uint8)[...] = 0x5A + 17 * fill
        if way == "run":
            plan.run(ins, outs)
        elif way == "bind":
            plan.bind(ins, outs)()
        elif way == "torch":
            plan.run({k: to_torch(v) for k, v in ins.items()},
                     {k: to_torch(v) for k, v in outs.items()})
        else:
            attnrt_ctypes.plan_runner(lib, int(plan._h().this), by_position(op.INPUTS, ins),
                                      by_position(op.OUTPUTS, outs))()
        results[way] = {**outs, **{n: ins[n] for n in written}}
    return plan, results


def assert_bitwise(results):
    reference = results["ctypes"]
    for way, arrays in results.items():
        assert arrays.keys() == reference.keys()
        for name, array in arrays.items():
            c = reference[name]
            assert array.shape == c.shape and array.dtype == c.dtype, (way, name)
            same = array.view(np.uint8) == c.view(np.uint8)
            assert same.all(), (f"{name}: plan via {way} differs from attnrt_plan_run in "
                                f"{np.count_nonzero(~same)} of {same.size} bytes")


def values(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


N, NKV, H = 8, 2, 64


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("phase", ["prompt", "decode"])
def test_gqa(rt, lib, dtype, phase):
    seed = SEED + (dtype == BF16) + 2 * (phase == "decode")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    b, capacity = 2, 40
    op = rt.gqa_op(N, NKV)
    if phase == "prompt":
        s = 12
        inputs = {"query": values(rng, (b, s, N * H), dtype),
                  "key": values(rng, (b, s, NKV * H), dtype),
                  "value": values(rng, (b, s, NKV * H), dtype),
                  "seqlens_k": np.array([s - 1, s - 1], np.int32),
                  "total_sequence_length": np.array([s], np.int32)}
        outputs = {name: np.empty(shape, dtype) for name, (shape, _) in
                   op.output_shapes(inputs).items()}
        written = ()
    else:                                     # one token on shared past/present buffers
        totals = [29, 17]
        cache_k = values(rng, (b, NKV, capacity, H), dtype)
        cache_v = values(rng, (b, NKV, capacity, H), dtype)
        inputs = {"query": values(rng, (b, 1, N * H), dtype),
                  "key": values(rng, (b, 1, NKV * H), dtype),
                  "value": values(rng, (b, 1, NKV * H), dtype),
                  "past_key": cache_k, "past_value": cache_v,
                  "seqlens_k": np.array([t - 1 for t in totals], np.int32),
                  "total_sequence_length": np.array([max(totals)], np.int32)}
        outputs = {"output": np.empty((b, 1, N * H), dtype), "present_key": cache_k,
                   "present_value": cache_v}
        written = ("past_key", "past_value")
    plan, results = run_every_way(lib, op, inputs, outputs, written)
    assert plan.kernel.startswith("cpu_x86.gqa.")
    assert_bitwise(results)
    if phase == "decode":                     # the step's rows were written into every copy
        for arrays in results.values():
            new_k = inputs["key"].reshape(b, 1, NKV, H)
            assert np.array_equal(arrays["past_key"][0, :, 28], new_k[0, 0])
            assert arrays["present_key"] is arrays["past_key"]


@pytest.mark.parametrize("layout", ["BSNH", "BNSH"])
@pytest.mark.parametrize("s", [1, 3], ids=["decode", "chunk"])
def test_paged_gqa(rt, lib, layout, s):
    seed = SEED + 10 + (layout == "BNSH") + 2 * (s == 3)
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    num_blocks, block_size = 12, 4
    past = [5, 13] if s == 1 else [13]        # ONNX Runtime: a multi-token step with a past has B 1
    b = len(past)
    with attnrt.BlockPool(num_blocks, block_size) as pool:
        seqs = [pool.add_sequence() for _ in past]
        for seq, length in zip(seqs, past):
            pool.append(seq, length + s)          # this step's tokens appended
        table, seqlens = pool.block_table(seqs, 5)
    shape = ((num_blocks, block_size, NKV, H) if layout == "BSNH"
             else (num_blocks, NKV, block_size, H))
    inputs = {"query": values(rng, (b, s, N * H), np.float32),
              "key": values(rng, (b, s, NKV * H), np.float32),
              "value": values(rng, (b, s, NKV * H), np.float32),
              "key_cache": values(rng, shape, np.float32),
              "value_cache": values(rng, shape, np.float32),
              "seqlens_k": seqlens, "total_sequence_length": np.array([seqlens.max() + 1],
                                                                      np.int32),
              "block_table": table}
    op = rt.paged_gqa_op(N, NKV, block_size, kv_layout=layout)
    outputs = {"output": np.empty((b, s, N * H), np.float32)}
    plan, results = run_every_way(lib, op, inputs, outputs, ("key_cache", "value_cache"))
    assert plan.kernel.startswith("cpu_x86.paged_gqa.")
    assert_bitwise(results)
    changed = results["ctypes"]["key_cache"] != inputs["key_cache"]
    assert changed.any()                          # the step's rows went into the pool


SPARSE_CASES = [(1, "bf16", "CSA", "BSND/BSND"), (2, "bf16", "HCA", "BSND/PA_BBND"),
                (3, "bf16", "CSA", "TND/TND"), (3, "fp16", "SWA", "BSND/PA_BBND")]


@pytest.mark.parametrize("mode,qdt,scenario,layout", SPARSE_CASES,
                         ids=[f"mode{m}-{q}-{s}" for m, q, s, _ in SPARSE_CASES])
def test_sparse_mla_and_its_metadata(rt, lib, mode, qdt, scenario, layout):
    seed = SEED + 20 + mode + (qdt == "fp16")
    print(f"seed {seed}")
    inputs, _, attrs = make_case(np.random.default_rng(seed), mode, scenario, layout, qdt,
                                 variant=0)       # sinks, softmax LSE, masks
    meta_op = rt.sparse_mla_metadata_op(mode, **attrs)
    meta_out = {meta_op.OUTPUTS[0]: np.empty(2048, np.int32)}
    plan, meta = run_every_way(lib, meta_op, inputs, meta_out)
    assert_bitwise(meta)
    metadata = meta["ctypes"][meta_op.OUTPUTS[0]]
    assert metadata.dtype == np.int32 and metadata.shape == (2048,)

    op = rt.sparse_mla_op(mode, **attrs)
    inputs = dict(inputs, metadata=metadata)
    outputs = {name: np.empty(shape, inputs["q"].dtype if dtype is None else dtype)
               for name, (shape, dtype) in op.output_shapes(inputs).items()}
    assert set(outputs) == {"attn_out", "softmax_lse"}
    plan, results = run_every_way(lib, op, inputs, outputs)
    assert plan.kernel.startswith("sparse_mla.")
    assert_bitwise(results)
    out = results["ctypes"]["attn_out"].astype(np.float32)
    assert np.isfinite(out).all() and np.any(out != 0)
