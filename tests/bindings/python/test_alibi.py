"""attnrt.paged_attention_varlen with alibi_slopes (ALiBi, as vLLM's CPU kernel and FlashAttention
take it): for query row i of sequence b at position p = seq_lens[b] - q_len_b + i and key position
j, the score is scale * q.k_j, capped (softcap * tanh(s / softcap)) when softcap > 0, then
slope[n] * (j - p) is added, n the QUERY head; then the mask (causal: j <= p, within the window;
causal=False: every key of the sequence, the bias positive for j > p), the softmax (with sinks in
the denominator) and P.V.

Checked against a float64 reference written from that definition, every element, over a mixed
batch (decodes over 40-130 tokens, a prefill chunk over a cached prefix, a first prompt, a
sequence without query rows, two padding rows that must stay NaN), with the new key/value rows
written into caches that already hold random content; numpy inputs (the Python path) and torch
tensors (the C++ operator), float32/bfloat16/float16, both cache layouts, GQA and MHA; causal with
and without a window, causal=False, softcap, sinks, cu_seqlens_k. Every paged_gqa_varlen kernel is
pinned in turn: each computes ALiBi (a flash kernel may decline softcap, sinks or float32 on AMX,
as without ALiBi, never ALiBi itself). Negative
controls (slopes indexed by the kv head, -|j - p| as the bias, the bias added before softcap, no
ALiBi at all) must fail the comparison by more than 10x its tolerance. Invalid alibi_slopes (dtype,
shape) are refused by name before anything is written."""
from __future__ import annotations

import math
import os
import random
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from varlen_kernels import varlen_kernels  # noqa: E402

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
PADDING = 2  # query/output rows past cu_seqlens_q[B]
BS = 16
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}
GEOMETRIES = {"gqa_n8_nkv2_h64": (8, 2, 64), "mha_n4_nkv4_h128": (4, 4, 128)}

# (q_len, k_len, seq_len) per sequence; k_len == q_len unless cu_seqlens_k is given.
SEQS = (
    (1, 1, 40),     # decode
    (12, 12, 50),   # prefill chunk over 38 cached tokens
    (1, 1, 130),    # decode over a long context
    (9, 9, 9),      # first prompt
    (0, 0, 17),     # no query row
    (1, 1, 77),     # decode
    (5, 5, 100),    # short chunk over a long prefix
)
SEQS_K = (
    (1, 1, 40),
    (12, 4, 50),    # k_len < q_len
    (1, 3, 130),    # k_len > q_len
    (9, 9, 9),
    (0, 3, 17),     # key rows only
    (1, 0, 77),     # nothing new: the cache as it is
    (5, 5, 100),
)
FEATURES = {
    "causal": {},
    "window": {"left": 20},
    "noncausal": {"causal": False},
    "softcap": {"softcap": 30.0},
    "sinks": {"sinks": True},
    "cu_seqlens_k": {"cu_k": True},
}


def seeded(msg: str) -> str:
    return f"{msg} (seed {SEED}; ATTNRT_TEST_SEED={SEED} reproduces)"


