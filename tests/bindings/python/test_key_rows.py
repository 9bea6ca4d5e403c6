"""attnrt.paged_attention_varlen with cu_seqlens_k (the C ABI's key_start_loc): new key/value rows
per sequence in their own count (k_len_b, which may differ from q_len_b: more, fewer, none), written
as the sequence's last k_len_b tokens [seq_lens[b] - k_len_b, seq_lens[b]) through the block table
before attention reads the caches.

Checked against a float64 reference written from that definition, every element, over mixed
batches (k_len == q_len, k_len > q_len, k_len < q_len, k_len == 0, k_len == seq_len, a sequence
with key rows and no query row), causal and not, cross-attention shaped (q_len > seq_len,
causal=False), both cache layouts, float32/bfloat16/float16, numpy inputs (the SWIG path) and
torch tensors (the C++ operator), every paged_gqa_varlen kernel pinned in turn. The whole cache is
compared with a copy that has exactly the expected rows written (slot_mapping -1 rows not written,
and then read as the old content); padding output rows stay NaN. Negative controls (the rows
written where the old rule k_len == q_len puts them; the causal position shifted) must fail the
comparison. Invalid cu_seqlens_k / k / v / slot_mapping are refused by name before any write.

The tests named *_without_key_start_loc run without cu_seqlens_k (k_len == q_len) and validate
this reference and harness against the behaviour that predates it."""
from __future__ import annotations

import math
import os
import random
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from varlen_kernels import varlen_kernels  # noqa: E402

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
PADDING = 2  # output/query rows past cu_seqlens_q[B], as an engine pads its batch
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}

# (q_len, k_len, seq_len) per sequence.
CAUSAL_SEQS = (
    (1, 1, 37),    # decode, k_len == q_len
    (5, 5, 21),    # prefill chunk, k_len == q_len
    (1, 20, 20),   # 20 encoder rows, one query: k_len > q_len, k_len == seq_len
    (3, 12, 16),   # k_len > q_len, 4 earlier tokens already cached
    (6, 2, 30),    # k_len < q_len
    (1, 0, 45),    # decode over an already-filled cache, no new row
    (7, 7, 7),     # first prompt: k_len == q_len == seq_len
    (0, 3, 12),    # key rows only, no query row
    (4, 0, 10),    # several query rows, no new row
)
# More query rows than keys (q_len > seq_len): cross-attention (causal=False), and causal calls
# aligned at the end as FlashAttention aligns them (bottom-right), the first rows seeing no key.
CROSS_SEQS = CAUSAL_SEQS + ((9, 4, 4), (5, 0, 3))
# k_len == q_len: runs without cu_seqlens_k.
TODAY_SEQS = ((1, 1, 37), (5, 5, 21), (7, 7, 7), (0, 0, 12), (3, 3, 16), (1, 1, 1), (4, 4, 30))
# Rows written with slot_mapping -1 (kept as the cache had them): the last key row of these.
UNWRITTEN_SEQS = (2, 3, 6)

CUK = r"cu_seqlens_k|key_start_loc"


def seeded(msg: str) -> str:
    return f"{msg} (seed {SEED}; ATTNRT_TEST_SEED={SEED} reproduces)"


@dataclass(frozen=True)
class Config:
    seqs: tuple
    causal: bool = True
    n: int = 8
    nkv: int = 2
    h: int = 64
    block_size: int = 16
    slots: bool = False
    k2d: bool = False
    softcap: float = 0.0
    sinks: bool = False
    scale: float | None = None


CONFIGS = {
    "causal_gqa_bs16_slots": Config(CAUSAL_SEQS, True, 8, 2, 64, 16, slots=True),
    "causal_mha_bs1_k2d_softcap_sinks": Config(CAUSAL_SEQS, True, 4, 4, 128, 1, k2d=True,
                                               softcap=5.0, sinks=True),
    "noncausal_gqa_bs1_scale": Config(CAUSAL_SEQS, False, 8, 2, 64, 1, scale=0.1),
    "cross_mha_bs16_slots": Config(CROSS_SEQS, False, 4, 4, 128, 16, slots=True),
    "bottom_right_causal_gqa_bs16_slots": Config(CROSS_SEQS, True, 8, 2, 64, 16, slots=True),
}
TODAY_CONFIGS = {
    True: Config(TODAY_SEQS, True, 8, 2, 64, 16, slots=True),
    False: Config(TODAY_SEQS, False, 4, 4, 128, 1, k2d=True),
}


