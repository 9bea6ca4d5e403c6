"""cpu_x86.paged_gqa_varlen.flash.amx over float8 caches: its e4m3fn decode tiles decode the codes
by byte-table lookups (AVX512-VBMI) instead of gqa.flash.avx512's in-register conversion, and score
them on AMX tiles when the query rows hold bfloat16 values (head sizes a multiple of 32 up to 256,
a per-tensor scale). Where the tiles score, the sums run in another order than gqa.flash.avx512's,
so the outputs are compared with the reference and with gqa.flash.avx512 within rounding; every
other problem must give gqa.flash.avx512's bits: e4m3fn and e5m2, bfloat16 and float32 queries,
per-tensor scales that are not powers of two (with those, prompt tiles take AMX tile products),
head sizes that are not a multiple of 64 (the 16-code tail), cache blocks of 16 and 128,
p_precision input and exact, caches that hold every code (NaN codes included: a NaN output is NaN
in both, its sign may differ), and prompts whose rows per kv head leave a short last group of rows
(head sizes above 256). Both kernels are checked against PyTorch's scaled_dot_product_attention on
float64 dequantized caches first (a negative control: a wrong scale must fail), so equal bits are
equal to a checked output. The tile scores must not depend on how the keys are split into calls:
the same cache in blocks of 5, 16, 48 and 128 rows gives the same float32 bits."""
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


def same_bits(a, b) -> bool:
    """Equal bits, NaN for NaN (the sign of a NaN output is the order of its operands' choice)."""
    nan = torch.isnan(a.float())
    if not torch.equal(nan, torch.isnan(b.float())):
        return False
    words = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.view(words)[~nan], b.view(words)[~nan])


def close_bits(a, b, prec="exact") -> bool:
    """NaN where the other is NaN, and finite values one rounding step of a's type apart at most
    (float32 sums in another order round to neighbouring values), plus a part of b's largest
    magnitude where an output near 0 is a sum that cancels: 2^-16 for p_precision exact (a score
    a float32 step off moves each p by about 2^-24 times the score, which a cancelling sum of
    values near the largest does not shrink: 5e-5 measured at an output of 1e-3 among values up
    to 17), 2^-8 for input, whose rounding of p to bfloat16 can go the other way for such a p (a
    step of 2^-8 of it: 2 bfloat16 steps measured at an output of 0.14 among values up to 19)."""
    nan = torch.isnan(a.float())
    if not torch.equal(nan, torch.isnan(b.float())):
        return False
    x, y = a.double()[~nan], b.double()[~nan]
    eps = torch.finfo(a.dtype).eps
    floor = (2.0**-8 if prec == "input" else 2.0**-16) * (y.abs().max().item() if y.numel() else 0.0)
    return bool(((x - y).abs() <= eps * torch.maximum(x.abs(), y.abs()) + floor).all())


def tile_scores(fp8, qdt, h, q_lens) -> bool:
    """Whether the AMX kernel scores this problem's decode tiles on tiles: e4m3fn, query values
    that are bfloat16 values, head size a multiple of 32 up to 256, decode rows."""
    return (fp8 == torch.float8_e4m3fn and qdt == torch.bfloat16 and h % 32 == 0 and h <= 256
            and q_lens is None)


