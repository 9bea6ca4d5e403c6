"""Paged attention over packed variable-length batches: PagedGqaVarlenOp and
paged_attention_varlen(), in FlashAttention's and vLLM's convention."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import attnrt_c as _c
from . import _arrays, _torch_lib
from ._errors import InvalidArgumentError
from ._gqa import GQA_ATTRIBUTES, set_gqa_attributes
from ._op import Op, io_names
from ._paged_gqa import KV_LAYOUTS, p_precision_value, set_value_cache_type

PAGED_GQA_VARLEN_INPUTS, PAGED_GQA_VARLEN_OUTPUTS = io_names(_c.ATTNRT_OP_PAGED_GQA_VARLEN)


class PagedGqaVarlenOp(Op):
    """Paged GroupQueryAttention over packed variable-length batches
    (attnrt/ops/paged_gqa_varlen.h): prefill chunks and decodes of any number of sequences in one
    call, as a serving engine makes it per layer.

    Attributes: PagedGqaOp's (num_heads, kv_num_heads, block_size, kv_layout, p_precision, scale,
    softcap, local_window_size, smooth_softmax, quantization, v_cache_bit_width, do_rotary,
    rotary_interleaved), without qk_output, and local_window_right (with causal=0: the keys after
    each row it sees, -1 all) and alibi_form ("signed": slope * (j - p), vLLM's, the default;
    "symmetric": -slope * |j - p|, FlashAttention's).

    Inputs (PAGED_GQA_VARLEN_INPUTS): query [num_tokens, N*H] (or [num_tokens, N, H]); key, value
    [num_tokens, Nkv*H] (the new rows, or both None); key_cache, value_cache (block pools, compact
    or strided views of one cache tensor); query_start_loc int32 [B+1]; seq_lens int32 [B] (context
    length including the new tokens); block_table int32 [B, max_blocks]; slot_mapping int64
    [num_tokens] (optional, -1 = row not written); head_sink [N]; k_scale, v_scale;
    key_start_loc int32 [B+1] (optional: key/value rows of their own count, sequence b's
    [key_start_loc[b], key_start_loc[b+1]) written as its last tokens; slot_mapping then has one
    slot per key row); alibi_slopes float32 [N] (optional: ALiBi); cos_cache, sin_cache [M, R/2]
    like query (with do_rotary=1); position_ids int64 [num_tokens], key_position_ids int64
    [key rows] (optional: the rotary positions of query and new key rows, else their token
    positions). Output:
    output [num_tokens, N*H] like query; rows past query_start_loc[B] are left as they are.
    """

    KIND = _c.ATTNRT_OP_PAGED_GQA_VARLEN
    TITLE = "paged GroupQueryAttention (varlen)"
    INPUTS = PAGED_GQA_VARLEN_INPUTS
    OUTPUTS = PAGED_GQA_VARLEN_OUTPUTS
    HOST_INTS = {"query_start_loc": np.int32, "seq_lens": np.int32, "block_table": np.int32,
                 "slot_mapping": np.int64, "key_start_loc": np.int32, "position_ids": np.int64,
                 "key_position_ids": np.int64}
    WRITTEN_INPUTS = ("key_cache", "value_cache")

    def __init__(self, runtime, num_heads: int, kv_num_heads: int, block_size: int,
                 kv_layout: str | int = "BSNH", p_precision: str | int = "exact",
                 v_cache_bit_width: int | None = None, local_window_right: int = -1,
                 alibi_form: str | int = "signed", **attributes):
        native = _c.PagedGqaAttributes()
        set_gqa_attributes(native.gqa, {"num_heads": num_heads, "kv_num_heads": kv_num_heads,
                                        **attributes}, self.TITLE)
        if isinstance(kv_layout, str):
            if kv_layout.upper() not in KV_LAYOUTS:
                raise InvalidArgumentError(
                    f"kv_layout: expected one of {', '.join(KV_LAYOUTS)}, got '{kv_layout}'")
            kv_layout = KV_LAYOUTS[kv_layout.upper()]
        native.block_size = _arrays.integer(block_size, "block_size", 32)
        native.kv_layout = _arrays.integer(kv_layout, "kv_layout", 32)
        self.attributes: dict[str, Any] = {n: getattr(native.gqa, n) for n in GQA_ATTRIBUTES}
        native.p_precision = p_precision_value(p_precision)
        native.local_window_right = _arrays.integer(local_window_right, "local_window_right", 32)
        native.alibi_form = alibi_form_value(alibi_form)
        self.attributes.update(block_size=native.block_size, kv_layout=native.kv_layout,
                               p_precision=native.p_precision,
                               local_window_right=native.local_window_right,
                               alibi_form=native.alibi_form)
        self._cache_types = set_value_cache_type(native, self.attributes, v_cache_bit_width)
        super().__init__(runtime, native, True)

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """output: the query's shape (its head size the value head size) and dtype."""
        inputs = self._by_name(inputs)
        query = _arrays.shape_of(inputs.get("query"), "query")
        return {"output": (_arrays.value_rows_shape(query, inputs.get("key_cache"),
                                                    inputs.get("value_cache"), *self._cache_types),
                           None)}

    def __call__(self, output=None, **inputs):
        """Runs on inputs given by name; returns output, allocated in the query's framework unless
        given."""
        outputs = self.allocate_outputs(inputs, {"output": output})
        self.run(inputs, outputs)
        return outputs["output"]


ALIBI_FORMS = {"signed": 0, "symmetric": 1}


def alibi_form_value(alibi_form) -> int:
    """ALiBi's form as the attribute: "signed" (0, slope * (j - p)) or "symmetric" (1,
    -slope * |j - p|), by name or number."""
    if isinstance(alibi_form, str) and alibi_form.lower() in ALIBI_FORMS:
        return ALIBI_FORMS[alibi_form.lower()]
    if (isinstance(alibi_form, (int, np.integer)) and not isinstance(alibi_form, bool)
            and int(alibi_form) in ALIBI_FORMS.values()):
        return int(alibi_form)
    raise InvalidArgumentError(
        f"alibi_form: expected 'signed' or 'symmetric', got {alibi_form!r}")


def _window(window_size, causal: bool = True) -> tuple[int, int]:
    """FlashAttention's (left, right) window as the op's (local_window_size, local_window_right): a
    query at position p sees keys [p - left, p + right], -1 leaving that side open; causal
    attention sees no later key (right 0 or -1); (-1, -1) is no window."""
    if window_size is None:
        return -1, -1
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"window_size: expected (left, right) integers, got {window_size!r}") from None
    if causal and right not in (-1, 0):
        raise InvalidArgumentError(
            f"window_size: right must be 0 or -1 (causal attention sees no later key), got {right}")
    for side, value in (("left", left), ("right", right)):
        if value < -1:
            raise InvalidArgumentError(f"window_size: {side} must be -1 (off) or >= 0, got {value}")
        if value >= 2**31 - 1:  # left + 1 is the op's int32 local_window_size
            raise InvalidArgumentError(f"window_size: {side} must be below 2^31 - 1, got {value}")
    return -1 if left < 0 else left + 1, -1 if causal else right