# ------------------------------------------------------------------------------------------------
# The float64 reference, from the definition.

def attend(q, keys, values, pos0, causal, scale, softcap=0.0, sinks=None):
    """float64 attention of q [L, N, H] over one sequence's keys/values [T, Nkv, H] (numpy).
    Query row i sits at position pos0 + i; causal: it sees keys [0, pos0 + i], else all T keys.
    Scores scale * q.k (then softcap * tanh(s / softcap) when softcap > 0); sinks [N]: one more
    logit per head in the softmax's denominator. Query head n reads kv head n // (N / Nkv). A row
    that sees no key (pos0 + i < 0, causal) is zero, as FlashAttention gives it."""
    length, n, _ = q.shape
    t, nkv, _ = keys.shape
    group = n // nkv
    out = np.empty((length, n, values.shape[2]))
    positions = pos0 + np.arange(length)
    if causal:
        visible = np.arange(t)[None, :] <= positions[:, None]
    else:
        visible = np.ones((length, t), dtype=bool)
    for head in range(n):
        kh = keys[:, head // group]
        vh = values[:, head // group]
        s = scale * (q[:, head] @ kh.T)  # [L, T]
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        s = np.where(visible, s, -np.inf)
        with np.errstate(invalid="ignore"):
            m = s.max(axis=1, keepdims=True) if t else np.full((length, 1), -np.inf)
            if sinks is not None:
                m = np.maximum(m, sinks[head])
            e = np.exp(s - m)
            denom = e.sum(axis=1, keepdims=True)
            if sinks is not None:
                denom = denom + np.exp(sinks[head] - m)
            p = e / denom
        p[~visible.any(axis=1)] = 0.0
        out[:, head] = p @ vh
    return out


def cache_row(cache, kv_layout, block, offset):
    """The [Nkv, H] row of a block pool at (block, offset)."""
    return cache[block, :, offset] if kv_layout == "BNSH" else cache[block, offset]


def sequence_rows(cache, d, b, length):
    """Tokens [0, length) of sequence b, read through the block table: float64 [length, Nkv, H]."""
    bs = d.cfg.block_size
    rows = [cache_row(cache, d.kv_layout, int(d.table[b, j // bs]), j % bs)
            for j in range(length)]
    if not rows:
        return np.zeros((0, d.cfg.nkv, d.cfg.h))
    return torch.stack(rows).double().numpy()


def expected_caches(d, rule="new"):
    """The caches as they must be after the call: the old ones with each written key row (k/v in
    the cache dtype) stored at its position. rule "new": key row r of sequence b at
    seq_len - k_len + r (the specification); "old": at seq_len - q_len + r (as if k_len were
    q_len); "shifted": one position earlier than "new". Positions outside [0, seq_len) are
    dropped (only the negative controls make them)."""
    ek, ev = d.k_cache0.clone(), d.v_cache0.clone()
    bs = d.cfg.block_size
    for b, (q_len, k_len, t) in enumerate(d.cfg.seqs):
        for r in range(k_len):
            row = d.cu_k[b] + r
            if d.slot_mapping is not None and int(d.slot_mapping[row]) < 0:
                continue
            pos = {"new": t - k_len + r, "old": t - q_len + r, "shifted": t - k_len + r - 1}[rule]
            if not 0 <= pos < t:
                continue
            block = int(d.table[b, pos // bs])
            cache_row(ek, d.kv_layout, block, pos % bs)[...] = d.k[row]
            cache_row(ev, d.kv_layout, block, pos % bs)[...] = d.v[row]
    return ek, ev


def reference(d, ek, ev, *, shift=0, pos_from="q", causal=None, only=None):
    """The expected output rows of each sequence (None for those without query rows or not in
    `only`), attention over caches ek/ev. pos_from "q": query row i at seq_len - q_len + i (the
    specification); "k": at seq_len - k_len + i (a negative control); shift moves it."""
    cfg = d.cfg
    causal = cfg.causal if causal is None else causal
    scale = cfg.scale if cfg.scale is not None else 1 / math.sqrt(cfg.h)
    sinks = d.sinks.double().numpy() if d.sinks is not None else None
    refs = []
    for b, (q_len, k_len, t) in enumerate(cfg.seqs):
        if q_len == 0 or (only is not None and not only(q_len, k_len, t)):
            refs.append(None)
            continue
        keys, values = sequence_rows(ek, d, b, t), sequence_rows(ev, d, b, t)
        qb = d.q[d.cu_q[b]:d.cu_q[b] + q_len].double().numpy()
        pos0 = (t - q_len if pos_from == "q" else t - k_len) + shift
        refs.append(attend(qb, keys, values, pos0, causal, scale, cfg.softcap, sinks))
    return refs


def max_error(out, d, refs):
    """Largest |out - reference| over every element of the sequences with a reference (inf where
    either side is NaN)."""
    worst = 0.0
    for b, want in enumerate(refs):
        if want is None:
            continue
        q_len = d.cfg.seqs[b][0]
        got = out[d.cu_q[b]:d.cu_q[b] + q_len].double().numpy()
        diff = np.abs(got - want)
        worst = max(worst, float(np.max(np.where(np.isnan(diff), np.inf, diff))))
    return worst


# ------------------------------------------------------------------------------------------------
# Inputs and the call.

def make_data(cfg, kv_layout, dtype, seed, key_rows=True):
    """Random inputs of a batch. key_rows (cu_seqlens_k given): k/v have exactly cu_k[B] rows;
    otherwise (a call without it, k_len == q_len) one row per query row, padding included."""
    g = torch.Generator().manual_seed(seed)
    seqs = cfg.seqs
    B = len(seqs)
    q_lens, k_lens, lens = ([s[i] for s in seqs] for i in range(3))
    if not key_rows:
        assert q_lens == k_lens
    cu_q = [0] + list(np.cumsum(q_lens).tolist())
    cu_k = [0] + list(np.cumsum(k_lens).tolist())
    num_tokens = cu_q[-1] + PADDING
    num_keys = cu_k[-1] if key_rows else num_tokens
    bs = cfg.block_size
    width = max(1, max((t + bs - 1) // bs for t in lens))
    num_blocks = B * width + 3
    shape = ((num_blocks, bs, cfg.nkv, cfg.h) if kv_layout == "BSNH"
             else (num_blocks, cfg.nkv, bs, cfg.h))
    k_cache = torch.randn(shape, generator=g).to(dtype)
    v_cache = torch.randn(shape, generator=g).to(dtype)
    table = torch.randperm(num_blocks, generator=g)[:B * width].to(torch.int32).reshape(B, width)
    q = (2 * torch.randn(num_tokens, cfg.n, cfg.h, generator=g)).to(dtype)
    q[cu_q[-1]:] = float("nan")  # padding rows: never read
    k = torch.randn(num_keys, cfg.nkv, cfg.h, generator=g).to(dtype)
    v = torch.randn(num_keys, cfg.nkv, cfg.h, generator=g).to(dtype)
    slot_mapping = None
    if cfg.slots:
        slot_mapping = torch.full((num_keys,), -1, dtype=torch.int64)
        for b, (_, k_len, t) in enumerate(seqs):
            for r in range(k_len):
                pos = t - k_len + r
                slot_mapping[cu_k[b] + r] = int(table[b, pos // bs]) * bs + pos % bs
        unwritten = [cu_k[b + 1] - 1 for b in UNWRITTEN_SEQS if b < B and k_lens[b] > 0]
        assert unwritten
        slot_mapping[unwritten] = -1
    sinks = torch.randn(cfg.n, generator=g).to(dtype) if cfg.sinks else None
    return SimpleNamespace(
        cfg=cfg, kv_layout=kv_layout, dtype=dtype, key_rows=key_rows, q=q, k=k, v=v,
        k_cache=k_cache, v_cache=v_cache, k_cache0=k_cache.clone(), v_cache0=v_cache.clone(),
        table=table, cu_q=cu_q, cu_k=cu_k, seq_lens=torch.tensor(lens, dtype=torch.int32),
        cu_q_t=torch.tensor(cu_q, dtype=torch.int32), cu_k_t=torch.tensor(cu_k, dtype=torch.int32),
        slot_mapping=slot_mapping, sinks=sinks, num_tokens=num_tokens,
        out=torch.full((num_tokens, cfg.n, cfg.h), float("nan"), dtype=dtype))


def to_numpy(x):
    """A numpy view sharing the tensor's memory (bfloat16 as ml_dtypes.bfloat16)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.dtype == torch.bfloat16:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def call(rt, d, framework, *, with_cu_k=None, **changes):
    """paged_attention_varlen on d's inputs (numpy views or the torch tensors), writing d.out and
    the caches in place; `changes` replace keyword or positional inputs by name."""
    cfg = d.cfg
    with_cu_k = d.key_rows if with_cu_k is None else with_cu_k
    k, v = d.k, d.v
    if cfg.k2d:
        k, v = k.reshape(k.shape[0], -1), v.reshape(v.shape[0], -1)
    args = dict(q=d.q, k_cache=d.k_cache, v_cache=d.v_cache, cu_seqlens_q=d.cu_q_t,
                seq_lens=d.seq_lens, block_table=d.table)
    kwargs = dict(k=k, v=v, causal=cfg.causal, softcap=cfg.softcap, sinks=d.sinks,
                  slot_mapping=d.slot_mapping, out=d.out, kv_layout=d.kv_layout)
    if cfg.scale is not None:
        kwargs["softmax_scale"] = cfg.scale
    if with_cu_k:
        kwargs["cu_seqlens_k"] = d.cu_k_t
    for name, value in changes.items():
        (args if name in args else kwargs)[name] = value
    if framework == "numpy":
        args = {n: to_numpy(x) for n, x in args.items()}
        kwargs = {n: to_numpy(x) for n, x in kwargs.items()}
    result = attnrt.paged_attention_varlen(
        rt, args["q"], args["k_cache"], args["v_cache"], args["cu_seqlens_q"], args["seq_lens"],
        args["block_table"], **kwargs)
    if framework == "numpy":
        assert isinstance(result, np.ndarray) and np.shares_memory(result, kwargs["out"])
    else:
        assert result.data_ptr() == d.out.data_ptr()
    return result


def unchanged(d):
    return (torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0)
            and bool(torch.isnan(d.out).all()))


def value_scale(d):
    return max(1.0, float(d.v.double().abs().max()), float(d.v_cache0.double().abs().max()))


def run_and_check(d, framework, kernel=None, controls=True):
    """One call, then: the caches equal the expected ones element for element, the padding rows
    are still NaN, every output row within tolerance of the reference; the negative controls
    (when `controls`) fail that same comparison."""
    cfg = d.cfg
    print(seeded(f"{framework} {d.kv_layout} {d.dtype} {cfg}"))
    cross = any(q_len > t for q_len, _, t in cfg.seqs)
    with attnrt.Runtime(kernel=kernel, num_threads=2) as rt:
        try:
            call(rt, d, framework)
        except attnrt.UnsupportedError as e:
            assert unchanged(d), seeded("a declined call wrote the caches or out")
            if kernel is None:
                raise
            pytest.skip(f"{kernel} declines: {str(e).split(kernel + ': ')[-1].split(';')[0]}")
        except attnrt.InvalidArgumentError as e:
            # q_len > seq_len under causal=False (cross-attention) may be refused by name.
            if cross and not cfg.causal and "seq_lens" in str(e) and not re.search(CUK, str(e)):
                assert unchanged(d), seeded("a refused call wrote the caches or out")
                pytest.xfail(f"cross-attention (q_len > seq_len, causal=False) refused: {e}")
            raise
    padding = d.out[d.cu_q[-1]:]
    assert bool(torch.isnan(padding).all()), seeded("padding output rows were written")

    ek, ev = expected_caches(d)
    assert torch.equal(d.k_cache, ek), seeded("key cache differs from the expected writes")
    assert torch.equal(d.v_cache, ev), seeded("value cache differs from the expected writes")

    tol = REL_TOL[d.dtype] * value_scale(d)
    err = max_error(d.out, d, reference(d, ek, ev))
    assert err <= tol, seeded(f"max |error| {err:.3g} > {tol:.3g}")
    if not controls:
        return
    bound = 2 * tol  # a control must miss by more than twice the tolerance
    controls_run = []
    if d.key_rows:
        ok, ov = expected_caches(d, "old")
        assert not (torch.equal(d.k_cache, ok) and torch.equal(d.v_cache, ov)), \
            seeded("the caches match the old rule (rows at seq_len - q_len + r)")
        controls_run.append(("rows where k_len == q_len puts them",
                             max_error(d.out, d, reference(d, ok, ov))))
    else:
        sk, sv = expected_caches(d, "shifted")
        assert not (torch.equal(d.k_cache, sk) and torch.equal(d.v_cache, sv)), \
            seeded("the caches match rows written one position early")
    if cfg.causal:
        controls_run.append(("causal position one earlier",
                             max_error(d.out, d, reference(d, ek, ev, shift=-1))))
        if any(q_len and q_len != k_len for q_len, k_len, _ in cfg.seqs):
            controls_run.append(("causal position from k_len",
                                 max_error(d.out, d, reference(d, ek, ev, pos_from="k"))))
    else:
        controls_run.append(("a causal mask", max_error(
            d.out, d, reference(d, ek, ev, causal=True, only=lambda q, k, t: q <= t))))
    for name, miss in controls_run:
        assert miss > bound, seeded(f"negative control '{name}' went unnoticed: {miss:.3g} "
                                    f"<= {bound:.3g}")


# ------------------------------------------------------------------------------------------------
# The reference itself.

def test_reference_self_check():
    """attend() agrees with PyTorch's attention (bottom-right causal mask, none, GQA), its sinks
    with an explicit extra logit column, its softcap with a capped score matrix."""
    print(seeded("reference"))
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(5, 8, 16, generator=g, dtype=torch.float64)
    keys = torch.randn(11, 2, 16, generator=g, dtype=torch.float64)
    values = torch.randn(11, 2, 16, generator=g, dtype=torch.float64)
    kr, vr = keys.repeat_interleave(4, 1), values.repeat_interleave(4, 1)
    mask = torch.arange(11)[None, :] <= (6 + torch.arange(5))[:, None]
    for causal in (True, False):
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), kr.transpose(0, 1), vr.transpose(0, 1),
            attn_mask=mask if causal else None, scale=0.3).transpose(0, 1).numpy()
        got = attend(q.numpy(), keys.numpy(), values.numpy(), 6, causal, 0.3)
        assert np.abs(got - want).max() < 1e-12, seeded(f"causal={causal}")
    # sinks: a column per head in the softmax whose probability is dropped.
    sinks = torch.randn(8, generator=g, dtype=torch.float64)
    s = torch.einsum("qnh,tnh->nqt", q, kr) * 0.3
    s = 2.0 * torch.tanh(s / 2.0)
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(torch.cat([s, sinks.reshape(8, 1, 1).expand(8, 5, 1)], -1), -1)[..., :11]
    want = torch.einsum("nqt,tnh->qnh", p, vr).numpy()
    got = attend(q.numpy(), keys.numpy(), values.numpy(), 6, True, 0.3, 2.0, sinks.numpy())
    assert np.abs(got - want).max() < 1e-12, seeded("softcap + sinks")
    # More rows than keys, causal, aligned at the end (pos0 = 3 - 5): rows 0 and 1 see no key and
    # are zero (FlashAttention's rule), the others as PyTorch's attention with that mask.
    got = attend(q.numpy(), keys[:3].numpy(), values[:3].numpy(), -2, True, 0.3)
    assert (got[:2] == 0).all(), seeded("rows before the first key")
    mask = torch.arange(3)[None, :] <= (-2 + torch.arange(5))[:, None]
    want = torch.nn.functional.scaled_dot_product_attention(
        q[2:].transpose(0, 1), kr[:3].transpose(0, 1), vr[:3].transpose(0, 1),
        attn_mask=mask[2:], scale=0.3).transpose(0, 1).numpy()
    assert np.abs(got[2:] - want).max() < 1e-12, seeded("bottom-right causal")


def test_expected_caches_self_check():
    """expected_caches puts key row r of sequence b at block_table[b][pos // bs], pos % bs with
    pos = seq_len - k_len + r, skips slot_mapping -1 rows, and touches nothing else."""
    cfg = Config(((1, 3, 5), (2, 0, 4), (1, 2, 3)), block_size=2, nkv=1, h=4, n=2, slots=True)
    d = make_data(cfg, "BNSH", torch.float32, SEED)
    ek, ev = expected_caches(d)
    # Sequence 0: rows 0..2 at positions 2, 3, 4. Sequence 2: rows 3, 4 at positions 1, 2, row 4
    # not written (slot_mapping -1, UNWRITTEN_SEQS).
    assert d.slot_mapping.tolist()[3:] == [int(d.table[2, 0]) * 2 + 1, -1]
    t = d.table.tolist()
    want = {(t[0][1], 0, 0): 0, (t[0][1], 0, 1): 1, (t[0][2], 0, 0): 2, (t[2][0], 0, 1): 3}
    changed = (ek != d.k_cache0).any(dim=-1).nonzero().tolist()  # [block, kv head, offset]
    assert sorted(map(tuple, changed)) == sorted(want)
    assert (ev != d.v_cache0).any(dim=-1).nonzero().tolist() == changed
    for (block, head, offset), row in want.items():
        assert torch.equal(ek[block, head, offset], d.k[row, head])
        assert torch.equal(ev[block, head, offset], d.v[row, head])
    # The "old" rule puts sequence 0's rows at 4, 5, 6: only position 4 exists (row 0).
    ok, _ = expected_caches(d, "old")
    assert torch.equal(ok[t[0][2], 0, 0], d.k[0, 0])


# ------------------------------------------------------------------------------------------------
# Today's call (no cu_seqlens_k, k_len == q_len) through the same reference and checks.

@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kv_layout", ["BSNH", "BNSH"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_rows_as_queries_without_key_start_loc(framework, kv_layout, dtype, causal):
    d = make_data(TODAY_CONFIGS[causal], kv_layout, DTYPES[dtype], SEED, key_rows=False)
    run_and_check(d, framework)


@pytest.mark.parametrize("kernel", varlen_kernels())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rows_as_queries_without_key_start_loc_every_kernel(kernel, dtype):
    d = make_data(TODAY_CONFIGS[True], "BNSH", DTYPES[dtype], SEED, key_rows=False)
    run_and_check(d, "torch", kernel=kernel)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_cross_attention_over_the_cache_without_key_start_loc(framework):
    """causal=False, no new rows: 9 and 5 decoder rows over 4 and 3 cached encoder tokens."""
    cfg = Config(((9, 0, 4), (2, 0, 6), (5, 0, 3)), False, 4, 4, 128, 16)
    d = make_data(cfg, "BSNH", torch.float32, SEED, key_rows=True)
    d.k = d.v = None
    with attnrt.Runtime(num_threads=2) as rt:
        try:
            call(rt, d, framework, with_cu_k=False, k=None, v=None)
        except attnrt.InvalidArgumentError as e:
            if "seq_lens" not in str(e):
                raise
            assert unchanged(d)
            pytest.xfail(f"cross-attention (q_len > seq_len, causal=False) refused: {e}")
    assert torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0)
    err = max_error(d.out, d, reference(d, d.k_cache0, d.v_cache0))
    tol = REL_TOL[torch.float32] * max(1.0, float(d.v_cache0.abs().max()))
    assert err <= tol, seeded(f"max |error| {err:.3g} > {tol:.3g}")
    assert bool(torch.isnan(d.out[d.cu_q[-1]:]).all())


# ------------------------------------------------------------------------------------------------
# cu_seqlens_k.

@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kv_layout", ["BSNH", "BNSH"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_key_rows(framework, kv_layout, dtype, config):
    d = make_data(CONFIGS[config], kv_layout, DTYPES[dtype], SEED)
    run_and_check(d, framework)


@pytest.mark.parametrize("kernel", varlen_kernels())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("config", ["causal_gqa_bs16_slots", "cross_mha_bs16_slots",
                                    "bottom_right_causal_gqa_bs16_slots"])
def test_key_rows_every_kernel(kernel, dtype, config):
    d = make_data(CONFIGS[config], "BNSH", DTYPES[dtype], SEED)
    run_and_check(d, "torch", kernel=kernel)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_cu_seqlens_k_equal_to_cu_seqlens_q_changes_nothing(framework):
    """cu_seqlens_k == cu_seqlens_q (k with exactly cu_seqlens_q[B] rows) gives the bits of the
    call without it, output and caches."""
    cfg = Config(TODAY_SEQS, True, 8, 2, 64, 16, slots=True)
    first = make_data(cfg, "BSNH", torch.float32, SEED, key_rows=True)
    second = make_data(cfg, "BSNH", torch.float32, SEED, key_rows=True)
    with attnrt.Runtime(num_threads=2) as rt:
        call(rt, first, framework, with_cu_k=True)
        # Without cu_seqlens_k, k/v have one row per query row, padding included (not written).
        pad = torch.zeros(PADDING, cfg.nkv, cfg.h)
        none = torch.full((PADDING,), -1, dtype=torch.int64)
        call(rt, second, framework, with_cu_k=False, k=torch.cat([second.k, pad]),
             v=torch.cat([second.v, pad]), slot_mapping=torch.cat([second.slot_mapping, none]))
    assert torch.equal(first.k_cache, second.k_cache)
    assert torch.equal(first.v_cache, second.v_cache)
    n = first.cu_q[-1]
    assert torch.equal(first.out[:n], second.out[:n]), seeded("outputs differ")
    assert bool(torch.isnan(first.out[n:]).all())


# ------------------------------------------------------------------------------------------------
# Errors, before any write.

ERROR_SEQS = ((2, 5, 10), (1, 3, 6))  # cu_seqlens_q [0, 2, 3], cu_seqlens_k [0, 5, 8]


def error_case(kind, d):
    """(input changes, pattern the message must match) of one invalid call."""
    i32 = torch.int32

    def rows(n):
        return d.k[:n] if n <= d.k.shape[0] else torch.cat([d.k, d.k[:n - d.k.shape[0]]])

    if kind == "key_rows":
        return dict(k=rows(9), v=torch.cat([d.v, d.v[:1]])), CUK + r"|\bkey\b|\bk\b"
    if kind == "value_rows":
        return dict(v=torch.cat([d.v, d.v[:1]])), CUK + r"|\bvalue\b|\bv\b"
    if kind == "first_not_zero":
        return dict(cu_seqlens_k=torch.tensor([1, 6, 9], dtype=i32), k=rows(9), v=rows(9)), CUK
    if kind == "decreasing":
        return dict(cu_seqlens_k=torch.tensor([0, 6, 5], dtype=i32), k=rows(5), v=rows(5)), CUK
    if kind == "length_B":
        return dict(cu_seqlens_k=torch.tensor([0, 5], dtype=i32)), CUK
    if kind == "int64":
        return dict(cu_seqlens_k=d.cu_k_t.to(torch.int64)), CUK
    if kind == "k_len_above_seq_len":
        return dict(seq_lens=torch.tensor([10, 2], dtype=i32)), CUK + "|seq_lens"
    if kind == "no_key_rows":
        return dict(k=None, v=None), CUK
    good = torch.tensor([int(d.table[b, p // 16]) * 16 + p % 16
                         for b, (_, k_len, t) in enumerate(ERROR_SEQS)
                         for p in range(t - k_len, t)], dtype=torch.int64)
    assert good.numel() == d.cu_k[-1]
    if kind == "slot_mapping_per_query":
        return dict(slot_mapping=good[:d.num_tokens].clone()), "slot_mapping"
    if kind == "slot_mapping_wrong_slot":
        bad = good.clone()
        bad[6] += 1
        return dict(slot_mapping=bad), "slot_mapping"
    raise AssertionError(kind)


ERROR_KINDS = ["key_rows", "value_rows", "first_not_zero", "decreasing", "length_B", "int64",
               "k_len_above_seq_len", "no_key_rows", "slot_mapping_per_query",
               "slot_mapping_wrong_slot"]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_error_case_base_is_valid(framework):
    """The unchanged inputs of the error cases run, so each error below comes from its change."""
    d = make_data(Config(ERROR_SEQS), "BSNH", torch.float32, SEED)
    run_and_check(d, framework)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_invalid_key_rows_are_refused_before_any_write(framework, kind):
    print(seeded(kind))
    d = make_data(Config(ERROR_SEQS), "BSNH", torch.float32, SEED)
    changes, pattern = error_case(kind, d)
    assert d.num_tokens != d.cu_k[-1]
    with attnrt.Runtime(num_threads=2) as rt:
        with pytest.raises(attnrt.Error) as e:
            call(rt, d, framework, **changes)
    assert re.search(pattern, str(e.value)), f"{kind}: the message names no input ({pattern}): " \
        f"{e.value}"
    assert torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0), \
        seeded(f"{kind}: the caches were written before the error")
    assert bool(torch.isnan(d.out).all()), seeded(f"{kind}: out was written before the error")
