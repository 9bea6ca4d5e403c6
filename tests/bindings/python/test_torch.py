"""attnrt with PyTorch: torch tensors in and out, paged GQA against
torch.nn.functional.scaled_dot_product_attention in bfloat16 and float16, and the custom ops of
attnrt.torch under torch.compile(fullgraph=True)."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
import attnrt.torch  # noqa: E402,F401  (registers torch.ops.attnrt.*)

N, NKV, H, BLOCK = 8, 2, 64, 16
SEED = int(os.environ.get("ATTNRT_TEST_SEED", "20261201"))
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def sdpa_reference(q, k, v, causal_offset):
    """float32 SDPA of (S,N,H) queries over (T,Nkv,H) keys; query i sees keys <= causal_offset+i."""
    s, t = q.shape[0], k.shape[0]
    mask = torch.arange(t)[None, :] <= (causal_offset + torch.arange(s))[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(0, 1)[None], k.float().transpose(0, 1)[None],
        v.float().transpose(0, 1)[None], attn_mask=mask, enable_gqa=True)
    return out[0].transpose(0, 1).reshape(s, -1)


class PagedSequences:
    """Two sequences in a BlockPool with torch block pools (BSNH), decoded through attnrt."""

    def __init__(self, rt, dtype, generator):
        self.rt, self.dtype, self.g = rt, dtype, generator
        self.pool = attnrt.BlockPool(num_blocks=64, block_size=BLOCK)
        self.ids = [self.pool.add_sequence(), self.pool.add_sequence()]
        self.key_cache = torch.zeros((64, BLOCK, NKV, H), dtype=dtype)
        self.value_cache = torch.zeros_like(self.key_cache)
        self.keys = [torch.empty((0, NKV, H), dtype=dtype) for _ in self.ids]
        self.values = [torch.empty((0, NKV, H), dtype=dtype) for _ in self.ids]

    def rand(self, *shape, scale=1.0):
        return (torch.randn(*shape, generator=self.g) * scale).to(self.dtype)

    def step(self, s, out=None):
        """Appends s tokens to both sequences and runs the paged op; returns (output, expected)."""
        for seq in self.ids:
            assert self.pool.append(seq, s) is None
        table, seqlens_k = self.pool.block_table(self.ids)
        # Scores that vary by several units: a wrong mask or a dropped key shows.
        q = self.last_q = self.rand(2, s, N * H, scale=2.0)
        k, v = self.rand(2, s, NKV * H, scale=2.0), self.rand(2, s, NKV * H)
        output = attnrt.paged_gqa(
            self.rt, q, k, v, self.key_cache, self.value_cache, torch.from_numpy(seqlens_k),
            int(seqlens_k.max()) + 1, torch.from_numpy(table), num_heads=N, kv_num_heads=NKV,
            output=out)
        expected = []
        for b in range(2):
            self.keys[b] = torch.cat([self.keys[b], k[b].view(s, NKV, H)])
            self.values[b] = torch.cat([self.values[b], v[b].view(s, NKV, H)])
            past = self.keys[b].shape[0] - s
            expected.append(sdpa_reference(q[b].view(s, N, H), self.keys[b], self.values[b], past))
        return output, torch.stack(expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_paged_prefill_and_decode_match_sdpa(rt, dtype):
    print(f"seed {SEED}")
    seqs = PagedSequences(rt, dtype, torch.Generator().manual_seed(SEED))
    cache_ptr = seqs.key_cache.data_ptr()
    output, expected = seqs.step(37)  # prefill: 37 tokens, three blocks
    assert isinstance(output, torch.Tensor) and output.dtype == dtype
    torch.testing.assert_close(output.float(), expected, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    for _ in range(12):  # decode across a block boundary
        out = torch.full((2, 1, N * H), float("nan"), dtype=dtype)
        output, expected = seqs.step(1, out=out)
        assert output is out  # written in place, not a copy
        torch.testing.assert_close(output.float(), expected, atol=TOLERANCE[dtype],
                                   rtol=TOLERANCE[dtype])
    # The new rows went into the caller's pools in place.
    assert seqs.key_cache.data_ptr() == cache_ptr
    table, _ = seqs.pool.block_table(seqs.ids)
    rows = torch.cat([seqs.key_cache[blk] for blk in table[0] if blk >= 0])[:49]
    assert torch.equal(rows, seqs.keys[0])


def test_negative_control_a_dropped_key_fails(rt):
    """The comparison above would catch a kernel that loses one key: the SDPA of the same queries
    without the first key differs beyond the tolerance."""
    seqs = PagedSequences(rt, torch.float16, torch.Generator().manual_seed(SEED + 1))
    output, expected = seqs.step(20)
    torch.testing.assert_close(output.float(), expected, atol=2e-3, rtol=2e-3)
    q = seqs.last_q
    dropped = torch.stack([sdpa_reference(q[b].view(20, N, H), seqs.keys[b][1:], seqs.values[b][1:],
                                          -1) for b in range(2)])
    assert not torch.allclose(output.float()[:, 1:], dropped[:, 1:], atol=2e-3, rtol=2e-3)


def test_gqa_torch_bfloat16_in_torch_out_no_copy(rt):
    g = torch.Generator().manual_seed(SEED + 2)
    q = torch.randn(1, 5, N * H, generator=g).bfloat16()
    k = torch.randn(1, 5, NKV * H, generator=g).bfloat16()
    v = torch.randn(1, 5, NKV * H, generator=g).bfloat16()
    out, present_k, present_v = attnrt.gqa(rt, q, k, v, seqlens_k=[4], total_sequence_length=5,
                                           num_heads=N, kv_num_heads=NKV)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert isinstance(present_k, torch.Tensor) and present_k.shape == (1, NKV, 5, H)
    expected = sdpa_reference(q[0].view(5, N, H), k[0].view(5, NKV, H), v[0].view(5, NKV, H), 0)
    torch.testing.assert_close(out[0].float(), expected, atol=2e-2, rtol=2e-2)
    # Under no_grad a grad-requiring input is read through its detached view, never copied.
    q.requires_grad_(True)
    with torch.no_grad():
        out2, _, _ = attnrt.gqa(rt, q, k, v, seqlens_k=[4], total_sequence_length=5,
                                num_heads=N, kv_num_heads=NKV)
    assert torch.equal(out2, out)


# ---- torch.compile -----------------------------------------------------------------------------------


class GqaLayer(torch.nn.Module):
    """A decode attention layer: projections around torch.ops.attnrt.gqa on a shared KV buffer."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(SEED + 3)
        self.wq = torch.nn.Parameter(torch.randn(N * H, N * H, generator=g) / 16, requires_grad=False)
        self.wkv = torch.nn.Parameter(torch.randn(N * H, 2 * NKV * H, generator=g) / 16,
                                      requires_grad=False)

    def forward(self, x, past_key, past_value, seqlens_k, total: int):
        q = x @ self.wq
        k, v = (x @ self.wkv).split(NKV * H, dim=-1)
        out = torch.ops.attnrt.gqa(q, k.contiguous(), v.contiguous(), past_key, past_value,
                                   seqlens_k, total, N, NKV)
        return out @ self.wq.T


