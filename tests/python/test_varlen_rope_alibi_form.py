"""attnrt.paged_attention_varlen: rotary embedding (rotary_cos, rotary_sin, rotary_interleaved,
position_ids, key_position_ids) and alibi_form ("signed" / "symmetric"), ABI 1.12.

The specification (bindings/python/attnrt/_varlen.py, abi/attnrt/ops/paged_gqa_varlen.h, sections
"ALiBi" and "Rotary embedding"), as this file's float64 reference implements it:

* RoPE as ONNX Runtime's GroupQueryAttention: cos, sin [M, R/2] in q's dtype; the first R
  dimensions of a row are rotated in pairs (x0, x1) = (x[i], x[i + R/2]) (half-split) or
  (x[2i], x[2i + 1]) (interleaved) at position pos: x0' = x0 cos[pos, i] - x1 sin[pos, i],
  x1' = x0 sin[pos, i] + x1 cos[pos, i]; dimensions R..H are copied; each rotated value is rounded
  to the dtype (the reference rounds its float64 result to the dtype).
* Query row i of sequence b is rotated at position_ids[row] when given, else at its token position
  seq_lens[b] - q_len_b + i; new key row l at key_position_ids[row] when given, else at
  seq_lens[b] - k_len_b + l (k_len_b from cu_seqlens_k, else q_len_b). Rows already in the cache are
  not rotated; the rotated keys are what is stored. Values are never rotated.
* ALiBi: slope_n * (j - p) ("signed") or -slope_n * |j - p| ("symmetric") added after the scale,
  before the mask and the softmax, p the query's TOKEN position (never its rotary position), j the
  key position. The mask: causal j <= p; window_size (left, right): j in [p - left, p + right].

Every call passes `out` prefilled with NaN: every element of the real rows must be overwritten and
within tolerance of the reference, the padding rows must stay NaN; the caches are compared with the
expected caches element for element (rotated key dimensions within one rounding step of the
dtype, everything else bit-exact). Negative controls (the query rotated one position later, the key
rows one position later, the other pairing, the other ALiBi form without the causal mask) must miss
the comparison. Error cases are refused with InvalidArgumentError naming the input, with the caches
and `out` untouched.

Coverage: causal and causal=False; half-split and interleaved pairs; partial (R < H) and full
rotary; head sizes 64, 80, 96, 128; GQA groups 1-4; mixed batches of decodes (q_len 1), prefill
chunks over a cached past, first prompts, sequences without query rows; explicit position_ids and
key_position_ids; cu_seqlens_k (cross-attention shaped, q_len > seq_len, causal=False); signed and
symmetric ALiBi without the causal mask, with and without a window (left, right), and under the
causal mask (where the forms agree); slot_mapping with a -1 row; BSNH and BNSH; float32, bfloat16,
float16; numpy arrays (SWIG) and torch tensors; every paged_gqa_varlen kernel the runtime lists,
pinned in turn with Runtime(kernel=...) (a kernel that declines a call is skipped with its reason).

The seed: ATTNRT_TEST_SEED (tests/python/conftest.py picks a random one per session, printed in the
header) combined with the test's node id; each test prints it.
"""
from __future__ import annotations

import math
import os
import re
import zlib
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402

PADDING = 2  # query/output rows past cu_seqlens_q[B], as an engine pads its batch
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Output tolerance, relative to the largest |value| (as tests/bindings/python/test_key_rows.py).
REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
# A rotated value computed in any precision at least the dtype's and rounded to the dtype lies
# within this many (|x0 cos| + |x1 sin|) of the float64 value rounded to the dtype (two roundings
# plus the float32 arithmetic).
ROPE_ULPS = {torch.float32: 2.0 ** -22, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}


def varlen_kernels() -> list[str]:
    """Every paged_gqa_varlen kernel the runtime lists (CPU: flash/naive, each ISA)."""
    with attnrt.Runtime() as rt:
        return [k["name"] for p in rt.list()["plugins"] for k in p["kernels"]
                if k["op"] == "paged_gqa_varlen"]


KERNELS = varlen_kernels()


def seed_of(request) -> tuple[int, str]:
    """The test's seed and the line to print."""
    suite = int(os.environ.get("ATTNRT_TEST_SEED", "0"))
    seed = (suite * 1_000_003 + zlib.crc32(request.node.nodeid.encode())) % 2**62
    return seed, f"seed {seed} (ATTNRT_TEST_SEED={suite}, {request.node.nodeid})"


# ------------------------------------------------------------------------------------------------
# Configurations.

@dataclass(frozen=True)
class Config:
    seqs: tuple            # (q_len, k_len, seq_len) per sequence; k_len == q_len without key_rows
    causal: bool = True
    n: int = 8
    nkv: int = 2
    h: int = 64
    rot: int = 0           # R, 0: no rotary embedding
    interleaved: bool = False
    pos_ids: bool = False  # explicit position_ids
    kpos_ids: bool = False  # explicit key_position_ids
    key_rows: bool = False  # cu_seqlens_k
    alibi: str | None = None  # None, "signed", "symmetric"
    window: tuple | None = None
    block_size: int = 16
    kv_layout: str = "BSNH"
    slots: bool = False
    freqs: bool = False    # real RoPE frequency tables, else random angles per (position, pair)
    padding: int = PADDING  # query rows past cu_seqlens_q[B]


