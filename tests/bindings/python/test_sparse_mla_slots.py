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


# ---- torch.ops.attnrt.flash_mla_with_kvcache: vLLM's DeepSeek-V4 CPU kernel schema, in C++ -------

def _operator():
    from attnrt import _torch_lib

    if not _torch_lib.load():
        if os.environ.get("ATTNRT_REQUIRE_TORCH_OPS") == "1":
            pytest.fail(f"ATTNRT_REQUIRE_TORCH_OPS=1: {_torch_lib.why_not_loaded()}")
        pytest.skip(_torch_lib.why_not_loaded())
    return _torch_lib


def page_view_2d(view):
    """A (nb, bs, 1, 584) layer view as vLLM passes it: the 2-D page view [nb, bs * 584] with the
    shared buffer's page stride and the layer's storage offset."""
    nb, bs, _, kv_d = view.shape
    return view.as_strided((nb, bs * kv_d), (view.stride(0), 1), view.storage_offset())


def dsv4_call(seed, heads, topk, num_tokens):
    """vLLM's arguments of one DeepSeek-V4 layer call (out poisoned) and the reference's inputs."""
    rng = np.random.default_rng(seed)
    ori_c = compact_cache(rng, 2, False, 12, 64)
    window = slot_rows(rng, num_tokens, 128, 12 * 64).astype(np.int64)
    q = (rng.standard_normal((num_tokens, heads, 512)) * 2.0).astype(ml_dtypes.bfloat16)
    sink = rng.uniform(0, 4, heads).astype(np.float32)
    sink[0] = -np.inf
    ref_in = {"q": q.astype(np.float64), "ori_kv": ori_c,
              "cu_seqlens_q": np.array([0, num_tokens]),
              "ori_sparse_indices": window.reshape(num_tokens, 1, 128), "sinks": sink}
    window_2d = page_view_2d(shared_view(ori_c, 3, 1, 0))
    if topk:
        cmp_c = compact_cache(rng, 2, True, 9, 16)
        comp = slot_rows(rng, num_tokens, topk, 9 * 16).astype(np.int64)
        ref_in.update(cmp_kv=cmp_c, cmp_sparse_indices=comp.reshape(num_tokens, 1, topk))
        compressed_2d, compressed_slots, cbs = page_view_2d(shared_view(cmp_c, 2, 1, 576)), \
            torch.from_numpy(comp), 16
    else:  # an SWA-only layer: vLLM passes the window cache again, no columns, block size 1
        compressed_2d, compressed_slots, cbs = window_2d, torch.empty(num_tokens, 0,
                                                                      dtype=torch.int64), 1
    out = torch.full((num_tokens, heads, 512), float("nan"), dtype=torch.bfloat16)
    args = dict(out=out, q=to_torch(q), window_cache_2d=window_2d,
                window_slots=torch.from_numpy(window), window_block_size=64,
                compressed_cache_2d=compressed_2d, compressed_slots=compressed_slots,
                compressed_block_size=cbs, attn_sink=torch.from_numpy(sink), scale=0.041666668)
    return args, ref_in


@pytest.mark.parametrize("heads,topk,num_tokens", [(1, 0, 3), (16, 512, 4), (64, 0, 2),
                                                   (128, 512, 2), (8, 40, 33)])
def test_flash_mla_with_kvcache_operator_against_the_reference(rt, heads, topk, num_tokens):
    """The C++ operator on vLLM's arguments (2-D page views of shared padded buffers, int64 slot
    ids, -1 skipped) on a runtime on torch's threads, against the float64 reference, and the
    same bits as attnrt.sparse_mla given the same inputs on a runtime of the same team size."""
    torch_lib = _operator()
    seed = SEED + 1000 + heads * 7 + topk + num_tokens
    print(f"seed {seed}")
    args, ref_in = dsv4_call(seed, heads, topk, num_tokens)
    rid = torch_lib.torch_threads_runtime(2)
    try:
        torch.ops.attnrt._flash_mla_with_kvcache_on(rid, **args)
        _, hits, misses = torch.ops.attnrt._runtime_stats(rid)
        assert (hits, misses) == (0, 1)  # the metadata, computed once for this signature
        again = torch.full_like(args["out"], float("nan"))
        torch.ops.attnrt._flash_mla_with_kvcache_on(rid, **{**args, "out": again})
        assert torch.ops.attnrt._runtime_stats(rid)[1:] == [1, 1]
    finally:
        torch_lib.release_runtime(rid)
    out = args["out"]
    assert torch.equal(out.view(torch.int16), again.view(torch.int16))
    attrs = dict(quant_mode=2, topk_value_mode=3, layout_q="TND", layout_kv="PA_BBND",
                 softmax_scale=0.041666668)
    want, _ = sparse_mla_reference(ref_in, {**attrs, "cmp_ratio": 4 if topk else 1,
                                            "return_softmax_lse": 1})
    assert_cann_close(as_np(out), want, "out")
    from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

    with attnrt.Runtime(num_threads=2) as own:
        python_out = torch.full_like(out, float("nan"))
        flash_mla_with_kvcache_python(**{**args, "out": python_out}, runtime=own)
    assert torch.equal(out.view(torch.int16), python_out.view(torch.int16))


