"""GroupQueryAttention over a paged KV cache: PagedGqaOp and paged_gqa()."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import attnrt_c as _c
from . import _arrays
from ._errors import InvalidArgumentError
from ._gqa import _HOST_INTS, GQA_ATTRIBUTES, head_size, set_gqa_attributes
from ._op import Op, io_names

PAGED_GQA_INPUTS, PAGED_GQA_OUTPUTS = io_names(_c.ATTNRT_OP_PAGED_GQA)
KV_LAYOUTS = {"BSNH": _c.ATTNRT_PAGED_KV_LAYOUT_BSNH, "BNSH": _c.ATTNRT_PAGED_KV_LAYOUT_BNSH}
P_PRECISIONS = {"exact": _c.ATTNRT_P_PRECISION_EXACT, "input": _c.ATTNRT_P_PRECISION_INPUT}


CacheType = tuple[int, int]  # (quant type, bit width)


def set_value_cache_type(native, attributes: dict[str, Any],
                         v_cache_bit_width) -> tuple[CacheType, CacheType]:
    """value_cache's own type (ABI 1.9, docs/paged-gqa.md "Value cache type"): None keeps key_cache's
    (v_cache_own_type 0); 0, 4 or 8 gives value_cache the type of v_quant_type with that bit width
    (v_cache_own_type 1). Returns the key and value cache types the output shape is read with."""
    key_type = (attributes["k_quant_type"], attributes["kv_cache_bit_width"])
    if v_cache_bit_width is None:
        return key_type, key_type
    native.v_cache_own_type = 1
    native.v_cache_bit_width = _arrays.integer(v_cache_bit_width, "v_cache_bit_width", 32)
    attributes.update(v_cache_bit_width=native.v_cache_bit_width)
    return key_type, (attributes["v_quant_type"], native.v_cache_bit_width)


def p_precision_value(p_precision) -> int:
    """The attnrt_p_precision of "exact" / "input" (any case) or 0 / 1; InvalidArgumentError (a
    ValueError) naming p_precision otherwise."""
    if isinstance(p_precision, str) and p_precision.lower() in P_PRECISIONS:
        return P_PRECISIONS[p_precision.lower()]
    if isinstance(p_precision, int) and not isinstance(p_precision, bool) and \
            p_precision in P_PRECISIONS.values():
        return p_precision
    raise InvalidArgumentError(
        f"p_precision: expected 'exact' or 'input', got {p_precision!r}")


class PagedGqaOp(Op):
    """GroupQueryAttention over a paged KV cache (attnrt/ops/paged_gqa.h): ONNX Runtime's
    GroupQueryAttention math, with K and V in two block pools read through a block table.

    Attributes: every GqaOp attribute (sliding_window_cache must be 0), block_size (tokens per
    block, 1..1024, required) and kv_layout ("BSNH" default: pools [num_blocks, block_size, Nkv, H],
    vLLM's and FlashAttention's paged layout; or "BNSH": [num_blocks, Nkv, block_size, H]),
    p_precision ("exact" default: softmax probabilities stay float32 for P·V; "input": each is
    rounded to the query dtype first, as FlashAttention and vLLM's AMX CPU kernel do;
    docs/gqa-semantics.md, "Probability precision") and v_cache_bit_width (None default: value_cache
    has key_cache's type; 0, 4 or 8: value_cache's own type, v_quant_type "NONE" (a float32,
    float16 or bfloat16 pool) or "PER_BLOCK_32" (Q8_0 8, Q4_0 4), as llama.cpp's -ctk/-ctv make;
    docs/paged-gqa.md, "Value cache type").

    Inputs (PAGED_GQA_INPUTS): GroupQueryAttention's, with key_cache / value_cache (the pools, T_CACHE
    as above; uint8 with H/2 for a 4-bit cache) in place of past_key / past_value, and block_table
    int32 [B, max_blocks_per_seq] (logical block -> physical block, -1 = unallocated) appended.
    The run writes this step's new K/V rows into the pools in place, then attends over tokens
    [0, seqlens_k[b] + 1) of each sequence. Outputs (PAGED_GQA_OUTPUTS): output (B,S,N*H);
    output_qk (B,N,S,T) with qk_output != 0.

    Raises:
        InvalidArgumentError: an attribute is invalid (named, with expected and actual values);
            at run, a block id out of range, a block written that another slot also names, ...
    """

    KIND = _c.ATTNRT_OP_PAGED_GQA
    TITLE = "paged GroupQueryAttention"
    INPUTS = PAGED_GQA_INPUTS
    OUTPUTS = PAGED_GQA_OUTPUTS
    HOST_INTS = {**_HOST_INTS, "block_table": np.int32}
    WRITTEN_INPUTS = ("key_cache", "value_cache")

    def __init__(self, runtime, num_heads: int, kv_num_heads: int, block_size: int,
                 kv_layout: str | int = "BSNH", p_precision: str | int = "exact",
                 v_cache_bit_width: int | None = None, **attributes):
        native = _c.PagedGqaAttributes()
        gqa = native.gqa
        set_gqa_attributes(gqa, {"num_heads": num_heads, "kv_num_heads": kv_num_heads,
                                 **attributes}, self.TITLE)
        if isinstance(kv_layout, str):
            if kv_layout.upper() not in KV_LAYOUTS:
                raise InvalidArgumentError(
                    f"kv_layout: expected one of {', '.join(KV_LAYOUTS)}, got '{kv_layout}'")
            kv_layout = KV_LAYOUTS[kv_layout.upper()]
        native.block_size = _arrays.integer(block_size, "block_size", 32)
        native.kv_layout = _arrays.integer(kv_layout, "kv_layout", 32)
        self.attributes: dict[str, Any] = {n: getattr(gqa, n) for n in GQA_ATTRIBUTES}
        native.p_precision = p_precision_value(p_precision)
        self.attributes.update(block_size=native.block_size, kv_layout=native.kv_layout,
                               p_precision=native.p_precision)
        self._cache_types = set_value_cache_type(native, self.attributes, v_cache_bit_width)
        super().__init__(runtime, native)

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """output (B,S,N*Hv) of query's dtype (Hv the value head size, value_cache's); output_qk
        (B,N,S,T) with qk_output != 0."""
        inputs = self._by_name(inputs)
        a = self.attributes
        b, s, _ = qshape = _arrays.shape_of(inputs.get("query"), "query")
        h = head_size(a, qshape, packed=inputs.get("key") is None)
        shapes: dict[str, tuple[tuple[int, ...], Any]] = {
            "output": (_arrays.value_rows_shape((b, s, a["num_heads"] * h), inputs.get("key_cache"),
                                                inputs.get("value_cache"), *self._cache_types),
                       None)}
        if a["qk_output"]:
            t = _arrays.first_int(inputs.get("total_sequence_length"), "total_sequence_length")
            shapes["output_qk"] = ((b, a["num_heads"], s, t), None)
        return shapes

    def __call__(self, output=None, output_qk=None, **inputs):
        """Runs on inputs given by name; returns output (and output_qk with qk_output != 0),
        allocated in the query's framework unless given."""
        outputs = self.allocate_outputs(inputs, {"output": output, "output_qk": output_qk})
        self.run(inputs, outputs)
        if "output_qk" in outputs:
            return outputs["output"], outputs["output_qk"]
        return outputs["output"]


