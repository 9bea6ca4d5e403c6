"""A paged decode gives the bits of the same decode over any other block size, and of the
contiguous cache (the promise of docs/paged-gqa.md), also where its split of the keys across
threads (flash decoding) depends on the kv heads: batch 1 with 2 kv heads on 2 threads, whose
cache blocks of 16 rows are read for both kv heads at once and those of 256 or more per kv head.
float32 caches and queries (every bit of the output shows), flash.avx512 and flash.amx (AMX
machines only), head sizes 64 and 256, both checked against a float64 reference."""
from __future__ import annotations

import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
KERNELS = ["cpu_x86.paged_gqa_varlen.flash.avx512", "cpu_x86.paged_gqa_varlen.flash.amx",
           "cpu_x86.paged_gqa_varlen.flash.avx2"]


def pools(k, v, bs):
    """k, v [L, Nkv, H] laid into BNSH pools of blocks of bs rows, in reverse block order."""
    length, nkv, h = k.shape
    nb = (length + bs - 1) // bs
    kp = torch.full((nb * bs, nkv, h), float("nan"))
    vp = kp.clone()
    kp[:length], vp[:length] = k, v
    to_bnsh = lambda x: x.view(nb, bs, nkv, h).permute(0, 2, 1, 3).contiguous().flip(0)  # noqa: E731
    table = torch.arange(nb - 1, -1, -1, dtype=torch.int32)[None]
    return to_bnsh(kp), to_bnsh(vp), table


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("h", [64, 256])
def test_decode_bits_do_not_depend_on_block_size(kernel, h):
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    n, nkv, length = 16, 2, 1100
    q = torch.randn(1, n, h, generator=g)
    k = torch.randn(length, nkv, h, generator=g) * 2
    v = torch.randn(length, nkv, h, generator=g)
    rt = attnrt.Runtime(kernel=kernel, num_threads=2)
    try:
        names = [x["name"] for p in rt.list()["plugins"] for x in p["kernels"]]
        if kernel not in names:
            pytest.skip(f"{kernel} is not built here")
        outs = {}
        for bs in (16, 64, 256, 1024):
            kc, vc, table = pools(k, v, bs)
            try:
                outs[bs] = attnrt.paged_attention_varlen(
                    rt, q, kc, vc, torch.tensor([0, 1], dtype=torch.int32),
                    torch.tensor([length], dtype=torch.int32), table, kv_layout="BNSH")
            except attnrt.UnsupportedError as e:
                pytest.skip(f"{kernel} declines here: {e}")
    finally:
        rt.close()
    kk = k.double().repeat_interleave(n // nkv, 1).transpose(0, 1)  # [n, L, h]
    vv = v.double().repeat_interleave(n // nkv, 1).transpose(0, 1)
    ref = torch.softmax(kk @ q[0].double()[:, :, None] / h**0.5, 1).transpose(1, 2) @ vv
    assert (outs[16].double() - ref.squeeze(1)[None]).abs().max().item() < 1e-5
    for bs in (64, 256, 1024):
        assert torch.equal(outs[bs].view(torch.int32), outs[16].view(torch.int32)), bs
