"""Paged GroupQueryAttention over torch views of one KV cache tensor, as serving engines lay it out
(vLLM's CPU cache [num_blocks, Nkv, block_size, 2 * H]; vLLM's / FlashAttention's
[2, num_blocks, block_size, Nkv, H]; FlashInfer's NHD and HND pages): no copy is made, the new
K/V rows land in the views, and the output matches PyTorch's scaled_dot_product_attention over the
same tokens gathered through the block table. A negative control (one key dropped) must differ."""
from __future__ import annotations

import math
import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402

N, NKV, H = 8, 2, 64
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))


def views(layout: str, num_blocks: int, block_size: int, dtype):
    """(cache tensor, key view, value view, kv_layout) for one engine layout."""
    g = torch.Generator().manual_seed(SEED)
    if layout == "vllm_cpu":
        kv = torch.randn(num_blocks, NKV, block_size, 2 * H, generator=g).to(dtype)
        return kv, kv[..., :H], kv[..., H:], "BNSH"
    if layout == "flash_attention":
        kv = torch.randn(2, num_blocks, block_size, NKV, H, generator=g).to(dtype)
        return kv, kv[0], kv[1], "BSNH"
    if layout == "flashinfer_nhd":
        kv = torch.randn(num_blocks, 2, block_size, NKV, H, generator=g).to(dtype)
        return kv, kv[:, 0], kv[:, 1], "BSNH"
    kv = torch.randn(num_blocks, 2, NKV, block_size, H, generator=g).to(dtype)  # flashinfer_hnd
    return kv, kv[:, 0], kv[:, 1], "BNSH"


def token_rows(cache, kv_layout, table_row, length, block_size):
    """[Nkv, length, H] rows of one sequence read through its block table."""
    rows = []
    for j in range(length):
        block = int(table_row[j // block_size])
        o = j % block_size
        rows.append(cache[block, :, o] if kv_layout == "BNSH" else cache[block, o])
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("layout", ["vllm_cpu", "flash_attention", "flashinfer_nhd",
                                    "flashinfer_hnd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_over_engine_cache_views(layout, dtype):
    print(f"seed {SEED} (ATTNRT_TEST_SEED reproduces)")
    rt = attnrt.Runtime(num_threads=2)
    block_size, B = 16, 3
    seqlens = torch.tensor([40, 16, 70], dtype=torch.int32)  # T_b - 1
    slots = (int(seqlens.max()) + 1 + block_size - 1) // block_size
    num_blocks = B * slots + 2
    kv, k_cache, v_cache, kv_layout = views(layout, num_blocks, block_size, dtype)
    assert not k_cache.is_contiguous() or layout == "flash_attention"
    g = torch.Generator().manual_seed(SEED + 1)
    table = torch.randperm(num_blocks, generator=g)[:B * slots].to(torch.int32).reshape(B, slots)
    # Scaled so that attention is far from uniform: a wrong key set would show.
    q = (3 * torch.randn(B, 1, N * H, generator=g)).to(dtype)
    k = torch.randn(B, 1, NKV * H, generator=g).to(dtype)
    v = torch.randn(B, 1, NKV * H, generator=g).to(dtype)
    before = kv.clone()
    data_ptr = kv.data_ptr()

    out = attnrt.paged_gqa(rt, q, k, v, k_cache, v_cache, seqlens, int(seqlens.max()) + 1, table,
                           num_heads=N, kv_num_heads=NKV, kv_layout=kv_layout)
    assert kv.data_ptr() == data_ptr
    assert out.shape == (B, 1, N * H) and out.dtype == dtype

    tol = 1e-5 if dtype == torch.float32 else 2e-2
    changed = (kv != before).reshape(-1).sum().item()
    assert changed > 0
    for b in range(B):
        t = int(seqlens[b]) + 1
        keys = token_rows(k_cache, kv_layout, table[b], t, block_size).float()
        values = token_rows(v_cache, kv_layout, table[b], t, block_size).float()
        # The new token (position t - 1) was written into the views.
        assert torch.equal(keys[:, t - 1], k[b, 0].float().reshape(NKV, H))
        assert torch.equal(values[:, t - 1], v[b, 0].float().reshape(NKV, H))
        qb = q[b, 0].float().reshape(N, 1, H)
        kb = keys.repeat_interleave(N // NKV, dim=0)
        vb = values.repeat_interleave(N // NKV, dim=0)
        expected = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb,
                                                                    scale=1 / math.sqrt(H))
        got = out[b, 0].float().reshape(N, 1, H)
        assert torch.allclose(got, expected, atol=tol, rtol=tol), (got - expected).abs().max()
        # Negative control: the same reference without each head's heaviest key is not what came
        # out.
        scores = qb @ kb.transpose(-1, -2)
        keep = torch.ones_like(scores, dtype=torch.bool)
        keep.scatter_(-1, scores.argmax(-1, keepdim=True), False)
        dropped = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=keep,
                                                                   scale=1 / math.sqrt(H))
        assert (got - dropped).abs().max() > 10 * tol
    # Rows outside the new tokens' are untouched: exactly B * 2 * NKV * H elements changed at most.
    assert changed <= B * 2 * NKV * H


def test_overlapping_views_are_refused():
    rt = attnrt.Runtime(num_threads=1)
    kv = torch.randn(4, NKV, 16, 2 * H)
    q = torch.randn(1, 1, N * H)
    k = torch.randn(1, 1, NKV * H)
    before = kv.clone()
    with pytest.raises(attnrt.InvalidArgumentError, match="value_cache shares memory with key_cache"):
        attnrt.paged_gqa(rt, q, k, k, kv[..., :H], kv[..., H // 2:H + H // 2],
                         torch.tensor([3], dtype=torch.int32), 4,
                         torch.tensor([[0]], dtype=torch.int32), num_heads=N, kv_num_heads=NKV,
                         kv_layout="BNSH")
    assert torch.equal(kv, before)
