"""Prompts and chunked-prefill steps over BNSH cache blocks (compact pools and FlashInfer's HND page
halves, whose kv head rows lie contiguous in a block) of sizes around the flash kernels' key
chunks: the paged flash kernel's output is bitwise that of gqa.flash over a contiguous cache
holding the same tokens (docs/paged-gqa.md: prompts make the same tasks), and within rounding of
a float64 softmax(Q K^T / sqrt(H)) V written from docs/gqa-semantics.md. Long enough for several
key blocks, so that key blocks and cache blocks do not start together. Outputs start as NaN so
that an element never written shows."""
from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}


def reference(q, keys, values, past):
    """float64 causal attention: q [S, N, H], keys/values [Nkv, T, H]; query i is token past + i."""
    s, n_heads, h = q.shape
    group = n_heads // keys.shape[0]
    out = np.empty((s, n_heads, h))
    visible = np.arange(keys.shape[1])[None, :] <= past + np.arange(s)[:, None]
    for n in range(n_heads):
        scores = np.where(visible, q[:, n] @ keys[n // group].T / math.sqrt(h), -np.inf)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, n] = (p / p.sum(axis=1, keepdims=True)) @ values[n // group]
    return out


def pools(layout, num_blocks, nkv, block_size, h, dtype, g):
    if layout == "flashinfer_hnd":
        pages = torch.randn(num_blocks, 2, nkv, block_size, h, generator=g).to(dtype)
        return pages[:, 0], pages[:, 1]
    return (torch.randn(num_blocks, nkv, block_size, h, generator=g).to(dtype),
            torch.randn(num_blocks, nkv, block_size, h, generator=g).to(dtype))


def bits(t):
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


CASES = [(layout, block_size, dtype, s, past, 8, 2, 64, 1)
         for layout in ("bnsh", "flashinfer_hnd")
         for block_size in (31, 32, 33, 48, 64, 128, 256)
         for dtype in (torch.float32, torch.float16, torch.bfloat16)
         for s, past in ((200, 0), (100, 1300))]
# Groups of 16 heads (per-token rows above the decode tile), head sizes 96 and 128, two threads.
CASES += [("bnsh", 64, torch.bfloat16, 100, 1300, 16, 1, 128, 1),
          ("flashinfer_hnd", 256, torch.bfloat16, 300, 1500, 8, 2, 96, 2),
          ("bnsh", 48, torch.float16, 1000, 0, 8, 2, 128, 2)]


@pytest.mark.parametrize("layout,block_size,dtype,s,past,n,nkv,h,threads", CASES)
def test_prefill_over_bnsh_blocks_is_the_contiguous_output(layout, block_size, dtype, s, past, n,
                                                           nkv, h, threads):
    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    g = torch.Generator().manual_seed(SEED)
    total = past + s
    used = (total + block_size - 1) // block_size
    num_blocks = used + 3
    k_cache, v_cache = pools(layout, num_blocks, nkv, block_size, h, dtype, g)
    table = torch.randperm(num_blocks, generator=g)[:used].to(torch.int32).reshape(1, used)
    q = (2 * torch.randn(1, s, n * h, generator=g)).to(dtype)
    k = torch.randn(1, s, nkv * h, generator=g).to(dtype)
    v = torch.randn(1, s, nkv * h, generator=g).to(dtype)
    seqlens = torch.tensor([total - 1], dtype=torch.int32)

    def past_rows(cache):
        rows = [cache[int(table[0, j // block_size]), :, j % block_size] for j in range(past)]
        return (torch.stack(rows, 1) if rows else cache[0, :, :0]).unsqueeze(0).contiguous()

    past_k, past_v = past_rows(k_cache), past_rows(v_cache)
    paged_rt = attnrt.Runtime(num_threads=threads, kernel="*paged_gqa.flash*")
    contiguous_rt = attnrt.Runtime(num_threads=threads, kernel="*.gqa.flash*")
    out = torch.full((1, s, n * h), float("nan"), dtype=dtype)
    attnrt.paged_gqa(paged_rt, q, k, v, k_cache, v_cache, seqlens, total, table, num_heads=n,
                     kv_num_heads=nkv, kv_layout="BNSH", output=out)
    expected = torch.full((1, s, n * h), float("nan"), dtype=dtype)
    present = [torch.full((1, nkv, total, h), float("nan"), dtype=dtype) for _ in range(2)]
    attnrt.gqa(contiguous_rt, q, k, v, past_k, past_v, seqlens, total, num_heads=n,
               kv_num_heads=nkv, output=expected, present_key=present[0],
               present_value=present[1])

    differ = (bits(out) != bits(expected)).reshape(-1).nonzero().reshape(-1)
    assert differ.numel() == 0, (
        f"{differ.numel()} of {out.numel()} elements differ from the contiguous cache's, first at "
        f"{differ[:4].tolist()}: {out.reshape(-1)[differ[:4]].tolist()} vs "
        f"{expected.reshape(-1)[differ[:4]].tolist()}")
    keys = torch.cat([past_k[0], k[0].reshape(s, nkv, h).transpose(0, 1)], 1).double().numpy()
    values = torch.cat([past_v[0], v[0].reshape(s, nkv, h).transpose(0, 1)], 1).double().numpy()
    want = reference(q[0].reshape(s, n, h).double().numpy(), keys, values, past)
    got = out[0].reshape(s, n, h).double().numpy()
    assert np.isfinite(got).all()
    error = np.abs(got - want).max()
    assert error <= TOLERANCE[dtype], f"largest error {error:.3g} against float64"
