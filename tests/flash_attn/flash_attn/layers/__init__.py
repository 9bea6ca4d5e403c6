"""flash_attn.layers (the rotary module FlashAttention's tests import)."""
