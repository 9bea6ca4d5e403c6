"""flash_attn.layers.rotary's apply_rotary_emb for FlashAttention's tests' references: its own
PyTorch implementation (apply_rotary_emb_torch, read from the sdist FLASH_ATTN_SDIST names; the
Triton kernel it normally calls does not run on CPU), with seqlen_offsets applied per sequence and
the Triton kernel's arithmetic: x, cos and sin loaded as float32, rotated, stored once in x's dtype
(apply_rotary_emb_torch on float16 inputs would round each product and the sum)."""
from __future__ import annotations

import os
import pathlib

import torch

_source = pathlib.Path(os.environ["FLASH_ATTN_SDIST"], "flash_attn", "layers", "rotary.py")
_namespace: dict = {}
exec(compile("".join(line for line in _source.read_text().splitlines(keepends=True)
                     if "flash_attn.ops.triton" not in line), str(_source), "exec"), _namespace)
apply_rotary_emb_torch = _namespace["apply_rotary_emb_torch"]


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    """x [B, S, N, H] rotated at positions seqlen_offsets[b] + s (FlashAttention's Triton
    apply_rotary_emb's meaning), through FlashAttention's PyTorch rotation."""
    assert cu_seqlens is None, "varlen rotary is not used by the tests this shim runs"
    b, s = x.shape[:2]
    offsets = (torch.full((b,), int(seqlen_offsets)) if isinstance(seqlen_offsets, int)
               else seqlen_offsets.cpu().long())
    out = torch.empty_like(x)
    for i in range(b):
        o = int(offsets[i])
        out[i:i + 1] = apply_rotary_emb_torch(x[i:i + 1].float(), cos[o:o + s].float(),
                                              sin[o:o + s].float(), interleaved).to(x.dtype)
    if inplace:
        x.copy_(out)
        return x
    return out