MIXED = ((1, 1, 37), (6, 6, 21), (1, 1, 5), (7, 7, 7), (0, 0, 12), (3, 3, 16), (1, 1, 1))
NONCAUSAL = ((1, 1, 19), (5, 5, 23), (8, 8, 8), (2, 2, 30), (1, 1, 3))
# Cross-attention shaped: key rows of their own count, q_len > seq_len, key rows only, none new.
CROSS = ((3, 9, 9), (7, 4, 4), (1, 2, 20), (0, 3, 12), (2, 0, 6), (4, 11, 11))
DECODES = ((1, 1, 30), (1, 1, 9), (1, 1, 17), (1, 1, 2), (1, 1, 1))
KEY_ROWS_CAUSAL = ((1, 1, 40), (6, 3, 25), (2, 8, 17), (1, 0, 33), (0, 4, 9), (5, 5, 5))

CONFIGS = {
    # causal, half-split, partial (64 of 128), token positions, signed ALiBi, GQA group 4.
    "causal_half_r64_h128_alibi_signed": Config(
        MIXED, True, 8, 2, 128, rot=64, alibi="signed", slots=True, freqs=True),
    # causal, interleaved, full, explicit positions, symmetric ALiBi (equal to signed under the
    # causal mask) with a left window, BNSH, block size 8.
    "causal_inter_full_h64_posids_alibi_sym_window": Config(
        MIXED, True, 8, 2, 64, rot=64, interleaved=True, pos_ids=True, kpos_ids=True,
        alibi="symmetric", window=(5, 0), block_size=8, kv_layout="BNSH"),
    # causal=False, half-split, full, odd head size 80, symmetric ALiBi, window (4, 2), group 3.
    "noncausal_half_full_h80_alibi_sym_window": Config(
        NONCAUSAL, False, 6, 2, 80, rot=80, alibi="symmetric", window=(4, 2)),
    # causal=False, interleaved, partial (32 of 96), explicit query positions, signed ALiBi, window.
    "noncausal_inter_r32_h96_posids_alibi_signed_window": Config(
        NONCAUSAL, False, 4, 2, 96, rot=32, interleaved=True, pos_ids=True, alibi="signed",
        window=(3, 5), kv_layout="BNSH", block_size=4, slots=True),
    # cross-attention: cu_seqlens_k, causal=False, q_len > seq_len (explicit query positions),
    # explicit key positions, interleaved, partial (48 of 64), symmetric ALiBi, no window.
    "cross_keyrows_inter_r48_h64_alibi_sym": Config(
        CROSS, False, 8, 2, 64, rot=48, interleaved=True, pos_ids=True, kpos_ids=True,
        key_rows=True, alibi="symmetric", slots=True),
    # cu_seqlens_k, causal, default positions (key row l at seq_len - k_len + l), half-split,
    # partial (96 of 128), group 4, no ALiBi.
    "causal_keyrows_half_r96_h128": Config(
        KEY_ROWS_CAUSAL, True, 4, 1, 128, rot=96, key_rows=True, freqs=True, kv_layout="BNSH"),
    # Decodes only, windowed, causal=False (the flash kernels take windows in decodes), BNSH.
    "noncausal_decodes_inter_r64_h128_alibi_sym_window": Config(
        DECODES, False, 8, 2, 128, rot=64, interleaved=True, kpos_ids=True, alibi="symmetric",
        window=(5, 3), kv_layout="BNSH", slots=True),
    # Decodes only, explicit query positions, key rows at their token positions (the all-decode
    # path must not rotate a new key at its query's position_ids), causal, half-split.
    "causal_decodes_half_r32_h64_posids_only": Config(
        DECODES, True, 8, 2, 64, rot=32, pos_ids=True, alibi="signed"),
    # One decode, no padding row: a single-token call (the flash kernels' windows in 16 bits).
    "noncausal_one_decode_half_r64_h64_alibi_sym_window": Config(
        ((1, 1, 23),), False, 8, 2, 64, rot=64, alibi="symmetric", window=(6, 2), padding=0),
    # No rotary: the symmetric form alone, causal=False, window (6, 3), MHA.
    "noncausal_alibi_sym_window_no_rotary": Config(
        NONCAUSAL, False, 4, 4, 64, alibi="symmetric", window=(6, 3)),
    # No rotary: the signed form under causal=False, both sides of p.
    "noncausal_alibi_signed_no_rotary": Config(NONCAUSAL, False, 8, 2, 64, alibi="signed"),
}
KERNEL_CONFIGS = tuple(CONFIGS)


def alibi_slopes(n: int, g: torch.Generator) -> torch.Tensor:
    """Standard ALiBi slopes 2^(-8(h+1)/n), scaled up, in a random order (every head its own)."""
    slopes = torch.tensor([3.0 * 2.0 ** (-8.0 * (h + 1) / n) for h in range(n)])
    return slopes[torch.randperm(n, generator=g)].to(torch.float32)


