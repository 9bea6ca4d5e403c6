"""The C++ torch operator library (libattnrt_torch.so beside this package, bindings/torch/).

When it is there and loads into this process's torch, torch.ops.attnrt.paged_attention_varlen is
its C++ operator (a few microseconds a call: no DLPack, no Python between the call and the
kernel) and attnrt.paged_attention_varlen calls it for torch tensors; otherwise both keep the
Python implementation. ATTNRT_TORCH_OPS=0 in the environment leaves the library unloaded.

Runtimes: the C++ operators run on the library's own runtime (default options) unless
attnrt.torch.set_runtime / attnrt.torch.runtime() name one; attnrt.paged_attention_varlen passes
its runtime with each call (registered once per attnrt.Runtime, by its handle). The library also
makes runtimes of its own whose parallel work runs on torch's intra-op threads
(torch_threads_runtime: at::parallel_for, OpenMP in torch's standard builds), which the vLLM
backend uses so that attention and torch's operators share one team of threads.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import warnings
import weakref
from typing import Any

from . import _errors
from ._arrays import attribute as _attribute
from ._arrays import value_rows_shape as _value_rows_shape

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libattnrt_torch.so")

_lock = threading.Lock()
_state: bool | None = None  # None: not tried yet; then whether the library is loaded
_why_not = ""  # why it is not, once tried
_BY_STATUS = {cls.status: cls for cls in _errors._BY_CODE.values()}
_STATUS = re.compile(r"(ATTNRT_[A-Z_]+): (.*)", re.S)
# Set when the library loads: torch.Tensor and the operator overload called per call.
_Tensor: Any = None
_varlen_on: Any = None


def load() -> bool:
    """Loads libattnrt_torch.so into torch once (imports torch); True when its operators are
    registered. A library that does not load (built for another torch) is reported once as a
    warning, and the Python operators are used."""
    global _state
    if _state is not None:
        return _state
    with _lock:
        if _state is None:
            _state = _load()
    return _state


def _load() -> bool:
    global _why_not
    if os.environ.get("ATTNRT_TORCH_OPS", "1").strip() == "0":
        _why_not = "ATTNRT_TORCH_OPS=0 leaves it unloaded"
        return False
    if not os.path.isfile(LIBRARY):
        _why_not = f"{LIBRARY} is missing (attnrt was built without its torch operators)"
        return False
    import torch

    try:
        torch.ops.load_library(LIBRARY)
    except (OSError, RuntimeError) as e:
        _why_not = f"{LIBRARY} does not load into torch {torch.__version__} ({e})"
        warnings.warn(f"attnrt: {_why_not}; using the Python torch operators", RuntimeWarning,
                      stacklevel=3)
        return False
    global _Tensor, _varlen_on
    _Tensor = torch.Tensor
    _varlen_on = torch.ops.attnrt._paged_attention_varlen_on.default
    return True


def why_not_loaded() -> str:
    """Why load() found no operators ("" when it did or was not tried)."""
    return _why_not


def loaded() -> bool:
    """Whether the C++ operators are registered (without loading them)."""
    return bool(_state)


def for_tensor(x) -> bool:
    """True when `x` is a torch tensor and the C++ operators are loaded (loading them the first
    time a torch tensor comes by; numpy callers never import torch here)."""
    if _state:
        return isinstance(x, _Tensor)
    if _state is False:
        return False
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and load()


def runtime_id(runtime) -> int:
    """The C++ library's id of an attnrt.Runtime, registered on first use and kept on the object;
    released when the runtime is closed (calls naming it then fail with "runtime is closed") or
    when the object goes."""
    rid = runtime.__dict__.get("_torch_runtime_id")
    if rid is not None:
        return rid
    handle = runtime._h()  # raises InvalidArgumentError("runtime is closed")
    import torch

    with _lock:
        rid = runtime.__dict__.get("_torch_runtime_id")
        if rid is None:
            rid = torch.ops.attnrt._register_runtime(int(handle.this))
            weakref.finalize(runtime, _release, rid)
            runtime.__dict__.setdefault("_close_hooks", []).append(lambda: _release(rid))
            runtime._torch_runtime_id = rid
    return rid


def _release(rid: int) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.ops.attnrt._release_runtime(rid)
        except Exception:  # interpreter exit: torch may be half torn down
            pass


def torch_threads_runtime(num_threads: int = 0) -> int:
    """The id of a new runtime of the C++ library (default options otherwise) whose parallel work
    runs on torch's intra-op threads, in at::parallel_for, with a team of num_threads (0:
    torch.get_num_threads() now; the team is fixed, kernels plan with it). The library owns it:
    release_runtime(id) destroys it."""
    import torch

    return torch.ops.attnrt._torch_threads_runtime(int(num_threads))


def release_runtime(rid: int) -> None:
    """Forgets runtime `rid` (destroying it when the library owns it); calls naming it then fail
    with "runtime is closed"."""
    _release(rid)


def use_runtime(runtime) -> None:
    """Makes torch.ops.attnrt.paged_attention_varlen (the C++ operator) run on `runtime`."""
    import torch

    torch.ops.attnrt._use_runtime(runtime_id(runtime))


def raise_attnrt_error(e: Exception):
    """Re-raises a C++ operator's error ("ATTNRT_ERROR_...: message") as the attnrt.Error subclass
    of its status, as the Python path raises it; anything else as it is."""
    m = _STATUS.match(str(e))
    cls = _BY_STATUS.get(m.group(1)) if m else None
    if cls is None or m is None:
        raise e
    raise cls(m.group(2)) from None


def varlen(runtime, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, k, v,
           softmax_scale, window_left, softcap, sinks, slot_mapping, out, kv_layout, block_size,
           p_precision="exact", causal=True, k_scale=None, v_scale=None, cu_seqlens_k=None,
           alibi_slopes=None, window_right=-1):
    """attnrt.paged_attention_varlen through the C++ operator on `runtime`; returns out, or None
    when the call is not one for it (an argument that is not a tensor, a kv_layout given as a
    number, a block_size other than the cache's), which the Python path then serves."""
    tensor = _Tensor
    if not (isinstance(k_cache, tensor) and isinstance(v_cache, tensor)
            and isinstance(cu_seqlens_q, tensor) and isinstance(seq_lens, tensor)
            and isinstance(block_table, tensor) and type(kv_layout) is str):
        return None
    for x in (k, v, sinks, slot_mapping, out, k_scale, v_scale, cu_seqlens_k, alibi_slopes):
        if x is not None and not isinstance(x, tensor):
            return None
    if block_size is not None and (
            k_cache.dim() != 4 or k_cache.shape[2 if kv_layout.upper() == "BNSH" else 1]
            != block_size):
        return None
    # Numbers the operator reads as float32, checked by name (a string is an attnrt error).
    softmax_scale = 0.0 if softmax_scale is None else _attribute(softmax_scale, float,
                                                                 "softmax_scale")
    softcap = _attribute(softcap, float, "softcap")
    rid = runtime_id(runtime)
    if out is None:
        out = q.new_empty(_value_rows_shape(q.shape, k_cache, v_cache))
    try:
        _varlen_on(rid, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_table, out, k, v,
                   slot_mapping, sinks, softmax_scale, window_left, softcap, kv_layout,
                   p_precision, causal, k_scale, v_scale, cu_seqlens_k, alibi_slopes,
                   window_right)
    except (RuntimeError, ValueError) as e:
        raise_attnrt_error(e)
    return out
