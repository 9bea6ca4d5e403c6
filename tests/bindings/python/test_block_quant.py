"""ggml's Q8_0/Q4_0 KV blocks (k_quant_type "PER_BLOCK_32", docs/gqa-semantics.md) from Python.

The blocks are built here with numpy from ggml's definitions (quantize_row_q8_0_ref /
quantize_row_q4_0_ref in ggml-quants.c), the expected output is gqa_numpy's float64 attention over
the dequantized rows, and the row a decode appends must come back as the bytes the quantizer makes.
"""
from __future__ import annotations

import numpy as np
import pytest

import attnrt
from gqa_numpy import reference

N, NKV, H = 4, 2, 64
BLOCK_BYTES = {8: 34, 4: 18}


def quantize_row(x, bits):
    """One row of H float32 values as H/32 ggml blocks (uint8)."""
    out = []
    for block in x.astype(np.float32).reshape(-1, 32):
        if bits == 8:
            d = np.float32(np.abs(block).max()) / np.float32(127)
            inv = np.float32(1) / d if d else np.float32(0)
            # roundf: halves away from zero
            q = np.trunc(block * inv + np.copysign(np.float32(0.5), block * inv)).astype(np.int8)
            payload = q.view(np.uint8)
        else:
            m = block[np.argmax(np.abs(block))]  # the first of the largest magnitude
            d = np.float32(m) / np.float32(-8)
            inv = np.float32(1) / d if d else np.float32(0)
            codes = np.minimum(15, ((block * inv).astype(np.float32) + np.float32(8.5))
                               .astype(np.int8)).astype(np.uint8)
            payload = codes[:16] | (codes[16:] << 4)
        out.append(np.concatenate([np.array([d], np.float16).view(np.uint8), payload]))
    return np.concatenate(out)


def dequantize_row(row, bits):
    values = []
    for block in row.reshape(-1, BLOCK_BYTES[bits]):
        d = block[:2].view(np.float16)[0].astype(np.float32)
        if bits == 8:
            q = block[2:].view(np.int8).astype(np.float32)
        else:
            q = np.concatenate([block[2:] & 0xF, block[2:] >> 4]).astype(np.float32) - 8
        values.append(q * d)
    return np.concatenate(values)


@pytest.mark.parametrize("bits", [8, 4])
def test_decode_over_block_cache_matches_reference(bits):
    rng = np.random.default_rng(20261206 + bits)
    past, capacity = 37, 48
    width = H // 32 * BLOCK_BYTES[bits]
    raw_k = rng.standard_normal((1, NKV, capacity, H)).astype(np.float32) * 2
    raw_v = rng.standard_normal((1, NKV, capacity, H)).astype(np.float32)
    cache_k = np.zeros((1, NKV, capacity, width), np.uint8)
    cache_v = np.zeros_like(cache_k)
    for h in range(NKV):
        for t in range(past):
            cache_k[0, h, t] = quantize_row(raw_k[0, h, t], bits)
            cache_v[0, h, t] = quantize_row(raw_v[0, h, t], bits)
    q = rng.standard_normal((1, 1, N * H)).astype(np.float32)
    k = rng.standard_normal((1, 1, NKV * H)).astype(np.float32)
    v = rng.standard_normal((1, 1, NKV * H)).astype(np.float32)
    out = np.full((1, 1, N * H), np.nan, np.float32)
    with attnrt.Runtime() as rt:
        op = rt.gqa_op(N, NKV, k_quant_type="PER_BLOCK_32", v_quant_type="PER_BLOCK_32",
                       kv_cache_bit_width=bits)
        op.run({"query": q, "key": k, "value": v, "past_key": cache_k, "past_value": cache_v,
                "seqlens_k": [past], "total_sequence_length": past + 1},
               {"output": out, "present_key": cache_k, "present_value": cache_v})
    for h in range(NKV):
        np.testing.assert_array_equal(cache_k[0, h, past], quantize_row(k[0, 0, h * H:(h + 1) * H],
                                                                        bits))
        np.testing.assert_array_equal(cache_v[0, h, past], quantize_row(v[0, 0, h * H:(h + 1) * H],
                                                                        bits))
    rows = past + 1
    keys = np.array([[dequantize_row(cache_k[0, h, t], bits) for t in range(rows)]
                     for h in range(NKV)])[None]
    values = np.array([[dequantize_row(cache_v[0, h, t], bits) for t in range(rows)]
                       for h in range(NKV)])[None]
    expected = reference(q, keys, values, [past], N, NKV)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    # The attention is not near-uniform: a wrong key would show.
    assert np.abs(expected).max() > 0.2