def make_case(g, fp8, qdt, lens, h, bs, heads=(16, 4), every_code=False, q_lens=None):
    n, nkv = heads
    q_lens = q_lens or [1] * len(lens)  # one decode row per sequence by default
    blocks = [(ln + bs - 1) // bs for ln in lens]
    nb = sum(blocks)
    table = torch.zeros(len(lens), max(blocks), dtype=torch.int32)
    o = 0
    for b, c in enumerate(blocks):
        table[b, :c] = torch.arange(o, o + c)
        o += c
    cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    q = (torch.randn(sum(q_lens), n, h, generator=g) * 1.5).to(qdt)
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
    """float64 causal attention of each sequence's rows (the last q_len of its positions) over its
    dequantized rows."""
    n = c["q"].shape[1]
    nkv = c["k_cache"].shape[1]
    bs = c["k_cache"].shape[2]
    out = torch.empty(c["q"].shape, dtype=torch.float64)
    cu = c["cu"].tolist()
    for b, ln in enumerate(c["lens"].tolist()):
        rows = [(int(c["table"][b, j // bs]), j % bs) for j in range(ln)]
        k = torch.stack([c["k_cache"][x, :, s].double() for x, s in rows], 1) * float(c["ks"])
        v = torch.stack([c["v_cache"][x, :, s].double() for x, s in rows], 1) * float(c["vs"])
        k = k.repeat_interleave(n // nkv, 0)
        v = v.repeat_interleave(n // nkv, 0)
        q = c["q"][cu[b]:cu[b + 1]].double().transpose(0, 1)  # [n, q_len, h]
        q_len = q.shape[1]
        # Row i sits at position ln - q_len + i and sees keys up to it.
        mask = torch.arange(ln).view(1, ln) <= torch.arange(ln - q_len, ln).view(q_len, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out[cu[b]:cu[b + 1]] = o.transpose(0, 1)
    return out


# (name, fp8, query dtype, seq_lens, head size, block size, heads, q_lens or None: decodes)
CASES = [
    ("e4m3fn bf16 h128 bs128", torch.float8_e4m3fn, torch.bfloat16, [300, 1, 129], 128, 128,
     (16, 4), None),
    ("e4m3fn f32 h72 bs16", torch.float8_e4m3fn, torch.float32, [77, 40, 16], 72, 16, (16, 4),
     None),
    ("e4m3fn bf16 h200 bs16", torch.float8_e4m3fn, torch.bfloat16, [33, 65], 200, 16, (16, 4),
     None),
    ("e5m2 bf16 h128 bs128", torch.float8_e5m2, torch.bfloat16, [300, 5], 128, 128, (16, 4), None),
    ("e5m2 f32 h40 bs16", torch.float8_e5m2, torch.float32, [50, 17], 40, 16, (16, 4), None),
    # Prompts of 7 tokens x 5 heads on one kv head (35 rows: more than one group of rows at head
    # sizes above 256) and 10 x 7 at head size 200, beside a decode.
    ("prompt e4m3fn f32 h384", torch.float8_e4m3fn, torch.float32, [67, 20], 384, 16, (5, 1),
     [7, 1]),
    ("prompt e5m2 bf16 h512", torch.float8_e5m2, torch.bfloat16, [67], 512, 33, (5, 1), [7]),
    ("prompt e4m3fn bf16 h200", torch.float8_e4m3fn, torch.bfloat16, [40], 200, 16, (7, 1), [10]),
]


@pytest.mark.parametrize("prec", ["input", "exact"])
@pytest.mark.parametrize("name,fp8,qdt,lens,h,bs,heads,q_lens", CASES,
                         ids=[c[0] for c in CASES])
def test_amx_fp8_equals_avx512_and_the_reference(name, fp8, qdt, lens, h, bs, heads, q_lens,
                                                 prec):
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    c = make_case(g, fp8, qdt, lens, h, bs, heads=heads, q_lens=q_lens)
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
        if tile_scores(fp8, qdt, h, q_lens):
            # One bfloat16 rounding step of the output apart at most.
            assert close_bits(got, want, prec), name
        else:
            assert same_bits(got, want), name


@pytest.mark.parametrize("heads", [(16, 4), (3, 1), (8, 1)])
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_amx_fp8_decode_every_code_same_bits(fp8, heads):
    """Caches of random codes with every code (NaN and, for e5m2, infinities included) in them: the
    rows that meet a NaN or an infinity come out NaN or infinite alike, the others bit for bit."""
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    c = make_case(g, fp8, torch.bfloat16, [256, 300], 96, 16, heads=heads, every_code=True)
    with runtime_or_skip(AMX) as amx, runtime_or_skip(AVX512) as avx512:
        try:
            got = run(amx, c, "input")
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{AMX} declines here: {e}")
        want = run(avx512, c, "input")
    assert torch.isnan(want.float()).any()
    if fp8 == torch.float8_e4m3fn:  # scored on tiles (head size 96)
        assert close_bits(got, want, "input")
    else:
        assert same_bits(got, want)


def to_block_size(c, bs):
    """The case's caches re-laid in blocks of bs rows (blocks in reverse order in the pools)."""
    old_bs = c["k_cache"].shape[2]
    nkv, h = c["k_cache"].shape[1], c["k_cache"].shape[3]
    lens = c["lens"].tolist()
    blocks = [(ln + bs - 1) // bs for ln in lens]
    nb = sum(blocks)
    kc = torch.zeros(nb, nkv, bs, h, dtype=torch.uint8)
    vc = torch.zeros(nb, nkv, bs, h, dtype=torch.uint8)
    table = torch.zeros(len(lens), max(blocks), dtype=torch.int32)
    o = nb
    for b, ln in enumerate(lens):
        for j in range(blocks[b]):
            o -= 1
            table[b, j] = o
        for t in range(ln):
            src = int(c["table"][b, t // old_bs]), t % old_bs
            dst = int(table[b, t // bs]), t % bs
            kc[dst[0], :, dst[1]] = c["k_cache"][src[0], :, src[1]].view(torch.uint8)
            vc[dst[0], :, dst[1]] = c["v_cache"][src[0], :, src[1]].view(torch.uint8)
    fp8 = c["k_cache"].dtype
    return dict(c, k_cache=kc.view(fp8), v_cache=vc.view(fp8), table=table)


@pytest.mark.parametrize("h,heads", [(128, (16, 4)), (96, (8, 1)), (256, (6, 2))])
def test_amx_e4m3fn_tile_scores_split_invariant_and_exact(h, heads):
    """float32 queries whose values are bfloat16 values take the tile scores and give float32
    outputs, which show every bit of the scores: equal across cache block sizes (calls of 5, 16,
    48 and 128 keys), within float32 rounding of the float64 reference, and not gqa.flash.avx512's
    bits necessarily, but within its rounding."""
    print("seed", SEED)
    g = torch.Generator().manual_seed(SEED)
    c = make_case(g, torch.float8_e4m3fn, torch.bfloat16, [700, 1, 129, 48], h, 128, heads=heads)
    c["q"] = c["q"].float()
    c["ks"], c["vs"] = torch.tensor([0.37]), torch.tensor([1.0])
    ref = sdpa_reference(c)
    with runtime_or_skip(AMX) as amx, runtime_or_skip(AVX512) as avx512:
        try:
            outs = [run(amx, to_block_size(c, bs), "input") for bs in (128, 5, 16, 48)]
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{AMX} declines here: {e}")
        want = run(avx512, c, "input")
        wrong = run(amx, c, "input", k_scale=c["ks"] * 1.01)
    # p_precision input rounds P to the query type (float32): exact; 1e-5 covers float32 sums.
    tol = 1e-5 * max(1.0, ref.abs().max().item())
    assert (outs[0].double() - ref).abs().max().item() <= tol
    assert (wrong.double() - ref).abs().max().item() > tol  # negative control: a 1 % key scale
    for o in outs[1:]:
        assert same_bits(o, outs[0])
    assert (want.double() - outs[0].double()).abs().max().item() <= tol


def _extreme_case(kind):
    """One decode row over one kv head (head size 64, 16 keys, block 16) whose K scale sits at an
    edge where the tile scores, which apply k_scale to the sum rather than to each key element,
    would differ from the scaled products if they took the problem: an infinite k_scale (every
    score NaN), a query near 2^120 with k_scale 2^-20 (the unscaled sums overflow, the scaled
    ones do not), k_scale 0 with a query of 2^126 (Inf * 0), and e4m3fn subnormal codes with a
    query of 2^-120 and k_scale 2^125 (the unscaled products are flushed below FLT_MIN)."""
    g = torch.Generator().manual_seed(SEED)
    h, n = 64, 16
    q = torch.randint(1, 4, (1, 1, h), generator=g).float()
    codes = torch.randint(0x30, 0x50, (1, 1, n, h), generator=g, dtype=torch.int32)
    if kind == "inf":
        q, k_scale = torch.ones(1, 1, h), float("inf")
        codes[..., 0::2] = 0x38  # 1.0
        codes[..., 1::2] = 0xB8  # -1.0: each key holds +Inf and -Inf after the scale
    elif kind == "overflow":
        q, k_scale = q * 2.0**120, 2.0**-20
        codes[:] = 0x7E  # 448
    elif kind == "zero":
        q, k_scale = torch.full((1, 1, h), 2.0**126), 0.0
        codes[:] = 0x7E
    else:  # "underflow"
        q, k_scale = q * 2.0**-120, 2.0**125
        codes = torch.randint(1, 4, (1, 1, n, h), generator=g, dtype=torch.int32)
        codes[..., ::2] |= 0x80
    kc = codes.to(torch.uint8).view(torch.float8_e4m3fn)
    vc = torch.randn(1, 1, n, h, generator=g).to(torch.float8_e4m3fn)
    return dict(q=q, k_cache=kc, v_cache=vc, cu=torch.tensor([0, 1], dtype=torch.int32),
                lens=torch.tensor([n], dtype=torch.int32), table=torch.tensor([[0]], dtype=torch.int32),
                ks=torch.tensor([k_scale]), vs=torch.tensor([1.0]))


@pytest.mark.parametrize("kind", ["inf", "overflow", "zero", "underflow"])
def test_amx_e4m3fn_extreme_k_scales(kind):
    """The tile scores take only k_scales and queries under which applying the scale to the sum
    changes nothing but rounding; these edges go to the scaled products and give what
    gqa.flash.avx512 and the float64 reference give (NaN rows where every score is NaN)."""
    print("seed", SEED)
    c = _extreme_case(kind)
    with runtime_or_skip(AMX) as amx, runtime_or_skip(AVX512) as avx512:
        try:
            got = run(amx, c, "exact")
        except attnrt.UnsupportedError as e:
            pytest.skip(f"{AMX} declines here: {e}")
        want = run(avx512, c, "exact")
    assert same_bits(got, want), kind
    if kind == "inf":
        assert torch.isnan(got).all()
        return
    k = c["k_cache"][0, 0].double() * float(c["ks"])
    v = c["v_cache"][0, 0].double()
    s = (k @ c["q"][0, 0].double()) / 8.0
    ref = torch.softmax(s, 0) @ v
    assert (got[0, 0].double() - ref).abs().max().item() <= 1e-5 * max(1.0, ref.abs().max().item())