def _quantization(k_cache, k_scale, v_scale) -> dict[str, Any]:
    """The quantization attributes of 8-bit caches given with scales (an int8, float8_e4m3fn or
    float8_e5m2 k_cache: one scale each is per tensor, as vLLM's k_scale/v_scale, more is per
    channel), as the C++ operator derives them; none otherwise (the op then names what does not
    fit)."""
    if k_scale is None and v_scale is None:
        return {}
    given = "k_scale" if k_scale is not None else "v_scale"
    name = str(_arrays.dtype_of(k_cache)).removeprefix("torch.")
    if name not in ("int8", "float8_e4m3fn", "float8_e5m2"):
        raise InvalidArgumentError(
            f"{given}: scales are for 8-bit caches (int8, float8_e4m3fn or float8_e5m2), got a "
            f"k_cache of {name}; other quantized caches go through PagedGqaVarlenOp")
    count = 1
    for d in _arrays.shape_of(k_scale if k_scale is not None else v_scale, given):
        count *= d
    quant = "PER_TENSOR" if count == 1 else "PER_CHANNEL"
    return {"k_quant_type": quant, "v_quant_type": quant, "kv_cache_bit_width": 8}


def _heads(q, k_cache, kv_layout) -> tuple[int, int, int]:
    """(num_heads, kv_num_heads, block_size) from q's and k_cache's shapes, as the C++ operator
    derives them; InvalidArgumentError naming the input for a shape they cannot come from."""
    if isinstance(kv_layout, str) and kv_layout.upper() in KV_LAYOUTS:
        bnsh = kv_layout.upper() == "BNSH"
    elif isinstance(kv_layout, int) and not isinstance(kv_layout, bool) and \
            kv_layout in KV_LAYOUTS.values():
        bnsh = kv_layout == KV_LAYOUTS["BNSH"]
    else:
        raise InvalidArgumentError(
            f"kv_layout: expected one of {', '.join(KV_LAYOUTS)}, got {kv_layout!r}")
    cache = _arrays.shape_of(k_cache, "k_cache")
    if len(cache) != 4:
        raise InvalidArgumentError(
            f"k_cache: expected 4 dimensions [num_blocks, block_size, Nkv, H] (BSNH) or "
            f"[num_blocks, Nkv, block_size, H] (BNSH), got {cache}")
    head_size = cache[3]
    if head_size <= 0:
        raise InvalidArgumentError(
            f"k_cache: head size (the last dimension) must be > 0, got {cache}")
    qshape = _arrays.shape_of(q, "q")
    if len(qshape) not in (2, 3):
        raise InvalidArgumentError(
            f"q: expected [num_tokens, N, H] or [num_tokens, N * H], got {qshape}")
    if len(qshape) == 2 and qshape[1] % head_size:
        raise InvalidArgumentError(
            f"q: expected [num_tokens, N * H] with H = {head_size} (k_cache's head size), got "
            f"{qshape}")
    num_heads = qshape[1] if len(qshape) == 3 else qshape[1] // head_size
    return num_heads, cache[1] if bnsh else cache[2], cache[2] if bnsh else cache[1]


