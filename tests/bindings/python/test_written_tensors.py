"""Tensors a call writes (KV caches written in place, outputs) are written where the caller reads
them, or refused by name; never replaced by a copy that takes the writes. Autograd: the ops have no
backward, so an input that requires grad is refused under grad mode (its gradient would be
silently missing) and a tensor that requires grad is never written. Python (DLPack) paths of
every op; the C++ operator's are in test_torch_op.py."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import attnrt  # noqa: E402
from attnrt import _varlen  # noqa: E402

N, NKV, H, BS = 4, 2, 16, 4


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def varlen_call(g):
    """One decode and one 2-token prefill over BSNH pools, the new rows written by slot_mapping."""
    return dict(q=torch.randn(3, N, H, generator=g), k_cache=torch.zeros(4, BS, NKV, H),
                v_cache=torch.zeros(4, BS, NKV, H),
                cu_seqlens_q=torch.tensor([0, 1, 3], dtype=torch.int32),
                seq_lens=torch.tensor([3, 6], dtype=torch.int32),
                block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
                k=torch.randn(3, NKV, H, generator=g), v=torch.randn(3, NKV, H, generator=g),
                slot_mapping=torch.tensor([2, 12, 13], dtype=torch.int64))


def run_varlen_python(rt, call, **changes):
    c = dict(call, **changes)
    return _varlen.paged_attention_varlen_python(
        rt, c["q"], c["k_cache"], c["v_cache"], c["cu_seqlens_q"], c["seq_lens"],
        c["block_table"], k=c["k"], v=c["v"], slot_mapping=c["slot_mapping"], out=c.get("out"))


def paged_gqa_call(g):
    return dict(query=torch.randn(1, 1, N * H, generator=g),
                key=torch.randn(1, 1, NKV * H, generator=g),
                value=torch.randn(1, 1, NKV * H, generator=g),
                key_cache=torch.zeros(2, BS, NKV, H), value_cache=torch.zeros(2, BS, NKV, H),
                seqlens_k=torch.tensor([4], dtype=torch.int32), total_sequence_length=5,
                block_table=torch.tensor([[0, 1]], dtype=torch.int32))


def run_paged_gqa(rt, call, **changes):
    return attnrt.paged_gqa(rt, num_heads=N, kv_num_heads=NKV, **dict(call, **changes))


@pytest.mark.parametrize("name, op_name", [("k_cache", "key_cache"), ("v_cache", "value_cache")])
def test_varlen_python_path_refuses_a_negative_view_cache(rt, name, op_name):
    """A negative view of a cache was replaced by resolve_neg()'s copy: the call succeeded, the new
    rows went into the copy, and the cache kept its stale rows."""
    call = varlen_call(torch.Generator().manual_seed(1))
    cache = call[name]
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=rf"input '{op_name}': expected a tensor the call can write, got a "
                             r"negative view"):
        run_varlen_python(rt, call, **{name: torch._neg_view(cache)})
    assert not cache.any()
    # The same cache, not a view: the rows are written.
    run_varlen_python(rt, call)
    assert call[name].any()


@pytest.mark.parametrize("name", ["key_cache", "value_cache"])
def test_paged_gqa_refuses_a_negative_view_cache(rt, name):
    call = paged_gqa_call(torch.Generator().manual_seed(2))
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=rf"input '{name}': expected a tensor the call can write, got a "
                             r"negative view"):
        run_paged_gqa(rt, call, **{name: torch._neg_view(call[name])})
    assert not call[name].any()


def test_gqa_refuses_a_negative_view_present_buffer_but_reads_a_negative_past(rt):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 1, N * H, generator=g)
    k, v = (torch.randn(1, 1, NKV * H, generator=g) for _ in range(2))
    past_k, past_v = (torch.randn(1, NKV, 4, H, generator=g) for _ in range(2))
    kw = dict(seqlens_k=[2], total_sequence_length=3, num_heads=N, kv_num_heads=NKV)
    want = attnrt.gqa(rt, q, k, v, -past_k, past_v, **kw)[0]
    assert torch.equal(attnrt.gqa(rt, q, k, v, torch._neg_view(past_k), past_v, **kw)[0], want)
    shared = torch._neg_view(past_k.clone())
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=r"output 'present_key': expected a tensor the call can write, got a "
                             r"negative view"):
        attnrt.gqa(rt, q, k, v, shared, past_v, present_key=shared, present_value=past_v, **kw)


def test_sparse_mla_encode_refuses_a_negative_view_output_and_reads_a_negative_kv():
    """sparse_mla_encode handed its tensors to DLPack unchecked: a negative view of kv was read as
    its stored values and one of out was written through its stored values."""
    g = torch.Generator().manual_seed(4)
    kv = torch.randn(2, 512, generator=g)
    want = attnrt.sparse_mla_encode(1, -kv)
    assert torch.equal(attnrt.sparse_mla_encode(1, torch._neg_view(kv)), want)
    out = torch.zeros(2, 608, dtype=torch.int8)
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=r"output 'out': expected a tensor the call can write, got a "
                             r"negative view"):
        attnrt.sparse_mla_encode(1, kv, out=torch._neg_view(out))
    assert not out.any()
    block = torch.zeros(4 * 584, dtype=torch.int8)
    with pytest.raises(attnrt.InvalidArgumentError, match=r"output 'block': .*negative view"):
        attnrt.sparse_mla_encode(2, kv, block=torch._neg_view(block))
    assert not block.any()


# ---- autograd -------------------------------------------------------------------------------------


def test_python_ops_refuse_inputs_that_require_grad_under_grad_mode(rt):
    """The result of an attnrt op has no grad_fn: backward completed with attention's gradient
    silently missing. Refused by name under grad mode; served under no_grad / inference_mode."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 1, N * H, generator=g)
    k, v = (torch.randn(1, 1, NKV * H, generator=g) for _ in range(2))
    kw = dict(seqlens_k=[0], total_sequence_length=1, num_heads=N, kv_num_heads=NKV)
    want = attnrt.gqa(rt, q, k, v, **kw)[0]
    for name in ("query", "value"):
        args = {"query": q, "key": k, "value": v}
        args[name] = args[name].clone().requires_grad_()
        with pytest.raises(attnrt.InvalidArgumentError,
                           match=rf"input '{name}': requires grad, but attnrt's ops have no "
                                 r"backward"):
            attnrt.gqa(rt, **args, **kw)
        with torch.no_grad():
            assert torch.equal(attnrt.gqa(rt, **args, **kw)[0], want)
        with torch.inference_mode():
            assert torch.equal(attnrt.gqa(rt, **args, **kw)[0], want)


