"""attnrt.paged_attention_varlen on hostile shapes and values: every one raises an attnrt.Error
whose message names the offending input (never IndexError / ZeroDivisionError / a bare ValueError
from inside the package), on the Python path (numpy; torch through PagedGqaVarlenOp) and on the
C++ operator's path (torch tensors, when libattnrt_torch.so is built). And paged_gqa takes Python
lists for its host integer inputs as paged_attention_varlen does."""
from __future__ import annotations

import numpy as np
import pytest

import attnrt
from attnrt import _varlen

N, NKV, H, BS = 4, 2, 16, 4

# The op's input names next to paged_attention_varlen's argument names: a message may use either.
ALIASES = {"q": "q|query", "k": r"\bk\b|key", "v": r"\bv\b|value", "k_cache": "k_cache|key_cache",
           "v_cache": "v_cache|value_cache", "cu_seqlens_q": "cu_seqlens_q|query_start_loc",
           "sinks": "sinks|head_sink", "out": r"\bout\b|output"}


def good():
    g = np.random.default_rng(0)
    return dict(q=g.standard_normal((3, N, H), np.float32),
                k_cache=np.zeros((4, BS, NKV, H), np.float32),
                v_cache=np.zeros((4, BS, NKV, H), np.float32),
                cu_seqlens_q=np.array([0, 1, 3], np.int32), seq_lens=np.array([3, 6], np.int32),
                block_table=np.array([[0, 1], [2, 3]], np.int32),
                k=g.standard_normal((3, NKV, H), np.float32),
                v=g.standard_normal((3, NKV, H), np.float32),
                slot_mapping=np.array([2, 12, 13], np.int64))


def f32(*shape):
    return np.zeros(shape, np.float32)


def i32(*shape):
    return np.zeros(shape, np.int32)


