"""attnrt.paged_attention_varlen: mixed prefill and decode sequences packed in one call, over a
vLLM CPU-layout cache (one tensor, K and V halves as strided views) and a FlashAttention-layout
cache, every varlen kernel pinned in turn. Checked against PyTorch's scaled_dot_product_attention
per sequence (plain causal attention, and non-causal: causal=False, every row sees its whole
sequence) and a float64 reference written from the definition (window, softcap, sinks), every
element; the cache rows written where slot_mapping says and nowhere else; padding rows of the
output untouched. Negative controls (the window off by one; a causal mask for causal=False) must
fail the comparison."""
from __future__ import annotations

import math
import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from varlen_kernels import varlen_kernels  # noqa: E402

N, NKV, H, BS = 8, 2, 64, 16
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
# (q_len, seq_len): decodes, a first prompt, prefill chunks, a sequence with no new row.
SEQUENCES = [(1, 50), (7, 7), (1, 130), (33, 40), (0, 9), (3, 20)]
PADDING = 2  # rows past query_start_loc[B], as an engine pads its batch


def reference(q, keys, values, past, window, softcap, sink, scale, causal=True):
    """float64 attention of q [q_len, N, H] over keys/values [T, Nkv, H]; row i at position
    past + i sees keys (position - window, position] (window -1: all earlier), or every key when
    not causal."""
    q = q.double()
    k = keys.double().repeat_interleave(N // NKV, dim=1)
    v = values.double().repeat_interleave(N // NKV, dim=1)
    scores = torch.einsum("qnh,tnh->nqt", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    t = keys.shape[0]
    pos = past + torch.arange(q.shape[0]).reshape(-1, 1)
    j = torch.arange(t).reshape(1, -1)
    visible = j <= pos if causal else j < t
    if window > 0:
        visible &= j > pos - window
    scores = scores.masked_fill(~visible, float("-inf"))
    if sink is not None:
        logits = torch.cat([scores, sink.double().reshape(N, 1, 1).expand(N, q.shape[0], 1)], -1)
        p = torch.softmax(logits, -1)[..., :t]
    else:
        p = torch.softmax(scores, -1)
    return torch.einsum("nqt,tnh->qnh", p, v)


def make_cache(layout, num_blocks, dtype, g):
    if layout == "vllm_cpu":
        kv = torch.randn(num_blocks, NKV, BS, 2 * H, generator=g).to(dtype)
        return kv, kv[..., :H], kv[..., H:], "BNSH"
    kv = torch.randn(2, num_blocks, BS, NKV, H, generator=g).to(dtype)  # flash_attention
    return kv, kv[0], kv[1], "BSNH"


def rows_of(cache, kv_layout, table_row, length):
    out = []
    for j in range(length):
        block, o = int(table_row[j // BS]), j % BS
        out.append(cache[block, :, o] if kv_layout == "BNSH" else cache[block, o])
    return torch.stack(out)  # [length, Nkv, H]


@pytest.mark.parametrize("kernel", varlen_kernels())
@pytest.mark.parametrize("layout", ["vllm_cpu", "flash_attention"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("features", ["plain", "window_softcap_sinks", "non_causal"])
def test_mixed_batch(kernel, layout, dtype, features):
    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    g = torch.Generator().manual_seed(SEED)
    B = len(SEQUENCES)
    q_lens = [s[0] for s in SEQUENCES]
    seq_lens = torch.tensor([s[1] for s in SEQUENCES], dtype=torch.int32)
    cu = torch.tensor([0] + list(torch.cumsum(torch.tensor(q_lens), 0)), dtype=torch.int32)
    num_tokens = int(cu[-1]) + PADDING
    slots = max((t + BS - 1) // BS for t in seq_lens.tolist())
    num_blocks = B * slots + 3
    kv, k_cache, v_cache, kv_layout = make_cache(layout, num_blocks, dtype, g)
    table = torch.randperm(num_blocks, generator=g)[:B * slots].to(torch.int32).reshape(B, slots)
    q = (2 * torch.randn(num_tokens, N, H, generator=g)).to(dtype)
    k = torch.randn(num_tokens, NKV, H, generator=g).to(dtype)
    v = torch.randn(num_tokens, NKV, H, generator=g).to(dtype)
    slot_mapping = torch.full((num_tokens,), -1, dtype=torch.int64)
    for b, (q_len, t) in enumerate(SEQUENCES):
        for i in range(q_len):
            pos = t - q_len + i
            slot_mapping[int(cu[b]) + i] = int(table[b, pos // BS]) * BS + pos % BS
    # One row of sequence 3 is not written (-1): the cache keeps what it had there.
    unwritten = int(cu[3]) + 5
    slot_mapping[unwritten] = -1
    window, softcap, sinks = -1, 0.0, None
    causal = features != "non_causal"
    if features == "window_softcap_sinks":
        window, softcap = 24, 30.0
        sinks = torch.randn(N, generator=g).to(dtype)
    out = torch.full((num_tokens, N, H), 7.0, dtype=dtype)
    before = kv.clone()

    with attnrt.Runtime(kernel=kernel, num_threads=2) as rt:
        try:
            result = attnrt.paged_attention_varlen(
                rt, q, k_cache, v_cache, cu, seq_lens, table, k=k, v=v, causal=causal,
                window_size=(window - 1, 0) if window > 0 else (-1, -1), softcap=softcap,
                sinks=sinks, slot_mapping=slot_mapping, out=out, kv_layout=kv_layout)
        except attnrt.UnsupportedError as e:
            assert torch.equal(kv, before)
            pytest.skip(f"{kernel} declines: {str(e).split(kernel + ': ')[-1].split(';')[0]}")
    assert result.data_ptr() == out.data_ptr()
    assert torch.all(out[int(cu[-1]):] == 7.0), "padding rows were written"

    # The expected cache: the old one with each written row stored at its slot.
    expected_kv = before.clone()
    ek, ev = make_views(expected_kv, layout)
    for b, (q_len, t) in enumerate(SEQUENCES):
        for i in range(q_len):
            row = int(cu[b]) + i
            if int(slot_mapping[row]) < 0:
                continue
            pos = t - q_len + i
            block, o = int(table[b, pos // BS]), pos % BS
            if kv_layout == "BNSH":
                ek[block, :, o], ev[block, :, o] = k[row], v[row]
            else:
                ek[block, o], ev[block, o] = k[row], v[row]
    assert torch.equal(kv, expected_kv), "cache rows differ from the slots slot_mapping names"

    tol = 2e-5 if dtype == torch.float32 else 3e-2
    scale = 1 / math.sqrt(H)
    worst_negative = 0.0
    for b, (q_len, t) in enumerate(SEQUENCES):
        if q_len == 0:
            continue
        keys = rows_of(k_cache, kv_layout, table[b], t)
        values = rows_of(v_cache, kv_layout, table[b], t)
        qb = q[int(cu[b]):int(cu[b]) + q_len]
        got = out[int(cu[b]):int(cu[b]) + q_len].double()
        want = reference(qb, keys, values, t - q_len, window, softcap, sinks, scale, causal)
        err = (got - want).abs().max().item()
        assert err <= tol, f"sequence {b}: max |error| {err} > {tol}"
        if features != "window_softcap_sinks":
            # PyTorch's own attention agrees (bottom-right aligned causal mask, or none).
            qs = qb.float().transpose(0, 1)
            ks = keys.float().repeat_interleave(N // NKV, 1).transpose(0, 1)
            vs = values.float().repeat_interleave(N // NKV, 1).transpose(0, 1)
            mask = torch.arange(t).reshape(1, -1) <= (t - q_len + torch.arange(q_len)).reshape(-1, 1)
            sdpa = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=mask if causal else None)
            assert (got.float() - sdpa.transpose(0, 1)).abs().max().item() <= tol
        if not causal:
            # Negative control: the causal answer differs wherever a row has later keys.
            off = reference(qb, keys, values, t - q_len, window, softcap, sinks, scale)
            worst_negative = max(worst_negative, (got - off).abs().max().item())
        elif features != "plain":
            # Negative control: a window one key shorter is a different answer.
            off = reference(qb, keys, values, t - q_len, window - 1, softcap, sinks, scale)
            worst_negative = max(worst_negative, (got - off).abs().max().item())
    if features != "plain":
        assert worst_negative > 10 * tol, f"the negative control ({features}) went unnoticed"


def make_views(kv, layout):
    if layout == "vllm_cpu":
        return kv[..., :H], kv[..., H:]
    return kv[0], kv[1]


def test_bad_slot_mapping_is_refused_before_any_write():
    g = torch.Generator().manual_seed(SEED)
    kv = torch.randn(6, NKV, BS, 2 * H, generator=g)
    k_cache, v_cache = kv[..., :H], kv[..., H:]
    q = torch.randn(2, N, H, generator=g)
    k = torch.randn(2, NKV, H, generator=g)
    table = torch.tensor([[3, 4]], dtype=torch.int32)
    before = kv.clone()
    with attnrt.Runtime(num_threads=1) as rt:
        with pytest.raises(attnrt.InvalidArgumentError, match=r"slot_mapping\[1\] = 5 but"):
            attnrt.paged_attention_varlen(
                rt, q, k_cache, v_cache, torch.tensor([0, 2], dtype=torch.int32),
                torch.tensor([20], dtype=torch.int32), table, k=k, v=k,
                slot_mapping=torch.tensor([4 * BS + 2, 5], dtype=torch.int64), kv_layout="BNSH")
        with pytest.raises(attnrt.InvalidArgumentError, match=r"seq_lens\[0\] = 1 must be at least 2"):
            attnrt.paged_attention_varlen(
                rt, q, k_cache, v_cache, torch.tensor([0, 2], dtype=torch.int32),
                torch.tensor([1], dtype=torch.int32), table, k=k, v=k, kv_layout="BNSH")
    assert torch.equal(kv, before)


def test_torch_custom_op_matches_the_function_and_compiles():
    """torch.ops.attnrt.paged_attention_varlen writes out and the cache in place, equal to the
    function's result, also under torch.compile (fullgraph)."""
    import attnrt.torch  # noqa: F401  (registers torch.ops.attnrt.*)
    g = torch.Generator().manual_seed(SEED)
    kv = torch.randn(12, NKV, 2, BS, H, generator=g)
    k_cache, v_cache = kv[:, :, 0], kv[:, :, 1]
    cu = torch.tensor([0, 1, 6], dtype=torch.int32)
    lens = torch.tensor([30, 5], dtype=torch.int32)
    table = torch.tensor([[3, 7], [9, 0]], dtype=torch.int32)
    q = torch.randn(6, N, H, generator=g)
    k = torch.randn(6, NKV, H, generator=g)
    v = torch.randn(6, NKV, H, generator=g)
    kv_ref = kv.clone()
    with attnrt.Runtime(num_threads=1) as rt:
        expected = attnrt.paged_attention_varlen(rt, q, kv_ref[:, :, 0], kv_ref[:, :, 1], cu, lens,
                                                 table, k=k, v=v, kv_layout="BNSH")
    out = torch.empty_like(q)
    torch.ops.attnrt.paged_attention_varlen(q, k_cache, v_cache, cu, lens, table, out, k=k, v=v,
                                            kv_layout="BNSH")
    assert torch.equal(out, expected) and torch.equal(kv, kv_ref)

    kv2 = kv_ref.clone()
    out2 = torch.empty_like(q)

    @torch.compile(fullgraph=True, backend="eager")
    def step(q, kc, vc, out):
        torch.ops.attnrt.paged_attention_varlen(q, kc, vc, cu, lens, table, out, k=k, v=v,
                                                kv_layout="BNSH")
        return out * 1

    assert torch.equal(step(q, kv2[:, :, 0], kv2[:, :, 1], out2), expected)


def test_non_causal_through_the_python_path_matches_the_operator():
    """causal=False on numpy arrays (the SWIG path) gives the torch operator's bits; the window of
    non-causal attention is the same on both paths, a later-key window of causal attention and a
    causal that is not a bool are refused by name."""
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(SEED)
    kv = torch.randn(6, 2, BS, NKV, H, generator=g)
    cu = torch.tensor([0, 5, 25], dtype=torch.int32)
    lens = torch.tensor([9, 20], dtype=torch.int32)
    table = torch.tensor([[3, 1], [0, 5]], dtype=torch.int32)
    q = 2 * torch.randn(25, N, H, generator=g)
    k = torch.randn(25, NKV, H, generator=g)
    v = torch.randn(25, NKV, H, generator=g)
    with attnrt.Runtime(num_threads=2) as rt:
        kv_t = kv.clone()
        got = attnrt.paged_attention_varlen(rt, q, kv_t[:, 0], kv_t[:, 1], cu, lens, table, k=k,
                                            v=v, causal=False)
        kv_n = kv.clone().numpy()
        got_n = attnrt.paged_attention_varlen(
            rt, q.numpy(), kv_n[:, 0], kv_n[:, 1], cu.numpy(), lens.numpy(), table.numpy(),
            k=k.numpy(), v=v.numpy(), causal=False)
        assert np.array_equal(np.asarray(got_n), got.numpy())
        assert np.array_equal(kv_n, kv_t.numpy())
        # A window of non-causal attention: the same bits on both paths (no new rows: the
        # caches hold them now).
        got_w = attnrt.paged_attention_varlen(rt, q, kv_t[:, 0], kv_t[:, 1], cu, lens, table,
                                              causal=False, window_size=(8, 3))
        got_wn = attnrt.paged_attention_varlen(rt, q.numpy(), kv_n[:, 0], kv_n[:, 1], cu.numpy(),
                                               lens.numpy(), table.numpy(), causal=False,
                                               window_size=(8, 3))
        assert np.array_equal(np.asarray(got_wn), got_w.numpy())
        assert not torch.equal(got_w, got)
        with pytest.raises(attnrt.InvalidArgumentError, match="window_size: right must be 0"):
            attnrt.paged_attention_varlen(rt, q, kv_t[:, 0], kv_t[:, 1], cu, lens, table,
                                          window_size=(8, 3))
        with pytest.raises(attnrt.InvalidArgumentError, match="window_size: right must be 0"):
            attnrt.paged_attention_varlen(rt, q.numpy(), kv_n[:, 0], kv_n[:, 1], cu.numpy(),
                                          lens.numpy(), table.numpy(), window_size=(8, 3))
        with pytest.raises(attnrt.InvalidArgumentError, match="causal: expected True or False"):
            attnrt.paged_attention_varlen(rt, q, kv_t[:, 0], kv_t[:, 1], cu, lens, table,
                                          causal="no")


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("kernel", varlen_kernels())
def test_every_fp8_code_decodes_exactly(kernel, fp8):
    """A float8_e4m3fn (float8_e5m2) value cache holding every code once (subnormals, signed
    zeros, +-448 (+-57344, infinities), NaN) read by one query over one key: the output is the
    value row itself, so each kernel's decode of each code must be torch's float8 to float32
    conversion exactly (NaN as NaN), times the v_scale of 1.0."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    pools = torch.zeros(2, 2, BS, NKV, 128, dtype=torch.uint8)  # [K|V, block, slot, kv head, H]
    pools[1, 0, 0] = codes.view(NKV, 128)
    k_cache, v_cache = (p.view(fp8) for p in pools)
    q = torch.zeros(1, N, 128)
    one = torch.tensor([1.0])
    with attnrt.Runtime(kernel=kernel, num_threads=1) as rt:
        try:
            out = attnrt.paged_attention_varlen(
                rt, q, k_cache, v_cache, torch.tensor([0, 1], dtype=torch.int32),
                torch.tensor([1], dtype=torch.int32), torch.tensor([[0]], dtype=torch.int32),
                k_scale=one, v_scale=one)
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{kernel} declines: {str(e).split(kernel + ': ')[-1].split(';')[0]}")
    want = codes.view(fp8).float().view(NKV, 128)
    for h in range(N):
        got = out[0, h]
        expect = want[h // (N // NKV)]
        nan = torch.isnan(expect)
        assert torch.equal(torch.isnan(got), nan), h
        # Equal values (P·V's sum starts from +0, so a -0 code comes out as +0).
        assert torch.equal(got[~nan], expect[~nan]), h