def test_varlen_python_path_refuses_inputs_that_require_grad(rt):
    call = varlen_call(torch.Generator().manual_seed(6))
    for name, op_name in (("q", "query"), ("k", "key")):
        with pytest.raises(attnrt.InvalidArgumentError,
                           match=rf"input '{op_name}': requires grad"):
            run_varlen_python(rt, call, **{name: call[name].clone().requires_grad_()})
        assert not call["k_cache"].any()


@pytest.mark.parametrize("name, op_name", [("k_cache", "key_cache"), ("v_cache", "value_cache"),
                                           ("out", "output")])
def test_varlen_python_path_never_writes_a_tensor_that_requires_grad(rt, name, op_name):
    """Even under no_grad (where torch itself would let an in-place write through) the write would
    go past autograd's record of the tensor."""
    call = varlen_call(torch.Generator().manual_seed(7))
    call["out"] = torch.zeros(3, N, H)
    target = call[name].requires_grad_()
    kind = "output" if name == "out" else "input"
    for mode in (torch.enable_grad, torch.no_grad):
        with mode(), pytest.raises(attnrt.InvalidArgumentError,
                                   match=rf"{kind} '{op_name}': expected a tensor the call can "
                                         r"write, got one that requires grad"):
            run_varlen_python(rt, call)
        assert not target.detach().any()


@pytest.mark.parametrize("name, op_name", [("k_cache", "key_cache"), ("out", "output")])
def test_varlen_python_path_writes_an_inference_tensor_only_in_inference_mode(rt, name, op_name):
    """torch allows no in-place update of an inference tensor outside inference mode: the Python
    (DLPack) path refuses to write one there, as the C++ operators do, and writes it inside."""
    call = varlen_call(torch.Generator().manual_seed(9))
    with torch.inference_mode():
        call[name] = torch.zeros(call[name].shape if name != "out" else (3, N, H))
    kind = "output" if name == "out" else "input"
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=rf"{kind} '{op_name}': expected a tensor the call can write, got an "
                             r"inference tensor outside inference mode"):
        run_varlen_python(rt, call)
    assert not call[name].any()
    with torch.inference_mode():
        run_varlen_python(rt, call)
    assert call[name].any()


def test_paged_gqa_never_writes_a_cache_that_requires_grad(rt):
    call = paged_gqa_call(torch.Generator().manual_seed(8))
    cache = call["key_cache"].requires_grad_()
    with torch.no_grad(), pytest.raises(attnrt.InvalidArgumentError,
                                        match=r"input 'key_cache': expected a tensor the call "
                                              r"can write, got one that requires grad"):
        run_paged_gqa(rt, call)
    assert not cache.detach().any()


