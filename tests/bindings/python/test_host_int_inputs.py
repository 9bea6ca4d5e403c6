"""Host integer inputs given as Python ints, lists or numpy scalars (seqlens_k,
total_sequence_length, query_start_loc, seq_lens, block_table, slot_mapping, ...): integers of the
input's dtype range are taken as they are; floats, bools, rows of different lengths and values
past the dtype's range are an InvalidArgumentError naming the input and the element, raised before
any output is sized or written (a float list used to be truncated, total_sequence_length=[1e12]
asked numpy for 116 TiB). The valid forms give the same output as int32 arrays."""
from __future__ import annotations

import enum

import numpy as np
import pytest

import attnrt

N, NKV, H, S = 4, 2, 16, 8
RNG = np.random.default_rng(0)
Q = RNG.random((1, S, N * H), dtype=np.float32)
K = RNG.random((1, S, NKV * H), dtype=np.float32)


def gqa(**changes):
    args = dict(seqlens_k=np.array([S - 1], np.int32),
                total_sequence_length=np.array([S], np.int32))
    args.update(changes)
    with attnrt.Runtime(num_threads=1) as rt:
        return attnrt.gqa(rt, Q, K, K, num_heads=N, kv_num_heads=NKV, **args)


class Seven(enum.IntEnum):
    SEVEN = S - 1


@pytest.mark.parametrize("name,value,pattern", [
    ("seqlens_k", [7.0], r"seqlens_k: expected integers, element 0 \(flattened\) is float 7\.0"),
    ("seqlens_k", [True], r"seqlens_k: expected integers, element 0 \(flattened\) is bool"),
    ("seqlens_k", True, r"seqlens_k: expected an integer, got the bool"),
    ("seqlens_k", [2**31], r"seqlens_k: element 0 \(flattened\) = 2147483648 does not fit int32"),
    ("total_sequence_length", 8.9, r"total_sequence_length"),
    ("total_sequence_length", [1e12], r"total_sequence_length: expected integers"),
    ("total_sequence_length", [True], r"total_sequence_length: expected integers"),
    ("total_sequence_length", 2**32 + 8, r"total_sequence_length: .*does not fit int32"),
    ("total_sequence_length", np.int64(2**32 + 8), r"total_sequence_length: .*does not fit int32"),
    ("total_sequence_length", np.float32(8), r"total_sequence_length"),
])
def test_gqa_host_ints_refused_by_name(name, value, pattern):
    with pytest.raises(attnrt.InvalidArgumentError, match=pattern):
        gqa(**{name: value})


@pytest.mark.parametrize("seqlens_k", [[S - 1], (S - 1,), S - 1, np.int8(S - 1), [np.int64(S - 1)],
                                       [np.array(S - 1)], [Seven.SEVEN]])
def test_gqa_host_int_forms_accepted(seqlens_k):
    want = gqa()[0]
    got = gqa(seqlens_k=seqlens_k, total_sequence_length=S)[0]
    np.testing.assert_array_equal(got, want)


KV_CACHE = RNG.random((3, 16, NKV, H), dtype=np.float32)  # 3 blocks of 16 (BSNH)
Q_DECODE = RNG.random((2, N, H), dtype=np.float32)


def varlen(**changes):
    """Two decodes over blocks of 16: sequences of 20 and 9 tokens."""
    kc, q = KV_CACHE, Q_DECODE
    args = dict(cu_seqlens_q=np.array([0, 1, 2], np.int32), seq_lens=np.array([20, 9], np.int32),
                block_table=np.array([[0, 1], [2, 0]], np.int32))
    args.update(changes)
    with attnrt.Runtime(num_threads=1) as rt:
        return attnrt.paged_attention_varlen(rt, q, kc, kc, args["cu_seqlens_q"],
                                             args["seq_lens"], args["block_table"])


@pytest.mark.parametrize("name,value,pattern", [
    ("seq_lens", [20.5, 9.0], r"seq_lens: expected integers, element 0"),
    ("seq_lens", [20, False], r"seq_lens: expected integers, element 1"),
    ("block_table", [[0, 1], [2]], r"block_table: a nested list whose rows differ in length"),
    ("block_table", [[0, 1], [2, 0.0]], r"block_table: expected integers, element 3"),
    ("cu_seqlens_q", [0, 1, 2**40], r"query_start_loc: element 2 .*does not fit int32"),
])
def test_varlen_host_ints_refused_by_name(name, value, pattern):
    with pytest.raises(attnrt.InvalidArgumentError, match=pattern):
        varlen(**{name: value})


def test_varlen_host_int_lists_accepted():
    np.testing.assert_array_equal(
        varlen(cu_seqlens_q=[0, 1, 2], seq_lens=[20, np.int16(9)], block_table=[[0, 1], [2, 0]]),
        varlen())
