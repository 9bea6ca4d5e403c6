"""libattnrt_onnxruntime.so in onnxruntime sessions (docs/onnxruntime.md): the parity suite's
GroupQueryAttention cases through ONNX Runtime's own kernel and through the library, refusals,
shared buffers, several sessions and threads.

Needs the library (built with ONNX Runtime's headers: scripts/setup-onnxruntime-headers.sh); skipped
without it unless ATTNRT_REQUIRE_ONNXRUNTIME_OPS=1 (scripts/test.sh sets it).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import attnrt_runner  # noqa: F401  (puts the build's attnrt package on sys.path)
from attnrt_runner import run_attnrt
from conftest import suite_seed
from gqa_cases import MODELS, build_cycling_case, build_model_prompt, model_decode_feeds
from gqa_model import INPUT_NAMES, build_model, run_ort
from test_gqa_parity import CYCLING, compare

import attnrt.onnxruntime as attnrt_ort  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
try:
    LIBRARY = attnrt_ort.library_path()
except FileNotFoundError as e:
    if os.environ.get("ATTNRT_REQUIRE_ONNXRUNTIME_OPS") == "1":
        raise
    pytest.skip(str(e), allow_module_level=True)

_runs = ctypes.CDLL(LIBRARY).attnrt_onnxruntime_runs
_runs.restype = ctypes.c_uint64
_sessions: dict[tuple, ort.InferenceSession] = {}


def library_options(config: dict | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    attnrt_ort.register(options)
    return options


def library_session(attrs: dict, feeds: dict) -> ort.InferenceSession:
    types = {name: feeds[name].dtype for name in INPUT_NAMES if name in feeds}
    key = (json.dumps(attrs, sort_keys=True), tuple((n, str(t)) for n, t in types.items()))
    if key not in _sessions:
        _sessions[key] = ort.InferenceSession(build_model(attrs, types).SerializeToString(),
                                              library_options(),
                                              providers=["CPUExecutionProvider"])
    return _sessions[key]


def run_library(attrs: dict, feeds: dict) -> dict[str, np.ndarray]:
    """Runs one case through the library; checks that the library served exactly this run."""
    session = library_session(attrs, feeds)
    names = [o.name for o in session.get_outputs()]
    before = _runs()
    outputs = dict(zip(names, session.run(names, feeds)))
    assert _runs() == before + 1, "the library's GroupQueryAttention did not run"
    return outputs


def check_through_ort(case, config: str, error_table) -> dict[str, np.ndarray]:
    """Built-in kernel vs the library within the suite's tolerances; the library's outputs equal
    attnrt's direct run (same kernel, same inputs). Returns the built-in's outputs."""
    theirs = run_ort(case.attrs, case.feeds)
    ours = run_library(case.attrs, case.feeds)
    direct, kernel = run_attnrt(case.attrs, case.feeds)
    where = (f"[ATTNRT_TEST_SEED={suite_seed()}] {config} through onnxruntime, kernel {kernel}, "
             f"attributes {json.dumps(case.attrs)}, T_b {case.valid.tolist()}")
    assert set(ours) == set(theirs), f"{where}: outputs {sorted(ours)} vs {sorted(theirs)}"
    B, S = case.feeds["query"].shape[:2]
    rows = np.ones((B, S), bool)
    if case.path_dependent_rows and ".flash." not in kernel:  # ORT's default path is flash here
        rows = np.arange(S)[None, :] < case.valid[:, None]
    masks = {"output": rows[:, :, None], "present_key": True, "present_value": True}
    if "output_qk" in theirs:
        cols = np.arange(theirs["output_qk"].shape[3])[None, :] < case.valid[:, None]
        masks["output_qk"] = rows[:, None, :, None] & cols[:, None, None, :]
    problems = []
    errors = {}
    for name, mask in masks.items():
        errors[name], problem = compare(case, name, ours[name], theirs[name], mask)
        if problem:
            problems.append(problem)
        m = np.broadcast_to(mask, direct[name].shape)
        if not np.array_equal(ours[name][m], direct[name][m], equal_nan=True):
            problems.append(f"{name} differs from attnrt's direct run")
    error_table.add(f"ort-custom-op {config}", errors, kernel)
    assert not problems, f"{where}:\n  " + "\n  ".join(problems)
    return theirs


@pytest.mark.parametrize("row", [r for _, r in CYCLING], ids=[i for i, _ in CYCLING])
def test_cycling_through_ort(row, rng, error_table, request):
    case = build_cycling_case(row, rng)
    check_through_ort(case, request.node.callspec.id, error_table)


@pytest.mark.parametrize("model", list(MODELS))
def test_model_through_ort(model, rng, error_table):
    """Each model's prompt (512 tokens) and one decode step after 1024 past tokens, batch 2."""
    check_through_ort(build_model_prompt(model, 2, rng), f"{model} prompt512 B2", error_table)
    m = MODELS[model]
    shape = (2, m["Nkv"], 1024, m["H"])
    past_k, past_v = (rng.standard_normal(shape, np.float32) for _ in range(2))
    case = model_decode_feeds(model, np.array([1024, 700]), past_k, past_v, rng)
    check_through_ort(case, f"{model} decode1024 B2", error_table)


