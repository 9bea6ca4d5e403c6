"""What attnrt does not do, marked on FlashAttention's own test cases as expected failures
(strict: a case that starts passing fails the run, so this list cannot go stale): dropout, ALiBi
without the causal mask (FlashAttention adds -slope * |i + seqlen_k - seqlen_q - j|, attnrt
slope * (j - p), vLLM's form), rotary embedding inside flash_attn_with_kvcache, and cache_leftpad.
Every other case runs FlashAttention's test unchanged against attnrt."""
import pytest


def _reason(params):
    if params.get("dropout_p", 0.0) > 0.0:
        return "dropout: attnrt has no attention-probability dropout"
    if params.get("alibi") and not params.get("causal", False):
        return ("ALiBi without the causal mask: attnrt adds slope * (j - p) (vLLM's form), "
                "FlashAttention -slope * |j - p|")
    if params.get("rotary_fraction", 0.0) > 0.0 and params.get("new_kv"):
        return "rotary embedding inside flash_attn_with_kvcache: attnrt's varlen op has none"
    if params.get("has_leftpad"):
        return "cache_leftpad: not served"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        reason = _reason(callspec.params) if callspec is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
