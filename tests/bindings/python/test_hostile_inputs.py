"""Hostile inputs to the Python API: every one raises an attnrt.Error naming the offending argument
(never a bare TypeError / OverflowError from inside the package), and nothing is written into
memory the caller marked read-only."""
from __future__ import annotations

import math

import numpy as np
import pytest

import attnrt

N, NKV, H = 4, 2, 16


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


def decode_inputs():
    return (np.zeros((1, 1, N * H), np.float32), np.zeros((1, 1, NKV * H), np.float32),
            np.zeros((1, 1, NKV * H), np.float32))


@pytest.mark.parametrize("attributes, name", [
    ({"scale": None}, "scale"), ({"scale": [1.0]}, "scale"), ({"causal": "yes"}, "causal"),
    ({"local_window_size": 2**40}, "local_window_size"), ({"softcap": "1"}, "softcap"),
    ({"do_rotary": 1.5}, "do_rotary")])
def test_bad_attribute_values_name_the_attribute(rt, attributes, name):
    q, k, v = decode_inputs()
    with pytest.raises(attnrt.InvalidArgumentError, match=name):
        attnrt.gqa(rt, q, k, v, seqlens_k=[0], total_sequence_length=1, num_heads=N,
                   kv_num_heads=NKV, **attributes)


def test_bad_host_integers_and_arrays_name_the_input(rt):
    q, k, v = decode_inputs()
    with pytest.raises(attnrt.InvalidArgumentError, match="seqlens_k"):
        attnrt.gqa(rt, q, k, v, seqlens_k=[2**40], total_sequence_length=1, num_heads=N,
                   kv_num_heads=NKV)
    with pytest.raises(attnrt.InvalidArgumentError, match="GroupQueryAttention outputs"):
        attnrt.gqa(rt, bytearray(256), k, v, seqlens_k=[0], total_sequence_length=1,
                   num_heads=N, kv_num_heads=NKV)


@pytest.mark.parametrize("call, name", [
    (lambda: attnrt.BlockPool(None, 16), "num_blocks"),
    (lambda: attnrt.BlockPool(2**64, 16), "num_blocks"),
    (lambda: attnrt.BlockPool(4.5, 16), "num_blocks"),
    (lambda: attnrt.BlockPool(4, 16).block_table(0), "sequences"),
    (lambda: attnrt.BlockPool(4, 16).block_table([0], -1), "max_blocks_per_seq"),
    (lambda: attnrt.BlockPool(4, 16).append(0, 1.5), "num_tokens"),
    (lambda: attnrt.sparse_mla_encode(1, np.zeros((1, 512), np.float32), slot=3), "slot"),
    (lambda: attnrt.sparse_mla_encode(True, np.zeros((1, 512), np.float32)), "quant_mode")])
def test_bad_pool_and_encoder_arguments_raise_attnrt_errors(call, name):
    with pytest.raises(attnrt.Error, match=name):
        call()


def test_paged_pools_must_be_writable(rt):
    q, k, v = decode_inputs()
    pools = [np.zeros((8, 4, NKV, H), np.float32) for _ in range(2)]
    for pool in pools:
        pool.flags.writeable = False
    with pytest.raises(attnrt.InvalidArgumentError, match="key_cache: a writable buffer"):
        attnrt.paged_gqa(rt, q, k, v, *pools, np.array([5], np.int32), 6,
                         np.array([[0, 1]], np.int32), num_heads=N, kv_num_heads=NKV)
    assert not pools[0].any() and not pools[1].any()


def test_bind_rejects_tensors_of_another_signature(rt):
    q, k, v = decode_inputs()
    op = rt.gqa_op(N, NKV)
    inputs = [q, k, v, None, None, np.array([0], np.int32), np.array([1], np.int32)]
    outputs = op.allocate_outputs(inputs)
    plan = op.plan(inputs, outputs)
    other = [q.astype(np.float16), k.astype(np.float16), v.astype(np.float16)] + inputs[3:]
    with pytest.raises(attnrt.PlanMismatchError, match="bind"):
        plan.bind(other, op.allocate_outputs(other))


def test_meta_tensors_mixed_with_cpu_tensors_are_an_error():
    torch = pytest.importorskip("torch")
    import attnrt.torch  # noqa: F401
    with pytest.raises(RuntimeError, match="meta"):
        torch.ops.attnrt.gqa(torch.zeros(1, 1, N * H), torch.zeros(1, 1, NKV * H),
                             torch.zeros(1, 1, NKV * H), torch.empty(1, NKV, 8, H, device="meta"),
                             torch.zeros(1, NKV, 8, H), torch.tensor([3], dtype=torch.int32), 4,
                             N, NKV)


@pytest.mark.parametrize("name", ["scale", "softcap"])
@pytest.mark.parametrize("value", [1e-50, -1e-46, 2.0**-150])
def test_float_attributes_that_round_to_zero_are_refused(rt, name, value):
    """The float attributes are float32, where 0 means the default (scale 1/sqrt(H), no softcap):
    a nonzero value that rounds to 0 was silently read as that; 2^-150 + one step is the smallest
    one float32 keeps (as 2^-149)."""
    q, k, v = decode_inputs()
    with pytest.raises(attnrt.InvalidArgumentError, match=rf"{name}: .* rounds to 0 in float32"):
        attnrt.gqa(rt, q, k, v, seqlens_k=[0], total_sequence_length=1, num_heads=N,
                   kv_num_heads=NKV, **{name: value})
    kept = math.nextafter(2.0**-150, 1.0)
    attnrt.gqa(rt, q, k, v, seqlens_k=[0], total_sequence_length=1, num_heads=N,
               kv_num_heads=NKV, **{name: kept})


@pytest.mark.parametrize("which, kind", [("query", "input"), ("output", "output")])
def test_torch_tensor_past_its_storage_is_refused(rt, which, kind):
    """A torch tensor whose storage was resized under it (untyped_storage().resize_) keeps its
    shape, and DLPack carries no allocation size: the kernel had read or written past the
    allocation (heap corruption)."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x).clone() for x in decode_inputs())
    out = torch.zeros_like(q)
    victim = q if which == "query" else out
    victim.untyped_storage().resize_(4)
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=rf"{kind} '{which}': its elements \(shape \[1, 1, {N * H}\].*\) "
                             r"reach past its storage of 4 bytes"):
        attnrt.gqa(rt, q, k, v, seqlens_k=[0], total_sequence_length=1, num_heads=N,
                   kv_num_heads=NKV, output=out)


def test_torch_negative_views_read_as_their_values_and_are_refused_as_outputs(rt):
    """DLPack exports a negative view (torch._neg_view) as its stored values: a query read as -q
    gave the result of q, and an output came back negated."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    q = torch.randn((1, 2, N * H), generator=g)  # a prompt of two tokens: the query matters
    k, v = (torch.randn((1, 2, NKV * H), generator=g) for _ in range(2))
    kw = dict(seqlens_k=[1], total_sequence_length=2, num_heads=N, kv_num_heads=NKV)
    want = attnrt.gqa(rt, -q, k, v, **kw)[0]
    assert not torch.equal(want, attnrt.gqa(rt, q, k, v, **kw)[0])
    assert torch.equal(attnrt.gqa(rt, torch._neg_view(q), k, v, **kw)[0], want)
    out = torch._neg_view(torch.zeros_like(q))
    with pytest.raises(attnrt.InvalidArgumentError,
                       match=r"output 'output': expected a tensor the call can write, got a "
                             r"negative view"):
        attnrt.gqa(rt, q, k, v, output=out, **kw)
