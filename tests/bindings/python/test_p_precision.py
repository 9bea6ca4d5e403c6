"""p_precision of attnrt.paged_attention_varlen and the paged ops (docs/gqa-semantics.md,
"Probability precision"): the keyword and its error; float32 identical in both modes; bfloat16
within a stated tolerance of a numpy float64 reference of INPUT's definition (p = exp(s - m)
rounded to bfloat16 before P·V, l the sum of the unrounded p), with the exact float64 attention
outside that tolerance somewhere (so the check tells the modes apart); the C++ torch operator
with the new trailing argument and without it (older positional callers); the plan's debug line
naming the mode.

Scores are exact in float32 (query and key elements on a grid of 1/2, scale 2) and key 0 holds
every row's largest score, so the running maximum is the row maximum; one thread (no split-KV)."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

import attnrt

ml_dtypes = pytest.importorskip("ml_dtypes")

N, NKV, H, BS = 4, 2, 64, 16
SCALE = 2.0
SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
# (q_len, seq_len): decodes and a prefill chunk.
SEQUENCES = [(1, 90), (5, 70), (1, 33)]


def make_step(seed):
    rng = np.random.default_rng(seed)
    keys, values, queries = [], [], []
    for q_len, total in SEQUENCES:
        k = np.where(rng.random((total, NKV, H)) < 0.85, 0.5, 0.0)
        k[0] = 0.5  # key 0: every row's largest score
        keys.append(k)
        values.append(rng.integers(-127, 128, (total, NKV, H)) / 64.0)
        queries.append(rng.integers(0, 3, (q_len, N, H)) * 0.5)
    return keys, values, queries


def layout(keys, values, dtype):
    """Packed q/k/v rows, pools (BSNH) holding the past rows, table, lengths."""
    slots = max((t + BS - 1) // BS for _, t in SEQUENCES)
    b = len(SEQUENCES)
    table = np.arange(b * slots, dtype=np.int32).reshape(b, slots)[:, ::-1].copy()
    k_cache = np.zeros((b * slots, BS, NKV, H), dtype=dtype)
    v_cache = np.zeros_like(k_cache)
    new_k, new_v = [], []
    for s, (q_len, total) in enumerate(SEQUENCES):
        for j in range(total - q_len):
            k_cache[table[s, j // BS], j % BS] = keys[s][j]
            v_cache[table[s, j // BS], j % BS] = values[s][j]
        new_k.append(keys[s][total - q_len:])
        new_v.append(values[s][total - q_len:])
    q_lens = [q for q, _ in SEQUENCES]
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    seq_lens = np.array([t for _, t in SEQUENCES], dtype=np.int32)
    return (k_cache, v_cache, table, cu, seq_lens,
            np.concatenate(new_k).astype(dtype), np.concatenate(new_v).astype(dtype))


def bf16_spacing(x):
    """Spacing of bfloat16 around |x| (8 significant bits)."""
    a = np.maximum(np.abs(x), 2.0 ** -126)
    return 2.0 ** (np.floor(np.log2(a)) - 7)


def references(keys, values, queries):
    """Per output row (packed order) and head: INPUT reference, exact attention, tolerance."""
    inp, exact, tol = [], [], []
    for s, (q_len, total) in enumerate(SEQUENCES):
        for i in range(q_len):
            keys_seen = total - q_len + i + 1
            rin, rex, rtol = [], [], []
            for n in range(N):
                kvh = n // (N // NKV)
                sc = SCALE * (keys[s][:keys_seen, kvh] @ queries[s][i, n])
                assert sc.max() == sc[0]
                p = np.exp(sc - sc[0])
                pr = p.astype(ml_dtypes.bfloat16).astype(np.float64)  # to nearest even
                v = values[s][:keys_seen, kvh]
                l = p.sum()
                o_in = pr @ v / l
                # p within 1/1024 of a spacing of a bfloat16 midpoint: a float32 exp a few ulp
                # off may round it the other way.
                frac = p / bf16_spacing(p)
                near = np.abs(frac - np.floor(frac) - 0.5) < 1 / 1024
                amb = (near * bf16_spacing(p)) @ np.abs(v) / l
                f32 = 2.0 ** -16 * (pr @ np.abs(v)) / l  # float32 accumulation
                rin.append(o_in)
                rex.append(p @ v / l)
                # ... and the output's rounding to bfloat16.
                rtol.append(f32 + amb + 0.5 * bf16_spacing(np.abs(o_in) + f32 + amb))
            inp.append(rin)
            exact.append(rex)
            tol.append(rtol)
    return np.array(inp), np.array(exact), np.array(tol)


def run(rt, dtype, p_precision, keys, values, queries, torch_tensors=False):
    k_cache, v_cache, table, cu, seq_lens, k, v = layout(keys, values, dtype)
    q = np.concatenate(queries).astype(dtype)
    if torch_tensors:
        torch = pytest.importorskip("torch")
        tdt = {np.float32: torch.float32}.get(dtype, torch.bfloat16)
        conv = lambda x: torch.from_numpy(x.astype(np.float32)).to(tdt)
        q, k, v, k_cache, v_cache = map(conv, (q, k, v, k_cache, v_cache))
        table, cu, seq_lens = map(torch.from_numpy, (table, cu, seq_lens))
        out = attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, seq_lens, table, k=k, v=v,
                                            softmax_scale=SCALE, p_precision=p_precision)
        return out.float().numpy().astype(np.float64)
    out = attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, seq_lens, table, k=k, v=v,
                                        softmax_scale=SCALE, p_precision=p_precision)
    return np.asarray(out).astype(np.float64)


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime(num_threads=1) as r:
        yield r


@pytest.mark.parametrize("bad", ["half", "EXACTLY", 2, True, None])
def test_bad_p_precision_is_refused_by_name(rt, bad):
    keys, values, queries = make_step(SEED)
    with pytest.raises(ValueError, match="p_precision: expected 'exact' or 'input', got"):
        run(rt, np.float32, bad, keys, values, queries)
    with pytest.raises(attnrt.InvalidArgumentError, match="p_precision"):
        attnrt.PagedGqaVarlenOp(rt, num_heads=N, kv_num_heads=NKV, block_size=BS,
                                p_precision=bad)


@pytest.mark.parametrize("torch_tensors", [False, True])
def test_float32_modes_are_identical(rt, torch_tensors):
    keys, values, queries = make_step(SEED)
    exact = run(rt, np.float32, "exact", keys, values, queries, torch_tensors)
    inp = run(rt, np.float32, "input", keys, values, queries, torch_tensors)
    assert np.array_equal(exact.view(np.int64), inp.view(np.int64)), f"seed {SEED}"


@pytest.mark.parametrize("torch_tensors", [False, True])
def test_bfloat16_input_matches_its_definition(rt, torch_tensors):
    keys, values, queries = make_step(SEED)
    got = run(rt, ml_dtypes.bfloat16, "input", keys, values, queries, torch_tensors)
    got = got.reshape(-1, N, H)
    ref_in, ref_ex, tol = references(keys, values, queries)
    assert not np.isnan(got).any()
    err = np.abs(got - ref_in)
    assert (err <= tol).all(), (f"seed {SEED}: max excess {np.max(err - tol)} at "
                                f"{np.unravel_index(np.argmax(err - tol), err.shape)}")
    # Negative control: the exact attention is outside the INPUT tolerance somewhere.
    assert (np.abs(got - ref_ex) > tol).any(), f"seed {SEED}: the modes cannot be told apart"
    exact = run(rt, ml_dtypes.bfloat16, "exact", keys, values, queries, torch_tensors)
    assert not np.array_equal(exact.reshape(-1, N, H), got), f"seed {SEED}"


def test_torch_operator_takes_p_precision_last():
    torch = pytest.importorskip("torch")
    import attnrt.torch  # noqa: F401  (registers torch.ops.attnrt.*)
    keys, values, queries = make_step(SEED)
    k_cache, v_cache, table, cu, seq_lens, k, v = layout(keys, values, np.float32)
    q = np.concatenate(queries).astype(np.float32)
    conv = lambda x: torch.from_numpy(x).to(torch.bfloat16)
    outs = {}
    for mode in ("old_positional", "exact", "input", "input_keyword"):
        kc, vc = conv(k_cache), conv(v_cache)
        out = torch.full((q.shape[0], N * H), float("nan"), dtype=torch.bfloat16)
        args = [conv(q).reshape(q.shape[0], N * H), kc, vc, torch.from_numpy(cu),
                torch.from_numpy(seq_lens), torch.from_numpy(table), out,
                conv(k).reshape(-1, NKV * H), conv(v).reshape(-1, NKV * H), None, None, SCALE,
                -1, 0.0, "BSNH"]
        if mode == "old_positional":
            torch.ops.attnrt.paged_attention_varlen(*args)
        elif mode == "input_keyword":
            torch.ops.attnrt.paged_attention_varlen(*args, p_precision="input")
        else:
            torch.ops.attnrt.paged_attention_varlen(*args, mode)
        assert not torch.isnan(out).any()
        outs[mode] = out
    assert torch.equal(outs["old_positional"], outs["exact"])
    assert torch.equal(outs["input"], outs["input_keyword"])
    assert not torch.equal(outs["input"], outs["exact"])
    with pytest.raises((RuntimeError, ValueError), match="p_precision"):
        torch.ops.attnrt.paged_attention_varlen(*args, "bfloat16")


def test_plan_debug_line_names_p_precision(capfd):
    keys, values, queries = make_step(SEED)
    with attnrt.Runtime(num_threads=1, debug=True) as r:
        run(r, ml_dtypes.bfloat16, "input", keys, values, queries)
        run(r, ml_dtypes.bfloat16, "exact", keys, values, queries)
    err = capfd.readouterr().err
    assert "p_precision=input" in err, err
    assert "p_precision=exact" in err, err


def test_paged_op_attributes_and_paged_gqa_keyword(rt):
    op = attnrt.PagedGqaOp(rt, num_heads=N, kv_num_heads=NKV, block_size=BS, p_precision="input")
    assert op.attributes["p_precision"] == 1
    assert attnrt.PagedGqaOp(rt, num_heads=N, kv_num_heads=NKV,
                             block_size=BS).attributes["p_precision"] == 0
    with pytest.raises(attnrt.InvalidArgumentError, match="p_precision"):
        attnrt.PagedGqaOp(rt, num_heads=N, kv_num_heads=NKV, block_size=BS, p_precision="fp32")


@pytest.mark.parametrize("attribute, good, bad", [
    ("p_precision", 1, True), ("p_precision", 1, 1.0), ("p_precision", 0, False),
    ("p_precision", 1, np.int64(1)), ("block_size", BS, float(BS))])
def test_refused_attribute_stays_refused_after_an_equal_value_was_cached(attribute, good, bad):
    """The one-call functions keep their ops per attribute set; a value the op refuses (a bool, a
    float or a numpy scalar where a name or 0/1 is expected) that compares equal to a cached one
    (True == 1 == 1.0) is still refused, not served by the op made for the other value."""
    with attnrt.Runtime(num_threads=1) as r:
        kc = np.zeros((4, BS, NKV, H), np.float32)
        q = np.ones((1, 1, N * H), np.float32)
        kv = np.ones((1, 1, NKV * H), np.float32)

        def call(value):
            attributes = {"p_precision": "exact", "block_size": BS, attribute: value}
            return attnrt.paged_gqa(r, q, kv, kv, kc, kc.copy(), np.array([3], np.int32),
                                    np.array([4], np.int32), np.array([[0, 1]], np.int32),
                                    num_heads=N, kv_num_heads=NKV, **attributes)

        with pytest.raises(attnrt.InvalidArgumentError, match=attribute):
            call(bad)
        call(good)  # now cached
        with pytest.raises(attnrt.InvalidArgumentError, match=attribute):
            call(bad)