def test_fault_switch_is_detected():
    """Negative control: with ATTNRT_ONNXRUNTIME_TEST_FAULT=output the library changes one output
    element, and the comparison above must fail."""
    env = {**os.environ, "ATTNRT_ONNXRUNTIME_TEST_FAULT": "output"}
    first = CYCLING[0][0]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         f"{Path(__file__)}::test_cycling_through_ort[{first}]"],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "output max abs error" in result.stdout, result.stdout[-3000:]


def _decode_model(attrs: dict, dtype) -> bytes:
    types = {"query": dtype, "key": dtype, "value": dtype, "past_key": dtype, "past_value": dtype,
             "seqlens_k": np.dtype(np.int32), "total_sequence_length": np.dtype(np.int32)}
    return build_model(attrs, types).SerializeToString()


def _decode_feeds(rng, B, N, Nkv, H, P, dtype, valid):
    return {"query": rng.standard_normal((B, 1, N * H)).astype(dtype),
            "key": rng.standard_normal((B, 1, Nkv * H)).astype(dtype),
            "value": rng.standard_normal((B, 1, Nkv * H)).astype(dtype),
            "past_key": rng.standard_normal((B, Nkv, P, H)).astype(dtype),
            "past_value": rng.standard_normal((B, Nkv, P, H)).astype(dtype),
            "seqlens_k": np.asarray(valid, np.int32),  # past rows per batch = new total - 1
            "total_sequence_length": np.array([max(valid) + 1], np.int32)}


def _run_bound(session, feeds):
    """Runs with present_key/value bound to past_key/value's memory (shared buffers)."""
    binding = session.io_binding()
    values = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in feeds.items()}
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    binding.bind_output("output")
    binding.bind_ortvalue_output("present_key", values["past_key"])
    binding.bind_ortvalue_output("present_value", values["past_value"])
    session.run_with_iobinding(binding)
    return (binding.copy_outputs_to_cpu()[0], values["past_key"].numpy(),
            values["past_value"].numpy())


def test_shared_buffers_in_place(rng):
    """present = past (ONNX Runtime GenAI's shared-buffer mode): appended in place, as the
    built-in kernel does."""
    B, N, Nkv, H, P = 2, 8, 2, 64, 64
    attrs = {"num_heads": N, "kv_num_heads": Nkv}
    model = _decode_model(attrs, np.dtype(np.float32))
    feeds = _decode_feeds(rng, B, N, Nkv, H, P, np.float32, [20, 41])
    theirs = _run_bound(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), feeds)
    before = _runs()
    ours = _run_bound(ort.InferenceSession(model, library_options(),
                                           providers=["CPUExecutionProvider"]), feeds)
    assert _runs() == before + 1
    np.testing.assert_allclose(ours[0], theirs[0], atol=1e-5, rtol=0)
    for b, row in enumerate((20, 41)):  # the new row, written into the shared buffer
        np.testing.assert_array_equal(ours[1][b, :, row], feeds["key"][b, 0].reshape(Nkv, H))
        np.testing.assert_array_equal(ours[2][b, :, row], feeds["value"][b, 0].reshape(Nkv, H))
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_array_equal(ours[2], theirs[2])