def test_block_cache_errors_name_the_input():
    with attnrt.Runtime() as rt:
        op = rt.gqa_op(N, NKV, k_quant_type="PER_BLOCK_32", v_quant_type="PER_BLOCK_32",
                       kv_cache_bit_width=8)
        q = np.zeros((1, 1, N * H), np.float32)
        kv = np.zeros((1, 1, NKV * H), np.float32)
        wrong = np.zeros((1, NKV, 8, H // 2), np.uint8)  # int4's width, not Q8_0's 68 bytes
        with pytest.raises(attnrt.InvalidArgumentError, match="past_key.*expected 68"):
            op.run({"query": q, "key": kv, "value": kv, "past_key": wrong, "past_value": wrong,
                    "seqlens_k": [4], "total_sequence_length": 5},
                   {"output": np.zeros((1, 1, N * H), np.float32), "present_key": wrong,
                    "present_value": wrong})
        cache = np.zeros((1, NKV, 8, 68), np.uint8)
        with pytest.raises(attnrt.InvalidArgumentError, match="k_scale must be absent"):
            op.run({"query": q, "key": kv, "value": kv, "past_key": cache, "past_value": cache,
                    "seqlens_k": [4], "total_sequence_length": 5,
                    "k_scale": np.ones(1, np.float32), "v_scale": np.ones(1, np.float32)},
                   {"output": np.zeros((1, 1, N * H), np.float32), "present_key": cache,
                    "present_value": cache})


@pytest.mark.parametrize("key_dtype,bits", [(np.float16, 4), (np.float32, 8)])
def test_paged_decode_with_a_value_cache_of_its_own_type(key_dtype, bits):
    """-ctk f16 -ctv q4_0 as llama.cpp makes it: a float key cache of the query's dtype and a
    Q4_0/Q8_0 value cache (v_cache_bit_width, docs/paged-gqa.md "Value cache type"), one block of
    `capacity` rows per kv head (BNSH)."""
    rng = np.random.default_rng(20261207 + bits)
    past, capacity = 29, 40
    width = H // 32 * BLOCK_BYTES[bits]
    key_cache = (rng.standard_normal((1, NKV, capacity, H)) * 2).astype(key_dtype)
    raw_v = rng.standard_normal((1, NKV, capacity, H)).astype(np.float32)
    value_cache = np.zeros((1, NKV, capacity, width), np.uint8)
    for h in range(NKV):
        for t in range(past):
            value_cache[0, h, t] = quantize_row(raw_v[0, h, t], bits)
    q = (rng.standard_normal((1, 1, N * H)) * 2).astype(key_dtype)
    k = rng.standard_normal((1, 1, NKV * H)).astype(key_dtype)
    v = rng.standard_normal((1, 1, NKV * H)).astype(key_dtype)
    with attnrt.Runtime() as rt:
        op = rt.paged_gqa_op(N, NKV, capacity, kv_layout="BNSH", v_quant_type="PER_BLOCK_32",
                             v_cache_bit_width=bits)
        assert op.attributes["v_cache_bit_width"] == bits
        out = op(query=q, key=k, value=v, key_cache=key_cache, value_cache=value_cache,
                 seqlens_k=[past], total_sequence_length=past + 1,
                 block_table=np.zeros((1, 1), np.int32))
    assert out.shape == (1, 1, N * H) and out.dtype == key_dtype
    for h in range(NKV):
        np.testing.assert_array_equal(key_cache[0, h, past], k[0, 0, h * H:(h + 1) * H])
        np.testing.assert_array_equal(
            value_cache[0, h, past], quantize_row(v[0, 0, h * H:(h + 1) * H].astype(np.float32),
                                                  bits))
    rows = past + 1
    values = np.array([[dequantize_row(value_cache[0, h, t], bits) for t in range(rows)]
                       for h in range(NKV)])[None]
    expected = reference(q, key_cache, values, [past], N, NKV)
    tolerance = 2e-3 if key_dtype == np.float16 else 1e-5
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    # A wrong reading would show: the value rows read as the key cache's type do not match.
    assert np.abs(expected).max() > 0.2
    wrong = reference(q, key_cache, np.repeat(values[..., :1], H, -1), [past], N, NKV)
    assert not np.allclose(out, wrong, rtol=tolerance, atol=tolerance)


def test_value_cache_type_errors_name_the_attribute():
    with attnrt.Runtime() as rt:
        with pytest.raises(attnrt.InvalidArgumentError, match="v_cache_bit_width must be 8"):
            rt.paged_gqa_op(N, NKV, 16, v_quant_type="PER_BLOCK_32", v_cache_bit_width=0)
        op = rt.paged_gqa_op(N, NKV, 16, v_quant_type="NONE", v_cache_bit_width=0)
        q = np.zeros((1, 1, N * H), np.float32)
        key_cache = np.zeros((1, 16, NKV, H), np.float32)
        with pytest.raises(attnrt.InvalidArgumentError, match="value_cache: expected dtype float32, "
                                                              "float16 or bfloat16"):
            op(query=q, key=None, value=None, key_cache=key_cache,
               value_cache=np.zeros((1, 16, NKV, H), np.int8), seqlens_k=[3],
               total_sequence_length=4, block_table=np.zeros((1, 1), np.int32))