# (case id, the arguments changed, the input the message must name)
HOSTILE = [
    ("q-0d", dict(q=f32()), "q"),
    ("q-empty-1d", dict(q=f32(0)), "q"),
    ("q-1d", dict(q=f32(N * H)), "q"),
    ("q-4d", dict(q=f32(1, 3, N, H)), "q"),
    ("q-2d-not-a-multiple-of-head-size", dict(q=f32(3, N * H + 1)), "q"),
    ("q-2d-narrower-than-a-head", dict(q=f32(3, H - 1)), "q"),
    ("q-zero-heads", dict(q=f32(3, 0, H)), "q|num_heads"),
    ("q-zero-heads-2d", dict(q=f32(3, 0)), "q|num_heads"),
    ("q-heads-not-a-multiple-of-kv-heads", dict(q=f32(3, 3, H)), "num_heads|kv_num_heads"),
    ("q-wrong-head-size", dict(q=f32(3, N, H + 1)), "q|k|k_cache"),
    ("q-no-tokens", dict(q=f32(0, N, H)), "q|cu_seqlens_q|slot_mapping|k"),
    ("k_cache-0d", dict(k_cache=f32()), "k_cache"),
    ("k_cache-empty", dict(k_cache=f32(0)), "k_cache"),
    ("k_cache-3d", dict(k_cache=f32(4, BS, NKV * H)), "k_cache"),
    ("k_cache-5d", dict(k_cache=f32(4, BS, NKV, H, 1)), "k_cache"),
    ("k_cache-zero-head-size", dict(k_cache=f32(4, BS, NKV, 0)), "k_cache"),
    ("k_cache-zero-kv-heads", dict(k_cache=f32(4, BS, 0, H)), "k_cache|kv_num_heads"),
    ("k_cache-zero-block-size", dict(k_cache=f32(4, 0, NKV, H)), "k_cache|block_size"),
    ("k_cache-no-blocks", dict(k_cache=f32(0, BS, NKV, H)), "k_cache|block_table"),
    ("v_cache-other-shape", dict(v_cache=f32(4, BS, NKV, H // 2)), "v_cache"),
    ("v_cache-3d", dict(v_cache=f32(4, BS, NKV * H)), "v_cache"),
    ("cu_seqlens_q-0d", dict(cu_seqlens_q=np.array(0, np.int32)), "cu_seqlens_q"),
    ("cu_seqlens_q-empty", dict(cu_seqlens_q=i32(0)), "cu_seqlens_q"),
    ("cu_seqlens_q-2d", dict(cu_seqlens_q=i32(1, 3)), "cu_seqlens_q"),
    ("cu_seqlens_q-one-sequence-too-many", dict(cu_seqlens_q=np.array([0, 1, 2, 3], np.int32)),
     "cu_seqlens_q|seq_lens|block_table"),
    ("cu_seqlens_q-past-the-tokens", dict(cu_seqlens_q=np.array([0, 1, 9], np.int32)),
     "cu_seqlens_q"),
    ("cu_seqlens_q-float", dict(cu_seqlens_q=np.array([0, 1, 3], np.float32)), "cu_seqlens_q"),
    ("seq_lens-empty", dict(seq_lens=i32(0)), "seq_lens|cu_seqlens_q"),
    ("seq_lens-0d", dict(seq_lens=np.array(3, np.int32)), "seq_lens|cu_seqlens_q"),
    ("seq_lens-one-short", dict(seq_lens=np.array([3], np.int32)), "seq_lens|cu_seqlens_q"),
    ("block_table-1d", dict(block_table=np.array([0, 1], np.int32)), "block_table"),
    ("block_table-empty", dict(block_table=i32(0, 0)), "block_table"),
    ("block_table-one-row", dict(block_table=np.array([[0, 1]], np.int32)), "block_table"),
    ("block_table-ragged-list", dict(block_table=[[0, 1], [2]]), "block_table"),
    ("slot_mapping-one-short", dict(slot_mapping=np.array([2, 12], np.int64)), "slot_mapping"),
    ("slot_mapping-2d", dict(slot_mapping=np.zeros((3, 1), np.int64)), "slot_mapping"),
    ("k-other-tokens", dict(k=f32(2, NKV, H)), "k"),
    ("k-2d", dict(k=f32(3, NKV * H + 1)), "k"),
    ("k-without-v", dict(v=None), "k|v"),
    ("sinks-wrong-length", dict(sinks=f32(N + 1)), "sinks"),
    ("sinks-0d", dict(sinks=f32()), "sinks"),
    ("out-other-shape", dict(out=f32(3, N, H + 1)), "out"),
    ("out-0d", dict(out=f32()), "out"),
    ("softmax_scale-string", dict(softmax_scale="x"), "softmax_scale"),
    ("softmax_scale-none-of-a-list", dict(softmax_scale=[1.0]), "softmax_scale"),
    ("softcap-string", dict(softcap="x"), "softcap"),
    ("kv_layout-unknown", dict(kv_layout="NHSB"), "kv_layout"),
    ("kv_layout-a-number", dict(kv_layout=7), "kv_layout"),
    ("window_size-right", dict(window_size=(2, 3)), "window_size"),
    ("window_size-one-number", dict(window_size=4), "window_size"),
    ("block_size-zero", dict(block_size=0), "block_size"),
    ("block_size-not-the-caches", dict(block_size=BS * 2), "block_size|k_cache|block_table"),
]


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def pattern(names: str) -> str:
    return "|".join(ALIASES.get(n, n) for n in names.split("|"))


def call(rt, fn, args):
    a = dict(args)
    return fn(rt, a.pop("q"), a.pop("k_cache"), a.pop("v_cache"), a.pop("cu_seqlens_q"),
              a.pop("seq_lens"), a.pop("block_table"), **a)


def check(rt, fn, args, names):
    with pytest.raises(attnrt.Error) as raised:
        call(rt, fn, args)
    assert raised.type is not attnrt.InternalError, raised.value
    message = str(raised.value)
    import re
    assert re.search(pattern(names), message), f"{message!r} does not name {names}"


@pytest.mark.parametrize("case, changes, names", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_numpy(rt, case, changes, names):
    check(rt, attnrt.paged_attention_varlen, dict(good(), **changes), names)


def as_torch(args):
    torch = pytest.importorskip("torch")
    return {n: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
            for n, v in args.items()}


@pytest.mark.parametrize("case, changes, names", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_torch(rt, case, changes, names):
    """Torch tensors: the C++ operator when it is loaded (else the Python path)."""
    check(rt, attnrt.paged_attention_varlen, as_torch(dict(good(), **changes)), names)


@pytest.mark.parametrize("case, changes, names", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_torch_python_path(rt, case, changes, names):
    check(rt, _varlen.paged_attention_varlen_python, as_torch(dict(good(), **changes)), names)


def test_the_good_call_runs(rt):
    """The table's base call is valid on every path (so each case fails for its own change)."""
    call(rt, attnrt.paged_attention_varlen, good())
    call(rt, attnrt.paged_attention_varlen, as_torch(good()))
    call(rt, _varlen.paged_attention_varlen_python, as_torch(good()))


def test_paged_gqa_takes_lists_for_host_integers_as_varlen_does(rt):
    """block_table as a list of lists was refused by paged_gqa ("expected a numpy array ...") while
    paged_attention_varlen took it; both take lists for every host integer input now."""
    g = np.random.default_rng(1)
    q = g.standard_normal((2, 1, N * H), np.float32)
    k, v = (g.standard_normal((2, 1, NKV * H), np.float32) for _ in range(2))

    def pools():
        return (g.standard_normal((4, BS, NKV, H), np.float32),) * 2

    k_cache, v_cache = pools()
    k_cache, v_cache = k_cache.copy(), v_cache.copy()
    k2, v2 = k_cache.copy(), v_cache.copy()
    table = [[0, 1], [2, 3]]
    want = attnrt.paged_gqa(rt, q, k, v, k_cache, v_cache, np.array([4, 6], np.int32), 7,
                            np.array(table, np.int32), num_heads=N, kv_num_heads=NKV)
    got = attnrt.paged_gqa(rt, q, k, v, k2, v2, [4, 6], 7, table, num_heads=N, kv_num_heads=NKV)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(k2, k_cache)
    with pytest.raises(attnrt.InvalidArgumentError, match="block_table"):
        attnrt.paged_gqa(rt, q, k, v, k2, v2, [4, 6], 7, [[0, 1], [2]], num_heads=N,
                         kv_num_heads=NKV)
