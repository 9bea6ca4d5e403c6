"""Sparse MLA with global slot ids (topk_value_mode 3, ori_sparse_indices) and PA_BBND caches
passed as strided views of a shared, padded buffer (ABI 1.6, abi/attnrt/ops/sparse_mla.h), through
attnrt.sparse_mla and torch.ops.attnrt.sparse_mla, against the independent float64 reference
(sparse_mla_reference.py) under CANN's tolerance (rtol 2^-7, atol 1e-4, >= 99.5% of elements).

The caches are built as an engine holds them (vLLM): one uint8 buffer whose pages are padded to a
multiple of 576 bytes and shared by several layers, each layer's cache a view
`buffer.as_strided((num_blocks, block_size, 1, kv_d), (page_stride, kv_d, kv_d, 1), offset)`.
The bytes around a layer's blocks are 0xFF (NaN in every token format) or other layers' blocks, and
a strided call must give the compact call's bytes exactly.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import attnrt
from sparse_mla_reference import sparse_mla_reference

torch = pytest.importorskip("torch")
import attnrt.torch  # noqa: E402,F401  (registers torch.ops.attnrt)

SEED = int(os.environ.get("ATTNRT_TEST_SEED", "7301"))
RTOL, ATOL, FRACTION = 2.0 ** -7, 1e-4, 0.995
KV_D = {(1, False): 608, (2, False): 584, (3, False): 512, (1, True): 608, (2, True): 584,
        (3, True): 258}


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def compact_cache(rng, quant_mode, cmp, num_blocks, block_size):
    """A compact (num_blocks, block_size, 1, kv_d) cache of random tokens (numpy)."""
    values = rng.standard_normal((num_blocks * block_size, 512)).astype(np.float32)
    values[:, :448] *= np.repeat(rng.uniform(0.25, 4.0, (num_blocks * block_size, 7)), 64, axis=1)
    shape = (num_blocks, block_size, 1)
    if quant_mode == 1:
        return attnrt.sparse_mla_encode(1, values).reshape(shape + (608,))
    if quant_mode == 2:
        blocks = np.zeros(shape + (584,), np.uint8)
        for k in range(num_blocks):
            attnrt.sparse_mla_encode(2, values[k * block_size:(k + 1) * block_size],
                                     block=blocks[k], slot=0)
        return blocks
    if cmp:
        return attnrt.sparse_mla_encode(3, values).reshape(shape + (258,))
    return values.astype(ml_dtypes.bfloat16).reshape(shape + (512,))


def page_bytes(compact):
    """The block's bytes rounded up to a multiple of 576, plus 576 when already a multiple."""
    return (compact[0].nbytes // 576 + 1) * 576


def shared_view(compact, layers, layer, lead_bytes):
    """compact copied into layer `layer` of a buffer of `layers` interleaved layers of padded
    pages after `lead_bytes` bytes; returns the torch view of that layer (no copy)."""
    nb, bs, _, kv_d = compact.shape
    page = page_bytes(compact)
    raw = compact.view(np.uint8).reshape(nb, -1)
    buf = torch.full((lead_bytes + nb * layers * page,), 0xFF, dtype=torch.uint8)
    host = buf.numpy()
    for k in range(nb):
        for lay in range(layers):
            src = raw[k] if lay == layer else raw[(k + 1 + lay) % nb]
            start = lead_bytes + (k * layers + lay) * page
            host[start:start + raw.shape[1]] = src
    elem = compact.itemsize
    typed = buf if elem == 1 else buf.view(torch.bfloat16)
    view = typed.as_strided((nb, bs, 1, kv_d), (layers * page // elem, kv_d, kv_d, 1),
                            (lead_bytes + layer * page) // elem)
    assert view.data_ptr() != buf.data_ptr() or lead_bytes + layer * page == 0
    return view


def to_torch(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def slot_rows(rng, rows, width, slots, lead_minus=True):
    """int32 (rows, width) slot ids: windows of consecutive slots behind a few -1 entries (a
    window not yet full), random rows with -1 and repeats inside, rows ending in -1."""
    idx = np.full((rows, width), -1, np.int32)
    for r in range(rows):
        kind = r % 3
        if kind == 0:
            lead = int(rng.integers(0, width // 4 + 1)) if lead_minus else 0
            start = int(rng.integers(0, slots))
            idx[r, lead:] = (start + np.arange(width - lead)) % slots
        elif kind == 1:
            idx[r] = rng.integers(0, slots, width)
            idx[r, rng.random(width) < 0.15] = -1
            rep = rng.random(width) < 0.15
            rep[0] = False
            idx[r, rep] = idx[r, np.nonzero(rep)[0] - 1]
        else:
            used = int(rng.integers(1, width + 1))
            idx[r, :used] = rng.integers(0, slots, used)
    return idx


def assert_cann_close(got, want, what):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, what
    infinite = np.isinf(want)
    assert np.array_equal(got[infinite], want[infinite]), f"{what}: infinite entries differ"
    got, want = np.where(infinite, 0.0, got), np.where(infinite, 0.0, want)
    assert np.isfinite(got).all(), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite"
    close = np.abs(got - want) <= ATOL + RTOL * np.abs(want)
    frac = float(np.mean(close))
    assert frac >= FRACTION, f"{what}: {frac:.4%} within tolerance"
    empty = np.all(want == 0, axis=-1)
    assert np.all(got[empty] == 0), f"{what}: rows without keys are not zero"
    return frac


def as_np(t):
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np.float64)
    return t.numpy().astype(np.float64)


def run_both(rt, q, ori, cmp, extra, attrs):
    """The op on the given (strided) caches and on compact copies: (out, lse) of each."""
    strided = attnrt.sparse_mla(rt, q, ori, cmp, **extra, **attrs)
    compact = attnrt.sparse_mla(rt, q, ori.contiguous(),
                                None if cmp is None else cmp.contiguous(), **extra, **attrs)
    return strided, compact


@pytest.mark.parametrize("heads,topk", [(1, 0), (16, 512), (64, 0), (128, 512)])
def test_deepseek_v4_decode_with_shared_paged_buffer(rt, heads, topk):
    """vLLM's DeepSeek-V4 call: q [T, H, 512] bf16 (TND, cu_seqlens_q [0, T]), window_slots
    [T, 128] and compressed_slots [T, K] (int64 in the engine, int32 here), quant_mode 2 caches of
    64-token blocks in one shared buffer, attn_sink float32 [H] with -inf for head 0."""
    seed = SEED + heads * 7 + topk
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    T = max(2, 64 // heads)
    ori_c = compact_cache(rng, 2, False, 12, 64)
    cmp_c = compact_cache(rng, 2, True, 9, 64) if topk else None
    window = slot_rows(rng, T, 128, 12 * 64).astype(np.int64)
    q = (rng.standard_normal((T, heads, 512)) * 2.0).astype(ml_dtypes.bfloat16)
    sink = rng.uniform(0, 4, heads).astype(np.float32)
    sink[0] = -np.inf
    extra = {"cu_seqlens_q": torch.tensor([0, T], dtype=torch.int32),
             "ori_sparse_indices": torch.from_numpy(window.astype(np.int32).reshape(T, 1, 128)),
             "sinks": torch.from_numpy(sink)}
    ref_in = {"q": q.astype(np.float64), "ori_kv": ori_c, "cu_seqlens_q": np.array([0, T]),
              "ori_sparse_indices": window.reshape(T, 1, 128), "sinks": sink}
    cmp_view = None
    if topk:
        comp = slot_rows(rng, T, topk, 9 * 64)
        extra["cmp_sparse_indices"] = torch.from_numpy(comp.reshape(T, 1, topk))
        ref_in.update(cmp_kv=cmp_c, cmp_sparse_indices=comp.reshape(T, 1, topk))
        cmp_view = shared_view(cmp_c, 2, 1, 576)
    attrs = dict(quant_mode=2, topk_value_mode=3, layout_q="TND", layout_kv="PA_BBND",
                 softmax_scale=0.041666668, cmp_ratio=4 if topk else 1, return_softmax_lse=1)
    ori_view = shared_view(ori_c, 3, 1, 0)
    (out, lse), (out_c, lse_c) = run_both(rt, to_torch(q), ori_view, cmp_view, extra, attrs)
    assert torch.equal(out.view(torch.int16), out_c.view(torch.int16))
    assert torch.equal(lse, lse_c)
    want_out, want_lse = sparse_mla_reference(ref_in, {**attrs, "quant_mode": 2})
    assert_cann_close(as_np(out), want_out, "attn_out")
    assert_cann_close(as_np(lse), want_lse, "softmax_lse")


@pytest.mark.parametrize("quant_mode", [1, 2, 3])
@pytest.mark.parametrize("layout_q", ["BSND", "TND"])
def test_slot_lists_and_strided_caches(rt, quant_mode, layout_q):
    """CSA with slot lists in every quant mode, BSND q with seqused_q or TND q with two batches,
    rows whose lists are all -1, duplicates, and a peaked softmax."""
    seed = SEED + 31 * quant_mode + (layout_q == "TND")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    bs, nb_o, nb_c, heads, W, K = 16, 7, 5, 8, 24, 20
    ori_c = compact_cache(rng, quant_mode, False, nb_o, bs)
    cmp_c = compact_cache(rng, quant_mode, True, nb_c, bs)
    if layout_q == "BSND":
        lead, rows = (2, 4), 8
        q = (rng.standard_normal((2, 4, heads, 512)) * 3.0)
        extra = {"seqused_q": np.array([4, 2], np.int32)}
    else:
        lead, rows = (7,), 7
        q = (rng.standard_normal((7, heads, 512)) * 3.0)
        extra = {"cu_seqlens_q": np.array([0, 3, 6], np.int32)}     # row 6: in no batch
    q = q.astype(ml_dtypes.bfloat16)
    ori_idx = slot_rows(rng, rows, W, nb_o * bs)
    cmp_idx = slot_rows(rng, rows, K, nb_c * bs)
    ori_idx[1], cmp_idx[1] = -1, -1                                 # a row with no key
    cmp_idx[2] = cmp_idx[2, 0]                                      # one slot K times
    extra.update(ori_sparse_indices=ori_idx.reshape(lead + (1, W)),
                 cmp_sparse_indices=cmp_idx.reshape(lead + (1, K)))
    attrs = dict(quant_mode=quant_mode, topk_value_mode=3, layout_q=layout_q,
                 layout_kv="PA_BBND", cmp_ratio=4, return_softmax_lse=1)
    ref_in = {**extra, "q": q.astype(np.float64), "ori_kv": ori_c, "cmp_kv": cmp_c}
    if quant_mode == 3:
        ref_in["ori_kv"] = ori_c.astype(np.float64)
    targs = {k: torch.from_numpy(v) for k, v in extra.items()}
    (out, lse), (out_c, lse_c) = run_both(rt, to_torch(q), shared_view(ori_c, 2, 1, 1152),
                                          shared_view(cmp_c, 3, 0, 576), targs, attrs)
    assert torch.equal(out.view(torch.int16), out_c.view(torch.int16))
    assert torch.equal(lse, lse_c)
    want_out, want_lse = sparse_mla_reference(ref_in, attrs)
    assert_cann_close(as_np(out), want_out, "attn_out")
    assert_cann_close(as_np(lse), want_lse, "softmax_lse")
    # Negative control: the reference without each row's first ori slot is not within tolerance.
    dropped = ori_idx.copy()
    for r in range(rows):
        hit = np.nonzero(dropped[r] != -1)[0]
        if hit.size:
            dropped[r, hit[0]] = -1
    other, _ = sparse_mla_reference({**ref_in, "ori_sparse_indices":
                                     dropped.reshape(lead + (1, W))}, attrs)
    assert np.mean(np.abs(as_np(out) - other) <= ATOL + RTOL * np.abs(other)) < FRACTION


def test_numpy_strided_view_and_torch_op(rt):
    """A numpy view made with as_strided, and torch.ops.attnrt.sparse_mla with ori_sparse_indices
    as its trailing optional tensor."""
    seed = SEED + 500
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    ori_c = compact_cache(rng, 2, False, 6, 64)
    page = page_bytes(ori_c)
    buf = np.full(576 + 6 * 2 * page, 0xFF, np.uint8)
    for k in range(6):
        buf[576 + (2 * k + 1) * page:576 + (2 * k + 1) * page + ori_c[k].nbytes] = \
            ori_c[k].reshape(-1)
    view = np.lib.stride_tricks.as_strided(buf[576 + page:], (6, 64, 1, 584),
                                           (2 * page, 584, 584, 1))
    T = 3
    idx = slot_rows(rng, T, 128, 6 * 64).reshape(T, 1, 128)
    q = (rng.standard_normal((T, 16, 512)) * 2.0).astype(ml_dtypes.bfloat16)
    attrs = dict(quant_mode=2, topk_value_mode=3, layout_q="TND", layout_kv="PA_BBND",
                 return_softmax_lse=1)
    cu = np.array([0, T], np.int32)
    out, lse = attnrt.sparse_mla(rt, q, view, cu_seqlens_q=cu, ori_sparse_indices=idx, **attrs)
    out_c, lse_c = attnrt.sparse_mla(rt, q, ori_c, cu_seqlens_q=cu, ori_sparse_indices=idx,
                                     **attrs)
    assert np.array_equal(out.view(np.uint16), out_c.view(np.uint16))
    assert np.array_equal(lse, lse_c)
    want, _ = sparse_mla_reference({"q": q.astype(np.float64), "ori_kv": ori_c,
                                    "cu_seqlens_q": cu, "ori_sparse_indices": idx}, attrs)
    assert_cann_close(out.astype(np.float64), want, "attn_out")
    t_out, t_lse = torch.ops.attnrt.sparse_mla(
        to_torch(q), torch.from_numpy(view), 2, cu_seqlens_q=torch.from_numpy(cu),
        layout_q="TND", layout_kv="PA_BBND", topk_value_mode=3,
        ori_sparse_indices=torch.from_numpy(idx))
    assert np.array_equal(t_out.view(torch.int16).numpy().view(np.uint16), out.view(np.uint16))
    assert np.array_equal(t_lse.numpy(), lse)


def test_bad_slots_and_strides_are_refused(rt):
    seed = SEED + 600
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    ori_c = compact_cache(rng, 2, False, 4, 64)
    q = (rng.standard_normal((2, 4, 512))).astype(ml_dtypes.bfloat16)
    cu = np.array([0, 2], np.int32)
    attrs = dict(quant_mode=2, topk_value_mode=3, layout_q="TND", layout_kv="PA_BBND")
    good = slot_rows(rng, 2, 16, 4 * 64).reshape(2, 1, 16)
    attnrt.sparse_mla(rt, q, ori_c, cu_seqlens_q=cu, ori_sparse_indices=good, **attrs)
    for bad in (4 * 64, -2):
        idx = good.copy()
        idx[1, 0, 5] = bad
        out = np.full(q.shape, np.nan).astype(q.dtype)
        with pytest.raises(attnrt.InvalidArgumentError) as info:
            attnrt.sparse_mla(rt, q, ori_c, cu_seqlens_q=cu, ori_sparse_indices=idx,
                              attn_out=out, **attrs)
        assert "ori_sparse_indices" in info.value.message, info.value.message
        assert np.isnan(out.astype(np.float32)).all(), "attn_out written before the error"
    with pytest.raises(attnrt.InvalidArgumentError) as info:
        attnrt.sparse_mla(rt, q, ori_c, cu_seqlens_q=cu, **attrs)   # no ori_sparse_indices
    assert "ori_sparse_indices" in info.value.message, info.value.message
    # Overlapping blocks: a block stride below block_size * kv_d.
    buf = torch.zeros(4 * 64 * 584, dtype=torch.uint8)
    overlap = buf.as_strided((4, 64, 1, 584), (64 * 584 - 576, 584, 584, 1))
    with pytest.raises(attnrt.InvalidArgumentError) as info:
        attnrt.sparse_mla(rt, to_torch(q), overlap, cu_seqlens_q=torch.from_numpy(cu),
                          ori_sparse_indices=torch.from_numpy(good), **attrs)
    assert "ori_kv" in info.value.message, info.value.message