def test_bfloat16_through_ort(rng):
    """bfloat16 (no CPU kernel in ONNX Runtime itself): the library's result is attnrt's."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    B, N, Nkv, H, P = 2, 4, 2, 32, 16
    attrs = {"num_heads": N, "kv_num_heads": Nkv}
    feeds = _decode_feeds(rng, B, N, Nkv, H, P, bf16, [5, 9])
    node = helper.make_node("GroupQueryAttention", list(feeds), ["output", "present_key",
                            "present_value"], domain="com.microsoft", **attrs)
    elem = {bf16: TensorProto.BFLOAT16, np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph(
        [node], "gqa", [helper.make_tensor_value_info(n, elem[a.dtype], None)
                        for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, None) for n in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), library_options(),
                                   providers=["CPUExecutionProvider"])
    direct, _ = run_attnrt(attrs, feeds)
    # onnxruntime's Python API takes bfloat16 as raw uint16 OrtValues; outputs are bound likewise.
    binding = session.io_binding()
    values = {}
    for name, array in feeds.items():
        onnx_type = TensorProto.BFLOAT16 if array.dtype == bf16 else TensorProto.INT32
        raw = np.ascontiguousarray(array.view(np.uint16) if array.dtype == bf16 else array)
        values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type)
        binding.bind_ortvalue_input(name, values[name])
    ours = {name: np.full(direct[name].shape, 0xFFFF, np.uint16) for name in node.output}
    for name, array in ours.items():
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            array, TensorProto.BFLOAT16))
    before = _runs()
    session.run_with_iobinding(binding)
    assert _runs() == before + 1
    for name, value in ours.items():
        np.testing.assert_array_equal(value, direct[name].view(np.uint16))


REFUSED_ATTRIBUTES = [
    ({"num_heads": 6, "kv_num_heads": 4}, "kv_num_heads"),
    ({"num_heads": 4, "kv_num_heads": 2, "k_quant_type": "PER_BLOCK", "v_quant_type": "NONE"},
     "k_quant_type"),
    ({"num_heads": 4, "kv_num_heads": 2, "qk_output": 7}, "qk_output"),
]


@pytest.mark.parametrize("attrs,named", REFUSED_ATTRIBUTES, ids=[n for _, n in REFUSED_ATTRIBUTES])
def test_refused_attributes_fail_session_creation(attrs, named):
    model = _decode_model(attrs, np.dtype(np.float32))
    with pytest.raises(Exception) as failure:
        ort.InferenceSession(model, library_options(), providers=["CPUExecutionProvider"])
    message = str(failure.value)
    assert "attnrt GroupQueryAttention node '" in message, message
    assert named in message, message


def test_refused_types_fail_first_run_then_sessions_still_work(rng):
    """A float16 query with a float32 cache (no quantization): the first run fails with attnrt's
    message naming past_key; the host keeps running, and a valid session afterwards works."""
    B, N, Nkv, H, P = 1, 4, 2, 16, 8
    types = {"query": np.dtype(np.float16), "key": np.dtype(np.float16),
             "value": np.dtype(np.float16), "past_key": np.dtype(np.float32),
             "past_value": np.dtype(np.float32), "seqlens_k": np.dtype(np.int32),
             "total_sequence_length": np.dtype(np.int32)}
    attrs = {"num_heads": N, "kv_num_heads": Nkv}
    session = ort.InferenceSession(build_model(attrs, types).SerializeToString(),
                                   library_options(), providers=["CPUExecutionProvider"])
    feeds = _decode_feeds(rng, B, N, Nkv, H, P, np.float16, [3])
    feeds["past_key"] = feeds["past_key"].astype(np.float32)
    feeds["past_value"] = feeds["past_value"].astype(np.float32)
    with pytest.raises(Exception) as failure:
        session.run(None, feeds)
    message = str(failure.value)
    assert re.search(r"attnrt GroupQueryAttention node '.*': attnrt: ATTNRT_ERROR_", message), \
        message
    assert "past_key" in message, message
    good = _decode_feeds(rng, B, N, Nkv, H, P, np.float32, [3])
    run_library(attrs, good)


def test_norm_weights_refused_at_first_run(rng):
    B, N, Nkv, H, P = 1, 4, 2, 16, 8
    feeds = _decode_feeds(rng, B, N, Nkv, H, P, np.float32, [3])
    feeds["q_norm_weight"] = np.ones(H, np.float32)
    feeds["k_norm_weight"] = np.ones(H, np.float32)
    names = INPUT_NAMES + ("q_norm_weight", "k_norm_weight")
    inputs = [n if n in feeds else "" for n in names]
    node = helper.make_node("GroupQueryAttention", inputs, ["output", "present_key",
                            "present_value"], domain="com.microsoft", num_heads=N,
                            kv_num_heads=Nkv, name="layer0_attn")
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "gqa",
        [helper.make_tensor_value_info(n, TensorProto.INT32 if a.dtype == np.int32 else f32, None)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, f32, None) for n in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), library_options(),
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as failure:
        session.run(None, feeds)
    message = str(failure.value)
    assert "node 'layer0_attn'" in message and "q_norm_weight" in message, message


@pytest.mark.parametrize("value", ["many", "2000", "1025", "-1", " 4", "+4", "4 ", ""])
def test_bad_num_threads_entry_fails_registration(value):
    # Past the runtime's 1024 threads, signs and spaces are refused when the library is registered,
    # naming the entry (2000 used to pass here and fail at session creation naming a C option).
    options = ort.SessionOptions()
    options.add_session_config_entry("attnrt.num_threads", value)
    with pytest.raises(Exception, match=r"attnrt\.num_threads: expected an integer in \[0, 1024\]"):
        options.register_custom_ops_library(LIBRARY)


def test_num_threads_entry_at_the_limit_registers():
    options = ort.SessionOptions()
    options.add_session_config_entry("attnrt.num_threads", "1024")
    options.register_custom_ops_library(LIBRARY)


def test_older_onnxruntime_api_gets_a_clear_error():
    """RegisterCustomOps through an OrtApiBase that serves no API 21 (an older ONNX Runtime):
    the status made with the oldest API's CreateStatus names the version needed and the one found."""
    lib = ctypes.CDLL(LIBRARY)
    create_status_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
    get_api_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
    version_t = ctypes.CFUNCTYPE(ctypes.c_void_p)  # const char*, kept alive by `version`
    messages = []

    def create_status(code, message):
        messages.append((code, message.decode()))
        return 0x1234  # any non-NULL status

    create_status_fn = create_status_t(create_status)
    table = (ctypes.c_void_p * 1)(ctypes.cast(create_status_fn, ctypes.c_void_p))  # CreateStatus
    get_api_fn = get_api_t(lambda v: None if v > 16 else ctypes.addressof(table))
    version = ctypes.create_string_buffer(b"1.16.3")
    version_fn = version_t(lambda: ctypes.addressof(version))

    class OrtApiBase(ctypes.Structure):
        _fields_ = [("GetApi", get_api_t), ("GetVersionString", version_t)]

    base = OrtApiBase(get_api_fn, version_fn)
    lib.RegisterCustomOps.restype = ctypes.c_void_p
    lib.RegisterCustomOps.argtypes = [ctypes.c_void_p, ctypes.POINTER(OrtApiBase)]
    status = lib.RegisterCustomOps(None, ctypes.byref(base))
    assert status == 0x1234
    assert messages == [(1, "libattnrt_onnxruntime.so needs ONNX Runtime's C API version 21 "
                            "(onnxruntime 1.21 or newer); this ONNX Runtime is 1.16.3")]


