"""Sparse MLA through Python (attnrt.sparse_mla) against the independent float64 reference
(sparse_mla_reference.py): every scenario, quant mode and layout pair, with masks, sinks, seqused
and the softmax LSE, under CANN's tolerance (rtol 2^-7, atol 1e-4, >= 99.5% of elements).

KV tokens are built with attnrt.sparse_mla_encode; test_encoded_tokens_decode_to_their_inputs
checks with the reference's own decoders that those bytes hold the values given, and the
attention comparison then feeds the same bytes to both sides.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import attnrt
from sparse_mla_reference import (TQ4_CODEBOOK, decode_fp16, decode_mode1_tokens,
                                  decode_mode2_blocks, decode_tq4_tokens, sparse_mla_reference)

SEED = int(os.environ.get("ATTNRT_TEST_SEED", "7301"))
RTOL, ATOL, FRACTION = 2.0 ** -7, 1e-4, 0.995
B, N, S1, S2, RATIO, TOPK, BS_ORI, BS_CMP = 2, 8, 5, 24, 4, 6, 8, 4
Q_SCALE = 3.0        # scores scale * q.k have a standard deviation of about 3: far from uniform
NP_DTYPE = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def kv_rows(rng, n):
    return rng.standard_normal((n, 512)).astype(np.float32)


class Side:
    """One KV input (ori or cmp) in its layout: the op's array, the reference's array and the
    per-layout extras (cu_seqlens, block table)."""

    def __init__(self, rng, fmt, layout, lens, block_size, qdt):
        self.extra = {}
        if layout == "PA_BBND":
            used = [-(-n // block_size) for n in lens]
            num_blocks = sum(used) + 2                      # two blocks no batch uses
            perm = rng.permutation(num_blocks)
            table = np.full((len(lens), max(used) + 1), -1, np.int32)
            start = 0
            for b, u in enumerate(used):
                table[b, :u] = perm[start:start + u]
                start += u
            self.extra["block_table"] = table
            values = kv_rows(rng, num_blocks * block_size)
            shape = (num_blocks, block_size, 1)
        elif layout == "TND":
            values = kv_rows(rng, sum(lens))
            self.extra["cu_seqlens"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            shape = (sum(lens), 1)
        else:
            values = kv_rows(rng, len(lens) * max(lens))
            shape = (len(lens), max(lens), 1)
        self.values = values
        if fmt == "mode1":
            self.op = attnrt.sparse_mla_encode(1, values).reshape(shape + (608,))
        elif fmt == "mode2":
            self.op = np.zeros(shape + (584,), np.uint8)
            for blk in range(shape[0]):
                attnrt.sparse_mla_encode(2, values[blk * block_size:(blk + 1) * block_size],
                                         block=self.op[blk], slot=0)
        elif fmt == "tq4":
            self.op = attnrt.sparse_mla_encode(3, values).reshape(shape + (258,))
        else:                                               # mode 3 ori: plain values in q's dtype
            self.op = values.astype(NP_DTYPE[qdt]).reshape(shape + (512,))
        self.ref = self.op.astype(np.float64) if fmt == "plain" else self.op


def make_case(rng, mode, scenario, layout, qdt="bf16", variant=0):
    """(op inputs, reference inputs, attributes) of one problem; `variant` cycles the options."""
    layout_q, layout_kv = layout.split("/")
    v = variant
    attrs = {"layout_q": layout_q, "layout_kv": layout_kv,
             "ori_mask_mode": (4, 3, 0)[v % 3], "return_softmax_lse": int(v % 3 != 2)}
    if attrs["ori_mask_mode"] == 4:
        attrs["ori_win_left"], attrs["ori_win_right"] = [(5, 0), (3, 2), (-1, 1), (7, -1)][v // 3 % 4]
    if scenario != "SWA":
        attrs.update(cmp_ratio=RATIO, cmp_mask_mode=(3, 0)[v % 2])
    seqused = (v // 2) % 2 == 0 or layout_kv == "PA_BBND"
    inputs = {}
    if layout_q == "TND":
        q_lens, ori_lens, cmp_lens = [5, 4], [24, 3], [6, 1]  # batch 1 row 0 sees no key
        q_shape = (sum(q_lens), N, 512)
        inputs["cu_seqlens_q"] = np.array([0, 5, 9], np.int32)
        if seqused:
            inputs["seqused_q"] = np.array([3, 4], np.int32)
    else:
        ori_lens = [S2, 17] if seqused else [S2, S2]
        cmp_lens = [n // RATIO for n in ori_lens]
        q_shape = (B, S1, N, 512)
        if seqused:
            inputs["seqused_q"] = np.array([S1, 3], np.int32)
            inputs["seqused_ori_kv"] = np.array(ori_lens, np.int32)
    ori_fmt, cmp_fmt = {1: ("mode1", "mode1"), 2: ("mode2", "mode2"), 3: ("plain", "tq4")}[mode]
    ori = Side(rng, ori_fmt, layout_kv, ori_lens, BS_ORI, qdt)
    inputs["ori_kv"] = ori.op
    extra = {"cu_seqlens": "cu_seqlens_{}_kv", "block_table": "{}_block_table"}
    inputs.update({extra[k].format("ori"): a for k, a in ori.extra.items()})
    ref_inputs = {}
    if scenario != "SWA":
        cmp = Side(rng, cmp_fmt, layout_kv, cmp_lens, BS_CMP, qdt)
        inputs["cmp_kv"] = cmp.op
        inputs.update({extra[k].format("cmp"): a for k, a in cmp.extra.items()})
        if v % 4 == 2:                                      # with cmp_mask_mode 3
            inputs["cmp_residual_kv"] = np.array([1, 3], np.int32)
    if scenario == "CSA":
        rows = q_shape[:-2] + (1, TOPK)
        idx = rng.integers(0, max(cmp_lens) + 2, rows).astype(np.int32)  # some out of range
        stop = rng.integers(2, TOPK + 1, rows[:-1])
        idx[np.arange(TOPK) >= stop[..., None]] = -1                       # -1 ends a row
        inputs["cmp_sparse_indices"] = idx
    if v % 2 == 0:
        inputs["sinks"] = rng.uniform(0.0, 6.0, N).astype(np.float32)
    q = (rng.standard_normal(q_shape) * Q_SCALE).astype(NP_DTYPE[qdt])
    inputs["q"] = q
    ref_inputs.update(inputs, q=q.astype(np.float64), ori_kv=ori.ref)
    return inputs, ref_inputs, attrs


def reference(ref_inputs, attrs, mode, qdt):
    return sparse_mla_reference(ref_inputs, {"quant_mode": mode, **attrs}, q_dtype=qdt)


def fraction_close(got, want):
    got = np.asarray(got, np.float64)
    return float(np.mean(np.abs(got - want) <= ATOL + RTOL * np.abs(want)))


def assert_cann_close(got, want, what):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, what
    # softmax_lse of rows that see no key is -inf (docs/sparse-mla.md): equal, then set aside.
    infinite = np.isinf(want)
    assert np.array_equal(got[infinite], want[infinite]), f"{what}: infinite entries differ"
    got, want = np.where(infinite, 0.0, got), np.where(infinite, 0.0, want)
    assert np.isfinite(got).all(), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite"
    frac = fraction_close(got, want)
    worst = np.abs(got - want).max()
    assert frac >= FRACTION, f"{what}: {frac:.4%} within tolerance (worst abs error {worst:.3g})"
    # Rows without output (beyond seqused_q, no visible key) are exactly zero.
    empty = np.all(want == 0, axis=-1)
    assert np.all(got[empty] == 0), f"{what}: rows without output are not zero"


MODES = [(1, "bf16"), (2, "bf16"), (3, "bf16"), (3, "fp16")]
LAYOUTS = ["BSND/BSND", "TND/TND", "BSND/PA_BBND"]
CASES = [(m, qdt, s, lay) for m, qdt in MODES for s in ("SWA", "CSA", "HCA") for lay in LAYOUTS
         if m != 2 or lay == "BSND/PA_BBND"]


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"mode{m}-{q}-{s}-{lay.replace('/', '_')}" for m, q, s, lay in CASES])
def test_matches_the_reference(rt, index):
    mode, qdt, scenario, layout = CASES[index]
    seed = SEED + index
    print(f"seed {seed}")
    inputs, ref_inputs, attrs = make_case(np.random.default_rng(seed), mode, scenario, layout,
                                          qdt, variant=index)
    want_out, want_lse = reference(ref_inputs, attrs, mode, qdt)
    for poison in (np.nan, 1e30 if qdt == "bf16" else 65504.0):
        out = np.full(inputs["q"].shape, poison).astype(inputs["q"].dtype)
        lse = None
        if attrs["return_softmax_lse"]:
            lse = np.full(want_lse.shape, poison, np.float32)
        result = attnrt.sparse_mla(rt, quant_mode=mode, attn_out=out, softmax_lse=lse, **attrs,
                                   **inputs)
        if lse is not None:
            assert result[0] is out and result[1] is lse
            assert_cann_close(lse, want_lse, f"softmax_lse (poison {poison})")
        else:
            assert result is out
        assert out.dtype == inputs["q"].dtype
        assert_cann_close(out, want_out, f"attn_out (poison {poison})")


def test_encoded_tokens_decode_to_their_inputs():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    x = rng.standard_normal((16, 512)).astype(np.float32) * rng.uniform(0.01, 50, (16, 1))
    x = x.astype(np.float32)
    amax = np.repeat(np.abs(x[:, :448]).reshape(16, 7, 64).max(-1), 64, axis=-1)

    def check_fp8(dec):
        err = np.abs(dec - x.astype(np.float64))
        assert np.all(err[:, :448] <= 0.07 * np.abs(x[:, :448]) + 0.01 * amax)      # e4m3 x scale
        assert np.all(err[:, 448:] <= 2.0 ** -8 * np.abs(x[:, 448:]))              # rope bf16

    tokens = attnrt.sparse_mla_encode(1, x)
    assert tokens.shape == (16, 608) and tokens.dtype == np.uint8
    assert np.all(tokens[:, 590:] == 0)                                            # pad bytes
    check_fp8(decode_mode1_tokens(tokens))
    assert np.array_equal(attnrt.sparse_mla_encode(1, x.astype(ml_dtypes.bfloat16)),
                          attnrt.sparse_mla_encode(1, x.astype(ml_dtypes.bfloat16)
                                                   .astype(np.float32)))

    block = np.zeros((1, 16, 1, 584), np.uint8)
    attnrt.sparse_mla_encode(2, x[:10], block=block[0], slot=0)
    attnrt.sparse_mla_encode(2, x[10:], block=block[0], slot=10)
    check_fp8(decode_mode2_blocks(block))

    tq4 = attnrt.sparse_mla_encode(3, x)
    assert tq4.shape == (16, 258)
    dec = decode_tq4_tokens(tq4)
    norm = np.linalg.norm(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(np.linalg.norm(dec, axis=1), norm, rtol=1e-2)
    cosine = np.sum(dec * x, axis=1) / (np.linalg.norm(dec, axis=1) * norm)
    assert np.all(cosine > 0.99), cosine.min()
    # The codes are the header's rule: the number of codebook midpoints <= x_d / |x|.
    codes = np.empty((16, 512), np.int64)
    codes[:, 0::2], codes[:, 1::2] = tq4[:, :256] & 0xF, tq4[:, :256] >> 4
    unit = x.astype(np.float64) / norm[:, None]
    mid = (TQ4_CODEBOOK[:-1].astype(np.float64) + TQ4_CODEBOOK[1:]) / 2
    want = (mid[None, None, :] <= unit[..., None]).sum(-1)
    assert np.mean(codes == want) > 0.999 and np.abs(codes - want).max() <= 1
    scale = norm / np.sqrt((TQ4_CODEBOOK.astype(np.float64)[codes] ** 2).sum(1))
    np.testing.assert_allclose(decode_fp16(tq4[:, 256:258])[:, 0], scale, rtol=2.0 ** -10)
    np.testing.assert_allclose(attnrt.TQ4_CODEBOOK, TQ4_CODEBOOK, rtol=0, atol=1e-8)


def test_torch_in_torch_out(rt):
    torch = pytest.importorskip("torch")
    seed = SEED + 100
    print(f"seed {seed}")
    inputs, ref_inputs, attrs = make_case(np.random.default_rng(seed), 1, "CSA", "BSND/BSND",
                                          variant=0)
    out_np, lse_np = attnrt.sparse_mla(rt, quant_mode=1, **attrs, **inputs)
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if k != "q"}
    t["q"] = torch.from_numpy(inputs["q"].view(np.int16)).view(torch.bfloat16)
    meta = attnrt.sparse_mla_metadata(rt, quant_mode=1, **attrs, **t)
    assert isinstance(meta, torch.Tensor) and meta.dtype == torch.int32 and meta.shape == (2048,)
    out, lse = attnrt.sparse_mla(rt, quant_mode=1, metadata=meta, **attrs, **t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert isinstance(lse, torch.Tensor) and lse.dtype == torch.float32
    assert np.array_equal(out.view(torch.int16).numpy().view(np.uint8), out_np.view(np.uint8))
    assert np.array_equal(lse.numpy().view(np.uint8), lse_np.view(np.uint8))
    want_out, want_lse = reference(ref_inputs, attrs, 1, "bf16")
    assert_cann_close(out.float().numpy(), want_out, "attn_out")
    assert_cann_close(lse.numpy(), want_lse, "softmax_lse")


def test_metadata_is_int32_and_checked_by_the_main_op(rt):
    rng = np.random.default_rng(SEED + 200)
    print(f"seed {SEED + 200}")
    inputs, _, attrs = make_case(rng, 1, "HCA", "BSND/BSND", variant=0)
    meta = attnrt.sparse_mla_metadata(rt, quant_mode=1, **attrs, **inputs)
    assert isinstance(meta, np.ndarray) and meta.dtype == np.int32 and meta.shape == (2048,)
    again = attnrt.sparse_mla_metadata(rt, quant_mode=1, **attrs, **inputs)
    assert np.array_equal(meta, again)
    out = attnrt.sparse_mla(rt, quant_mode=1, metadata=meta, **attrs, **inputs)[0]
    assert np.isfinite(out.astype(np.float32)).all()
    # Metadata of another problem: fewer query rows per batch (seqused_q), another S1.
    other = dict(inputs, seqused_q=np.array([S1, 1], np.int32))
    meta_other = attnrt.sparse_mla_metadata(rt, quant_mode=1, **attrs, **other)
    shorter = dict(inputs, q=inputs["q"][:, :4].copy(), seqused_q=np.array([4, 3], np.int32))
    meta_shape = attnrt.sparse_mla_metadata(rt, quant_mode=1, **attrs, **shorter)
    tampered = meta.copy()
    tampered[-1] = 7                                        # a word that must be zero
    for wrong in (meta_other, meta_shape, tampered):
        assert not np.array_equal(wrong, meta)
        with pytest.raises(attnrt.InvalidArgumentError) as info:
            attnrt.sparse_mla(rt, quant_mode=1, metadata=wrong, **attrs, **inputs)
        assert "metadata" in info.value.message, info.value.message


def test_negative_control_fails_the_tolerance(rt):
    seed = SEED + 300
    print(f"seed {seed}")
    inputs, ref_inputs, attrs = make_case(np.random.default_rng(seed), 1, "SWA", "BSND/BSND",
                                          variant=2)              # no mask, no seqused
    assert attrs["ori_mask_mode"] == 0 and "seqused_q" not in inputs
    out = attnrt.sparse_mla(rt, quant_mode=1, **attrs, **inputs)
    want, _ = reference(ref_inputs, attrs, 1, "bf16")
    assert fraction_close(out, want) >= FRACTION
    wrong_scale, _ = reference(ref_inputs, dict(attrs, softmax_scale=0.05), 1, "bf16")
    assert fraction_close(out, wrong_scale) < FRACTION
    dropped = dict(ref_inputs, ori_kv=ref_inputs["ori_kv"][:, 1:])  # key 0 gone from every row
    without_key, _ = reference(dropped, attrs, 1, "bf16")
    assert fraction_close(out, without_key) < FRACTION
