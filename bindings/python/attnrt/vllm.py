"""attnrt as vLLM's attention backend on CPU (vLLM 0.32's v1 attention API).

vLLM's CPU platform always asks for its CPU_ATTN backend (``--attention-backend`` is ignored on
CPU), so attnrt takes that slot: ``register()`` — the package's ``vllm.general_plugins`` entry
point, run by vLLM in every process it starts (main, engine core, workers) — calls
``vllm.v1.attention.backends.registry.register_backend(AttentionBackendEnum.CPU_ATTN,
"attnrt.vllm.AttnrtBackend")`` when the environment has ``ATTNRT_VLLM=1``, and logs
"attnrt serves attention (...)" through vLLM's logger. Without ATTNRT_VLLM=1 it does nothing and
vLLM runs unchanged. With ATTNRT_VLLM=1 and attnrt not usable (libattnrt.so missing or of an
older ABI, the C++ torch operators missing) register() raises, which fails vLLM's start-up with
the reason; any ATTNRT_VLLM value but 0, 1 or unset raises too. Layers whose backend vLLM picks
before CPU_ATTN (MLA models: CPU_MLA, AMX_MLA) are named in the log with the backend serving
them.

The backend (AttnrtBackend, AttnrtMetadataBuilder, AttnrtImpl, defined in attnrt._vllm_backend
and importable from here) runs every decoder attention layer — prefill, chunked prefill, decode and
mixed batches, sliding window, softcap, sinks — through attnrt.paged_attention_varlen, writing the
new K/V rows into vLLM's KV cache in place and reading it there. What it cannot serve (ALiBi,
encoder or cross attention, shared KV layers, quantized KV caches, fused output quantization)
fails when vLLM builds the layer, with the reason.

DeepSeek-V4 (vLLM's own CPU layer, DeepseekV4CPUAttention, which CPU_ATTN does not serve): with
ATTNRT_VLLM=1 and vLLM 0.32.0, register() also routes the layer's sparse attention kernel call
(torch.ops._C.flash_mla_with_kvcache_cpu in DeepseekV4CPUAttention.forward_mqa, that method only)
to attnrt._vllm_deepseek_v4.flash_mla_with_kvcache, attnrt's sparse MLA on vLLM's caches in place,
when vLLM imports that module (only for this model), and logs "attnrt serves DeepSeek-V4 sparse
attention". Another vLLM version, or a method or kernel of another signature, is logged as a
refusal and vLLM's kernel serves the layer.

Importing this module does not import vLLM; the backend classes are loaded on first access.
"""
from __future__ import annotations

import os

__all__ = ["register", "enabled", "AttnrtBackend", "AttnrtMetadataBuilder", "AttnrtImpl",
           "AttnrtMetadata"]

BACKEND_CLASS = "attnrt.vllm.AttnrtBackend"


def enabled() -> bool:
    """True when the environment asks for attnrt in vLLM (ATTNRT_VLLM=1); False for 0 or unset
    (or empty). Any other value raises ValueError naming the variable and its values."""
    raw = os.environ.get("ATTNRT_VLLM")
    value = "" if raw is None else raw.strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"ATTNRT_VLLM={raw!r}: expected 1 (attnrt serves vLLM's CPU attention) or 0 "
                     f"/ unset (vLLM's own attention)")


def check_usable() -> None:
    """Raises RuntimeError saying why attnrt cannot serve vLLM's attention in this process: the
    package did not import (libattnrt.so missing or of an older ABI) or its C++ torch operators
    are missing or do not load (unless ATTNRT_TORCH_OPS=0 asks for the Python path)."""
    import attnrt

    if attnrt._IMPORT_ERROR is not None:
        raise RuntimeError(f"ATTNRT_VLLM=1 but attnrt is not usable: {attnrt._IMPORT_ERROR}") \
            from attnrt._IMPORT_ERROR
    from . import _torch_lib

    if not _torch_lib.load() and os.environ.get("ATTNRT_TORCH_OPS", "1").strip() != "0":
        raise RuntimeError(f"ATTNRT_VLLM=1 but attnrt's torch operators are not usable: "
                           f"{_torch_lib.why_not_loaded()} (ATTNRT_TORCH_OPS=0 runs attention "
                           f"through attnrt's Python path instead)")


def register() -> None:
    """vLLM general plugin: makes attnrt serve CPU_ATTN in this process when ATTNRT_VLLM=1.
    Idempotent (vLLM may call it several times per process). vLLM runs it unguarded at start-up
    (unlike the entry point's import), so what it raises fails the start: an ATTNRT_VLLM value
    other than 0/1, or attnrt not usable (check_usable)."""
    # vLLM 0.32.0 DeepSeek-V4 on CPU without Triton, whatever ATTNRT_VLLM says (see
    # attnrt._vllm_deepseek_v4_support; does nothing on other versions or platforms).
    from ._vllm_deepseek_v4_support import apply as apply_deepseek_v4_support

    apply_deepseek_v4_support()

    if not enabled():
        return
    check_usable()
    from vllm.logger import init_logger
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    already = AttentionBackendEnum.CPU_ATTN.get_path() == BACKEND_CLASS
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_CLASS)
    _report_other_backends()
    from . import _vllm_deepseek_v4

    _vllm_deepseek_v4.route()
    if not already:
        from . import _vllm_backend

        # A logger under "vllm": vLLM's handler prints it.
        init_logger("vllm.attnrt").info(
            "attnrt serves attention (vLLM's CPU_ATTN slot -> %s; %s)", BACKEND_CLASS,
            _vllm_backend.describe())


_reported: set = set()


def _report_other_backends() -> None:
    """Wraps the platform's attention backend lookup so that a layer attnrt does not serve (MLA
    models get CPU_MLA / AMX_MLA, which the CPU platform picks before CPU_ATTN) is named in the
    log when vLLM builds it: which kind of layer and which backend serves it."""
    from vllm.platforms import current_platform

    cls = current_platform if isinstance(current_platform, type) else type(current_platform)
    lookup = getattr(cls, "get_attn_backend_cls")
    if getattr(lookup, "_attnrt_reports", False):
        return

    def get_attn_backend_cls(klass, selected_backend, attn_selector_config, *args, **kwargs):
        path = lookup(selected_backend, attn_selector_config, *args, **kwargs)
        if path != BACKEND_CLASS:
            report_unserved(path, attn_selector_config)
        return path

    setattr(get_attn_backend_cls, "_attnrt_reports", True)
    setattr(cls, "get_attn_backend_cls", classmethod(get_attn_backend_cls))


def report_unserved(path: str, attn_selector_config) -> None:
    """Logs (once per backend and kind of layer) that attnrt does not serve these layers."""
    kinds = [n for n, flag in (("MLA", "use_mla"), ("sparse", "use_sparse"),
                               ("non-causal", "use_non_causal"))
             if getattr(attn_selector_config, flag, False)]
    kind = " ".join(kinds) or f"{getattr(attn_selector_config, 'attn_type', 'attention')}"
    key = (path, kind)
    if key in _reported:
        return
    _reported.add(key)
    from vllm.logger import init_logger

    init_logger("vllm.attnrt").warning(
        "attnrt does not serve this model's %s attention layers (ATTNRT_VLLM=1): vLLM's %s "
        "serves them", kind, path)


def __getattr__(name):
    if name in ("AttnrtBackend", "AttnrtMetadataBuilder", "AttnrtImpl", "AttnrtMetadata"):
        from . import _vllm_backend

        return getattr(_vllm_backend, name)
    raise AttributeError(f"module 'attnrt.vllm' has no attribute {name!r}")
