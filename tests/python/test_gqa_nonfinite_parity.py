"""Non-finite inputs (gqa-semantics.md, non-finite values) against onnxruntime's CPU EP: every
attnrt CPU GQA kernel, pinned, on the cases where that page's rule is what the pinned package
returns on its default path (a decode step, float32: ONNX Runtime's flash path, or its naive one
with a head sink). Compared element by element: NaN where onnxruntime has NaN, the same infinity,
else 1e-5; quantized present bytes identical. Also input validation where attnrt follows the
pinned package: a 0-d seqlens_k is rejected with its message.

Seed: ATTNRT_TEST_SEED, as in test_gqa_parity.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnrt_runner import AttnrtError, attnrt
from conftest import suite_seed
from gqa_model import run_ort

N, NKV, H, P = 4, 2, 64, 8
INF, NAN = np.inf, np.nan


def _kernels() -> list[str]:
    with attnrt.Runtime() as rt:
        return [k["name"] for p in rt.list()["plugins"] if p["available"]
                for k in p["kernels"] if k["op"] == "gqa" and k["device"] == "cpu"]


KERNELS = _kernels()


def decode_feeds(rng, bias=False, sink=False) -> dict:
    f = {"query": rng.standard_normal((1, 1, N * H)).astype(np.float32),
         "key": rng.standard_normal((1, 1, NKV * H)).astype(np.float32),
         "value": rng.standard_normal((1, 1, NKV * H)).astype(np.float32),
         "past_key": rng.standard_normal((1, NKV, P, H)).astype(np.float32),
         "past_value": rng.standard_normal((1, NKV, P, H)).astype(np.float32),
         "seqlens_k": np.array([P], np.int32),
         "total_sequence_length": np.array([P + 1], np.int32)}
    if bias:
        f["attention_bias"] = rng.standard_normal((1, N, 1, P + 1)).astype(np.float32)
    if sink:
        f["head_sink"] = rng.standard_normal(N).astype(np.float32)
    return f


def _set(name, index, value):
    def poison(f):
        f[name][index] = value
    return poison


def _both(*poisons):
    def poison(f):
        for p in poisons:
            p(f)
    return poison


# (id, bias, sink, poison): heads 0 and 1 read kv head 0.
CASES = [
    ("query-nan", False, False, _set("query", (0, 0, 3), NAN)),
    ("query-inf", False, False, _set("query", (0, 0, H + 5), INF)),
    ("past-key-row-inf", False, False, _set("past_key", (0, 0, 3), INF)),
    ("past-key-nan", False, False, _set("past_key", (0, 1, 6, 9), NAN)),
    ("new-key-nan", False, False, _set("key", (0, 0, 1), NAN)),
    ("past-value-inf", False, False, _set("past_value", (0, 0, 3, 5), INF)),
    ("past-value-nan", False, False, _set("past_value", (0, 1, 0, 63), NAN)),
    ("past-value-row-neg-inf", False, False, _set("past_value", (0, 0, 7), -INF)),
    ("bias-row-neg-inf", True, False, _set("attention_bias", (0, 0, 0), -INF)),
    ("bias-all-neg-inf", True, False, _set("attention_bias", (Ellipsis,), -INF)),
    ("bias-pos-inf", True, False, _set("attention_bias", (0, 1, 0, 4), INF)),
    ("bias-nan", True, False, _set("attention_bias", (0, 2, 0, 8), NAN)),
    ("bias-some-neg-inf", True, False, _set("attention_bias", (0, 3, 0, slice(0, 5)), -INF)),
    ("bias-neg-inf-value-inf", True, False,
     _both(_set("attention_bias", (0, 0, 0, 3), -INF), _set("past_value", (0, 0, 3, 5), INF))),
    ("bias-row-neg-inf-value-inf", True, False,
     _both(_set("attention_bias", (0, 0, 0), -INF), _set("past_value", (0, 0, 3, 5), INF))),
    ("bias-row-neg-inf-sink", True, True, _set("attention_bias", (0, 0, 0), -INF)),
    ("sink-pos-inf", False, True, _set("head_sink", (0,), INF)),
    ("sink-neg-inf", False, True, _set("head_sink", (1,), -INF)),
    ("sink-nan", False, True, _set("head_sink", (3,), NAN)),
]


def assert_same(got: np.ndarray, want: np.ndarray, what: str):
    assert got.shape == want.shape, what
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    inf = np.isinf(w)
    with np.errstate(invalid="ignore"):
        close = np.abs(g - w) <= 1e-5
    bad = (nan != np.isnan(g)) | (inf & (g != w)) | (~nan & ~inf & ~close)
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements differ; first at "
                           f"{tuple(int(i) for i in np.argwhere(bad)[0])}: attnrt "
                           f"{g[bad][0]!r}, onnxruntime {w[bad][0]!r}")


def run_pinned(kernel: str, attrs: dict, feeds: dict):
    """Outputs of attnrt with only `kernel` allowed; None when that kernel declines the call."""
    with attnrt.Runtime(kernel=kernel) as rt, attnrt.GqaOp(rt, **attrs) as op:
        outputs = {name: np.full(shape, np.nan, dtype) if np.issubdtype(dtype, np.floating)
                   else np.zeros(shape, dtype)
                   for name, (shape, dtype) in op.output_shapes(feeds).items()}
        try:
            plan = op.plan(feeds, outputs)
        except AttnrtError as e:
            if ".naive." in kernel:
                raise
            return None, str(e)
        with plan:
            plan.run(feeds, outputs)
            assert plan.kernel == kernel
        return outputs, None


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name,bias,sink,poison", CASES, ids=[c[0] for c in CASES])
def test_nonfinite_decode(kernel, name, bias, sink, poison, rng):
    feeds = decode_feeds(rng, bias, sink)
    poison(feeds)
    attrs = {"num_heads": N, "kv_num_heads": NKV}
    want = run_ort(attrs, feeds)
    got, declined = run_pinned(kernel, attrs, feeds)
    if got is None:
        pytest.skip(f"{kernel} declines: {declined}")
    where = f"[ATTNRT_TEST_SEED={suite_seed()}] {kernel}, {name}"
    for out in ("output", "present_key", "present_value"):
        assert_same(got[out], want[out], f"{where}: {out}")


SCALES = [("zero", 0.0), ("negative", -0.02), ("nan", NAN), ("inf", INF), ("denormal", 1e-40)]
QUANT = [(bits, mode) for bits in (8, 4) for mode in ("PER_TENSOR", "PER_CHANNEL")]


@pytest.mark.parametrize("bits,mode", QUANT, ids=[f"int{b}-{m}" for b, m in QUANT])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("label,value", SCALES, ids=[s[0] for s in SCALES])
def test_quantization_scales(bits, mode, which, label, value, rng):
    """Scales of 0, negative, NaN, inf or denormal follow ONNX Runtime's formulas (no validation):
    the quantized bytes written and the output, for each attnrt kernel that takes the cache."""
    feeds = decode_feeds(rng)
    hc = H // 2 if bits == 4 else H
    lo, hi, dtype = (-128, 128, np.int8) if bits == 8 else (0, 256, np.uint8)
    for name in ("past_key", "past_value"):
        feeds[name] = rng.integers(lo, hi, (1, NKV, P, hc)).astype(dtype)
    count = 1 if mode == "PER_TENSOR" else NKV * H
    for name in ("k_scale", "v_scale"):
        feeds[name] = rng.uniform(0.01, 0.05, count).astype(np.float32)
    feeds[which][0] = value
    # A zero element in the new row meets the scale too (0 * inf with a denormal scale).
    feeds["key" if which == "k_scale" else "value"][0, 0, 0] = 0.0
    attrs = {"num_heads": N, "kv_num_heads": NKV, "k_quant_type": mode, "v_quant_type": mode,
             "kv_cache_bit_width": bits}
    want = run_ort(attrs, feeds)
    ran = 0
    for kernel in KERNELS:
        got, _ = run_pinned(kernel, attrs, feeds)
        if got is None:
            continue
        ran += 1
        where = f"[ATTNRT_TEST_SEED={suite_seed()}] {kernel}, {which} {label}"
        assert_same(got["output"], want["output"], f"{where}: output")
        for out in ("present_key", "present_value"):
            assert np.array_equal(got[out], want[out]), f"{where}: {out} bytes differ"
    assert ran > 0


@pytest.mark.parametrize("batch", [1, 2])
def test_scalar_seqlens_k_rejected(batch, rng):
    """A 0-d seqlens_k: the pinned onnxruntime rejects it whatever the batch size, and so does
    attnrt, with the same message."""
    feeds = decode_feeds(rng)
    for name in ("query", "key", "value", "past_key", "past_value"):
        feeds[name] = np.repeat(feeds[name], batch, axis=0)
    feeds["seqlens_k"] = np.array(P, np.int32)
    attrs = {"num_heads": N, "kv_num_heads": NKV}
    message = "seqlens_k must be at least 1D, got scalar"
    with pytest.raises(Exception, match=message):
        run_ort(attrs, feeds)
    outputs = {"output": np.zeros((batch, 1, N * H), np.float32),
               "present_key": np.zeros((batch, NKV, P + 1, H), np.float32),
               "present_value": np.zeros((batch, NKV, P + 1, H), np.float32)}
    with attnrt.Runtime() as rt, attnrt.GqaOp(rt, **attrs) as op:
        with pytest.raises(AttnrtError, match=message):
            op.plan(feeds, outputs)