def make_data(cfg: Config, dtype, seed: int) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    seqs = cfg.seqs
    B = len(seqs)
    q_lens, k_lens, lens = ([s[i] for s in seqs] for i in range(3))
    if not cfg.key_rows:
        assert q_lens == k_lens
    cu_q = [0] + np.cumsum(q_lens).tolist()
    cu_k = [0] + np.cumsum(k_lens).tolist()
    num_tokens = cu_q[-1] + cfg.padding
    num_keys = cu_k[-1] if cfg.key_rows else num_tokens
    bs = cfg.block_size
    width = max(1, max((t + bs - 1) // bs for t in lens))
    num_blocks = B * width + 3
    shape = ((num_blocks, bs, cfg.nkv, cfg.h) if cfg.kv_layout == "BSNH"
             else (num_blocks, cfg.nkv, bs, cfg.h))
    k_cache = torch.randn(shape, generator=g).to(dtype)
    v_cache = torch.randn(shape, generator=g).to(dtype)
    table = torch.randperm(num_blocks, generator=g)[:B * width].to(torch.int32).reshape(B, width)
    q = (2 * torch.randn(num_tokens, cfg.n, cfg.h, generator=g)).to(dtype)
    q[cu_q[-1]:] = float("nan")  # padding rows: never read
    k = torch.randn(num_keys, cfg.nkv, cfg.h, generator=g).to(dtype)
    v = torch.randn(num_keys, cfg.nkv, cfg.h, generator=g).to(dtype)

    # Token positions (the defaults) of every query and key row (padding rows: 0).
    qtok = np.zeros(num_tokens, dtype=np.int64)
    ktok = np.zeros(num_keys, dtype=np.int64)
    for b, (q_len, k_len, t) in enumerate(seqs):
        qtok[cu_q[b]:cu_q[b] + q_len] = t - q_len + np.arange(q_len)
        if cfg.key_rows:
            ktok[cu_k[b]:cu_k[b] + k_len] = t - k_len + np.arange(k_len)
        else:
            ktok[cu_q[b]:cu_q[b] + q_len] = t - q_len + np.arange(q_len)
    M = max(lens) + 9
    position_ids = key_position_ids = None
    qpos, kpos = qtok.copy(), ktok.copy()
    if cfg.rot and cfg.pos_ids:
        qpos = torch.randint(0, M, (num_tokens,), generator=g).numpy().astype(np.int64)
        qpos[cu_q[-1]:] = 0
        position_ids = torch.from_numpy(qpos.copy())
    if cfg.rot and cfg.kpos_ids:
        kpos = torch.randint(0, M, (num_keys,), generator=g).numpy().astype(np.int64)
        key_position_ids = torch.from_numpy(kpos.copy())
    cos = sin = None
    if cfg.rot:
        half = cfg.rot // 2
        if cfg.freqs:
            inv = 10000.0 ** (-np.arange(half) * 2.0 / cfg.rot)
            angles = np.arange(M)[:, None] * inv[None, :]
        else:
            angles = torch.rand(M, half, generator=g, dtype=torch.float64).numpy() * 2 * math.pi
        cos = torch.from_numpy(np.cos(angles)).to(dtype)
        sin = torch.from_numpy(np.sin(angles)).to(dtype)
    slot_mapping = None
    if cfg.slots:
        slot_mapping = torch.full((num_keys,), -1, dtype=torch.int64)
        for b, (q_len, k_len, t) in enumerate(seqs):
            start = cu_k[b] if cfg.key_rows else cu_q[b]
            for r in range(k_len):
                pos = t - k_len + r
                slot_mapping[start + r] = int(table[b, pos // bs]) * bs + pos % bs
        # One row not written (slot -1): its cached token stays as it was.
        some = [b for b in range(B) if k_lens[b] > 1] or [b for b in range(B) if k_lens[b]]
        start = cu_k[some[0]] if cfg.key_rows else cu_q[some[0]]
        slot_mapping[start] = -1
    return SimpleNamespace(
        cfg=cfg, dtype=dtype, seed=seed, q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache,
        k_cache0=k_cache.clone(), v_cache0=v_cache.clone(), table=table, cu_q=cu_q, cu_k=cu_k,
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        cu_q_t=torch.tensor(cu_q, dtype=torch.int32), cu_k_t=torch.tensor(cu_k, dtype=torch.int32),
        qtok=qtok, qpos=qpos, kpos=kpos, M=M, cos=cos, sin=sin, position_ids=position_ids,
        key_position_ids=key_position_ids, slot_mapping=slot_mapping,
        slopes=alibi_slopes(cfg.n, g) if cfg.alibi else None, num_tokens=num_tokens,
        num_keys=num_keys,
        out=torch.full((num_tokens, cfg.n, cfg.h), float("nan"), dtype=dtype))


# ------------------------------------------------------------------------------------------------
# The float64 reference.

def rope_pairs(h: int, rot: int, interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    """The dimension indices (x0, x1) of the R/2 rotated pairs."""
    half = rot // 2
    if interleaved:
        return 2 * np.arange(half), 2 * np.arange(half) + 1
    return np.arange(half), half + np.arange(half)


def rotate(x, positions, cos, sin, rot, interleaved):
    """RoPE of x [rows, heads, H] (float64 numpy holding dtype values) at positions [rows], cos/sin
    float64 [M, R/2]: (the exact float64 result, the per-element magnitude |x0 c| + |x1 s| of each
    rotated value, 0 for the copied dimensions)."""
    i0, i1 = rope_pairs(x.shape[-1], rot, interleaved)
    c = cos[positions][:, None, :]
    s = sin[positions][:, None, :]
    x0, x1 = x[..., i0], x[..., i1]
    y = x.copy()
    y[..., i0] = x0 * c - x1 * s
    y[..., i1] = x0 * s + x1 * c
    size = np.zeros_like(x)
    size[..., i0] = np.abs(x0 * c) + np.abs(x1 * s)
    size[..., i1] = np.abs(x0 * s) + np.abs(x1 * c)
    return y, size


def to_dtype(x: np.ndarray, dtype) -> np.ndarray:
    """float64 values rounded to dtype, back in float64."""
    return torch.from_numpy(x).to(dtype).double().numpy()


def rotated_rows(d, which, *, shift=0, interleaved=None):
    """The query ("q") or key ("k") rows as the op must use them: rotated at their positions (+
    shift, modulo M) and rounded to the dtype, float64; with the magnitudes for the bound."""
    cfg = d.cfg
    x = (d.q if which == "q" else d.k).double().numpy()
    if not cfg.rot:
        return x, np.zeros_like(x)
    pos = (d.qpos if which == "q" else d.kpos)
    pos = (pos + shift) % d.M
    y, size = rotate(np.nan_to_num(x), pos, d.cos.double().numpy(), d.sin.double().numpy(),
                     cfg.rot, cfg.interleaved if interleaved is None else interleaved)
    return to_dtype(y, d.dtype), size


def cache_slot(cache, kv_layout, block, offset):
    return cache[block, :, offset] if kv_layout == "BNSH" else cache[block, offset]


def expected_caches(d, **rotation):
    """(key cache, value cache, bound): the caches as they must be after the call, float64 numpy;
    bound: the allowed |difference| per element (0: bit-exact)."""
    cfg = d.cfg
    ek, ev = d.k_cache0.double().numpy().copy(), d.v_cache0.double().numpy().copy()
    bound = np.zeros_like(ek)
    keys, size = rotated_rows(d, "k", **rotation)
    values = d.v.double().numpy()
    bs = cfg.block_size
    for b, (q_len, k_len, t) in enumerate(cfg.seqs):
        start = d.cu_k[b] if cfg.key_rows else d.cu_q[b]
        for r in range(k_len):
            row = start + r
            if d.slot_mapping is not None and int(d.slot_mapping[row]) < 0:
                continue
            pos = t - k_len + r
            block = int(d.table[b, pos // bs])
            cache_slot(ek, cfg.kv_layout, block, pos % bs)[...] = keys[row]
            cache_slot(ev, cfg.kv_layout, block, pos % bs)[...] = values[row]
            cache_slot(bound, cfg.kv_layout, block, pos % bs)[...] = \
                ROPE_ULPS[d.dtype] * size[row]
    return ek, ev, bound


def attend(q, keys, values, ptok, *, causal, window, scale, slopes, form):
    """float64 attention of q [L, N, H] over keys/values [T, Nkv, H]; query row i at TOKEN
    position ptok[i]. ALiBi (slopes [N] or None): slope * (j - p) ("signed") or -slope * |j - p|
    ("symmetric"), added after the scale, before the mask. A row that sees no key is zero."""
    length, n, _ = q.shape
    t, nkv, _ = keys.shape
    group = n // nkv
    p = np.asarray(ptok)[:, None]
    j = np.arange(t)[None, :]
    visible = (j <= p) if causal else np.ones((length, t), dtype=bool)
    if window is not None:
        left, right = window
        if left >= 0:
            visible = visible & (j >= p - left)
        if right >= 0:
            visible = visible & (j <= p + right)
    out = np.zeros((length, n, values.shape[2]))
    for head in range(n):
        s = scale * (q[:, head] @ keys[:, head // group].T)
        if slopes is not None:
            slope = float(slopes[head])
            s = s + (slope * (j - p) if form == "signed" else -slope * np.abs(j - p))
        s = np.where(visible, s, -np.inf)
        rows = visible.any(axis=1)
        if not rows.any():
            continue
        sv = s[rows]
        e = np.exp(sv - sv.max(axis=1, keepdims=True))
        out[rows, head] = (e / e.sum(axis=1, keepdims=True)) @ values[:, head // group]
    return out


def sequence_rows(cache, d, b, length):
    bs = d.cfg.block_size
    if length == 0:
        return np.zeros((0, d.cfg.nkv, d.cfg.h))
    return np.stack([cache_slot(cache, d.cfg.kv_layout, int(d.table[b, j // bs]), j % bs)
                     for j in range(length)])


def reference(d, ek, ev, *, q_shift=0, interleaved=None, form=None):
    """Expected output rows [cu_q[B], N, H] (float64) over the caches ek/ev; q_shift, interleaved
    and form change the query rotation and the ALiBi form (the negative controls)."""
    cfg = d.cfg
    q, _ = rotated_rows(d, "q", shift=q_shift, interleaved=interleaved)
    slopes = d.slopes.double().numpy() if d.slopes is not None else None
    out = np.zeros((d.cu_q[-1], cfg.n, cfg.h))
    for b, (q_len, _, t) in enumerate(cfg.seqs):
        if q_len == 0:
            continue
        rows = slice(d.cu_q[b], d.cu_q[b] + q_len)
        out[rows] = attend(q[rows], sequence_rows(ek, d, b, t), sequence_rows(ev, d, b, t),
                           d.qtok[rows], causal=cfg.causal, window=cfg.window,
                           scale=1 / math.sqrt(cfg.h), slopes=slopes,
                           form=form or cfg.alibi or "signed")
    return out


def output_error(d, want) -> float:
    """max |out - want| over every element of the real rows (inf where out is NaN)."""
    got = d.out[:d.cu_q[-1]].double().numpy()
    diff = np.abs(got - want)
    return float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0))


def cache_misses(actual, expected, bound) -> int:
    """How many elements of a cache lie outside their bound of the expected one."""
    diff = np.abs(actual.double().numpy() - expected)
    return int(np.count_nonzero(~(diff <= bound)))


# ------------------------------------------------------------------------------------------------
# The call.

def to_numpy(x):
    """A numpy view sharing the tensor's memory (bfloat16 as ml_dtypes.bfloat16)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.dtype == torch.bfloat16:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def call(rt, d, framework, **changes):
    """paged_attention_varlen on d's inputs (numpy views or the torch tensors), writing d.out and
    the caches in place; `changes` replace inputs by name (None removes one)."""
    cfg = d.cfg
    args = dict(q=d.q, k_cache=d.k_cache, v_cache=d.v_cache, cu_seqlens_q=d.cu_q_t,
                seq_lens=d.seq_lens, block_table=d.table)
    kwargs = dict(k=d.k, v=d.v, causal=cfg.causal, slot_mapping=d.slot_mapping, out=d.out,
                  kv_layout=cfg.kv_layout, alibi_slopes=d.slopes)
    if cfg.key_rows:
        kwargs["cu_seqlens_k"] = d.cu_k_t
    if cfg.window is not None:
        kwargs["window_size"] = cfg.window
    if cfg.alibi is not None:
        kwargs["alibi_form"] = cfg.alibi
    if cfg.rot:
        kwargs.update(rotary_cos=d.cos, rotary_sin=d.sin, rotary_interleaved=cfg.interleaved,
                      position_ids=d.position_ids, key_position_ids=d.key_position_ids)
    for name, value in changes.items():
        (args if name in args else kwargs)[name] = value
    kwargs = {n: x for n, x in kwargs.items() if x is not None or n in ("k", "v")}
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


def untouched(d) -> bool:
    return (torch.equal(d.k_cache, d.k_cache0) and torch.equal(d.v_cache, d.v_cache0)
            and bool(torch.isnan(d.out).all()))


def value_scale(d) -> float:
    return max(1.0, float(d.v.double().abs().max()), float(d.v_cache0.double().abs().max()))


def run_and_check(d, framework, label, kernel=None, controls=None):
    """One call, then the caches, the padding rows, every output element; with `controls` (default:
    float32) the negative controls must miss by more than twice the tolerance."""
    cfg = d.cfg
    print(f"{label}: {framework} {d.dtype} kernel={kernel} {cfg}")
    with attnrt.Runtime(kernel=kernel, num_threads=2) as rt:
        try:
            call(rt, d, framework)
        except attnrt.UnsupportedError as e:
            assert untouched(d), f"{label}: a declined call wrote the caches or out"
            if kernel is None:
                raise
            reason = re.search(re.escape(kernel) + r": ([^;]*)", str(e))
            pytest.skip(f"{kernel} declines: {reason.group(1) if reason else e}")
    where = f"{label} {framework} {d.dtype} kernel={kernel}"
    assert bool(torch.isnan(d.out[d.cu_q[-1]:]).all()), f"{where}: padding output rows written"
    assert not bool(torch.isnan(d.out[:d.cu_q[-1]]).any()), \
        f"{where}: {int(torch.isnan(d.out[:d.cu_q[-1]]).sum())} output elements left NaN"

    ek, ev, bound = expected_caches(d)
    k_miss = cache_misses(d.k_cache, ek, bound)
    v_miss = cache_misses(d.v_cache, ev, np.zeros_like(ev))
    assert k_miss == 0, f"{where}: {k_miss} key cache elements differ from the expected writes"
    assert v_miss == 0, f"{where}: {v_miss} value cache elements differ from the expected writes"

    tol = REL_TOL[d.dtype] * value_scale(d)
    err = output_error(d, reference(d, ek, ev))
    print(f"{where}: max |error| {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol, f"{where}: max |error| {err:.3g} > {tol:.3g}"

    if controls is None:
        controls = d.dtype == torch.float32
    if not controls:
        return
    bound_miss = 2 * tol
    misses = []
    if cfg.rot:
        misses.append(("query rotated one position later",
                       output_error(d, reference(d, ek, ev, q_shift=1))))
        misses.append(("the other rotary pairing", output_error(
            d, reference(d, ek, ev, interleaved=not cfg.interleaved))))
        written = any(k for _, k, _ in cfg.seqs)
        if written:
            sk, _, sb = expected_caches(d, shift=1)
            assert cache_misses(d.k_cache, sk, sb) > 0, \
                f"{where}: the key cache also matches keys rotated one position later"
    # Only keys after a row's position tell the forms apart: q_len >= 2, or a cross row.
    if cfg.alibi and not cfg.causal and any(q > 1 for q, _, _ in cfg.seqs) and \
            (cfg.window is None or cfg.window[1] != 0):
        other = "symmetric" if cfg.alibi == "signed" else "signed"
        misses.append((f"alibi_form {other!r}", output_error(d, reference(d, ek, ev, form=other))))
    for name, miss in misses:
        assert miss > bound_miss, \
            f"{where}: negative control '{name}' went unnoticed: {miss:.3g} <= {bound_miss:.3g}"


# ------------------------------------------------------------------------------------------------
# The reference itself.

def test_reference_self_check(request):
    """rotate() equals an independent complex-number RoPE (interleaved pairs as complex numbers
    times e^{i angle}; half-split the same after a permutation of the dimensions); attend() equals
    PyTorch's attention with the ALiBi bias as a float mask."""
    seed, line = seed_of(request)
    print(line)
    g = torch.Generator().manual_seed(seed)
    rows, heads, h, rot, m = 5, 3, 12, 8, 9
    x = torch.randn(rows, heads, h, generator=g, dtype=torch.float64).numpy()
    angles = torch.rand(m, rot // 2, generator=g, dtype=torch.float64).numpy() * 6.3
    pos = torch.randint(0, m, (rows,), generator=g).numpy()
    rotor = np.exp(1j * angles[pos])[:, None, :]
    # Interleaved: (x[2i], x[2i + 1]) is x[2i] + i x[2i + 1].
    z = (x[..., 0:rot:2] + 1j * x[..., 1:rot:2]) * rotor
    want = x.copy()
    want[..., 0:rot:2], want[..., 1:rot:2] = z.real, z.imag
    got, _ = rotate(x, pos, np.cos(angles), np.sin(angles), rot, True)
    assert np.abs(got - want).max() < 1e-12
    # Half-split: (x[i], x[i + R/2]).
    z = (x[..., :rot // 2] + 1j * x[..., rot // 2:rot]) * rotor
    want = x.copy()
    want[..., :rot // 2], want[..., rot // 2:rot] = z.real, z.imag
    got, _ = rotate(x, pos, np.cos(angles), np.sin(angles), rot, False)
    assert np.abs(got - want).max() < 1e-12
    assert (got[..., rot:] == x[..., rot:]).all()

    n, nkv, length, t = 6, 2, 4, 15
    q = torch.randn(length, n, h, generator=g, dtype=torch.float64)
    keys = torch.randn(t, nkv, h, generator=g, dtype=torch.float64)
    values = torch.randn(t, nkv, h, generator=g, dtype=torch.float64)
    slopes = torch.rand(n, generator=g, dtype=torch.float64)
    kr, vr = keys.repeat_interleave(n // nkv, 1), values.repeat_interleave(n // nkv, 1)
    ptok = np.array([3, 7, 8, 14])
    p = torch.from_numpy(ptok).reshape(-1, 1)
    j = torch.arange(t).reshape(1, -1)
    for causal, window in ((True, None), (True, (2, 0)), (False, None), (False, (3, 4))):
        visible = (j <= p) if causal else torch.ones(length, t, dtype=torch.bool)
        if window is not None:
            visible &= (j >= p - window[0]) & (j <= p + window[1])
        for form in ("signed", "symmetric"):
            dist = (j - p).double() if form == "signed" else -(j - p).abs().double()
            mask = slopes.reshape(n, 1, 1) * dist
            mask = mask.masked_fill(~visible, float("-inf"))
            want = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), kr.transpose(0, 1), vr.transpose(0, 1), attn_mask=mask,
                scale=0.25).transpose(0, 1).numpy()
            got = attend(q.numpy(), keys.numpy(), values.numpy(), ptok, causal=causal,
                         window=window, scale=0.25, slopes=slopes.numpy(), form=form)
            assert np.abs(got - want).max() < 1e-12, (causal, window, form)
            if causal:  # both forms agree under the causal mask
                other = attend(q.numpy(), keys.numpy(), values.numpy(), ptok, causal=True,
                               window=window, scale=0.25, slopes=slopes.numpy(),
                               form="symmetric" if form == "signed" else "signed")
                assert np.abs(got - other).max() < 1e-12


# ------------------------------------------------------------------------------------------------
# Every configuration, both frameworks, every dtype (the kernel the runtime picks).

@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_rope_alibi_form(request, config, dtype, framework):
    seed, line = seed_of(request)
    print(line)
    d = make_data(CONFIGS[config], DTYPES[dtype], seed)
    run_and_check(d, framework, config)


# ------------------------------------------------------------------------------------------------
# Every paged_gqa_varlen kernel, pinned in turn.

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("config", KERNEL_CONFIGS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel(request, kernel, config, dtype):
    seed, line = seed_of(request)
    print(line)
    d = make_data(CONFIGS[config], DTYPES[dtype], seed)
    run_and_check(d, "torch" if dtype != "float16" else "numpy", config, kernel=kernel)


# ------------------------------------------------------------------------------------------------
# Negative controls, explicitly: each must miss by far.

def test_negative_controls(request):
    """float32, rotary + symmetric ALiBi without the causal mask: the reference with the query
    rotated one position off (either way), the key rows rotated one position later, the other
    pairing, the signed form, or token positions taken as rotary positions all miss attnrt's
    output (or cache) by more than 100x the tolerance; the specification's reference matches."""
    seed, line = seed_of(request)
    print(line)
    cfg = replace(CONFIGS["noncausal_half_full_h80_alibi_sym_window"], pos_ids=True,
                  kpos_ids=True, window=None)
    d = make_data(cfg, torch.float32, seed)
    run_and_check(d, "torch", "negative_controls", controls=True)
    ek, ev, bound = expected_caches(d)
    tol = REL_TOL[d.dtype] * value_scale(d)
    assert output_error(d, reference(d, ek, ev)) <= tol
    for name, want in (("q position + 1", reference(d, ek, ev, q_shift=1)),
                       ("q position - 1", reference(d, ek, ev, q_shift=-1)),
                       ("interleaved pairs", reference(d, ek, ev, interleaved=True)),
                       ("signed ALiBi", reference(d, ek, ev, form="signed"))):
        miss = output_error(d, want)
        print(f"control {name}: {miss:.3g} (tolerance {tol:.3g})")
        assert miss > 100 * tol, f"negative control '{name}' went unnoticed: {miss:.3g}"
    # Token positions in place of position_ids (the explicit ones are random).
    d.qpos = d.qtok
    miss = output_error(d, reference(d, ek, ev))
    assert miss > 100 * tol, f"negative control 'token positions' went unnoticed: {miss:.3g}"
    # Key rows rotated one position later: most rotated key elements are off.
    sk, _, sb = expected_caches(d, shift=1)
    assert cache_misses(d.k_cache, sk, sb) > 0.5 * np.count_nonzero(bound)


def test_symmetric_equals_signed_under_the_causal_mask(request):
    """alibi_form only matters without the causal mask: causal calls give the same bits."""
    seed, line = seed_of(request)
    print(line)
    cfg = CONFIGS["causal_half_r64_h128_alibi_signed"]
    outs = []
    for form in ("signed", "symmetric"):
        d = make_data(replace(cfg, alibi=form), torch.float32, seed)
        with attnrt.Runtime(num_threads=2) as rt:
            call(rt, d, "torch")
        outs.append((d.out, d.k_cache))
    assert torch.equal(outs[0][1], outs[1][1])
    err = float((outs[0][0][:d.cu_q[-1]] - outs[1][0][:d.cu_q[-1]]).abs().max())
    assert err <= REL_TOL[torch.float32] * value_scale(d), err


# ------------------------------------------------------------------------------------------------
# Errors: InvalidArgumentError naming the input, before anything is written.

ERROR_CFG = Config(((1, 1, 9), (3, 3, 12)), True, 4, 2, 64, rot=32, pos_ids=True, kpos_ids=True,
                   alibi="signed", slots=True)


def error_case(kind, d):
    """(changes to the call, pattern the message must match)."""
    if kind == "position_ids_out_of_range":
        pos = d.position_ids.clone()
        pos[1] = d.M  # a real row (sequence 1's first), one past the last cos row
        return dict(position_ids=pos), r"position_ids\[1\]"
    if kind == "negative_position_id":
        pos = d.position_ids.clone()
        pos[0] = -1
        return dict(position_ids=pos), r"position_ids\[0\]"
    if kind == "key_position_ids_out_of_range":
        pos = d.key_position_ids.clone()
        pos[2] = d.M + 5
        return dict(key_position_ids=pos), r"key_position_ids\[2\]"
    if kind == "token_position_out_of_range":
        # No explicit positions: sequence 1's tokens reach 11, the tables have 8 rows.
        return (dict(position_ids=None, key_position_ids=None, rotary_cos=d.cos[:8].clone(),
                     rotary_sin=d.sin[:8].clone()), r"query row 0.*(cos_cache|rotary_cos)")
    if kind == "position_ids_without_rotary":
        return (dict(rotary_cos=None, rotary_sin=None, key_position_ids=None),
                r"position_ids")
    if kind == "key_position_ids_without_rotary":
        return (dict(rotary_cos=None, rotary_sin=None, position_ids=None),
                r"key_position_ids")
    if kind == "key_position_ids_without_k":
        return dict(k=None, v=None, slot_mapping=None), r"key_position_ids"
    if kind == "rotary_cos_without_rotary_sin":
        return dict(rotary_sin=None), r"rotary_sin"
    if kind == "rotary_sin_without_rotary_cos":
        return dict(rotary_cos=None), r"rotary_cos"
    if kind == "cos_wrong_dtype":
        # float64 tables for a float32 query, float32 tables for a bfloat16 one.
        wrong = d.cos.double() if d.dtype == torch.float32 else d.cos.float()
        return dict(rotary_cos=wrong), r"cos_cache|rotary_cos"
    if kind == "sin_wrong_dtype":
        return dict(rotary_sin=d.sin.to(torch.float16)), r"sin_cache|rotary_sin"
    if kind == "cos_too_wide":
        # R/2 = H/2 + 1 > H/2.
        wide = torch.ones(d.M, d.cfg.h // 2 + 1, dtype=d.dtype)
        return dict(rotary_cos=wide, rotary_sin=wide.clone()), r"cos_cache|rotary_cos"
    if kind == "cos_sin_shapes_differ":
        return dict(rotary_sin=d.sin[:, :-1].clone()), r"sin_cache|rotary_sin"
    if kind == "position_ids_wrong_count":
        return dict(position_ids=d.position_ids[:-1].clone()), r"position_ids"
    if kind == "alibi_form_bogus":
        return dict(alibi_form="bogus"), r"alibi_form"
    if kind == "symmetric_without_slopes":
        return dict(alibi_form="symmetric", alibi_slopes=None), r"alibi_form.*alibi_slopes"
    if kind == "slope_overflows":
        # Finite, but slope * distance overflows float32: +Inf biases would make the rows NaN.
        slopes = d.slopes.clone()
        slopes[1] = -3e38
        return dict(alibi_slopes=slopes), r"alibi_slopes\[1\].*overflows float32"
    if kind == "float_seq_lens":
        # A Python list of floats for an integer input: an error, not a truncation.
        lens = [float(x) + 0.5 for x in d.seq_lens.tolist()]
        return dict(seq_lens=lens), r"seq_lens: expected integers, element 0"
    if kind == "bool_seq_lens":
        return dict(seq_lens=[True] * len(d.seq_lens)), r"seq_lens: expected integers"
    if kind == "rotary_interleaved_without_rotary":
        return (dict(rotary_cos=None, rotary_sin=None, position_ids=None, key_position_ids=None,
                     rotary_interleaved=True), r"rotary_interleaved")
    raise AssertionError(kind)


ERRORS = [("position_ids_out_of_range", "float32"), ("negative_position_id", "float32"),
          ("key_position_ids_out_of_range", "float32"), ("token_position_out_of_range", "float32"),
          ("position_ids_without_rotary", "float32"),
          ("key_position_ids_without_rotary", "float32"),
          ("key_position_ids_without_k", "float32"), ("rotary_cos_without_rotary_sin", "float32"),
          ("rotary_sin_without_rotary_cos", "float32"), ("cos_wrong_dtype", "float32"),
          ("cos_wrong_dtype", "bfloat16"), ("sin_wrong_dtype", "float32"),
          ("cos_too_wide", "float32"), ("cos_too_wide", "bfloat16"),
          ("cos_sin_shapes_differ", "float32"), ("position_ids_wrong_count", "float32"),
          ("alibi_form_bogus", "float32"), ("alibi_form_bogus", "bfloat16"),
          ("rotary_interleaved_without_rotary", "float32"),
          ("symmetric_without_slopes", "float32"), ("slope_overflows", "float32"),
          ("slope_overflows", "bfloat16"), ("float_seq_lens", "float32"),
          ("bool_seq_lens", "float32")]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kind,dtype", ERRORS)
def test_refused_by_name_nothing_written(request, kind, dtype, framework):
    seed, line = seed_of(request)
    print(line)
    d = make_data(ERROR_CFG, DTYPES[dtype], seed)
    changes, pattern = error_case(kind, d)
    with attnrt.Runtime(num_threads=2) as rt:
        with pytest.raises(attnrt.InvalidArgumentError) as info:
            call(rt, d, framework, **changes)
    message = str(info.value)
    print(f"{kind}: {message}")
    assert re.search(pattern, message), f"{kind}: the message does not name the input: {message}"
    assert untouched(d), f"{kind}: a refused call wrote the caches or out"
    # The same inputs without the fault run, and the check above is not vacuous.
    with attnrt.Runtime(num_threads=2) as rt:
        call(rt, d, framework)
    assert not untouched(d)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_padding_rows_positions_are_not_read(request, framework):
    """position_ids / key_position_ids of the padding rows past cu_seqlens_q[B] (no sequence's
    rows: neither rotated nor written) may lie outside [0, M): only the positions a call rotates at
    are checked."""
    seed, line = seed_of(request)
    print(line)
    d = make_data(ERROR_CFG, torch.float32, seed)
    d.position_ids[d.cu_q[-1]:] = d.M + 1000
    d.key_position_ids[d.cu_q[-1]:] = -7
    with attnrt.Runtime(num_threads=2) as rt:
        call(rt, d, framework)
    ek, ev, bound = expected_caches(d)
    assert cache_misses(d.k_cache, ek, bound) == 0 and cache_misses(d.v_cache, ev, 0 * ev) == 0
    assert bool(torch.isnan(d.out[d.cu_q[-1]:]).all())
    err = output_error(d, reference(d, ek, ev))
    assert err <= REL_TOL[d.dtype] * value_scale(d), err


@pytest.mark.parametrize("form", ["signed", "symmetric"])
def test_largest_finite_bias_runs_and_one_past_is_refused(form):
    """The slope bound is the call's largest key distance, max(T_b, q_len_b) - 1 (999 for one
    decode row over 1000 keys): a slope just under FLT_MAX / 999 runs (its largest bias is finite:
    the signed form puts all the weight on key 0, whose bias is the largest; the symmetric one on
    the row's own key), a slope just over it is refused naming the slope, with nothing written."""
    t, n, nkv, h, bs = 1000, 2, 1, 16, 128
    g = torch.Generator().manual_seed(0)
    nb = (t + bs - 1) // bs
    kc = torch.randn(nb, bs, nkv, h, generator=g)
    vc = torch.randn(nb, bs, nkv, h, generator=g)
    q = torch.randn(1, n, h, generator=g)
    args = (q, kc, vc, torch.tensor([0, 1], dtype=torch.int32), torch.tensor([t], dtype=torch.int32),
            torch.arange(nb, dtype=torch.int32).view(1, nb))
    bound = float(np.finfo(np.float32).max) / (t - 1)
    ok = torch.full((n,), -0.999 * bound if form == "signed" else 0.999 * bound)
    bad = ok * 1.002
    with attnrt.Runtime(num_threads=1) as rt:
        out = attnrt.paged_attention_varlen(rt, *args, alibi_slopes=ok, alibi_form=form)
        want = vc[0, 0, 0] if form == "signed" else vc[(t - 1) // bs, (t - 1) % bs, 0]
        for head in range(n):
            assert torch.equal(out[0, head], want), (form, head)
        untouched = torch.full_like(out, float("nan"))
        with pytest.raises(attnrt.InvalidArgumentError, match=r"alibi_slopes\[0\].*overflows"):
            attnrt.paged_attention_varlen(rt, *args, alibi_slopes=bad, alibi_form=form,
                                          out=untouched)
        assert bool(torch.isnan(untouched).all())
