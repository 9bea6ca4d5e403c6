"""GroupQueryAttention (ONNX Runtime's com.microsoft.GroupQueryAttention): GqaOp and gqa()."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import attnrt_c as _c
from . import _arrays
from ._errors import InvalidArgumentError
from ._op import Op, io_names

# ONNX Runtime's input and output names of com.microsoft.GroupQueryAttention, by position.
GQA_INPUTS, GQA_OUTPUTS = io_names(_c.ATTNRT_OP_GQA)
assert all(getattr(_c, f"ATTNRT_GQA_INPUT_{n.upper()}") == i for i, n in enumerate(GQA_INPUTS))
assert all(getattr(_c, f"ATTNRT_GQA_OUTPUT_{n.upper()}") == i for i, n in enumerate(GQA_OUTPUTS))

# Every attribute of attnrt_gqa_attributes (ONNX Runtime's names), with its Python type.
GQA_ATTRIBUTES: dict[str, type] = {
    "num_heads": int, "kv_num_heads": int, "causal": int, "scale": float, "softcap": float,
    "local_window_size": int, "sliding_window_cache": int, "do_rotary": int,
    "rotary_interleaved": int, "smooth_softmax": int, "qk_output": int, "k_quant_type": int,
    "v_quant_type": int, "kv_cache_bit_width": int, "qk_norm_epsilon": float}
_QUANT_TYPES = {"NONE": _c.ATTNRT_GQA_QUANT_NONE, "PER_TENSOR": _c.ATTNRT_GQA_QUANT_PER_TENSOR,
                "PER_CHANNEL": _c.ATTNRT_GQA_QUANT_PER_CHANNEL,
                "PER_BLOCK_32": _c.ATTNRT_GQA_QUANT_PER_BLOCK_32}
_HOST_INTS = {"seqlens_k": np.int32, "total_sequence_length": np.int32, "position_ids": np.int64}


def set_gqa_attributes(native: "_c.GqaAttributes", attributes: dict[str, Any], title: str) -> None:
    """Sets GroupQueryAttention attributes by name on a native struct, with clear errors."""
    _arrays.set_attributes(native, attributes, GQA_ATTRIBUTES,
                           {"k_quant_type": _QUANT_TYPES, "v_quant_type": _QUANT_TYPES}, title)


def head_size(attributes: dict[str, Any], query_shape: tuple[int, ...], packed: bool) -> int:
    """H from query (B, S, N*H), or packed QKV (B, S, (N+2*Nkv)*H)."""
    if len(query_shape) != 3:
        raise InvalidArgumentError(f"query: expected 3 dimensions (B,S,hidden), got {query_shape}")
    n, nkv = attributes["num_heads"], attributes["kv_num_heads"]
    return query_shape[2] // (n + 2 * nkv) if packed else query_shape[2] // n


class GqaOp(Op):
    """com.microsoft.GroupQueryAttention with ONNX Runtime's semantics (attnrt_op_create).

    Attributes (ONNX Runtime's names and defaults): num_heads N and kv_num_heads Nkv (required,
    N % Nkv == 0), causal (1), scale (0: 1/sqrt(H)), softcap (0: off), local_window_size (-1: off),
    sliding_window_cache (0), do_rotary (0), rotary_interleaved (0), smooth_softmax (-1),
    qk_output (0 none, 1 before softmax, 2 after), k_quant_type / v_quant_type ("NONE",
    "PER_TENSOR", "PER_CHANNEL", "PER_BLOCK_32" or 0/1/2/3), kv_cache_bit_width (0, 4 or 8),
    qk_norm_epsilon (1e-6). PER_BLOCK_32 is ggml's Q8_0 (8) / Q4_0 (4) blocks: uint8 caches of
    H/32 blocks of 34 / 18 bytes per row, each with its float16 scale; no k_scale/v_scale.

    Inputs (GQA_INPUTS; B batch, S new tokens, L new K/V rows, N/Nkv heads, H head size, P past
    buffer rows, T total length): query (B,S,N*H) or packed QKV (B,S,(N+2*Nkv)*H),
    float32/float16/bfloat16; key, value (B,L,Nkv*H); past_key, past_value (B,Nkv,P,H) (int4
    cache: uint8 (B,Nkv,P,H/2); PER_BLOCK_32: uint8 (B,Nkv,P,H/32*34 or H/32*18)); seqlens_k int32 (B) = total length - 1 per batch;
    total_sequence_length int32 (1) or a Python int; cos_cache, sin_cache (M,R/2); position_ids
    int64 (B,S); attention_bias (B|1,N|1,S,T); head_sink (N); k_scale, v_scale float32 (1 or
    Nkv*H); q_norm_weight, k_norm_weight (H).
    Outputs (GQA_OUTPUTS): output (B,S,N*H); present_key, present_value (B,Nkv,max(T,P),H), which
    may be past_key / past_value themselves (a shared buffer); output_qk (B,N,S,T) with
    qk_output != 0.

    Raises:
        InvalidArgumentError: an attribute is invalid (the message names it, expected and actual).
    """

    KIND = _c.ATTNRT_OP_GQA
    TITLE = "GroupQueryAttention"
    INPUTS = GQA_INPUTS
    OUTPUTS = GQA_OUTPUTS
    HOST_INTS = _HOST_INTS

    def __init__(self, runtime, num_heads: int, kv_num_heads: int, **attributes):
        native = _c.GqaAttributes()
        set_gqa_attributes(native, {"num_heads": num_heads, "kv_num_heads": kv_num_heads,
                                    **attributes}, self.TITLE)
        self.attributes: dict[str, Any] = {n: getattr(native, n) for n in GQA_ATTRIBUTES}
        super().__init__(runtime, native)

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """The documented output shapes and dtypes for these inputs (a dict by name):
        output (B,S,N*H) of query's dtype; present_key/value (B,Nkv,max(T,P),H) (P rows with
        sliding_window_cache=1) of past_key's dtype (without a past: query's, or int8 / uint8
        with H/2 for a quantized 8-/4-bit cache); output_qk (B,N,S,T) with qk_output != 0."""
        inputs = self._by_name(inputs)
        a = self.attributes
        query = inputs.get("query")
        b, s, _ = qshape = _arrays.shape_of(query, "query")
        h = head_size(a, qshape, packed=inputs.get("key") is None)
        t = _arrays.first_int(inputs.get("total_sequence_length"), "total_sequence_length")
        past_key = inputs.get("past_key")
        if past_key is not None:
            past = _arrays.shape_of(past_key, "past_key")
            if len(past) != 4:
                raise InvalidArgumentError(f"past_key: expected 4 dimensions, got {past}")
            p, cache_dtype, cache_h = past[2], past_key, past[3]
        else:
            p, cache_dtype, cache_h = 0, None, h
            if a["k_quant_type"] != _c.ATTNRT_GQA_QUANT_NONE:
                cache_dtype, cache_h = ("uint8", h // 2) if a["kv_cache_bit_width"] == 4 else \
                    ("int8", h)
        # A window-sized ring cache (sliding_window_cache=1) keeps the past buffer's P rows.
        present = p if a["sliding_window_cache"] == 1 else max(t, p)
        nkv = a["kv_num_heads"]
        shapes = {"output": ((b, s, a["num_heads"] * h), None),
                  "present_key": ((b, nkv, present, cache_h), cache_dtype),
                  "present_value": ((b, nkv, present, cache_h), cache_dtype)}
        if a["qk_output"]:
            shapes["output_qk"] = ((b, a["num_heads"], s, t), None)
        return shapes

    def __call__(self, output=None, present_key=None, present_value=None, output_qk=None,
                 **inputs):
        """Runs on inputs given by name and returns (output, present_key, present_value[,
        output_qk]); outputs not given are allocated in the query's framework (torch in, torch
        out; numpy otherwise)."""
        outputs = self.allocate_outputs(inputs, {
            "output": output, "present_key": present_key, "present_value": present_value,
            "output_qk": output_qk})
        self.run(inputs, outputs)
        result = (outputs["output"], outputs["present_key"], outputs["present_value"])
        return result + (outputs["output_qk"],) if "output_qk" in outputs else result


def gqa(runtime, query, key=None, value=None, past_key=None, past_value=None,
        seqlens_k=None, total_sequence_length=None, cos_cache=None, sin_cache=None,
        position_ids=None, attention_bias=None, head_sink=None, k_scale=None, v_scale=None,
        q_norm_weight=None, k_norm_weight=None, *, num_heads: int, kv_num_heads: int,
        output=None, present_key=None, present_value=None, output_qk=None, **attributes):
    """com.microsoft.GroupQueryAttention, as ONNX Runtime runs it, with its input names.

    Returns (output, present_key, present_value), plus output_qk when qk_output != 0, allocated in
    the query's framework (numpy arrays, or torch tensors for torch inputs) unless given (pass
    present_key=past_key, present_value=past_value to update a shared past/present buffer in
    place, as ONNX Runtime's IO binding does).

    Shapes and dtypes: see GqaOp. seqlens_k may be a list and total_sequence_length an int. The op
    is made once per attribute set and cached on the runtime; plans are cached per shape
    signature by the op, so a decode loop plans once.

    Raises:
        attnrt.Error subclasses: InvalidArgumentError, UnsupportedError, ... with the library's
        message.
    """
    op = runtime.cached_op(GqaOp, num_heads=num_heads, kv_num_heads=kv_num_heads, **attributes)
    inputs = {"query": query, "key": key, "value": value, "past_key": past_key,
              "past_value": past_value, "seqlens_k": seqlens_k,
              "total_sequence_length": total_sequence_length, "cos_cache": cos_cache,
              "sin_cache": sin_cache, "position_ids": position_ids,
              "attention_bias": attention_bias, "head_sink": head_sink, "k_scale": k_scale,
              "v_scale": v_scale, "q_norm_weight": q_norm_weight, "k_norm_weight": k_norm_weight}
    return op(output=output, present_key=present_key, present_value=present_value,
              output_qk=output_qk, **inputs)