def test_torch_custom_ops_refuse_inputs_that_require_grad():
    """torch.ops.attnrt.gqa / paged_gqa / sparse_mla / paged_attention_varlen have no backward: an
    input that requires grad under grad mode is refused by name before anything runs (custom_op
    had run the op, writing the caches, and failed only at backward; the C++ operator completed
    backward with attention's gradient missing); under no_grad the call runs."""
    import attnrt.torch  # noqa: F401

    g = torch.Generator().manual_seed(9)
    c = paged_gqa_call(g)
    args = [c["query"], c["key"], c["value"], c["key_cache"], c["value_cache"], c["seqlens_k"], 5,
            c["block_table"], N, NKV]
    for i, name in ((0, "query"), (2, "value")):
        bad = list(args)
        bad[i] = bad[i].clone().requires_grad_()
        with pytest.raises(ValueError, match=rf"\b{name}'?: requires grad, but attnrt's ops have "
                                             r"no backward"):
            torch.ops.attnrt.paged_gqa(*bad)
        assert not c["key_cache"].any()
        with torch.no_grad():
            torch.ops.attnrt.paged_gqa(*bad)
        assert c["key_cache"].any()
        c["key_cache"].zero_()
    q = torch.randn(1, 1, N * H, generator=g).requires_grad_()
    kv = torch.randn(1, 1, NKV * H, generator=g)
    with pytest.raises(ValueError, match=r"\bquery'?: requires grad"):
        torch.ops.attnrt.gqa(q, kv, kv, torch.zeros(1, NKV, 1, H), torch.zeros(1, NKV, 1, H),
                             torch.tensor([0], dtype=torch.int32), 1, N, NKV)
    call = varlen_call(g)
    out = torch.zeros(3, N, H)
    for name in ("q", "k", "sinks"):
        kw = dict(call, out=out, sinks=torch.zeros(N))
        kw[name] = kw[name].clone().requires_grad_()
        with pytest.raises(ValueError, match=rf"\b{name}'?: requires grad, but attnrt's ops have "
                                             r"no backward"):
            torch.ops.attnrt.paged_attention_varlen(**kw)
        assert not out.any() and not call["k_cache"].any()
    with torch.inference_mode():
        torch.ops.attnrt.paged_attention_varlen(**dict(call, out=out,
                                                       q=call["q"].clone().requires_grad_()))
    assert out.any()


@pytest.mark.parametrize("name", ["k_cache", "v_cache", "out"])
def test_torch_varlen_operator_never_writes_a_tensor_that_requires_grad(name):
    import attnrt.torch  # noqa: F401

    call = dict(varlen_call(torch.Generator().manual_seed(11)), out=torch.zeros(3, N, H))
    call[name].requires_grad_()
    for mode in (torch.enable_grad, torch.no_grad):
        alias = {"k_cache": "key_cache", "v_cache": "value_cache", "out": "output"}[name]
        with mode(), pytest.raises(ValueError, match=rf"\b({name}|{alias})'?: expected a tensor "
                                                     r"the call can write, got one that requires "
                                                     r"grad"):
            torch.ops.attnrt.paged_attention_varlen(**call)
        assert not call[name].detach().any()


def test_numpy_arrays_are_unaffected(rt):
    """The checks are for torch tensors only: numpy pools are written in place as before."""
    g = np.random.default_rng(10)
    q = g.standard_normal((3, N, H), np.float32)
    k, v = (g.standard_normal((3, NKV, H), np.float32) for _ in range(2))
    k_cache, v_cache = np.zeros((4, BS, NKV, H), np.float32), np.zeros((4, BS, NKV, H), np.float32)
    attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, [0, 1, 3], [3, 6], [[0, 1], [2, 3]],
                                  k=k, v=v, slot_mapping=[2, 12, 13])
    assert k_cache[0, 2].any() and v_cache[3, 1].any()


def test_torch_varlen_operator_bumps_the_versions_of_what_it_writes():
    """The C++ operator writes out and, with k/v, the caches in place: their version counters move
    as for torch's in-place operators, so a graph that saved their old values fails at backward
    instead of computing a wrong gradient; an inference tensor is written only in inference mode
    (torch allows no in-place update of one outside it)."""
    from attnrt import _torch_lib

    if not _torch_lib.load():
        pytest.skip(_torch_lib.why_not_loaded())
    call = dict(varlen_call(torch.Generator().manual_seed(12)), out=torch.ones(3, N, H))
    versions = {name: call[name]._version for name in ("out", "k_cache", "v_cache")}
    x = torch.ones(3, N, H, requires_grad=True)
    y = (x * call["out"]).sum()  # saves out for x's gradient
    torch.ops.attnrt.paged_attention_varlen(**call)
    for name, version in versions.items():
        assert call[name]._version > version, name
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with torch.inference_mode():
        out = torch.zeros(3, N, H)
    with pytest.raises(ValueError, match=r"out: expected a tensor the call can write, got an "
                                         r"inference tensor outside inference mode"):
        torch.ops.attnrt.paged_attention_varlen(**dict(call, out=out))
    assert not out.any()
    with torch.inference_mode():
        torch.ops.attnrt.paged_attention_varlen(**dict(call, out=out))
    assert out.any()
