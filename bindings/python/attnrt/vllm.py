"""attnrt as vLLM's attention backend on CPU (vLLM 0.32's v1 attention API).

vLLM's CPU platform always asks for its CPU_ATTN backend (``--attention-backend`` is ignored on
CPU), so attnrt takes that slot: ``register()`` — the package's ``vllm.general_plugins`` entry
point, run by vLLM in every process it starts (main, engine core, workers) — calls
``vllm.v1.attention.backends.registry.register_backend(AttentionBackendEnum.CPU_ATTN,
"attnrt.vllm.AttnrtBackend")`` when the environment has ``ATTNRT_VLLM=1``, and logs
"attnrt serves attention (...)" through vLLM's logger. Without ATTNRT_VLLM=1 it does nothing and
vLLM runs unchanged.

The backend (AttnrtBackend, AttnrtMetadataBuilder, AttnrtImpl, defined in attnrt._vllm_backend
and importable from here) runs every decoder attention layer — prefill, chunked prefill, decode and
mixed batches, sliding window, softcap, sinks — through attnrt.paged_attention_varlen, writing the
new K/V rows into vLLM's KV cache in place and reading it there. What it cannot serve (ALiBi,
encoder or cross attention, shared KV layers, quantized KV caches, fused output quantization)
fails when vLLM builds the layer, with the reason.

Importing this module does not import vLLM; the backend classes are loaded on first access.
"""
from __future__ import annotations

import os

__all__ = ["register", "enabled", "AttnrtBackend", "AttnrtMetadataBuilder", "AttnrtImpl",
           "AttnrtMetadata"]

BACKEND_CLASS = "attnrt.vllm.AttnrtBackend"


def enabled() -> bool:
    """True when the environment asks for attnrt in vLLM (ATTNRT_VLLM=1)."""
    return os.environ.get("ATTNRT_VLLM", "0").strip() == "1"


def register() -> None:
    """vLLM general plugin: makes attnrt serve CPU_ATTN in this process when ATTNRT_VLLM=1.
    Idempotent (vLLM may call it several times per process)."""
    if not enabled():
        return
    from vllm.logger import init_logger
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    already = AttentionBackendEnum.CPU_ATTN.get_path() == BACKEND_CLASS
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_CLASS)
    if not already:
        from . import _vllm_backend

        # A logger under "vllm": vLLM's handler prints it.
        init_logger("vllm.attnrt").info(
            "attnrt serves attention (vLLM's CPU_ATTN slot -> %s; %s)", BACKEND_CLASS,
            _vllm_backend.describe())


def __getattr__(name):
    if name in ("AttnrtBackend", "AttnrtMetadataBuilder", "AttnrtImpl", "AttnrtMetadata"):
        from . import _vllm_backend

        return getattr(_vllm_backend, name)
    raise AttributeError(f"module 'attnrt.vllm' has no attribute {name!r}")
