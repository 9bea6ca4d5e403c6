"""flash_attn.flash_attn_interface over attnrt.paged_attention_varlen (see the package's
docstring). Every function takes FlashAttention 2.7.4's arguments in its order."""
from __future__ import annotations

import math

import torch

import attnrt

_RUNTIME = None
_BLOCK = 16  # the scratch pools' block size (any works; 16 keeps padding small)


def _runtime():
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = attnrt.Runtime(num_threads=torch.get_num_threads())
    return _RUNTIME


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    raise NotImplementedError("attnrt: dropout is not served (no attention probabilities)")


def _check(dropout_p):
    if dropout_p:
        raise NotImplementedError("attnrt: dropout is not served")


def _window(window_size, causal):
    left, right = (int(w) for w in window_size)
    return (left, 0) if causal else (left, right)


def _per_sequence_slopes(alibi_slopes, batch):
    """FlashAttention's slopes, [N] or [B, N], as one [N] row per sequence."""
    slopes = alibi_slopes.float()
    return [slopes if slopes.dim() == 1 else slopes[b] for b in range(batch)]


def _attend(q, k_cache, v_cache, cu_q, seq_lens, table, *, causal, window, softcap, scale,
            alibi, k=None, v=None, cu_k=None, rotary=None, position_ids=None,
            key_position_ids=None):
    """One attnrt call, or one per sequence when ALiBi slopes differ between sequences. ALiBi
    takes FlashAttention's form, -slope * |j - p|: alibi_form "symmetric" where it differs from
    attnrt's default (without the causal mask; the other calls keep the C++ torch operator's
    path); rotary is (cos, sin, interleaved) or None."""
    kwargs = dict(causal=causal, window_size=_window(window, causal), softcap=softcap,
                  softmax_scale=scale, kv_layout="BSNH",
                  alibi_form="symmetric" if alibi is not None and not causal else "signed")
    if rotary is not None:
        kwargs.update(rotary_cos=rotary[0], rotary_sin=rotary[1], rotary_interleaved=rotary[2])
    batch = seq_lens.numel()
    slopes = _per_sequence_slopes(alibi, batch) if alibi is not None else None
    if slopes is None or all(torch.equal(s, slopes[0]) for s in slopes):
        return attnrt.paged_attention_varlen(
            _runtime(), q, k_cache, v_cache, cu_q, seq_lens, table, k=k, v=v, cu_seqlens_k=cu_k,
            alibi_slopes=None if slopes is None else slopes[0].contiguous(),
            position_ids=position_ids, key_position_ids=key_position_ids, **kwargs)
    out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=q.dtype)
    for b in range(batch):
        q0, q1 = int(cu_q[b]), int(cu_q[b + 1])
        k0, k1 = (int(cu_k[b]), int(cu_k[b + 1])) if cu_k is not None else (q0, q1)
        one = torch.tensor([0, q1 - q0], dtype=torch.int32)
        out[q0:q1] = attnrt.paged_attention_varlen(
            _runtime(), q[q0:q1].contiguous(), k_cache, v_cache, one, seq_lens[b:b + 1],
            table[b:b + 1], k=None if k is None else k[k0:k1].contiguous(),
            v=None if v is None else v[k0:k1].contiguous(),
            cu_seqlens_k=None if cu_k is None else torch.tensor([0, k1 - k0], dtype=torch.int32),
            alibi_slopes=slopes[b].contiguous(),
            position_ids=None if position_ids is None else position_ids[q0:q1].contiguous(),
            key_position_ids=(None if key_position_ids is None
                              else key_position_ids[k0:k1].contiguous()),
            **kwargs)
    return out


