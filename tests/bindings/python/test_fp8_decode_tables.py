"""cpu_x86.paged_gqa_varlen.flash.amx over float8 caches: its e4m3fn decode tiles decode the codes
by byte-table lookups (AVX512-VBMI) instead of gqa.flash.avx512's in-register conversion, and must
give the same bits as cpu_x86.paged_gqa_varlen.flash.avx512 on every problem: e4m3fn and e5m2,
bfloat16 and float32 queries, per-tensor scales other than 1, head sizes that are not a multiple
of 64 (the 16-code tail), cache blocks of 16 and 128, p_precision input and exact, and caches that
hold every code (NaN codes included). Both kernels are checked against PyTorch's
scaled_dot_product_attention on float64 dequantized caches first (a negative control: a wrong
scale must fail), so equal bits are equal to a checked output."""
from __future__ import annotations

import os
import random

import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402

AMX = "cpu_x86.paged_gqa_varlen.flash.amx"
AVX512 = "cpu_x86.paged_gqa_varlen.flash.avx512"
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))


def runtime_or_skip(kernel):
    rt = attnrt.Runtime(kernel=kernel, num_threads=2)
    names = [k["name"] for p in rt.list()["plugins"] for k in p["kernels"]]
    if kernel not in names:
        rt.close()
        pytest.skip(f"{kernel} is not built here")
    return rt


def make_case(g, fp8, qdt, lens, h, bs, heads=(16, 4), every_code=False):
    n, nkv = heads
    blocks = [(ln + bs - 1) // bs for ln in lens]
    nb = sum(blocks)
    table = torch.zeros(len(lens), max(blocks), dtype=torch.int32)
    o = 0
    for b, c in enumerate(blocks):
        table[b, :c] = torch.arange(o, o + c)
        o += c
    cu = torch.arange(len(lens) + 1, dtype=torch.int32)  # one decode row per sequence
    q = (torch.randn(len(lens), n, h, generator=g) * 1.5).to(qdt)
    if every_code:
        codes = torch.randint(0, 256, (2, nb, nkv, bs, h), generator=g, dtype=torch.int32)
        codes[:, :, :, :, 0] = torch.arange(256, dtype=torch.int32).repeat(nb * nkv * bs)[
            : nb * nkv * bs].view(nb, nkv, bs)
        kc, vc = (c.to(torch.uint8).view(fp8) for c in codes)
    else:
        kc = (torch.randn(nb, nkv, bs, h, generator=g) * 3).to(fp8)
        vc = (torch.randn(nb, nkv, bs, h, generator=g) * 3).to(fp8)
    return dict(q=q, k_cache=kc, v_cache=vc, cu=cu, lens=torch.tensor(lens, dtype=torch.int32),
                table=table, ks=torch.tensor([0.37]), vs=torch.tensor([1.7]))


def run(rt, c, prec, k_scale=None):
    return attnrt.paged_attention_varlen(
        rt, c["q"], c["k_cache"], c["v_cache"], c["cu"], c["lens"], c["table"],
        k_scale=c["ks"] if k_scale is None else k_scale, v_scale=c["vs"], kv_layout="BNSH",
        p_precision=prec)


def sdpa_reference(c):
    """float64 attention of each decode row over its sequence's dequantized rows."""
    n = c["q"].shape[1]
    nkv = c["k_cache"].shape[1]
    bs = c["k_cache"].shape[2]
    out = torch.empty(c["q"].shape, dtype=torch.float64)
    for b, ln in enumerate(c["lens"].tolist()):
        rows = [(int(c["table"][b, j // bs]), j % bs) for j in range(ln)]
        k = torch.stack([c["k_cache"][x, :, s].double() for x, s in rows], 1) * float(c["ks"])
        v = torch.stack([c["v_cache"][x, :, s].double() for x, s in rows], 1) * float(c["vs"])
        k = k.repeat_interleave(n // nkv, 0)
        v = v.repeat_interleave(n // nkv, 0)
        q = c["q"][b].double().unsqueeze(1)
        out[b] = torch.nn.functional.scaled_dot_product_attention(q, k, v).squeeze(1)
    return out


CASES = [
    ("e4m3fn bf16 h128 bs128", torch.float8_e4m3fn, torch.bfloat16, [300, 1, 129], 128, 128),
    ("e4m3fn f32 h72 bs16", torch.float8_e4m3fn, torch.float32, [77, 40, 16], 72, 16),
    ("e4m3fn bf16 h200 bs16", torch.float8_e4m3fn, torch.bfloat16, [33, 65], 200, 16),
    ("e5m2 bf16 h128 bs128", torch.float8_e5m2, torch.bfloat16, [300, 5], 128, 128),
    ("e5m2 f32 h40 bs16", torch.float8_e5m2, torch.float32, [50, 17], 40, 16),
]


@pytest.mark.parametrize("prec", ["input", "exact"])
@pytest.mark.parametrize("name,fp8,qdt,lens,h,bs", CASES, ids=[c[0] for c in CASES])
def test_amx_fp8_decode_equals_avx512_and_the_reference(name, fp8, qdt, lens, h, bs, prec):
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    c = make_case(g, fp8, qdt, lens, h, bs)
    with runtime_or_skip(AMX) as amx, runtime_or_skip(AVX512) as avx512:
        try:
            got = run(amx, c, prec)
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{AMX} declines here: {e}")
        want = run(avx512, c, prec)
        ref = sdpa_reference(c)
        tol = 2e-2 if qdt == torch.bfloat16 else 1e-4
        for out in (got, want):
            err = (out.double() - ref).abs().max().item()
            assert err <= tol * max(1.0, ref.abs().max().item()), (name, err)
        # Negative control: a key scale off by 10 % must fail the same comparison.
        wrong = run(avx512, c, prec, k_scale=c["ks"] * 1.1)
        assert (wrong.double() - ref).abs().max().item() > tol * max(1.0, ref.abs().max().item())
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), name


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_amx_fp8_decode_every_code_same_bits(fp8):
    """Caches of random codes with every code (NaN and, for e5m2, infinities included) in them: the
    rows that meet a NaN or an infinity come out NaN or infinite alike, bit for bit."""
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    c = make_case(g, fp8, torch.bfloat16, [256, 300], 96, 16, every_code=True)
    with runtime_or_skip(AMX) as amx, runtime_or_skip(AVX512) as avx512:
        try:
            got = run(amx, c, "input")
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{AMX} declines here: {e}")
        want = run(avx512, c, "input")
    assert torch.isnan(want.float()).any()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
