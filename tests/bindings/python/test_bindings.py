"""The Python binding: lifetimes, data from list/explain, zero-copy inputs and outputs, errors."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import attnrt
from attnrt import attnrt_c
from gqa_numpy import bnsh, reference

N, NKV, H = 4, 2, 16


@pytest.fixture
def rt():
    with attnrt.Runtime() as runtime:
        yield runtime


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def prompt(rng, b=1, s=8):
    q = rng.standard_normal((b, s, N * H), dtype=np.float32)
    k = rng.standard_normal((b, s, NKV * H), dtype=np.float32)
    v = rng.standard_normal((b, s, NKV * H), dtype=np.float32)
    return q, k, v


def test_version_and_abi():
    assert attnrt.version() == attnrt.__version__
    assert attnrt.abi_version() == (attnrt_c.ATTNRT_ABI_VERSION_MAJOR,
                                    attnrt_c.ATTNRT_ABI_VERSION_MINOR)


def test_list_returns_plain_data(rt):
    listing = rt.list()
    assert listing["num_threads"] >= 1
    assert listing["diagnostics"] == []
    plugin = next(p for p in listing["plugins"] if p["name"] == "cpu_x86")
    assert plugin["available"] is True and plugin["abi"][0] == 1
    assert isinstance(plugin["facts"], dict) and "isa" in plugin["facts"]
    names = [k["name"] for k in plugin["kernels"]]
    assert "cpu_x86.gqa.naive.scalar" in names
    priorities = [k["priority"] for k in plugin["kernels"]]
    assert priorities == sorted(priorities, reverse=True)
    assert "cpu_x86.paged_gqa.flash.scalar" in names
    assert all(k["op"] in ("gqa", "paged_gqa", "paged_gqa_varlen") and k["device"] == "cpu"
               for k in plugin["kernels"])


def test_diagnostics_name_skipped_files(tmp_path):
    (tmp_path / "libattnrt_broken.so").write_text("not a library")
    with attnrt.Runtime(tmp_path, search_default_paths=False) as runtime:
        assert runtime.plugins() == []
        (diagnostic,) = runtime.diagnostics()
        assert diagnostic["path"].endswith("libattnrt_broken.so") and diagnostic["message"]


def test_first_prompt_matches_reference(rt, rng):
    q, k, v = prompt(rng, b=2)
    out, present_k, present_v = attnrt.gqa(rt, query=q, key=k, value=v, seqlens_k=[7, 7],
                                           total_sequence_length=8, num_heads=N, kv_num_heads=NKV)
    assert out.shape == (2, 8, N * H) and out.dtype == np.float32
    assert present_k.shape == (2, NKV, 8, H)
    np.testing.assert_array_equal(present_k, bnsh(k, NKV))
    np.testing.assert_array_equal(present_v, bnsh(v, NKV))
    expected = reference(q, present_k, present_v, [7, 7], N, NKV)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_decode_on_shared_buffer_plans_once(rt, rng):
    capacity, steps = 32, 6
    cache_k = np.zeros((1, NKV, capacity, H), np.float32)
    cache_v = np.zeros_like(cache_k)
    out = np.empty((1, 8, N * H), np.float32)
    q, k, v = prompt(rng)
    op = rt.gqa_op(N, NKV)
    shared = {"present_key": cache_k, "present_value": cache_v}
    op.run({"query": q, "key": k, "value": v, "past_key": cache_k, "past_value": cache_v,
            "seqlens_k": [7], "total_sequence_length": 8}, {"output": out, **shared})
    np.testing.assert_allclose(out, reference(q, cache_k, cache_v, [7], N, NKV), rtol=1e-4,
                               atol=1e-5)
    step_out = np.empty((1, 1, N * H), np.float32)
    for step in range(steps):
        total = 9 + step
        q1, k1, v1 = prompt(rng, s=1)
        inputs = {"query": q1, "key": k1, "value": v1, "past_key": cache_k, "past_value": cache_v,
                  "seqlens_k": np.array([total - 1], np.int32),
                  "total_sequence_length": np.array([total], np.int32)}
        with op.plan(inputs, {"output": step_out, **shared}) as plan:
            assert plan.kernel.startswith("cpu_x86.gqa.")
            plan.run(inputs, {"output": step_out, **shared})
        np.testing.assert_array_equal(cache_k[0, :, total - 1], bnsh(k1, NKV)[0, :, 0])
        np.testing.assert_allclose(step_out, reference(q1, cache_k, cache_v, [total - 1], N, NKV),
                                   rtol=1e-4, atol=1e-5)
    stats = op.plan_cache_stats
    assert stats["misses"] == 2 and stats["hits"] == steps - 1  # prompt + first decode planned


def test_outputs_are_written_in_place(rt, rng):
    q, k, v = prompt(rng)
    out = np.full((1, 8, N * H), np.nan, np.float32)
    pk = np.full((1, NKV, 8, H), np.nan, np.float32)
    pv = np.full_like(pk, np.nan)
    result = attnrt.gqa(rt, query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8,
                        num_heads=N, kv_num_heads=NKV, output=out, present_key=pk,
                        present_value=pv)
    assert result[0] is out and result[1] is pk and result[2] is pv
    assert not np.isnan(out).any()
    # Inputs are read where they are: changing the array changes the next result.
    before = out.copy()
    q *= 2
    attnrt.gqa(rt, query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8, num_heads=N,
               kv_num_heads=NKV, output=out, present_key=pk, present_value=pv)
    assert not np.array_equal(before, out)


class LegacyDLPack:
    """Only __dlpack__ without max_version: numpy 1.24's "dltensor" capsule."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class VersionedDLPack(LegacyDLPack):
    """__dlpack__(max_version=...): a "dltensor_versioned" capsule (DLPack >= 1.0)."""

    calls: list = []

    def __dlpack__(self, stream=None, max_version=None):
        capsule = self.array.__dlpack__(max_version=max_version)
        VersionedDLPack.calls.append(max_version)
        return capsule


