"""A Llama-style decoder graph in onnxruntime, with and without libattnrt_onnxruntime.so: greedy
generation must give the same tokens and float32 logits within 1e-4 (docs/onnxruntime.md).

The graph is what ONNX Runtime GenAI's model builder exports for a float32 CPU Llama, reduced to a
few layers of small width with seeded random weights: Gather (embedding), then per layer
SkipSimplifiedLayerNormalization (com.microsoft, RMS norm of the residual sum), MatMul Q/K/V,
GroupQueryAttention with rotary embedding on past_key_values.N.key/value inputs and present.N
outputs, MatMul output projection; a final norm and MatMul to the logits. The KV cache grows by
ONNX Runtime's default I/O (a present one step longer than the past), as GenAI runs without its
shared buffer. Other com.microsoft nodes must keep ONNX Runtime's own kernels.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import attnrt_runner  # noqa: F401  (puts the build's attnrt package on sys.path)
import attnrt.onnxruntime as attnrt_ort  # noqa: E402

try:
    LIBRARY = attnrt_ort.library_path()
except FileNotFoundError as e:
    if os.environ.get("ATTNRT_REQUIRE_ONNXRUNTIME_OPS") == "1":
        raise
    pytest.skip(str(e), allow_module_level=True)

LAYERS, HIDDEN, N, NKV, H, VOCAB, MAX_LEN = 3, 128, 8, 2, 16, 512, 4096
THETA = 10000.0


def build_decoder(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    f32 = TensorProto.FLOAT
    inits, nodes = [], []

    def weight(name, shape, std):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32),
                                             name))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    angles = np.outer(np.arange(MAX_LEN), THETA ** (-np.arange(0, H, 2) / H))
    const("cos_cache", np.cos(angles).astype(np.float32))
    const("sin_cache", np.sin(angles).astype(np.float32))
    nodes.append(helper.make_node("Gather", [weight("embed", (VOCAB, HIDDEN), 1.0), "input_ids"],
                                  ["embedded"]))
    nodes.append(helper.make_node("Mul", ["embedded", const("zero", np.zeros(1, np.float32))],
                                  ["residual_in0"]))
    attn_out, residual = "embedded", "residual_in0"
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch", "seq", VOCAB])]
    for layer in range(LAYERS):
        p = f"layers.{layer}"
        gamma = const(f"{p}.norm", np.ones(HIDDEN, np.float32))
        nodes.append(helper.make_node(
            "SkipSimplifiedLayerNormalization", [attn_out, residual, gamma],
            [f"{p}.normed", "", "", f"{p}.residual"], domain="com.microsoft", epsilon=1e-5))
        for proj, width, std in (("q", N * H, 0.25), ("k", NKV * H, 0.25), ("v", NKV * H, 0.1)):
            nodes.append(helper.make_node("MatMul", [f"{p}.normed", weight(
                f"{p}.{proj}_proj", (HIDDEN, width), std)], [f"{p}.{proj}"]))
        past = [f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"]
        present = [f"present.{layer}.key", f"present.{layer}.value"]
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [f"{p}.q", f"{p}.k", f"{p}.v", *past, "seqlens_k", "total_sequence_length",
             "cos_cache", "sin_cache"],
            [f"{p}.attn", *present], domain="com.microsoft", name=f"{p}.attn.GroupQueryAttention",
            num_heads=N, kv_num_heads=NKV, do_rotary=1))
        nodes.append(helper.make_node("MatMul", [f"{p}.attn", weight(
            f"{p}.o_proj", (N * H, HIDDEN), 0.1)], [f"{p}.attn_out"]))
        attn_out, residual = f"{p}.attn_out", f"{p}.residual"
        inputs += [helper.make_tensor_value_info(n, f32, ["batch", NKV, "past", H]) for n in past]
        outputs += [helper.make_tensor_value_info(n, f32, ["batch", NKV, "total", H])
                    for n in present]
    nodes.append(helper.make_node(
        "SkipSimplifiedLayerNormalization",
        [attn_out, residual, const("final_norm", np.ones(HIDDEN, np.float32))],
        ["final_normed"], domain="com.microsoft", epsilon=1e-5))
    nodes.append(helper.make_node("MatMul", ["final_normed", weight("lm_head", (HIDDEN, VOCAB),
                                                                    0.2)], ["logits"]))
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model.SerializeToString()


def generate(session, prompt: np.ndarray, new_tokens: int):
    """Greedy decoding, batch 1; returns (tokens, logits of every step)."""
    past = {f"past_key_values.{l}.{kv}": np.zeros((1, NKV, 0, H), np.float32)
            for l in range(LAYERS) for kv in ("key", "value")}
    ids, length, tokens, logits = prompt[None, :].astype(np.int64), 0, [], []
    for _ in range(new_tokens):
        length += ids.shape[1]
        out = session.run(None, {"input_ids": ids, "seqlens_k": np.array([length - 1], np.int32),
                                 "total_sequence_length": np.array(length, np.int32), **past})
        names = [o.name for o in session.get_outputs()]
        results = dict(zip(names, out))
        step_logits = results["logits"][0, -1]
        logits.append(step_logits)
        tokens.append(int(step_logits.argmax()))
        past = {f"past_key_values.{l}.{kv}": results[f"present.{l}.{kv}"]
                for l in range(LAYERS) for kv in ("key", "value")}
        ids = np.array([[tokens[-1]]], np.int64)
    return tokens, np.stack(logits)


def compare_generation(prompt_length: int, new_tokens: int, seed: int = 0) -> tuple[float, bool]:
    model = build_decoder(seed)
    prompt = np.random.default_rng(seed + 1).integers(0, VOCAB, prompt_length)
    builtin = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    options = ort.SessionOptions()
    attnrt_ort.register(options)
    library = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    before = attnrt_ort.runs()
    tokens, logits = generate(library, prompt, new_tokens)
    assert attnrt_ort.runs() - before == LAYERS * new_tokens, "not every attention node ran attnrt"
    ref_tokens, ref_logits = generate(builtin, prompt, new_tokens)
    return float(np.abs(logits - ref_logits).max()), tokens == ref_tokens


@pytest.mark.parametrize("prompt_length", [16, 2048])
def test_greedy_generation_matches_builtin(prompt_length):
    error, same_tokens = compare_generation(prompt_length, 64)
    assert same_tokens, f"prompt {prompt_length}: tokens differ (max logit error {error:.3g})"
    assert error <= 1e-4, f"prompt {prompt_length}: max logit error {error:.3g} > 1e-4"


def test_negative_control_fault_is_detected():
    """The library with ATTNRT_ONNXRUNTIME_TEST_FAULT=output (one output element changed per run)
    must fail the comparison."""
    code = ("import sys; sys.path[:0] = %r; import test_ort_custom_op_decoder as t; "
            "error, same = t.compare_generation(16, 4); print('ERROR', error, same)"
            % [str(Path(__file__).parent)])
    env = {**os.environ, "ATTNRT_ONNXRUNTIME_TEST_FAULT": "output",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("ERROR"))
    assert float(line.split()[1]) > 1e-4, line
