"""FlashAttention 2's Python interface (flash_attn 2.7.4) over attnrt, forward only, on CPU: the
shim that lets FlashAttention's own tests (tests/test_flash_attn.py of its sdist) check
attnrt.paged_attention_varlen (scripts/test-flash-attn.sh). Keys and values given directly are
written into scratch block pools through cu_seqlens_k (attnrt's key_start_loc) and attended in the
same call; flash_attn_with_kvcache's caches are read where they lie (BSNH blocks).

Rotary embedding in flash_attn_with_kvcache is attnrt's (rotary_cos/rotary_sin with
FlashAttention's positions as position_ids/key_position_ids); cache_leftpad starts each sequence's
block table at its pad (blocks of one row); ALiBi takes FlashAttention's form, alibi_form
"symmetric" (-slope * |i + seqlen_k - seqlen_q - j|). Dropout is refused by name
(NotImplementedError). softmax_lse is not computed: return_attn_probs / return_softmax_lse give
None in its place."""
from .flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func,  # noqa: F401
                                   flash_attn_qkvpacked_func, flash_attn_varlen_func,
                                   flash_attn_varlen_kvpacked_func,
                                   flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func",
           "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_with_kvcache"]
