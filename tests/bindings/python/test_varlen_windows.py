"""attnrt.paged_attention_varlen: windows of non-causal attention (window_size (left, right) with
causal=False: a row at position p sees keys [p - left, p + right], FlashAttention's window without
the causal mask, vLLM's sliding window of encoder layers), and checks of the
key_start_loc and alibi_slopes inputs: a step of padding rows only, negative views of
alibi_slopes, non-finite slopes, the message of value rows under cu_seqlens_k. Each output
element against a float64 reference written from the definition, every kernel pinned in turn,
with a negative control."""
from __future__ import annotations

import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from varlen_kernels import varlen_kernels  # noqa: E402

N, NKV, H, BS = 4, 2, 32, 8
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))


def window_reference(q, keys, values, past, left, right, scale):
    """float64: row i (position past + i) of q [q_len, N, H] over keys/values [T, Nkv, H], keys
    [p - left, p + right] within [0, T) (-1: that side open); a row with no key is 0."""
    t = keys.shape[0]
    k = keys.double().repeat_interleave(N // NKV, dim=1)
    v = values.double().repeat_interleave(N // NKV, dim=1)
    s = torch.einsum("qnh,tnh->nqt", q.double(), k) * scale
    pos = past + torch.arange(q.shape[0]).reshape(-1, 1)
    j = torch.arange(t).reshape(1, -1)
    seen = torch.ones(q.shape[0], t, dtype=torch.bool)
    if left >= 0:
        seen &= j >= pos - left
    if right >= 0:
        seen &= j <= pos + right
    s = s.masked_fill(~seen, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("nqt,tnh->qnh", p, v)


def batch(g, dtype):
    """Sequences (q_len, T): an encoder (q_len = T), a chunk over a cached prefix, a decode, and a
    cross-attention-shaped one (more query rows than keys). Caches BSNH."""
    seqs = [(30, 30), (6, 21), (1, 17), (9, 4)]
    blocks = [(t + BS - 1) // BS for _, t in seqs]
    table = torch.full((len(seqs), max(blocks)), -1, dtype=torch.int32)
    nxt = 0
    for b, n in enumerate(blocks):
        table[b, :n] = torch.arange(nxt, nxt + n, dtype=torch.int32)
        nxt += n
    kc = torch.randn(nxt, BS, NKV, H, generator=g).to(dtype)
    vc = torch.randn(nxt, BS, NKV, H, generator=g).to(dtype)
    q_lens = [ql for ql, _ in seqs]
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = (2 * torch.randn(int(cu[-1]) + 2, N, H, generator=g)).to(dtype)
    lens = torch.tensor([t for _, t in seqs], dtype=torch.int32)
    return seqs, kc, vc, q, cu, lens, table


def rows_of(cache, table, b, t):
    pos = torch.arange(t)
    return cache[table[b][pos // BS].long(), pos % BS]


@pytest.mark.parametrize("window", [(8, 3), (-1, 2), (5, -1), (0, 0), (2, 40)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_window_of_non_causal_attention(window, dtype):
    print(f"seed {SEED}, window {window}, dtype {dtype}")
    g = torch.Generator().manual_seed(SEED)
    seqs, kc, vc, q, cu, lens, table = batch(g, dtype)
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    for kernel in varlen_kernels():
        with attnrt.Runtime(kernel=kernel) as rt:
            out = torch.full_like(q, float("nan"))
            try:
                attnrt.paged_attention_varlen(rt, q, kc, vc, cu, lens, table, causal=False,
                                              window_size=window, out=out, softmax_scale=0.2)
            except attnrt.UnsupportedError as e:
                # Only float32 on AMX, or a bfloat16 prompt with a left window (the naive path's
                # rule for windows, as ONNX Runtime's); never the window of non-causal attention.
                assert "flash" in kernel and "non-causal" not in str(e), (kernel, e)
                assert torch.isnan(out).all()
                continue
        assert torch.isnan(out[int(cu[-1]):]).all(), "padding rows were written"
        worst = worst_wrong = 0.0
        for b, (q_len, t) in enumerate(seqs):
            rows = slice(int(cu[b]), int(cu[b + 1]))
            keys, values = rows_of(kc, table, b, t), rows_of(vc, table, b, t)
            want = window_reference(q[rows], keys, values, t - q_len, *window, 0.2)
            worst = max(worst, float((out[rows].double() - want).abs().max()))
            # Negative control: the window one key wider on its left side (or narrower on its
            # right when the left is open).
            other = (window[0] + 1, window[1]) if window[0] >= 0 else (window[0], window[1] - 1)
            wrong = window_reference(q[rows], keys, values, t - q_len, *other, 0.2)
            worst_wrong = max(worst_wrong, float((out[rows].double() - wrong).abs().max()))
        assert worst <= tol, (kernel, worst, f"seed {SEED}")
        assert worst_wrong > 10 * tol, (kernel, "a narrower window went unnoticed", worst_wrong)


def test_window_of_non_causal_attention_through_the_operator():
    """torch.ops.attnrt.paged_attention_varlen's window_left/window_right give the Python API's
    bits; window_right > 0 with causal attention is refused by name."""
    g = torch.Generator().manual_seed(SEED)
    seqs, kc, vc, q, cu, lens, table = batch(g, torch.float32)
    with attnrt.Runtime() as rt:
        want = attnrt.paged_attention_varlen(rt, q, kc, vc, cu, lens, table, causal=False,
                                             window_size=(6, 2))
    got = torch.full_like(q, 7.0)
    torch.ops.attnrt.paged_attention_varlen(q, kc, vc, cu, lens, table, got, causal=False,
                                            window_left=6, window_right=2)
    t = int(cu[-1])
    assert torch.equal(got[:t], want[:t])
    with pytest.raises(ValueError, match="window_right: causal attention sees no later key"):
        torch.ops.attnrt.paged_attention_varlen(q, kc, vc, cu, lens, table, got, window_right=1)


def test_a_step_of_padding_rows_only_writes_nothing():
    """k/v with one row per query row and no sequence with a query row (cu_seqlens_q all 0): a
    no-op, as before key_start_loc existed (rows past cu_seqlens_q[B] are padding)."""
    g = torch.Generator().manual_seed(SEED)
    kc = torch.randn(4, BS, NKV, H, generator=g)
    vc = kc.clone() + 1
    before = (kc.clone(), vc.clone())
    q = torch.randn(4, N, H, generator=g)
    k = torch.randn(4, NKV, H, generator=g)
    out = torch.full_like(q, 7.0)
    with attnrt.Runtime() as rt:
        for numpy in (False, True):
            args = [q, kc, vc, torch.tensor([0, 0, 0], dtype=torch.int32),
                    torch.tensor([3, 5], dtype=torch.int32),
                    torch.tensor([[0], [1]], dtype=torch.int32)]
            kw = dict(k=k, v=k.clone(), out=out)
            if numpy:
                args = [a.numpy() for a in args]
                kw = {n: x.numpy() for n, x in kw.items()}
            attnrt.paged_attention_varlen(rt, *args, **kw)
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    assert torch.all(out == 7.0)


def test_alibi_slopes_negative_view_and_non_finite_slopes():
    """A negative view of alibi_slopes is read as its values (the torch operator resolves it); a
    NaN or infinite slope is refused naming alibi_slopes[n], nothing written."""
    g = torch.Generator().manual_seed(SEED)
    seqs, kc, vc, q, cu, lens, table = batch(g, torch.float32)
    slopes = torch.tensor([0.5, -0.25, 0.125, 1.0])
    with attnrt.Runtime() as rt:
        want = attnrt.paged_attention_varlen(rt, q, kc, vc, cu, lens, table, causal=False,
                                             alibi_slopes=slopes)
        got = attnrt.paged_attention_varlen(rt, q, kc, vc, cu, lens, table, causal=False,
                                            alibi_slopes=torch._neg_view(-slopes))
        t = int(cu[-1])
        assert torch.equal(got[:t], want[:t])
        for bad in (float("nan"), float("inf"), -float("inf")):
            s = slopes.clone()
            s[2] = bad
            out = torch.full_like(q, 7.0)
            with pytest.raises(attnrt.InvalidArgumentError, match=r"alibi_slopes\[2\] = .* finite"):
                attnrt.paged_attention_varlen(rt, q, kc, vc, cu, lens, table, causal=False,
                                              alibi_slopes=s, out=out)
            assert torch.all(out == 7.0)


def test_value_rows_of_their_own_count_are_named_so():
    """With cu_seqlens_k, a value tensor whose rows differ from key's is refused naming
    num_key_tokens (key's rows), not num_tokens."""
    g = torch.Generator().manual_seed(SEED)
    kc = torch.zeros(4, BS, NKV, H)
    vc = torch.zeros(4, BS, NKV, H)
    q = torch.randn(4, N, H, generator=g)
    with attnrt.Runtime() as rt:
        with pytest.raises(attnrt.InvalidArgumentError,
                           match=r"value: expected \[num_key_tokens \(key's rows\) 7"):
            attnrt.paged_attention_varlen(
                rt, q, kc, vc, torch.tensor([0, 4], dtype=torch.int32),
                torch.tensor([9], dtype=torch.int32), torch.tensor([[0, 1]], dtype=torch.int32),
                k=torch.randn(7, NKV, H), v=torch.randn(6, NKV, H),
                cu_seqlens_k=torch.tensor([0, 7], dtype=torch.int32), causal=False)
    assert not kc.any() and not vc.any()
