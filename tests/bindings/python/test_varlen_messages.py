"""PagedGqaVarlenOp's refusals name the input at fault and the shape it should have: a query of the
wrong rank or width is described with the head size of the key cache (not a head size of 0 or a
quotient of its own wrong width), a query_start_loc that does not match seq_lens says where
batch_size comes from."""
from __future__ import annotations

import numpy as np
import pytest

import attnrt

HEADS, KV_HEADS, H, BS = 4, 2, 16, 8


def run(rt, **overrides):
    inputs = dict(query=np.zeros((3, HEADS * H), np.float32),
                  key_cache=np.zeros((4, BS, KV_HEADS, H), np.float32),
                  value_cache=np.zeros((4, BS, KV_HEADS, H), np.float32),
                  query_start_loc=np.array([0, 3], np.int32), seq_lens=np.array([5], np.int32),
                  block_table=np.array([[0, 1]], np.int32))
    inputs.update(overrides)
    op = attnrt.PagedGqaVarlenOp(rt, num_heads=HEADS, kv_num_heads=KV_HEADS, block_size=BS)
    return op(**inputs)


@pytest.mark.parametrize("query", [np.zeros((3, 3), np.float32), np.zeros((3, 50), np.float32),
                                   np.zeros((3,), np.float32), np.zeros((3, 4, 16, 1), np.float32)],
                         ids=["row_below_num_heads", "row_not_a_multiple", "rank1", "rank4"])
def test_a_malformed_query_is_described_with_the_caches_head_size(query):
    with attnrt.Runtime() as rt:
        with pytest.raises(attnrt.InvalidArgumentError) as error:
            run(rt, query=query)
    message = str(error.value)
    assert message.split(": ", 1)[1].startswith("query:"), message
    assert "num_heads * head_size = 64" in message and f"[num_tokens, {HEADS}, {H}]" in message, \
        message


def test_query_start_loc_against_seq_lens_says_where_batch_size_comes_from():
    with attnrt.Runtime() as rt:
        with pytest.raises(attnrt.InvalidArgumentError) as error:
            run(rt, seq_lens=np.array([5, 5], np.int32))
    message = str(error.value)
    assert "query_start_loc: expected [batch_size + 1, seq_lens' length + 1 = 3]" \
        in message, message