def test_flash_mla_with_kvcache_operator_on_a_registered_and_a_closed_runtime():
    torch_lib = _operator()
    args, _ = dsv4_call(SEED + 1100, 4, 64, 3)
    with attnrt.Runtime(num_threads=1) as own:
        rid = torch_lib.runtime_id(own)
        torch.ops.attnrt._flash_mla_with_kvcache_on(rid, **args)
        assert not torch.isnan(args["out"].float()).any()
    with pytest.raises(ValueError, match="runtime is closed"):
        torch.ops.attnrt._flash_mla_with_kvcache_on(rid, **args)
    with pytest.raises(ValueError, match="no attnrt runtime is registered under id 987654"):
        torch.ops.attnrt._flash_mla_with_kvcache_on(987654, **args)
    # The library's own runtime (id 0, default options), under the plain name too.
    out = torch.full_like(args["out"], float("nan"))
    torch.ops.attnrt.flash_mla_with_kvcache(**{**args, "out": out})
    assert torch.equal(out.view(torch.int16), args["out"].view(torch.int16))


def _with(t, index, value):
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("change, message", [
    (lambda a: dict(q=a["q"].float()), "q: expected bfloat16 [num_tokens, num_heads, 512], got "
                                       "float32 [3, 4, 512]"),
    (lambda a: dict(out=a["out"][:2]), "out: expected a contiguous bfloat16 tensor of q's shape"),
    (lambda a: dict(window_slots=a["window_slots"].int()),
     "window_slots: expected int64 [num_tokens=3, n] global slot ids, got int32 [3, 128]"),
    (lambda a: dict(window_slots=a["window_slots"][:, :0]),
     "window_slots: expected at least one column"),
    (lambda a: dict(window_slots=_with(a["window_slots"], (1, 2), 768)),
     "window_slots[1][2]: expected -1 (skip) or a slot in [0, 768) (num_blocks * block_size of "
     "its cache), got 768"),
    (lambda a: dict(window_slots=_with(a["window_slots"], (2, 127), -(2**40))),
     "window_slots[2][127]: expected -1 (skip) or a slot in [0, 768)"),
    (lambda a: dict(compressed_slots=a["compressed_slots"].clamp(max=-2)),
     "compressed_slots[0][0]: expected -1 (skip) or a slot in [0, 144)"),
    (lambda a: dict(window_block_size=0), "window_cache_2d block_size: expected a positive int"),
    (lambda a: dict(window_block_size=2**62), "window_cache_2d: expected rows of at least"),
    (lambda a: dict(window_cache_2d=a["window_cache_2d"].view(torch.int8)),
     "window_cache_2d: expected a 2-D uint8 page view"),
    (lambda a: dict(window_cache_2d=a["window_cache_2d"].as_strided(
        (12, 64 * 584), (64 * 584 - 8, 1), a["window_cache_2d"].storage_offset())),
     "window_cache_2d: expected a page stride of at least"),
    (lambda a: dict(window_cache_2d=a["window_cache_2d"][:, ::2]),
     "window_cache_2d: expected rows of at least"),
    (lambda a: dict(compressed_cache_2d=a["compressed_cache_2d"][:, 1:].as_strided(
        (9, 16 * 584), (1, 9))), "compressed_cache_2d: expected the bytes of a page contiguous"),
    (lambda a: dict(attn_sink=a["attn_sink"][:2]),
     "attn_sink: expected contiguous float32 with num_heads=4 values"),
    (lambda a: dict(scale=float("inf")), "scale: expected a finite float32"),
    (lambda a: dict(q=a["q"].requires_grad_(False).float().requires_grad_().bfloat16()),
     "q: requires grad"),
])
def test_flash_mla_with_kvcache_operator_refuses_by_name_and_writes_nothing(change, message):
    _operator()
    args, _ = dsv4_call(SEED + 1200, 4, 64, 3)
    args.update(change(args))
    args["out"].fill_(7.0)
    with pytest.raises(ValueError) as e:
        torch.ops.attnrt.flash_mla_with_kvcache(**args)
    assert str(e.value).startswith("ATTNRT_ERROR_INVALID_ARGUMENT: "), str(e.value)
    assert message in str(e.value), str(e.value)
    assert (args["out"] == 7.0).all(), "out was written before the refusal"


def test_flash_mla_with_kvcache_operator_cache_past_its_storage_is_refused():
    """A page view whose pages reach past its buffer (a storage shrunk under the view) is refused
    by name before any read."""
    _operator()
    args, _ = dsv4_call(SEED + 1300, 4, 0, 2)
    view = args["window_cache_2d"]
    nbytes = view.untyped_storage().nbytes()
    buf = torch.empty(nbytes, dtype=torch.uint8)  # a resizable copy of the shared buffer
    buf.untyped_storage().copy_(view.untyped_storage())
    view = args["window_cache_2d"] = buf.as_strided(view.shape, view.stride(),
                                                    view.storage_offset())
    end = view.storage_offset() + (view.shape[0] - 1) * view.stride(0) + view.shape[1]
    buf.untyped_storage().resize_(end - 1)  # the last page's last byte is gone
    args["out"].fill_(7.0)
    with pytest.raises(ValueError, match="window_cache_2d: its elements .* reach past its "
                                         "storage"):
        torch.ops.attnrt.flash_mla_with_kvcache(**args)
    from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

    with attnrt.Runtime(num_threads=1) as own:  # the adapter's Python path as well
        with pytest.raises(attnrt.InvalidArgumentError,
                           match="window_cache_2d: its elements .* reach past its storage"):
            flash_mla_with_kvcache_python(**args, runtime=own)
    assert (args["out"] == 7.0).all()