def paged_gqa(runtime, query, key, value, key_cache, value_cache, seqlens_k,
              total_sequence_length, block_table, cos_cache=None, sin_cache=None,
              position_ids=None, attention_bias=None, head_sink=None, k_scale=None, v_scale=None,
              *, num_heads: int, kv_num_heads: int, block_size: int | None = None,
              kv_layout: str = "BSNH", output=None, output_qk=None, **attributes):
    """GroupQueryAttention over a paged KV cache in one call (see PagedGqaOp for shapes).

    Appends this step's key/value rows into key_cache / value_cache in place (where block_table
    and seqlens_k say), then attends. block_size defaults to the pools' (dimension 1 for BSNH,
    2 for BNSH). Returns output (and output_qk with qk_output != 0), allocated in the query's
    framework unless given. The op is cached on the runtime per attribute set and its plans per
    shape signature, so a decode loop plans once.
    """
    if block_size is None:
        cache = _arrays.shape_of(key_cache, "key_cache")
        if len(cache) != 4:
            raise InvalidArgumentError(
                f"key_cache: expected 4 dimensions [num_blocks, block_size, Nkv, H] (BSNH) or "
                f"[num_blocks, Nkv, block_size, H] (BNSH), got {cache}")
        block_size = cache[2] if str(kv_layout).upper() == "BNSH" else cache[1]
    op = runtime.cached_op(PagedGqaOp, num_heads=num_heads, kv_num_heads=kv_num_heads,
                           block_size=block_size, kv_layout=kv_layout, **attributes)
    inputs = {"query": query, "key": key, "value": value, "key_cache": key_cache,
              "value_cache": value_cache, "seqlens_k": seqlens_k,
              "total_sequence_length": total_sequence_length, "cos_cache": cos_cache,
              "sin_cache": sin_cache, "position_ids": position_ids,
              "attention_bias": attention_bias, "head_sink": head_sink, "k_scale": k_scale,
              "v_scale": v_scale, "block_table": block_table}
    return op(output=output, output_qk=output_qk, **inputs)
