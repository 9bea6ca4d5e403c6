"""What attnrt does not do, marked on FlashAttention's own test cases as expected failures
(strict: a case that starts passing fails the run, so this list cannot go stale): dropout. Every
other case runs FlashAttention's test unchanged against attnrt."""
import pytest


def _reason(params):
    if params.get("dropout_p", 0.0) > 0.0:
        return "dropout: attnrt has no attention-probability dropout"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        reason = _reason(callspec.params) if callspec is not None else None
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