def test_compiled_gqa_layer_equals_eager():
    layer = GqaLayer()
    g = torch.Generator().manual_seed(SEED + 4)
    x = torch.randn(1, 1, N * H, generator=g)
    caches = [torch.randn(1, NKV, 32, H, generator=g) for _ in range(2)]
    seqlens = torch.tensor([9], dtype=torch.int32)
    eager_caches = [c.clone() for c in caches]
    compiled_caches = [c.clone() for c in caches]
    eager = layer(x, *eager_caches, seqlens, 10)
    compiled = torch.compile(layer, fullgraph=True)(x, *compiled_caches, seqlens, 10)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    # The declared in-place write happened in the compiled graph too.
    assert torch.equal(compiled_caches[0], eager_caches[0])
    assert not torch.equal(compiled_caches[0], caches[0])


def test_compiled_paged_gqa_equals_eager():
    g = torch.Generator().manual_seed(SEED + 5)
    q = torch.randn(2, 1, N * H, generator=g)
    k, v = torch.randn(2, 1, NKV * H, generator=g), torch.randn(2, 1, NKV * H, generator=g)
    pools = [torch.randn(8, BLOCK, NKV, H, generator=g) for _ in range(2)]
    table = torch.tensor([[0, 3], [5, 1]], dtype=torch.int32)
    seqlens = torch.tensor([20, 17], dtype=torch.int32)

    def layer(q, k, v, key_cache, value_cache):
        out = torch.ops.attnrt.paged_gqa(q, k, v, key_cache, value_cache, seqlens, 21, table, N, NKV)
        return torch.nn.functional.silu(out) * 3

    eager_pools = [p.clone() for p in pools]
    compiled_pools = [p.clone() for p in pools]
    eager = layer(q, k, v, *eager_pools)
    compiled = torch.compile(layer, fullgraph=True)(q, k, v, *compiled_pools)
    torch.testing.assert_close(compiled, eager, atol=1e-6, rtol=1e-6)
    assert torch.equal(compiled_pools[1], eager_pools[1])


def test_compiled_sparse_mla_equals_eager():
    g = torch.Generator().manual_seed(SEED + 6)
    heads, rows, keys = 16, 2, 24
    q = (torch.randn(1, rows, heads, 512, generator=g) * 0.3).bfloat16()
    kv = torch.randn(keys, 512, generator=g)
    ori_kv = attnrt.sparse_mla_encode(1, kv).view(1, keys, 1, -1)
    assert isinstance(ori_kv, torch.Tensor)

    def layer(q, ori_kv):
        out, lse = torch.ops.attnrt.sparse_mla(q, ori_kv, 1, ori_mask_mode=3)
        return out.float() * 2, lse

    eager = layer(q, ori_kv)
    compiled = torch.compile(layer, fullgraph=True)(q, ori_kv)
    torch.testing.assert_close(compiled[0], eager[0], atol=0, rtol=0)
    torch.testing.assert_close(compiled[1], eager[1], atol=0, rtol=0)
    assert eager[1].shape == (1, 1, rows, heads) and np.isfinite(eager[1].numpy()).all()