def paged_attention_varlen(runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, *,
                           k=None, v=None, cu_seqlens_k=None, alibi_slopes=None,
                           softmax_scale: float | None = None,
                           causal: bool = True, window_size=(-1, -1), softcap: float = 0.0,
                           sinks=None, slot_mapping=None, out=None, kv_layout: str = "BSNH",
                           block_size: int | None = None, k_scale=None, v_scale=None,
                           p_precision: str = "exact", alibi_form: str = "signed",
                           rotary_cos=None, rotary_sin=None, rotary_interleaved: bool = False,
                           position_ids=None, key_position_ids=None):
    """Paged attention over a packed batch, FlashAttention/vLLM style, in one call; no copies.

    q [num_tokens, N, H] (or [num_tokens, N*H]); k_cache, v_cache the block pools
    ([num_blocks, block_size, Nkv, H] for kv_layout "BSNH", [num_blocks, Nkv, block_size, H] for
    "BNSH"; views of one cache tensor are fine; int8, float8_e4m3fn or float8_e5m2 with float32
    k_scale and v_scale, one each as vLLM's, or Nkv * H per channel: x = stored value * scale,
    new rows stored as x / scale, docs/gqa-semantics.md); cu_seqlens_q int32 [B+1]; seq_lens int32 [B]
    (context lengths including the new tokens); block_table int32 [B, max_blocks]. With k and v
    ([num_tokens, Nkv, H]) the new rows are written into the caches first (where slot_mapping
    says, -1 = not written; otherwise where the table and seq_lens say). k and v have one row per
    query row, or with cu_seqlens_k (int32 [B+1], FlashAttention's) rows of their own count:
    sequence b's are rows [cu_seqlens_k[b], cu_seqlens_k[b+1]), written as its last tokens (up to
    seq_lens[b] of them; slot_mapping then has one slot per key row), as cross-attention writes an
    encoder's rows. Query row i of sequence b is token seq_lens[b] - q_len_b + i; causal (default),
    it sees the keys up to its own position, with causal=False every key of its sequence (encoder
    and cross-attention, where q_len_b may exceed seq_lens[b]). window_size (left, right) as
    FlashAttention's: a row at position p sees keys [p - left, p + right] (-1: that side open;
    right 0 or -1 when causal); softcap > 0 caps the scores; alibi_slopes
    float32 [N] adds slope * (key position - query position) to the scores (ALiBi, as vLLM and
    FlashAttention take it; after softcap; alibi_form "symmetric" adds -slope * |key position -
    query position| instead, FlashAttention's form, which differs only without the causal mask);
    rotary_cos, rotary_sin [M, R/2] (q's dtype) rotate the first R dimensions of every query row
    and of every new key row before it is stored (RoPE, half-split or, with
    rotary_interleaved=True, interleaved pairs), at position_ids (int64 [num_tokens]) and
    key_position_ids (int64, one per k row) when given, else at each row's token position (query
    row i of sequence b: seq_lens[b] - q_len_b + i; key row l: seq_lens[b] - k_len_b + l); sinks
    [N] are per-head sink logits. p_precision "exact" (default) keeps the softmax probabilities in float32
    for P·V; "input" rounds each to q's dtype first, as FlashAttention and vLLM's AMX CPU kernel do
    (docs/gqa-semantics.md, "Probability precision"; the same as "exact" for float32). Returns out
    (allocated like q unless given).

    Torch tensors go through the C++ operator library when it is built (attnrt._torch_lib: a few
    microseconds a call); anything else through the Python path.
    """
    if not isinstance(causal, (bool, np.bool_)):
        raise InvalidArgumentError(f"causal: expected True or False, got {causal!r}")
    causal = bool(causal)
    precision = p_precision_value(p_precision)
    unset = isinstance(rotary_interleaved, (bool, np.bool_)) and not rotary_interleaved
    if rotary_cos is None and not unset:
        raise InvalidArgumentError(
            f"rotary_interleaved: {rotary_interleaved!r} given without rotary_cos and rotary_sin "
            "(it chooses the pairs they rotate), expected False or the rotary tables")
    # Rotary embedding and the symmetric ALiBi form (ABI 1.12) go through the Python path.
    newer = (rotary_cos is not None or rotary_sin is not None or position_ids is not None
             or key_position_ids is not None or alibi_form_value(alibi_form) != 0)
    if not newer and _torch_lib.for_tensor(q):
        default = window_size is None or (type(window_size) is tuple and window_size == (-1, -1))
        window, right = (-1, -1) if default else _window(window_size, causal)
        done = _torch_lib.varlen(runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table,
                                 k, v, softmax_scale, window - 1 if window > 0 else -1, softcap,
                                 sinks, slot_mapping, out, kv_layout, block_size,
                                 "input" if precision else "exact", causal, k_scale, v_scale,
                                 cu_seqlens_k, alibi_slopes, right)
        if done is not None:
            return done
    return paged_attention_varlen_python(
        runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, k=k, v=v,
        cu_seqlens_k=cu_seqlens_k, alibi_slopes=alibi_slopes, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap,
        sinks=sinks, slot_mapping=slot_mapping, out=out, kv_layout=kv_layout,
        block_size=block_size, k_scale=k_scale, v_scale=v_scale, p_precision=p_precision,
        alibi_form=alibi_form, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=rotary_interleaved, position_ids=position_ids,
        key_position_ids=key_position_ids)