def test_two_sessions_registered_twice_and_threads(rng):
    """The library in two sessions (one registering it twice), each run from several threads at
    once: every result equals the built-in kernel's within the tolerance."""
    B, N, Nkv, H, P = 2, 8, 2, 64, 128
    attrs = {"num_heads": N, "kv_num_heads": Nkv, "local_window_size": 48}
    model = _decode_model(attrs, np.dtype(np.float32))
    twice = library_options()
    twice.register_custom_ops_library(LIBRARY)
    sessions = [ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
                for options in (library_options({"attnrt.num_threads": "2"}), twice)]
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    cases = [_decode_feeds(rng, B, N, Nkv, H, P, np.float32, rng.integers(1, P, B))
             for _ in range(8)]
    expected = [reference.run(None, feeds) for feeds in cases]
    failures = []
    before = _runs()

    def work(session, index):
        try:
            for _ in range(3):
                for feeds, want in zip(cases, expected):
                    got = session.run(None, feeds)
                    for g, w in zip(got, want):
                        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
        except Exception as e:  # noqa: BLE001  (reported below)
            failures.append(f"thread {index}: {e}")

    threads = [threading.Thread(target=work, args=(sessions[i % 2], i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert _runs() == before + 4 * 3 * len(cases)


def test_docs_example_runs():
    """docs/onnxruntime.md's example, as written."""
    text = (REPO / "docs" / "onnxruntime.md").read_text()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, "-c", example], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    error = float(re.search(r"max \|attnrt - onnxruntime\| = (\S+)", result.stdout).group(1))
    assert error <= 1e-5, result.stdout
    assert "served by attnrt: 1" in result.stdout, result.stdout
