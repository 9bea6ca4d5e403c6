"""torch.ops.attnrt.flash_mla_with_kvcache (vLLM 0.32's DeepSeek-V4 CPU kernel schema, C++) and the
Python adapter's path (attnrt._vllm_deepseek_v4.flash_mla_with_kvcache_python) on inputs a caller
can build but vLLM does not pass: negative views, slot tensors whose storage was shrunk, an `out`
that overlaps an input, `out` under autograd and inference mode, scales at float32's edges. Both
paths must give the same result or the same refusal (by the schema's argument names, nothing
written); results are checked against the independent float64 reference (sparse_mla_reference.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import attnrt
from sparse_mla_reference import sparse_mla_reference
from test_sparse_mla_slots import SEED, _operator, as_np, assert_cann_close, dsv4_call

torch = pytest.importorskip("torch")

ATTRS = dict(quant_mode=2, topk_value_mode=3, layout_q="TND", layout_kv="PA_BBND",
             return_softmax_lse=1)


def _reference(args, ref_in, scale=None):
    topk = args["compressed_slots"].shape[1]
    want, _ = sparse_mla_reference(ref_in, {**ATTRS, "cmp_ratio": 4 if topk else 1,
                                            "softmax_scale": args["scale"] if scale is None
                                            else scale})
    return want


def _both(args, fresh_out=True):
    """Runs the C++ operator and the Python path on `args` (each on its own out filled with 7
    when `fresh_out`, else on args' out itself); returns [(out, error message or None)]."""
    from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

    results = []
    for path in ("operator", "python"):
        out = torch.full_like(args["out"], 7.0) if fresh_out else args["out"]
        try:
            if path == "operator":
                torch.ops.attnrt.flash_mla_with_kvcache(**{**args, "out": out})
            else:
                with attnrt.Runtime(num_threads=1) as own:
                    flash_mla_with_kvcache_python(**{**args, "out": out}, runtime=own)
            results.append((out, None))
        except (ValueError, attnrt.Error) as e:
            message = e.message if isinstance(e, attnrt.Error) else str(e).split(": ", 1)[1]
            results.append((out, message))
    return results


@pytest.mark.parametrize("name", ["attn_sink", "window_slots", "compressed_slots", "q"])
def test_negative_views_of_read_inputs_are_read_as_their_values(name):
    """torch._neg_view(-x) holds x's values: both paths read them (the operator used to read the
    stored bytes of attn_sink, a wrong result, and to refuse slot views naming negated ids)."""
    _operator()
    args, ref_in = dsv4_call(SEED + 2000, 4, 64, 3)
    args[name] = torch._neg_view(-args[name])
    want = _reference(args, ref_in)
    (op_out, op_err), (py_out, py_err) = _both(args)
    assert op_err is None and py_err is None, (op_err, py_err)
    assert_cann_close(as_np(op_out), want, "operator out")
    assert torch.equal(op_out.view(torch.int16), py_out.view(torch.int16))


@pytest.mark.parametrize("name", ["window_cache_2d", "compressed_cache_2d"])
def test_negative_views_of_caches_are_refused_by_name(name):
    """A cache is read in place: a negative view of one (values 256 - byte) is refused by name on
    both paths (the operator read its stored bytes, the Python path copied the whole cache)."""
    _operator()
    args, _ = dsv4_call(SEED + 2100, 4, 64, 3)
    args[name] = torch._neg_view(args[name])
    for out, message in _both(args):
        assert message is not None and message.startswith(
            f"{name}: expected a cache the call reads in place, got a negative view"), message
        assert (out == 7.0).all()


@pytest.mark.parametrize("name", ["window_slots", "compressed_slots"])
def test_slots_past_their_storage_are_refused_by_name(name):
    """Slot ids whose storage was shrunk under the view: refused by name before any read (the
    operator read past the allocation and reported whatever it found there; the Python path
    raised torch's own error)."""
    _operator()
    args, _ = dsv4_call(SEED + 2200, 4, 64, 3)
    slots = args[name]
    buf = torch.empty(slots.numel() * 8, dtype=torch.uint8)
    held = buf.view(torch.int64).view(slots.shape)
    held.copy_(slots)
    buf.untyped_storage().resize_(slots.numel() * 8 - 1)
    args[name] = held
    for out, message in _both(args):
        assert message is not None and message.startswith(f"{name}: its elements"), message
        assert "reach past its storage" in message, message
        assert (out == 7.0).all()


def _overlapping(args, name):
    """args with `out` placed over `name`'s first bytes (a buffer big enough for both)."""
    x = args[name]
    nbytes = args["out"].numel() * 2
    buf = torch.zeros(max(nbytes, x.numel() * x.element_size()) // x.element_size() + 8,
                      dtype=x.dtype)
    held = buf[:x.numel()].view(x.shape)
    held.copy_(x)
    out = buf.view(torch.bfloat16)[:args["out"].numel()].view(args["out"].shape)
    return {**args, name: held, "out": out}, held


@pytest.mark.parametrize("name", ["window_slots", "compressed_slots", "attn_sink", "q"])
def test_out_overlapping_an_input_is_refused_by_name(name):
    """out over the memory of an input: refused naming both arguments by the schema's names, the
    input left as it was (the operator wrote over the slot ids; the sparse MLA op named its own
    inputs: attn_out, sinks)."""
    _operator()
    args, _ = dsv4_call(SEED + 2300, 4, 64, 3)
    from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

    for path in ("operator", "python"):
        call, held = _overlapping(args, name)
        before = held.clone()
        with pytest.raises((ValueError, attnrt.Error)) as e:
            if path == "operator":
                torch.ops.attnrt.flash_mla_with_kvcache(**call)
            else:
                with attnrt.Runtime(num_threads=1) as own:
                    flash_mla_with_kvcache_python(**call, runtime=own)
        assert f"out: shares memory with {name}; out must not overlap an input" in str(e.value), \
            (path, str(e.value))
        assert torch.equal(held, before), path


def test_out_overlapping_a_cache_page_is_refused_by_name():
    _operator()
    args, _ = dsv4_call(SEED + 2400, 4, 64, 3)
    cache = args["window_cache_2d"]
    raw = torch.empty(0, dtype=torch.uint8).set_(cache.untyped_storage())
    start = cache.storage_offset()
    out = raw[start:start + args["out"].numel() * 2].view(torch.bfloat16).view(args["out"].shape)
    for _, message in _both({**args, "out": out}, fresh_out=False):
        assert message == "out: shares memory with window_cache_2d; out must not overlap an " \
                          "input", message


def test_out_written_bumps_its_version():
    """The op mutates out (Tensor(a!)): autograd sees it, so a graph that saved out's old values
    fails at backward instead of computing a wrong gradient silently."""
    _operator()
    args, _ = dsv4_call(SEED + 2500, 4, 64, 3)
    from attnrt._vllm_deepseek_v4 import flash_mla_with_kvcache_python

    for path in ("operator", "python"):
        out = torch.ones_like(args["out"])
        x = torch.ones(out.shape, dtype=torch.bfloat16, requires_grad=True)
        y = (x * out).sum()  # saves out for the gradient of x
        version = out._version
        if path == "operator":
            torch.ops.attnrt.flash_mla_with_kvcache(**{**args, "out": out})
        else:
            with attnrt.Runtime(num_threads=1) as own:
                flash_mla_with_kvcache_python(**{**args, "out": out}, runtime=own)
        assert out._version > version, path
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_inference_tensor_out_outside_inference_mode_is_refused_by_name():
    _operator()
    args, _ = dsv4_call(SEED + 2600, 4, 64, 3)
    with torch.inference_mode():
        out = torch.full_like(args["out"], 7.0)
    for _, message in _both({**args, "out": out}, fresh_out=False):
        assert message is not None and message.startswith(
            "out: expected a tensor the call can write, got an inference tensor outside "
            "inference mode"), message
    assert (out == 7.0).all()
    with torch.inference_mode():  # inside inference mode it is written
        for written, message in _both({**args, "out": out}, fresh_out=False):
            assert message is None, message
        assert not (out == 7.0).all()


@pytest.mark.parametrize("scale, reference_scale", [(0.0, 0.0), (1e-50, 0.0), (-0.05, -0.05)])
def test_scales_that_round_to_zero_or_are_negative_are_used_as_float32(scale, reference_scale):
    """The kernel's scale is float32: a scale that rounds to 0 weighs the keys uniformly on both
    paths (the Python path refused 1e-50, the operator took it)."""
    _operator()
    args, ref_in = dsv4_call(SEED + 2700, 4, 64, 3)
    args["scale"] = scale
    want = _reference(args, ref_in, reference_scale)
    (op_out, op_err), (py_out, py_err) = _both(args)
    assert op_err is None and py_err is None, (op_err, py_err)
    assert_cann_close(as_np(op_out), want, "out")
    assert torch.equal(op_out.view(torch.int16), py_out.view(torch.int16))


@pytest.mark.parametrize("scale", [float("nan"), float("-inf"), 1e39, -3.5e38])
def test_scales_past_float32_are_refused_alike(scale):
    _operator()
    args, _ = dsv4_call(SEED + 2800, 4, 64, 3)
    args["scale"] = scale
    for out, message in _both(args):
        assert message == f"scale: expected a finite float32, got {scale}", message
        assert (out == 7.0).all()


@pytest.mark.parametrize("change", [
    lambda a: dict(attn_sink=a["attn_sink"].clone().requires_grad_()),
    lambda a: dict(q=a["q"].clone().requires_grad_()),
    lambda a: dict(out=a["out"].clone().requires_grad_()),
    lambda a: dict(out=torch._neg_view(a["out"])),
    lambda a: dict(window_block_size=2**62),
    lambda a: dict(q=_shrunk(a["q"])),
    lambda a: dict(attn_sink=_shrunk(a["attn_sink"])),
    lambda a: dict(out=_shrunk(a["out"])),
])
def test_both_paths_refuse_with_the_same_message(change):
    """docs/python.md: the operator makes the adapter's checks with the same messages (the Python
    path named these inputs as the sparse MLA op does: input 'sinks', output 'attn_out')."""
    _operator()
    args, _ = dsv4_call(SEED + 2900, 4, 64, 3)
    args.update(change(args))
    (_, op_err), (_, py_err) = _both(args, fresh_out=False)
    assert op_err is not None and op_err == py_err, (op_err, py_err)


def _shrunk(t):
    """t's values in a storage one byte short of its last element."""
    nbytes = t.numel() * t.element_size()
    buf = torch.empty(nbytes, dtype=torch.uint8)
    held = buf.view(t.dtype).view(t.shape)
    held.copy_(t)
    buf.untyped_storage().resize_(nbytes - 1)
    return held