def paged_attention_varlen_python(runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens,
                                  block_table, *, k=None, v=None, cu_seqlens_k=None,
                                  alibi_slopes=None,
                                  softmax_scale: float | None = None, causal: bool = True,
                                  window_size=(-1, -1),
                                  softcap: float = 0.0, sinks=None, slot_mapping=None, out=None,
                                  kv_layout: str = "BSNH", block_size: int | None = None,
                                  k_scale=None, v_scale=None, p_precision: str = "exact",
                                  alibi_form: str = "signed", rotary_cos=None, rotary_sin=None,
                                  rotary_interleaved: bool = False, position_ids=None,
                                  key_position_ids=None):
    """paged_attention_varlen through PagedGqaVarlenOp (SWIG, DLPack): numpy, DLPack and torch
    inputs alike, quantized caches too (the path the C++ operator shortens for torch tensors)."""
    num_heads, kv_heads, cache_block_size = _heads(q, k_cache, kv_layout)
    if block_size is None:
        block_size = cache_block_size
    window, right = _window(window_size, causal)
    attributes = {"local_window_size": window, "local_window_right": right, "causal": int(causal),
                  "softcap": _arrays.attribute(softcap, float, "softcap"),
                  "p_precision": p_precision_value(p_precision),
                  "alibi_form": alibi_form_value(alibi_form)}
    if (rotary_cos is None) != (rotary_sin is None):
        raise InvalidArgumentError(
            "rotary_cos and rotary_sin: expected both or neither, got "
            + ("rotary_cos only" if rotary_sin is None else "rotary_sin only"))
    if rotary_cos is not None:
        if not isinstance(rotary_interleaved, (bool, np.bool_)):
            raise InvalidArgumentError(
                f"rotary_interleaved: expected True or False, got {rotary_interleaved!r}")
        attributes.update(do_rotary=1, rotary_interleaved=int(bool(rotary_interleaved)))
    if softmax_scale is not None:
        attributes["scale"] = _arrays.attribute(softmax_scale, float, "softmax_scale")
    attributes.update(_quantization(k_cache, k_scale, v_scale))
    op = runtime.cached_op(PagedGqaVarlenOp, num_heads=num_heads, kv_num_heads=kv_heads,
                           block_size=block_size, kv_layout=kv_layout, **attributes)
    inputs = {"query": q, "key": k, "value": v, "key_cache": k_cache, "value_cache": v_cache,
              "query_start_loc": cu_seqlens_q, "seq_lens": seq_lens, "block_table": block_table,
              "slot_mapping": slot_mapping, "head_sink": sinks, "k_scale": k_scale,
              "v_scale": v_scale, "key_start_loc": cu_seqlens_k, "alibi_slopes": alibi_slopes,
              "cos_cache": rotary_cos, "sin_cache": rotary_sin, "position_ids": position_ids,
              "key_position_ids": key_position_ids}
    return op(output=out, **inputs)
