"""The paged ops' value head size from Python (docs/paged-gqa.md, "Value head size"): v_cache rows
narrower or wider than k_cache rows, as MLA-style models have them. attnrt.paged_attention_varlen
(the torch operator for torch tensors, the SWIG path for numpy) and the padded op allocate an
output of the value head size, and match PyTorch's scaled_dot_product_attention, which takes a
value head size of its own, per sequence with its causal mask aligned to the end of the keys.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import attnrt

torch = pytest.importorskip("torch")

SEED = int(os.environ.get("ATTNRT_TEST_SEED", random.randrange(2**31)))
N, NKV, BS = 4, 2, 16
# (q_len, seq_len): decodes and prefill chunks over a filled cache.
SEQUENCES = [(1, 40), (6, 29), (3, 3), (1, 17)]


def make_step(rng, h, hv):
    keys, values, queries = [], [], []
    for q_len, total in SEQUENCES:
        keys.append(rng.standard_normal((total, NKV, h)))
        values.append(rng.standard_normal((total, NKV, hv)))
        # Scores that spread over several units: attention far from uniform.
        queries.append(2.0 * rng.standard_normal((q_len, N, h)) / np.sqrt(np.sqrt(h)))
    return keys, values, queries


def layout(keys, values, h, hv):
    """Pools (BSNH) holding each sequence's past rows, its new rows apart, table and lengths."""
    slots = max((t + BS - 1) // BS for _, t in SEQUENCES)
    b = len(SEQUENCES)
    table = np.arange(b * slots, dtype=np.int32).reshape(b, slots)[:, ::-1].copy()
    k_cache = np.zeros((b * slots, BS, NKV, h), dtype=np.float32)
    v_cache = np.zeros((b * slots, BS, NKV, hv), dtype=np.float32)
    new_k, new_v = [], []
    for s, (q_len, total) in enumerate(SEQUENCES):
        for j in range(total - q_len):
            k_cache[table[s, j // BS], j % BS] = keys[s][j]
            v_cache[table[s, j // BS], j % BS] = values[s][j]
        new_k.append(keys[s][total - q_len:])
        new_v.append(values[s][total - q_len:])
    cu = np.concatenate([[0], np.cumsum([q for q, _ in SEQUENCES])]).astype(np.int32)
    seq_lens = np.array([t for _, t in SEQUENCES], dtype=np.int32)
    return (k_cache, v_cache, table, cu, seq_lens, np.concatenate(new_k).astype(np.float32),
            np.concatenate(new_v).astype(np.float32))


def sdpa_reference(keys, values, queries):
    """PyTorch SDPA in float64, sequence by sequence: [num_tokens, N, Hv]."""
    rows = []
    for s, (q_len, total) in enumerate(SEQUENCES):
        q = torch.from_numpy(queries[s]).permute(1, 0, 2)  # [N, q_len, H]
        k = torch.from_numpy(keys[s]).permute(1, 0, 2).repeat_interleave(N // NKV, 0)
        v = torch.from_numpy(values[s]).permute(1, 0, 2).repeat_interleave(N // NKV, 0)
        # Query row i is token total - q_len + i: it sees keys [0, total - q_len + i].
        mask = torch.arange(total)[None, :] <= (total - q_len + torch.arange(q_len))[:, None]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        rows.append(out.permute(1, 0, 2).numpy())
    return np.concatenate(rows)


@pytest.fixture(scope="module")
def rt():
    with attnrt.Runtime(num_threads=2) as r:
        yield r


@pytest.mark.parametrize("h,hv", [(96, 64), (64, 128), (192, 128), (72, 64)])
@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_varlen_matches_sdpa(rt, h, hv, path):
    rng = np.random.default_rng(SEED + h * 1000 + hv)
    keys, values, queries = make_step(rng, h, hv)
    k_cache, v_cache, table, cu, seq_lens, k, v = layout(keys, values, h, hv)
    q = np.concatenate(queries).astype(np.float32)
    if path == "torch":
        q, k, v, k_cache, v_cache, table, cu, seq_lens = map(
            torch.from_numpy, (q, k, v, k_cache, v_cache, table, cu, seq_lens))
    out = attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, seq_lens, table, k=k, v=v)
    out = out.numpy() if path == "torch" else np.asarray(out)
    assert out.shape == (q.shape[0], N, hv), f"seed {SEED}"
    ref = sdpa_reference(keys, values, queries)
    # Not near-uniform: a kernel reading the wrong rows would show.
    assert np.abs(ref).max() > 0.5, f"seed {SEED}"
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5, err_msg=f"seed {SEED}")
    # The new rows went into the pools, each as wide as its own cache.
    v_pool = v_cache.numpy() if path == "torch" else v_cache
    s, (q_len, total) = 0, SEQUENCES[0]
    j = total - 1
    np.testing.assert_array_equal(v_pool[table[s, j // BS], j % BS],
                                  values[s][j].astype(np.float32))


def test_negative_control_with_one_head_size_fails(rt):
    """A reference whose V rows belong to other tokens (each sequence's rows reversed) must not
    match: the comparison can fail."""
    rng = np.random.default_rng(SEED)
    h, hv = 96, 64
    keys, values, queries = make_step(rng, h, hv)
    k_cache, v_cache, table, cu, seq_lens, k, v = layout(keys, values, h, hv)
    q = np.concatenate(queries).astype(np.float32)
    out = np.asarray(attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, seq_lens, table,
                                                   k=k, v=v))
    wrong = sdpa_reference(keys, [np.ascontiguousarray(x[::-1]) for x in values], queries)
    assert not np.allclose(out, wrong, rtol=1e-3, atol=1e-3), f"seed {SEED}"


def test_output_of_the_key_head_size_is_refused_by_name(rt):
    h, hv = 96, 64
    keys, values, queries = make_step(np.random.default_rng(SEED), h, hv)
    k_cache, v_cache, table, cu, seq_lens, k, v = layout(keys, values, h, hv)
    q = np.concatenate(queries).astype(np.float32)
    out = np.empty_like(q)  # N * H columns, where the output has N * Hv
    with pytest.raises(attnrt.InvalidArgumentError, match="output"):
        attnrt.paged_attention_varlen(rt, q, k_cache, v_cache, cu, seq_lens, table, k=k, v=v,
                                      out=out)
