"""A float64 numpy GroupQueryAttention for the binding tests: causal, BNSH caches, no extras."""
from __future__ import annotations

import numpy as np


def reference(query, present_key, present_value, seqlens_k, num_heads, kv_num_heads):
    """query (B,S,N*H); present_* (B,Nkv,>=T,H) already holding every key/value row;
    seqlens_k (B) = T_b - 1. Returns the output (B,S,N*H) in float64."""
    b_count, s_count, hidden = query.shape
    h = hidden // num_heads
    group = num_heads // kv_num_heads
    q = query.astype(np.float64).reshape(b_count, s_count, num_heads, h)
    out = np.zeros((b_count, s_count, num_heads, h))
    for b in range(b_count):
        total = int(seqlens_k[b]) + 1
        for n in range(num_heads):
            keys = present_key[b, n // group, :total].astype(np.float64)
            values = present_value[b, n // group, :total].astype(np.float64)
            for s in range(s_count):
                position = total - s_count + s
                scores = keys[:position + 1] @ q[b, s, n] / np.sqrt(h)
                p = np.exp(scores - scores.max())
                out[b, s, n] = (p / p.sum()) @ values[:position + 1]
    return out.reshape(b_count, s_count, hidden)


def bnsh(x, kv_num_heads):
    """(B,L,Nkv*H) -> (B,Nkv,L,H)."""
    b, l, hidden = x.shape
    return x.reshape(b, l, kv_num_heads, hidden // kv_num_heads).transpose(0, 2, 1, 3)