@pytest.mark.parametrize("wrap", [memoryview, LegacyDLPack, VersionedDLPack],
                         ids=["buffer", "dltensor", "dltensor_versioned"])
def test_buffer_and_dlpack_inputs_match_numpy(rt, rng, wrap):
    q, k, v = prompt(rng)
    expected, _, _ = attnrt.gqa(rt, query=q, key=k, value=v, seqlens_k=[7],
                                total_sequence_length=8, num_heads=N, kv_num_heads=NKV)
    out = np.empty_like(expected)
    pk = np.empty((1, NKV, 8, H), np.float32)
    pv = np.empty_like(pk)
    attnrt.gqa(rt, query=wrap(q), key=wrap(k), value=wrap(v), seqlens_k=[7],
               total_sequence_length=8, num_heads=N, kv_num_heads=NKV, output=wrap(out),
               present_key=wrap(pk), present_value=wrap(pv))
    np.testing.assert_array_equal(out, expected)
    if wrap is VersionedDLPack:
        assert (1, 0) in VersionedDLPack.calls
        capsule = q.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(capsule)


def test_non_contiguous_input_is_rejected_with_its_name(rt, rng):
    q, k, v = prompt(rng)
    wide = np.repeat(q, 2, axis=2)[:, :, ::2]  # right shape, non-compact strides
    assert not wide.flags.c_contiguous
    with pytest.raises(attnrt.InvalidArgumentError) as info:
        attnrt.gqa(rt, query=wide, key=k, value=v, seqlens_k=[7], total_sequence_length=8,
                   num_heads=N, kv_num_heads=NKV)
    assert "query" in info.value.message


def test_read_only_output_is_rejected(rt, rng):
    q, k, v = prompt(rng)
    out = np.empty((1, 8, N * H), np.float32)
    out.flags.writeable = False
    with pytest.raises(attnrt.InvalidArgumentError, match="output"):
        attnrt.gqa(rt, query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8,
                   num_heads=N, kv_num_heads=NKV, output=out)


def test_wrong_input_type_is_rejected(rt):
    op = rt.gqa_op(N, NKV)
    with pytest.raises(attnrt.InvalidArgumentError, match="query: expected a numpy array"):
        op.plan({"query": object()}, {})


def test_status_codes_map_to_error_classes(rt, rng):
    with pytest.raises(attnrt.InvalidArgumentError) as info:
        rt.gqa_op(num_heads=6, kv_num_heads=4)
    assert isinstance(info.value, ValueError) and isinstance(info.value, attnrt.Error)
    assert info.value.status == "ATTNRT_ERROR_INVALID_ARGUMENT" and info.value.code == 1
    assert "kv_num_heads" in info.value.message and str(info.value).startswith("ATTNRT_ERROR_")

    q, k, v = prompt(rng)
    op = rt.gqa_op(N, NKV)
    outputs = op.output_shapes({"query": q, "key": k, "total_sequence_length": 8})
    outs = {name: np.empty(shape, dtype) for name, (shape, dtype) in outputs.items()}
    inputs = {"query": q, "key": k, "value": v, "seqlens_k": [7], "total_sequence_length": 8}
    plan = op.plan(inputs, outs)
    q2, k2, v2 = prompt(rng, s=4)
    with pytest.raises(attnrt.PlanMismatchError):
        plan.run({"query": q2, "key": k2, "value": v2, "seqlens_k": [3],
                  "total_sequence_length": 4}, outs)
    with pytest.raises(attnrt.InvalidArgumentError, match="seqlens_k"):
        plan.run({**inputs, "seqlens_k": [70]}, outs)

    with attnrt.Runtime(kernel="no-such-kernel*") as pinned:
        with pytest.raises(attnrt.UnsupportedError) as info:
            pinned.gqa_op(N, NKV).plan(inputs, outs)
        assert "cpu_x86.gqa.naive.scalar" in info.value.message

    raw = attnrt_c.RawPluginInfo()
    with pytest.raises(attnrt.NotFoundError):
        rt._h().plugin_info(99, raw)