def make_slopes(n: int) -> torch.Tensor:
    """The standard ALiBi slopes 2^(-8(h+1)/n) times 6, one of them replaced by -0.5 and the last by
    0: every head of a GQA group has its own slope."""
    slopes = [6.0 * 2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    slopes[n - 2] = -0.5
    slopes[n - 1] = 0.0
    return torch.tensor(slopes, dtype=torch.float32)


# ------------------------------------------------------------------------------------------------
# The float64 reference.

def attend(q, keys, values, pos0, *, causal, scale, slopes, left=-1, softcap=0.0, sinks=None,
           variant="spec"):
    """float64 attention (numpy) of q [L, N, H] over one sequence's keys/values [T, Nkv, H]; query
    row i at position p = pos0 + i. variant "spec" is the specification; the others are the
    negative controls: "kv_head" (slope of the kv head index), "abs" (bias -slope * |j - p|),
    "before_softcap" (bias added before the cap), "none" (no ALiBi)."""
    length, n, _ = q.shape
    t, nkv, _ = keys.shape
    group = n // nkv
    p = pos0 + np.arange(length)[:, None]
    j = np.arange(t)[None, :]
    if causal:
        visible = j <= p
        if left >= 0:
            visible = visible & (j >= p - left)
    else:
        visible = np.ones((length, t), dtype=bool)
    distance = -np.abs(j - p) if variant == "abs" else (j - p)
    out = np.empty((length, n, values.shape[2]))
    for head in range(n):
        kvh = head // group
        s = scale * (q[:, head] @ keys[:, kvh].T)  # [L, T]
        slope = float(slopes[kvh] if variant == "kv_head" else slopes[head])
        bias = 0.0 if variant == "none" else slope * distance
        if variant == "before_softcap":
            s = s + bias
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if variant != "before_softcap":
            s = s + bias
        s = np.where(visible, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        if sinks is not None:
            m = np.maximum(m, sinks[head])
        e = np.exp(s - m)
        denom = e.sum(axis=1, keepdims=True)
        if sinks is not None:
            denom = denom + np.exp(sinks[head] - m)
        out[:, head] = (e / denom) @ values[:, kvh]
    return out


def test_reference_self_check():
    """attend() equals PyTorch's attention given the ALiBi bias as a float mask (causal, window,
    non-causal, GQA), its sinks an extra logit column, its softcap the capped scores plus bias."""
    print(seeded("reference"))
    g = torch.Generator().manual_seed(SEED)
    n, nkv, h, length, t, pos0, scale = 8, 2, 16, 5, 23, 18, 0.3
    q = torch.randn(length, n, h, generator=g, dtype=torch.float64)
    keys = torch.randn(t, nkv, h, generator=g, dtype=torch.float64)
    values = torch.randn(t, nkv, h, generator=g, dtype=torch.float64)
    slopes = make_slopes(n).double()
    kr, vr = keys.repeat_interleave(n // nkv, 1), values.repeat_interleave(n // nkv, 1)
    p = (pos0 + torch.arange(length)).reshape(-1, 1)
    j = torch.arange(t).reshape(1, -1)
    bias = slopes.reshape(n, 1, 1) * (j - p).double()  # [N, L, T]
    args = (q.numpy(), keys.numpy(), values.numpy(), pos0)
    for causal, left in ((True, -1), (True, 6), (False, -1)):
        visible = (j <= p) & (j >= p - left if left >= 0 else True) if causal else j < t
        mask = bias.masked_fill(~visible, float("-inf"))
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), kr.transpose(0, 1), vr.transpose(0, 1), attn_mask=mask,
            scale=scale).transpose(0, 1).numpy()
        got = attend(*args, causal=causal, scale=scale, slopes=slopes.numpy(), left=left)
        assert np.abs(got - want).max() < 1e-12, seeded(f"causal={causal} left={left}")
    sinks = torch.randn(n, generator=g, dtype=torch.float64)
    s = torch.einsum("qnh,tnh->nqt", q, kr) * scale
    s = (3.0 * torch.tanh(s / 3.0) + bias).masked_fill(~(j <= p), float("-inf"))
    prob = torch.softmax(torch.cat([s, sinks.reshape(n, 1, 1).expand(n, length, 1)], -1),
                         -1)[..., :t]
    want = torch.einsum("nqt,tnh->qnh", prob, vr).numpy()
    got = attend(*args, causal=True, scale=scale, slopes=slopes.numpy(), softcap=3.0,
                 sinks=sinks.numpy())
    assert np.abs(got - want).max() < 1e-12, seeded("softcap + sinks")


# ------------------------------------------------------------------------------------------------
# Inputs, the call, the checks.

def make_data(geometry, kv_layout, dtype, feature="causal"):
    n, nkv, h = GEOMETRIES[geometry]
    f = FEATURES[feature]
    seqs = SEQS_K if f.get("cu_k") else SEQS
    g = torch.Generator().manual_seed(SEED)
    B = len(seqs)
    cu_q = [0] + np.cumsum([s[0] for s in seqs]).tolist()
    cu_k = [0] + np.cumsum([s[1] for s in seqs]).tolist()
    num_tokens = cu_q[-1] + PADDING
    num_keys = cu_k[-1] if f.get("cu_k") else num_tokens
    width = max((t + BS - 1) // BS for _, _, t in seqs)
    num_blocks = B * width + 3
    shape = (num_blocks, BS, nkv, h) if kv_layout == "BSNH" else (num_blocks, nkv, BS, h)
    k_cache = torch.randn(shape, generator=g).to(dtype)
    v_cache = (2 * torch.rand(shape, generator=g) - 1).to(dtype)
    table = torch.randperm(num_blocks, generator=g)[:B * width].to(torch.int32).reshape(B, width)
    q = (2 * torch.randn(num_tokens, n, h, generator=g)).to(dtype)
    q[cu_q[-1]:] = float("nan")  # padding rows: never read
    k = torch.randn(num_keys, nkv, h, generator=g).to(dtype)
    v = (2 * torch.rand(num_keys, nkv, h, generator=g) - 1).to(dtype)
    sinks = torch.randn(n, generator=g).to(dtype) if f.get("sinks") else None
    return SimpleNamespace(
        n=n, nkv=nkv, h=h, seqs=seqs, kv_layout=kv_layout, dtype=dtype, feature=feature,
        causal=f.get("causal", True), left=f.get("left", -1), softcap=f.get("softcap", 0.0),
        use_cu_k=bool(f.get("cu_k")), sinks=sinks, slopes=make_slopes(n), q=q, k=k, v=v,
        k_cache=k_cache, v_cache=v_cache, k_cache0=k_cache.clone(), v_cache0=v_cache.clone(),
        table=table, cu_q=cu_q, cu_k=cu_k if f.get("cu_k") else cu_q,
        cu_q_t=torch.tensor(cu_q, dtype=torch.int32), cu_k_t=torch.tensor(cu_k, dtype=torch.int32),
        seq_lens=torch.tensor([t for _, _, t in seqs], dtype=torch.int32),
        out=torch.full((num_tokens, n, h), float("nan"), dtype=dtype))


def to_numpy(x):
    """A numpy view sharing the tensor's memory (bfloat16 as ml_dtypes.bfloat16)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.dtype == torch.bfloat16:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def call(rt, d, framework, **changes):
    kwargs = dict(k=d.k, v=d.v, alibi_slopes=d.slopes, causal=d.causal,
                  window_size=(d.left, 0) if d.left >= 0 else (-1, -1), softcap=d.softcap,
                  sinks=d.sinks, out=d.out, kv_layout=d.kv_layout)
    if d.use_cu_k:
        kwargs["cu_seqlens_k"] = d.cu_k_t
    kwargs.update(changes)
    args = [d.q, d.k_cache, d.v_cache, d.cu_q_t, d.seq_lens, d.table]
    if framework == "numpy":
        args = [to_numpy(x) for x in args]
        kwargs = {name: to_numpy(x) for name, x in kwargs.items()}
    result = attnrt.paged_attention_varlen(rt, *args, **kwargs)
    if framework == "numpy":
        assert isinstance(result, np.ndarray) and np.shares_memory(result, kwargs["out"])
    else:
        assert result.data_ptr() == d.out.data_ptr()


def unchanged(d):
    return (torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0)
            and bool(torch.isnan(d.out).all()))


def expected_caches(d):
    """The old caches with key row r of sequence b stored at position seq_len - k_len + r."""
    ek, ev = d.k_cache0.clone(), d.v_cache0.clone()
    for b, (_, k_len, t) in enumerate(d.seqs):
        for r in range(k_len):
            pos = t - k_len + r
            block, off = int(d.table[b, pos // BS]), pos % BS
            row = d.cu_k[b] + r
            if d.kv_layout == "BSNH":
                ek[block, off], ev[block, off] = d.k[row], d.v[row]
            else:
                ek[block, :, off], ev[block, :, off] = d.k[row], d.v[row]
    return ek, ev


def gather(cache, d, b, t):
    """Tokens [0, t) of sequence b through the block table: [t, Nkv, H] of cache (numpy)."""
    pos = np.arange(t)
    blocks, offs = d.table[b].numpy()[pos // BS], pos % BS
    return cache[blocks, offs] if d.kv_layout == "BSNH" else cache[blocks, :, offs]


def reference_inputs(d, ek, ev):
    """(first row, query rows, keys, values, position of the first row) of each sequence with query
    rows, float64 numpy, keys and values read from the caches ek, ev."""
    ekn, evn = ek.double().numpy(), ev.double().numpy()
    return [(d.cu_q[b], d.q[d.cu_q[b]:d.cu_q[b] + q_len].double().numpy(),
             gather(ekn, d, b, t), gather(evn, d, b, t), t - q_len)
            for b, (q_len, _, t) in enumerate(d.seqs) if q_len]


def max_error(d, inputs, variant="spec"):
    """Largest |out - reference| over every element of every query row (inf for a NaN)."""
    scale = 1 / math.sqrt(d.h)
    sinks = d.sinks.double().numpy() if d.sinks is not None else None
    slopes = d.slopes.double().numpy()
    out = d.out.double().numpy()
    worst = 0.0
    for row, qb, keys, values, pos0 in inputs:
        want = attend(qb, keys, values, pos0, causal=d.causal, scale=scale, slopes=slopes,
                      left=d.left, softcap=d.softcap, sinks=sinks, variant=variant)
        diff = np.abs(out[row:row + qb.shape[0]] - want)
        worst = max(worst, float(np.max(np.where(np.isnan(diff), np.inf, diff))))
    return worst


def tolerance(d):
    vmax = max(float(d.v.double().abs().max()), float(d.v_cache0.double().abs().max()))
    return TOL[d.dtype] * max(1.0, vmax)


def run_and_check(d, framework, kernel=None):
    """One call (the kernel pinned, or the runtime's choice), then: padding rows still NaN, the
    caches exactly the expected ones, every output element within tolerance of the reference, and
    each applicable negative control off by more than 10x the tolerance. Returns the max error."""
    print(seeded(f"{framework} {kernel} {d.kv_layout} {d.dtype} n={d.n} nkv={d.nkv} h={d.h} "
                 f"{d.feature} slopes={d.slopes.tolist()}"))
    with attnrt.Runtime(kernel=kernel, num_threads=2) as rt:
        try:
            call(rt, d, framework)
        except attnrt.UnsupportedError as e:
            assert unchanged(d), seeded("a declined call wrote the caches or out")
            reason = str(e).split(f"{kernel}: ")[-1].split(";")[0] if kernel else str(e)
            if kernel is None or "naive" in kernel:
                raise
            # A flash kernel declines what it declines without ALiBi (softcap, sinks, float32 on
            # AMX), never ALiBi itself; its own reason (the message also lists the inputs).
            assert f"{kernel}: " in str(e) and "alibi" not in reason, \
                seeded(f"{kernel} declines ALiBi: {e}")
            pytest.skip(f"{kernel} declines: {reason}")
    assert bool(torch.isnan(d.out[d.cu_q[-1]:]).all()), seeded("padding output rows were written")
    ek, ev = expected_caches(d)
    assert torch.equal(d.k_cache, ek), seeded("key cache differs from the expected writes")
    assert torch.equal(d.v_cache, ev), seeded("value cache differs from the expected writes")

    tol = tolerance(d)
    inputs = reference_inputs(d, ek, ev)
    err = max_error(d, inputs)
    print(f"max |error| {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol, seeded(f"max |error| {err:.3g} > {tol:.3g}")
    controls = ["none"]
    if d.n != d.nkv:
        controls.append("kv_head")
    if not d.causal:
        controls.append("abs")
    if d.softcap > 0:
        controls.append("before_softcap")
    for variant in controls:
        miss = max_error(d, inputs, variant)
        print(f"negative control {variant}: {miss:.3g}")
        assert miss > 10 * tol, seeded(f"negative control '{variant}' went unnoticed: "
                                       f"{miss:.3g} <= {10 * tol:.3g}")
    return err


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kv_layout", ["BSNH", "BNSH"])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("feature", list(FEATURES))
def test_alibi(framework, dtype, kv_layout, geometry, feature):
    """The runtime's own choice of kernel runs ALiBi and gets it right."""
    run_and_check(make_data(geometry, kv_layout, DTYPES[dtype], feature), framework)


@pytest.mark.parametrize("kernel", varlen_kernels())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("feature", ["causal", "noncausal", "softcap"])
def test_alibi_every_kernel(kernel, dtype, feature):
    """Each paged_gqa_varlen kernel pinned computes ALiBi (or declines something else)."""
    run_and_check(make_data("gqa_n8_nkv2_h64", "BNSH", DTYPES[dtype], feature), "torch",
                  kernel=kernel)


def test_kernel_families_present():
    """The op has naive and flash kernels (else test_alibi_every_kernel checks less than meant)."""
    names = varlen_kernels()
    assert any("naive" in k for k in names), names
    assert any("flash" in k for k in names), names


# ------------------------------------------------------------------------------------------------
# Invalid alibi_slopes, refused by name before any write.

def bad_slopes(kind, d):
    n, nkv = d.n, d.nkv
    good = d.slopes
    if kind == "float64":
        return good.double()
    if kind == "bfloat16":
        return good.to(torch.bfloat16)
    if kind == "float16":
        return good.to(torch.float16)
    if kind == "shape_n_plus_1":
        return torch.cat([good, good[:1]])
    if kind == "shape_1_n":
        return good.reshape(1, n).clone()
    if kind == "shape_nkv":
        assert nkv != n
        return good[:nkv].clone()
    raise AssertionError(kind)


BAD_KINDS = ["float64", "bfloat16", "float16", "shape_n_plus_1", "shape_1_n", "shape_nkv"]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kind", BAD_KINDS)
def test_invalid_alibi_slopes_are_refused(framework, kind):
    print(seeded(kind))
    d = make_data("gqa_n8_nkv2_h64", "BSNH", torch.float32)
    with attnrt.Runtime(num_threads=2) as rt:
        with pytest.raises(attnrt.Error) as e:
            call(rt, d, framework, alibi_slopes=bad_slopes(kind, d))
    assert "alibi_slopes" in str(e.value), f"{kind}: the message does not name alibi_slopes: " \
        f"{e.value}"
    assert torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0), \
        seeded(f"{kind}: the caches were written before the error")
    assert bool(torch.isnan(d.out).all()), seeded(f"{kind}: out was written before the error")
