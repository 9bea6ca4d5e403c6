"""One-node ONNX GroupQueryAttention models run in onnxruntime's CPU EP."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

# Positional inputs of com.microsoft.GroupQueryAttention (its schema); q/k_norm_weight are left out
# (the CPU EP rejects them).
INPUT_NAMES = (
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale",
)
OUTPUT_NAMES = ("output", "present_key", "present_value", "output_qk")

_ELEM_TYPE = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
}

_sessions: dict[tuple, ort.InferenceSession] = {}


def build_model(attrs: dict, input_types: dict[str, np.dtype]) -> onnx.ModelProto:
    """attrs: ONNX attribute names → values; input_types: the inputs given → their dtypes."""
    last = max(INPUT_NAMES.index(name) for name in input_types)
    inputs = [name if name in input_types else "" for name in INPUT_NAMES[: last + 1]]
    query_type = _ELEM_TYPE[input_types["query"]]
    cache_type = _ELEM_TYPE[input_types.get("past_key", input_types["query"])]
    outputs = list(OUTPUT_NAMES[:3]) + (["output_qk"] if attrs.get("qk_output", 0) else [])
    out_types = {"output": query_type, "present_key": cache_type, "present_value": cache_type,
                 "output_qk": query_type}
    node = helper.make_node("GroupQueryAttention", inputs, outputs, domain="com.microsoft",
                            **attrs)
    graph = helper.make_graph(
        [node], "gqa",
        [helper.make_tensor_value_info(n, _ELEM_TYPE[t], None) for n, t in input_types.items()],
        [helper.make_tensor_value_info(n, out_types[n], None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10  # onnx stamps a newer IR than ORT 1.30 accepts
    return model


def _session(attrs: dict, input_types: dict[str, np.dtype]) -> ort.InferenceSession:
    key = (tuple(sorted(attrs.items())), tuple(sorted((n, str(t)) for n, t in input_types.items())))
    if key not in _sessions:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        _sessions[key] = ort.InferenceSession(build_model(attrs, input_types).SerializeToString(),
                                              options, providers=["CPUExecutionProvider"])
    return _sessions[key]


def run_ort(attrs: dict, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the op on `feeds` (ORT input names); returns the outputs by name."""
    session = _session(attrs, {name: feeds[name].dtype for name in INPUT_NAMES if name in feeds})
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))