def test_unknown_names_are_rejected(rt):
    with pytest.raises(attnrt.InvalidArgumentError, match="unknown GroupQueryAttention attribute"):
        rt.gqa_op(N, NKV, num_kv_heads=2)
    with pytest.raises(attnrt.InvalidArgumentError, match="unknown input 'qeury'"):
        rt.gqa_op(N, NKV).plan({"qeury": np.zeros(1)}, {})


def test_attributes_take_onnx_runtime_values(rt):
    op = rt.gqa_op(N, NKV, k_quant_type="PER_TENSOR", v_quant_type="PER_TENSOR",
                   kv_cache_bit_width=8, softcap=30.0)
    assert op.attributes["k_quant_type"] == attnrt_c.ATTNRT_GQA_QUANT_PER_TENSOR
    assert op.attributes["softcap"] == 30.0 and op.attributes["local_window_size"] == -1


def test_explain_ranks_every_kernel(rt, rng):
    q, k, v = prompt(rng)
    op = rt.gqa_op(N, NKV)
    candidates = op.explain({"query": q, "key": k, "value": v, "seqlens_k": [7],
                             "total_sequence_length": 8})
    assert [c["status"] for c in candidates].count("selected") == 1
    # Kernels of another device (the CUDA plugins) may rank above the CPU kernels, and kernels of
    # bfloat16 problems only (cpu_x86's amx kernels), which decline this float32 one saying so, or,
    # on a CPU without AMX, decline every problem naming the features this CPU lacks.
    first = next(i for i, c in enumerate(candidates) if c["status"] == "selected")
    assert candidates[first]["reason"] == ""
    assert all(c["status"] in ("unavailable", "wrong-device")
               or (c["status"] == "declined"
                   and ("bfloat16" in c["reason"] or "this CPU/OS provides" in c["reason"]))
               for c in candidates[:first]), candidates[:first]
    with attnrt.Runtime(disable="*avx2*") as runtime:
        candidates = runtime.gqa_op(N, NKV).explain(
            {"query": q, "key": k, "value": v, "seqlens_k": [7], "total_sequence_length": 8})
        assert all(c["status"] == "disabled" for c in candidates if "avx2" in c["kernel"])


def test_closed_handles_raise(rng):
    runtime = attnrt.Runtime()
    op = runtime.gqa_op(N, NKV)
    runtime.close()
    runtime.close()
    with pytest.raises(attnrt.InvalidArgumentError, match="runtime is closed"):
        runtime.list()
    q, k, v = prompt(rng)
    out, _, _ = op(query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8)
    assert out.shape == (1, 8, N * H)  # the op outlives its runtime handle
    op.close()
    with pytest.raises(attnrt.InvalidArgumentError, match="op is closed"):
        op.plan({}, {})


def test_gil_is_released_while_a_kernel_runs(rng):
    # One long decode-free prompt with the scalar kernel on one thread: the main thread must make
    # progress meanwhile.
    with attnrt.Runtime(kernel="cpu_x86.gqa.naive.scalar", num_threads=1) as runtime:
        s = 768
        q = rng.standard_normal((1, s, 8 * 64), dtype=np.float32)
        k = rng.standard_normal((1, s, 2 * 64), dtype=np.float32)
        op = runtime.gqa_op(8, 2)
        inputs = {"query": q, "key": k, "value": k, "seqlens_k": [s - 1],
                  "total_sequence_length": s}
        shapes = op.output_shapes(inputs)
        outputs = {n: np.empty(shape, dtype) for n, (shape, dtype) in shapes.items()}
        started = time.perf_counter()
        op.run(inputs, outputs)
        serial = time.perf_counter() - started

        worker = threading.Thread(target=op.run, args=(inputs, outputs))
        ticks = 0
        worker.start()
        started = time.perf_counter()
        while worker.is_alive():
            ticks += 1
            time.sleep(0.001)
        worker.join()
        print(f"kernel {serial * 1e3:.0f} ms; main thread ran {ticks} times meanwhile")
        assert ticks >= max(3, int(serial * 1000 * 0.2))


def test_sliding_window_cache_outputs_keep_the_ring_length(rt, rng):
    # A window-sized ring cache holds P rows whatever the total length, so gqa() must allocate
    # present with P rows (max(T, P) would be rejected by the core's shape validation).
    capacity, total = 8, 20
    q1, k1, v1 = prompt(rng, s=1)
    past_k = rng.standard_normal((1, NKV, capacity, H), dtype=np.float32)
    past_v = rng.standard_normal((1, NKV, capacity, H), dtype=np.float32)
    out, present_k, present_v = attnrt.gqa(
        rt, query=q1, key=k1, value=v1, past_key=past_k, past_value=past_v,
        seqlens_k=[total - 1], total_sequence_length=total, num_heads=N, kv_num_heads=NKV,
        local_window_size=4, sliding_window_cache=1)
    assert present_k.shape == present_v.shape == (1, NKV, capacity, H)
    assert np.isfinite(out).all()