def _varlen(q, k, v, cu_q, cu_k, dropout_p, softmax_scale, causal, window_size, softcap,
            alibi_slopes):
    """FlashAttention's varlen call: keys and values given as packed rows, written into scratch
    BSNH pools (one run of blocks per sequence) and attended in the same call."""
    _check(dropout_p)
    cu_q = cu_q.to(torch.int32).cpu()
    cu_k = cu_k.to(torch.int32).cpu()
    k_lens = (cu_k[1:] - cu_k[:-1]).to(torch.int32)
    batch = k_lens.numel()
    blocks_per_seq = max(1, (int(k_lens.max()) + _BLOCK - 1) // _BLOCK) if batch else 1
    table = torch.arange(batch * blocks_per_seq, dtype=torch.int32).view(batch, blocks_per_seq)
    nkv, h, hv = k.shape[1], k.shape[2], v.shape[2]
    k_pool = torch.zeros(batch * blocks_per_seq, _BLOCK, nkv, h, dtype=k.dtype)
    v_pool = torch.zeros(batch * blocks_per_seq, _BLOCK, nkv, hv, dtype=v.dtype)
    return _attend(q.detach().contiguous(), k_pool, v_pool, cu_q, k_lens, table, causal=causal,
                   window=window_size, softcap=softcap, scale=softmax_scale, alibi=alibi_slopes,
                   k=k.detach().contiguous(), v=v.detach().contiguous(), cu_k=cu_k)


def _result(out, return_attn_probs):
    return (out, None, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    if block_table is not None:
        # Paged keys: k/v are the block pools [num_blocks, page_block_size, Nkv, H]; cu_seqlens_k
        # gives each sequence's context length.
        _check(dropout_p)
        cu_k = cu_seqlens_k.to(torch.int32).cpu()
        seq_lens = (cu_k[1:] - cu_k[:-1]).to(torch.int32)
        out = _attend(q.detach().contiguous(), k.detach(), v.detach(),
                      cu_seqlens_q.to(torch.int32).cpu(), seq_lens,
                      block_table.to(torch.int32).cpu(), causal=causal, window=window_size,
                      softcap=softcap, scale=softmax_scale, alibi=alibi_slopes)
        return _result(out, return_attn_probs)
    out = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                  window_size, softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False):
    k, v = kv.unbind(1)
    out = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                  window_size, softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    q, k, v = qkv.unbind(1)
    out = _varlen(q, k, v, cu_seqlens, cu_seqlens, dropout_p, softmax_scale, causal, window_size,
                  softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def _padded(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes):
    """[B, S, N, H] inputs as a varlen batch of equal lengths."""
    b, sq, n, _ = q.shape
    sk = k.shape[1]
    cu_q = torch.arange(b + 1, dtype=torch.int32) * sq
    cu_k = torch.arange(b + 1, dtype=torch.int32) * sk
    out = _varlen(q.reshape(b * sq, n, -1), k.reshape(b * sk, k.shape[2], -1),
                  v.reshape(b * sk, v.shape[2], -1), cu_q, cu_k, dropout_p, softmax_scale,
                  causal, window_size, softcap, alibi_slopes)
    return out.view(b, sq, n, -1)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    out = _padded(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    k, v = kv.unbind(2)
    out = _padded(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    q, k, v = qkv.unbind(2)
    out = _padded(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return _result(out, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """The caches are read (and k/v appended at cache_seqlens) where they lie: a paged cache
    [num_blocks, page_block_size, Nkv, H] through block_table, a contiguous one [B_cache, S, Nkv,
    H] as one block of S rows per batch entry (cache_batch_idx choosing the entry). With
    cache_leftpad, entry b's keys start at row cache_leftpad[b]: the contiguous cache is read as
    blocks of one row, and sequence b's table starts at that row (so its positions, for the causal
    mask, windows and ALiBi, count from it; FlashAttention's rotary positions stay the cache's
    rows, given as position_ids and key_position_ids)."""
    b, sq, n, _ = q.shape
    if cache_seqlens is None:
        cached = torch.full((b,), k_cache.shape[1] if block_table is None else 0, dtype=torch.int32)
    elif isinstance(cache_seqlens, int):
        cached = torch.full((b,), cache_seqlens, dtype=torch.int32)
    else:
        cached = cache_seqlens.to(torch.int32).cpu()
    leftpad = (torch.zeros(b, dtype=torch.int32) if cache_leftpad is None
               else cache_leftpad.to(torch.int32).cpu())
    if block_table is None:
        # Entry e's S rows as S / bs blocks of bs rows (attnrt's blocks hold at most 1024 rows);
        # blocks of one row when the entries start at a left pad.
        entries_total, s = k_cache.shape[0], k_cache.shape[1]
        bs = math.gcd(s, 256) if cache_leftpad is None else 1
        k_cache = k_cache.view(entries_total * (s // bs), bs, *k_cache.shape[2:])
        v_cache = v_cache.view(entries_total * (s // bs), bs, *v_cache.shape[2:])
        entries = (torch.arange(b, dtype=torch.int32) if cache_batch_idx is None
                   else cache_batch_idx.to(torch.int32).cpu())
        first = entries.view(b, 1) * (s // bs) + (leftpad.view(b, 1) // bs)
        # Rows past the entry's end repeat its last block: a table's unused slots are never read.
        table = torch.minimum(first + torch.arange(s // bs, dtype=torch.int32),
                              entries.view(b, 1) * (s // bs) + s // bs - 1).to(torch.int32)
    else:
        table = block_table.to(torch.int32).cpu()
    new = 0 if k is None else k.shape[1]
    seq_lens = (cached - leftpad + new).to(torch.int32)
    cu_q = torch.arange(b + 1, dtype=torch.int32) * sq
    kwargs = {}
    if k is not None:
        kwargs = dict(k=k.detach().reshape(b * new, k.shape[2], -1).contiguous(),
                      v=v.detach().reshape(b * new, v.shape[2], -1).contiguous(),
                      cu_k=torch.arange(b + 1, dtype=torch.int32) * new)
    if rotary_cos is not None:
        # FlashAttention's rotary positions: the new keys at cache_seqlens + l; the queries at
        # cache_seqlens + i when causal or local, else all at cache_seqlens.
        local = tuple(int(w) for w in window_size) != (-1, -1)
        steps = torch.arange(sq, dtype=torch.int64) if causal or local else torch.zeros(
            sq, dtype=torch.int64)
        kwargs.update(
            rotary=(rotary_cos.detach().contiguous(), rotary_sin.detach().contiguous(),
                    bool(rotary_interleaved)),
            position_ids=(cached.view(b, 1).to(torch.int64) + steps).reshape(-1),
            key_position_ids=(cached.view(b, 1).to(torch.int64)
                              + torch.arange(new, dtype=torch.int64)).reshape(-1))
    out = _attend(q.detach().reshape(b * sq, n, -1).contiguous(), k_cache, v_cache, cu_q, seq_lens,
                  table, causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                  alibi=alibi_slopes, **kwargs)
    out = out.view(b, sq, n, -1)
    return (out, None) if return_softmax_lse else out
