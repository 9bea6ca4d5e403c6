"""DeepSeek-V4 sparse attention as vLLM 0.32 calls it on CPU, served by attnrt's sparse MLA.

vLLM's CPU DeepSeek-V4 layer (vllm.models.deepseek_v4.cpu.cpu_sparse.DeepseekV4CPUAttention,
forward_mqa) resolves each query token's sliding-window keys and its compressed keys (C4A: the
indexer's top-k; C128A: the dense prefix; SWA-only layers: none) to global slot ids of two paged
caches and calls ``torch.ops._C.flash_mla_with_kvcache_cpu(out, q, window_cache_2d, window_slots,
window_block_size, compressed_cache_2d, compressed_slots, compressed_block_size, attn_sink,
scale)``. ``flash_mla_with_kvcache`` here takes the same arguments with the same meaning and writes
``out`` in place through attnrt.sparse_mla (docs/sparse-mla.md):

- q ``[T, H, 512]`` bf16 is a TND query with ``cu_seqlens_q = [0, T]`` (every token its own row;
  there is no causal mask: the slot lists are the selection);
- the caches are vLLM's ``fp8_ds_mla`` pages (per block: ``block_size`` tokens of 448 fp8 e4m3
  "nope" bytes and 64 bf16 "rope" values, then ``block_size`` x 8 bytes of UE8M0 scales), which is
  attnrt's quant_mode 2 token format. vLLM passes one layer's pages as a 2-D view
  ``[num_blocks, block_size * 584]`` whose row stride is the padded page stride of a buffer shared
  by several layers; attnrt reads it in place as the PA_BBND view ``(num_blocks, block_size, 1,
  584)`` with strides ``(row stride, 584, 584, 1)`` (torch's as_strided: no copy of the cache);
- window_slots ``[T, W]`` / compressed_slots ``[T, K]`` int64 are global slot ids
  ``block * block_size + offset``, -1 skipped: attnrt's topk_value_mode 3 ori_sparse_indices and
  cmp_sparse_indices, ``(T, 1, W)`` / ``(T, 1, K)`` int32. The conversion to int32 is the one copy
  this path makes (``T * (W + K) * 4`` bytes, a few hundred KiB at most; the caches are GiB);
  K = 0 is an SWA-only layer: no compressed cache at all;
- attn_sink float32 ``[H]`` are the sinks (-inf: no sink), scale the softmax scale.

Keys are attended as vLLM's kernel does: window keys then compressed keys, one online softmax with
the sink, probabilities rounded to bf16 for P·V. What differs: a slot outside its cache (not -1,
not below ``num_blocks * block_size``) is an error here, where vLLM's kernel skips it silently.

Paths and threads: with the C++ torch operators loaded (libattnrt_torch.so, attnrt._torch_lib),
the call is ``torch.ops.attnrt._flash_mla_with_kvcache_on`` (bindings/torch/
flash_mla_with_kvcache.cpp: the same checks and the same sparse MLA call in C++) on the vLLM
backend's runtime on torch's intra-op threads (attnrt._vllm_backend.torch_runtime_id: a team of
torch.get_num_threads(), the OpenMP threads vLLM's own operators run on), or on the given
runtime. Without them it is this module's Python path on attnrt's own threads
(attnrt._vllm_backend.runtime, torch.get_num_threads() of them). Either way the two sparse MLA ops
are kept on the runtime per softmax scale and the metadata per shape signature.

route() (called by attnrt.vllm.register with ATTNRT_VLLM=1) sends DeepseekV4CPUAttention's kernel
call here on vLLM 0.32.0; see its docstring and docs/python.md.
"""
from __future__ import annotations

import threading
from typing import Any

import torch

from . import _torch_lib
from ._arrays import check_writable, requires_grad_message
from ._errors import InvalidArgumentError
from ._sparse_mla import TOKEN_BYTES, SparseMlaMetadataOp, SparseMlaOp

#: Bytes of one fp8_ds_mla token in a page (448 fp8 + 64 bf16 + 8 scale bytes): quant_mode 2.
TOKEN_BYTES_DS_MLA = TOKEN_BYTES[2]
HEAD_DIM = 512
_INT32_MAX = 2**31 - 1
_cu_seqlens: dict[int, torch.Tensor] = {}
_lock = threading.Lock()


def _default_runtime():
    from ._vllm_backend import runtime

    return runtime()


def _cu_seqlens_q(num_tokens: int) -> torch.Tensor:
    """int32 [0, num_tokens], made once per token count (read only)."""
    t = _cu_seqlens.get(num_tokens)
    if t is None:
        with _lock:
            t = _cu_seqlens.get(num_tokens)
            if t is None:
                if len(_cu_seqlens) >= 4096:
                    _cu_seqlens.clear()
                t = _cu_seqlens[num_tokens] = torch.tensor([0, num_tokens], dtype=torch.int32)
    return t


def _tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise InvalidArgumentError(f"{name}: expected a CPU tensor, got one on {x.device}")
    return x


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _in_storage(t: torch.Tensor, name: str) -> None:
    """Its elements lie in its storage (a storage resized under a view would be read past)."""
    if t.numel() == 0:
        return
    end = (t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) \
        * t.element_size()
    held = t.untyped_storage().nbytes()
    if end > held:
        raise InvalidArgumentError(
            f"{name}: its elements (shape {list(t.shape)}, strides {list(t.stride())}, storage "
            f"offset {t.storage_offset()}) reach past its storage of {held} bytes")


def _check_no_grad(t: torch.Tensor, name: str) -> None:
    if t.requires_grad and torch.is_grad_enabled():
        raise InvalidArgumentError(requires_grad_message(name))


def _check_no_overlap(out: torch.Tensor, x: torch.Tensor, name: str) -> None:
    """out's bytes (first to last element) must not meet x's: out is written while x is read."""
    if out.numel() == 0 or x.numel() == 0:
        return
    _in_storage(out, "out")
    _in_storage(x, name)

    def span(t):
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (out_begin, out_end), (begin, end) = span(out), span(x)
    if out_begin < end and begin < out_end:
        raise InvalidArgumentError(f"out: shares memory with {name}; out must not overlap an "
                                   f"input")


def _float32_scale(scale) -> float:
    """scale as the kernel's float32 (a magnitude below float32's least rounds to 0, as in
    vLLM's kernel), or InvalidArgumentError when it is not finite there."""
    value = torch.tensor(float(scale), dtype=torch.float32)
    if not bool(torch.isfinite(value)):
        raise InvalidArgumentError(f"scale: expected a finite float32, got {float(scale)!r}")
    return float(value)


def _block_size(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name}: expected a positive int (tokens per cache block), "
                                   f"got {value!r}")
    return value


def paged_view(cache_2d: torch.Tensor, block_size: int, name: str = "cache") -> torch.Tensor:
    """vLLM's 2-D page view ``[num_blocks, >= block_size * 584]`` uint8 (row stride: the page
    stride, any storage offset) as attnrt's PA_BBND cache ``(num_blocks, block_size, 1, 584)``,
    strides ``(row stride, 584, 584, 1)``: a view of the same memory, nothing copied.

    Raises:
        InvalidArgumentError: not a 2-D uint8 CPU tensor, rows shorter than a block's bytes, bytes
            of a row not contiguous, or rows closer than a block's bytes (blocks would overlap).
    """
    _tensor(cache_2d, name)
    if cache_2d.is_neg() or cache_2d.is_conj():
        raise InvalidArgumentError(
            f"{name}: expected a cache the call reads in place, got a "
            f"{'negative' if cache_2d.is_neg() else 'conjugate'} view (torch._neg_view / conj) "
            f"whose values are not its bytes")
    block_size = _block_size(block_size, f"{name} block_size")
    if cache_2d.dtype != torch.uint8 or cache_2d.dim() != 2:
        raise InvalidArgumentError(
            f"{name}: expected a 2-D uint8 page view [num_blocks, block_size * "
            f"{TOKEN_BYTES_DS_MLA}] of vLLM's fp8_ds_mla cache, got {cache_2d.dim()}-D "
            f"{str(cache_2d.dtype).replace('torch.', '')} {list(cache_2d.shape)}")
    num_blocks, width = cache_2d.shape
    block_bytes = block_size * TOKEN_BYTES_DS_MLA
    if width < block_bytes:
        raise InvalidArgumentError(
            f"{name}: expected rows of at least block_size * {TOKEN_BYTES_DS_MLA} = "
            f"{block_bytes if block_bytes < 2**63 else '(past int64)'} bytes (block_size "
            f"{block_size}), got {width}")
    if cache_2d.stride(1) != 1:
        raise InvalidArgumentError(
            f"{name}: expected the bytes of a page contiguous (stride 1 in dimension 1), got "
            f"strides {list(cache_2d.stride())}")
    page_stride = cache_2d.stride(0) if num_blocks > 1 else max(cache_2d.stride(0), block_bytes)
    if page_stride < block_bytes:
        raise InvalidArgumentError(
            f"{name}: expected a page stride of at least block_size * {TOKEN_BYTES_DS_MLA} = "
            f"{block_bytes} bytes (pages must not overlap), got {page_stride}")
    _in_storage(cache_2d, name)  # as_strided below would raise torch's own error
    return cache_2d.as_strided((num_blocks, block_size, 1, TOKEN_BYTES_DS_MLA),
                               (page_stride, TOKEN_BYTES_DS_MLA, TOKEN_BYTES_DS_MLA, 1),
                               cache_2d.storage_offset())


def _slots(slots, name: str, num_tokens: int, num_slots: int) -> torch.Tensor:
    """int64 [T, W] global slot ids -> int32 (T, 1, W), every entry -1 or in [0, num_slots)."""
    _tensor(slots, name)
    if slots.dtype != torch.int64 or slots.dim() != 2 or slots.shape[0] != num_tokens:
        raise InvalidArgumentError(
            f"{name}: expected int64 [num_tokens={num_tokens}, n] global slot ids, got "
            f"{str(slots.dtype).replace('torch.', '')} {list(slots.shape)}")
    if not slots.is_contiguous():
        raise InvalidArgumentError(f"{name}: expected a contiguous tensor, got strides "
                                   f"{list(slots.stride())}")
    _in_storage(slots, name)  # its ids are read below
    if num_slots - 1 > _INT32_MAX:
        raise InvalidArgumentError(
            f"{name}: its cache holds {num_slots} slots, attnrt's slot ids are int32 (at most "
            f"{_INT32_MAX + 1} slots)")
    if slots.numel():
        low, high = torch.aminmax(slots)
        if int(low) < -1 or int(high) >= num_slots:
            bad = ((slots < -1) | (slots >= num_slots)).nonzero()[0].tolist()
            raise InvalidArgumentError(
                f"{name}[{bad[0]}][{bad[1]}]: expected -1 (skip) or a slot in [0, {num_slots}) "
                f"(num_blocks * block_size of its cache), got {int(slots[bad[0], bad[1]])}")
    # The one copy of this path: T * n int32 (the int64 ids fit: checked just above).
    return slots.to(torch.int32).view(num_tokens, 1, slots.shape[1])


def flash_mla_with_kvcache(out, q, window_cache_2d, window_slots, window_block_size,
                           compressed_cache_2d, compressed_slots, compressed_block_size, attn_sink,
                           scale, *, runtime=None) -> None:
    """vLLM 0.32's ``torch.ops._C.flash_mla_with_kvcache_cpu`` (DeepSeek-V4 sparse attention on
    CPU) on attnrt's sparse MLA: same arguments, same result, ``out`` written in place (see the
    module docstring). `runtime`: the attnrt.Runtime to run on (default: the vLLM backend's on
    torch's intra-op threads with the C++ operator, else one with torch.get_num_threads() threads
    of its own).

    Raises:
        InvalidArgumentError: what vLLM's op refuses (q not bf16 [T, H, 512] with its last
            dimension contiguous, out not bf16 contiguous of q's shape, slots not int64
            contiguous [T, n], no window column, attn_sink not float32 contiguous of H values,
            caches not uint8 2-D page views), and a slot outside its cache; attnrt's own
            refusals (attnrt.Error subclasses) name the sparse MLA input. Nothing is written to
            out then.
    """
    if _torch_lib.for_tensor(out) and _for_operator(q, window_cache_2d, window_slots,
                                                    window_block_size, compressed_cache_2d,
                                                    compressed_slots, compressed_block_size,
                                                    attn_sink, scale):
        if runtime is None:
            from ._vllm_backend import torch_runtime_id

            rid = torch_runtime_id()
        else:
            rid = _torch_lib.runtime_id(runtime)
        try:
            _flash_mla_on(rid, out, q, window_cache_2d, window_slots, window_block_size,
                          compressed_cache_2d, compressed_slots, compressed_block_size, attn_sink,
                          scale)
        except (RuntimeError, ValueError) as e:
            _torch_lib.raise_attnrt_error(e)
        return
    flash_mla_with_kvcache_python(out, q, window_cache_2d, window_slots, window_block_size,
                                  compressed_cache_2d, compressed_slots, compressed_block_size,
                                  attn_sink, scale, runtime=runtime)


def _for_operator(q, window_cache_2d, window_slots, window_block_size, compressed_cache_2d,
                  compressed_slots, compressed_block_size, attn_sink, scale) -> bool:
    """Whether the arguments have the operator schema's types (else the Python path refuses them
    by name, as vLLM's op would)."""
    tensor = torch.Tensor
    return (isinstance(q, tensor) and isinstance(window_cache_2d, tensor)
            and isinstance(window_slots, tensor) and isinstance(compressed_cache_2d, tensor)
            and isinstance(compressed_slots, tensor) and isinstance(attn_sink, tensor)
            and type(window_block_size) is int and type(compressed_block_size) is int
            and type(scale) in (int, float))


_operator = None  # torch.ops.attnrt._flash_mla_with_kvcache_on.default, looked up once


def _flash_mla_on(*args) -> None:
    global _operator
    if _operator is None:
        _operator = torch.ops.attnrt._flash_mla_with_kvcache_on.default
    _operator(*args)


def flash_mla_with_kvcache_python(out, q, window_cache_2d, window_slots, window_block_size,
                                  compressed_cache_2d, compressed_slots, compressed_block_size,
                                  attn_sink, scale, *, runtime=None) -> None:
    """flash_mla_with_kvcache through this module's Python path (attnrt.sparse_mla on an
    attnrt.Runtime; default: the vLLM backend's, threads of its own), whether or not the C++
    operator is loaded."""
    arguments = sparse_mla_arguments(out, q, window_cache_2d, window_slots, window_block_size,
                                     compressed_cache_2d, compressed_slots, compressed_block_size,
                                     attn_sink, scale)
    if arguments is not None:
        _run(runtime if runtime is not None else _default_runtime(), arguments)
        torch.autograd.graph.increment_version(out)  # written in place, as torch's ops count it


_INPUT_NAMES = ("q", "ori_kv", "cmp_kv", "cmp_sparse_indices", "cu_seqlens_q", "sinks",
                "ori_sparse_indices")
_MAX_METADATA = 256


def _run(rt, arguments: dict) -> None:
    """attnrt.sparse_mla(rt, **arguments), with what does not change between a layer's calls
    kept on the runtime: the two ops per softmax scale, and the metadata per shape signature (with
    global slot ids the metadata depends on the shapes and on cu_seqlens_q = [0, T] only, not on
    the slot values; the op rejects metadata made for anything else)."""
    inputs = {name: arguments.pop(name) for name in _INPUT_NAMES}
    out = arguments.pop("attn_out")
    scale = arguments["softmax_scale"]
    cache = rt.__dict__.get("_attnrt_dsv4")
    if cache is None:
        cache = rt.__dict__.setdefault("_attnrt_dsv4", {})
    entry = cache.get(scale)
    if entry is None:
        with _lock:
            entry = cache.get(scale)
            if entry is None:
                entry = cache[scale] = (SparseMlaMetadataOp(rt, **arguments),
                                        SparseMlaOp(rt, **arguments), {})
    metadata_op, op, metadata_by_shape = entry
    ori_kv, cmp_kv = inputs["ori_kv"], inputs["cmp_kv"]
    key = (rt.num_threads, tuple(inputs["q"].shape), tuple(ori_kv.shape), ori_kv.stride(),
           tuple(inputs["ori_sparse_indices"].shape),
           None if cmp_kv is None else (tuple(cmp_kv.shape), cmp_kv.stride(),
                                        tuple(inputs["cmp_sparse_indices"].shape)))
    metadata = metadata_by_shape.get(key)
    if metadata is None:
        metadata = metadata_op(**inputs)
        if len(metadata_by_shape) >= _MAX_METADATA:
            metadata_by_shape.clear()
        metadata_by_shape[key] = metadata
    inputs["metadata"] = metadata
    op.run(inputs, {"attn_out": out})


def sparse_mla_arguments(out, q, window_cache_2d, window_slots, window_block_size,
                         compressed_cache_2d, compressed_slots, compressed_block_size, attn_sink,
                         scale) -> dict | None:
    """The keyword arguments of attnrt.sparse_mla (all but the runtime) that
    flash_mla_with_kvcache passes for these vLLM arguments, validated as it validates them
    (None when there is no token: nothing to run). For a plan or its explanation:
    ``SparseMlaOp(rt, **attributes).explain(inputs)`` with the attributes and inputs split."""
    _tensor(q, "q")
    _tensor(out, "out")
    check_writable(out, "out")
    _check_no_grad(q, "q")
    for x, name in ((window_cache_2d, "window_cache_2d"),
                    (compressed_cache_2d, "compressed_cache_2d"), (attn_sink, "attn_sink")):
        if isinstance(x, torch.Tensor):
            _check_no_grad(x, name)
    if q.dim() != 3 or q.shape[2] != HEAD_DIM or q.dtype != torch.bfloat16:
        raise InvalidArgumentError(
            f"q: expected bfloat16 [num_tokens, num_heads, {HEAD_DIM}], got "
            f"{str(q.dtype).replace('torch.', '')} {list(q.shape)}")
    if q.stride(2) != 1:
        raise InvalidArgumentError(f"q: expected its last dimension contiguous, got strides "
                                   f"{list(q.stride())}")
    num_tokens, num_heads = q.shape[0], q.shape[1]
    if out.shape != q.shape or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise InvalidArgumentError(
            f"out: expected a contiguous bfloat16 tensor of q's shape {list(q.shape)}, got "
            f"{'' if out.is_contiguous() else 'non-contiguous '}"
            f"{str(out.dtype).replace('torch.', '')} {list(out.shape)}")
    _tensor(attn_sink, "attn_sink")
    if (attn_sink.dtype != torch.float32 or attn_sink.numel() != num_heads
            or not attn_sink.is_contiguous()):
        raise InvalidArgumentError(
            f"attn_sink: expected contiguous float32 with num_heads={num_heads} values, got "
            f"{str(attn_sink.dtype).replace('torch.', '')} {list(attn_sink.shape)}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise InvalidArgumentError(f"scale: expected a number, got {type(scale).__name__}")
    ori_kv = paged_view(window_cache_2d, window_block_size, "window_cache_2d")
    window_block_size = ori_kv.shape[1]
    ori_idx = _slots(window_slots, "window_slots", num_tokens, ori_kv.shape[0] * window_block_size)
    if window_slots.shape[1] == 0:
        raise InvalidArgumentError("window_slots: expected at least one column, got [T, 0]")
    _tensor(compressed_slots, "compressed_slots")
    num_compressed = compressed_slots.shape[1] if compressed_slots.dim() == 2 else -1
    cmp_kv = cmp_idx = None
    if num_compressed == 0 and compressed_slots.dtype == torch.int64 \
            and compressed_slots.shape[0] == num_tokens:
        # SWA-only layer: vLLM passes the window cache again with block size 1, unread.
        _block_size(compressed_block_size, "compressed_block_size")
    else:
        cmp_kv = paged_view(compressed_cache_2d, compressed_block_size, "compressed_cache_2d")
        cmp_idx = _slots(compressed_slots, "compressed_slots", num_tokens,
                         cmp_kv.shape[0] * cmp_kv.shape[1])
    softmax_scale = _float32_scale(scale)
    # out is written while every input is read (the slot ids too: the op sees int32 copies).
    for x, name in ((q, "q"), (window_cache_2d, "window_cache_2d"), (window_slots, "window_slots"),
                    (compressed_cache_2d if cmp_kv is not None else None, "compressed_cache_2d"),
                    (compressed_slots, "compressed_slots"), (attn_sink, "attn_sink")):
        if x is not None:
            _check_no_overlap(out, x, name)
    if num_tokens == 0:
        return None
    if not q.is_contiguous():  # attnrt's TND query is compact: T * H * 512 bf16, copied
        q = q.contiguous()
    # cmp_ratio: unused with global slot ids (any of 1..128); 1 is also what SWA-only needs.
    return dict(q=q, ori_kv=ori_kv, cmp_kv=cmp_kv, cmp_sparse_indices=cmp_idx,
                cu_seqlens_q=_cu_seqlens_q(num_tokens), sinks=attn_sink.view(num_heads),
                ori_sparse_indices=ori_idx, attn_out=out, quant_mode=2,
                softmax_scale=softmax_scale, cmp_ratio=1, layout_q="TND", layout_kv="PA_BBND",
                topk_value_mode=3)


# ---- routing vLLM's DeepSeek-V4 CPU layer to the adapter (attnrt.vllm, ATTNRT_VLLM=1) ----------

#: The vLLM release whose DeepseekV4CPUAttention.forward_mqa the route was written for.
ROUTED_VLLM_VERSION = "0.32.0"
ROUTED_MODULE = "vllm.models.deepseek_v4.cpu.cpu_sparse"
ROUTED_KERNEL = "flash_mla_with_kvcache_cpu"
_KERNEL_ARGUMENTS = ("out", "q", "window_cache_2d", "window_slots", "window_block_size",
                     "compressed_cache_2d", "compressed_slots", "compressed_block_size",
                     "attn_sink", "scale")
_FORWARD_MQA_PARAMETERS = ("self", "q", "kv", "positions", "output")
_route_state: dict[str, Any] = {"status": None, "announced": False}


class _KernelsOf:
    """torch.ops._C for the routed method: flash_mla_with_kvcache_cpu is the adapter (looked up
    at each call), every other name is torch.ops._C's."""

    def __getattr__(self, name):
        if name == ROUTED_KERNEL:
            if not _route_state["announced"]:
                _announce_routed()
            return globals()["flash_mla_with_kvcache"]
        return getattr(torch.ops._C, name)


class _OpsOf:
    def __getattr__(self, name):
        return _KERNELS if name == "_C" else getattr(torch.ops, name)


class _TorchOf:
    """The name `torch` inside the routed method: the torch module but for torch.ops._C's
    flash_mla_with_kvcache_cpu."""

    def __getattr__(self, name):
        return _OPS if name == "ops" else getattr(torch, name)


_KERNELS, _OPS = _KernelsOf(), _OpsOf()


def _logger():
    from vllm.logger import init_logger

    return init_logger("vllm.attnrt")


def _announce_routed() -> None:
    """Says once per process, in vLLM's log, that attnrt serves DeepSeek-V4's sparse attention:
    when the route is installed if vLLM's logging is set up by then, else at the first routed
    kernel call (vLLM 0.32 sets its logging up after the plugins load)."""
    _route_state["announced"] = True
    how = ("the C++ operator torch.ops.attnrt.flash_mla_with_kvcache on torch's intra-op threads"
           if _torch_lib.load() else
           f"the Python path on attnrt's own threads: {_torch_lib.why_not_loaded()}")
    _logger().info("attnrt serves DeepSeek-V4 sparse attention (%s.DeepseekV4CPUAttention: "
                   "torch.ops._C.%s -> attnrt._vllm_deepseek_v4.flash_mla_with_kvcache, sparse "
                   "MLA quant_mode 2 with global slot ids; %s)", ROUTED_MODULE, ROUTED_KERNEL, how)


def _refuse(why: str) -> str:
    """Records and reports a refusal: in vLLM's log when it is set up, else as a RuntimeWarning
    (stderr), so that it is seen whenever the plugin runs."""
    status = f"refused: {why}"
    if _route_state["status"] != status:
        message = (f"attnrt does not serve DeepSeek-V4 sparse attention (ATTNRT_VLLM=1): {why}; "
                   f"vLLM's own kernel serves it")
        logger = _logger()
        if logger.hasHandlers():
            logger.warning("%s", message)
        else:
            import warnings

            warnings.warn(message, RuntimeWarning, stacklevel=3)
    _route_state["status"] = status
    return status


def _why_not_routable(module) -> str | None:
    """Why `module` (cpu_sparse) is not the code the route was written for, or None."""
    import inspect

    cls = getattr(module, "DeepseekV4CPUAttention", None)
    method = getattr(cls, "forward_mqa", None) if cls is not None else None
    code = getattr(method, "__code__", None)
    if method is None or code is None:
        return f"{ROUTED_MODULE}.DeepseekV4CPUAttention.forward_mqa is missing"
    params = tuple(inspect.signature(method).parameters)
    if params != _FORWARD_MQA_PARAMETERS:
        return (f"DeepseekV4CPUAttention.forward_mqa takes ({', '.join(params)}), expected "
                f"({', '.join(_FORWARD_MQA_PARAMETERS)})")
    if not {"torch", "ops", "_C", ROUTED_KERNEL} <= set(code.co_names):
        return f"DeepseekV4CPUAttention.forward_mqa does not call torch.ops._C.{ROUTED_KERNEL}"
    # The schema registered with torch's dispatcher (not the attribute torch.ops._C exposes now,
    # which a profiler or timer may have wrapped).
    try:
        names = tuple(a.name for a in torch._C._get_schema(f"_C::{ROUTED_KERNEL}", "").arguments)
    except RuntimeError:
        names = ()
    if names != _KERNEL_ARGUMENTS:
        return (f"torch.ops._C.{ROUTED_KERNEL} takes ({', '.join(names) or 'missing'}), expected "
                f"({', '.join(_KERNEL_ARGUMENTS)})")
    return None


def _install(module) -> None:
    """Replaces DeepseekV4CPUAttention.forward_mqa by the same code whose name `torch` resolves
    to _TorchOf (a copy of the module's globals otherwise): only that method's kernel call
    changes; the class, the module and torch.ops._C stay as they are."""
    import types

    why = _why_not_routable(module)
    if why is not None:
        _refuse(why)
        return
    cls = module.DeepseekV4CPUAttention
    original = cls.forward_mqa
    scope = dict(original.__globals__)
    scope["torch"] = _TorchOf()
    routed = types.FunctionType(original.__code__, scope, original.__name__,
                                original.__defaults__, original.__closure__)
    routed.__kwdefaults__ = original.__kwdefaults__
    routed.__qualname__, routed.__doc__ = original.__qualname__, original.__doc__
    setattr(routed, "__wrapped__", original)
    setattr(routed, "_attnrt_routed", True)
    cls.forward_mqa = routed
    _route_state["status"] = "routed"
    if not _route_state["announced"] and _logger().hasHandlers():
        _announce_routed()


class _RouteOnImport:
    """A sys.meta_path finder that lets ROUTED_MODULE import as usual, then routes it (vLLM
    imports the DeepSeek-V4 CPU code only for that model: no import cost for other models)."""

    def find_spec(self, name, path=None, target=None):
        if name != ROUTED_MODULE:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, execute = spec.loader, spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _install(module)

        setattr(loader, "exec_module", exec_module)
        return spec


def route(version: str | None = None) -> str:
    """Routes vLLM's DeepSeek-V4 CPU attention kernel call to flash_mla_with_kvcache when the
    installed vLLM is ROUTED_VLLM_VERSION (`version`: vllm.__version__ unless given), now if its
    module is imported, else when it is. Returns and logs what happened: "routed", "pending"
    (on import), or "refused: <why>" (vLLM's kernel then serves the layer). Idempotent."""
    import sys

    if version is None:
        import vllm

        version = getattr(vllm, "__version__", "unknown")
    if version.split("+")[0] != ROUTED_VLLM_VERSION:
        return _refuse(f"vLLM {version} is installed, the route is written for vLLM "
                       f"{ROUTED_VLLM_VERSION}'s {ROUTED_MODULE}")
    module = sys.modules.get(ROUTED_MODULE)
    if module is not None:
        if not getattr(getattr(getattr(module, "DeepseekV4CPUAttention", None), "forward_mqa",
                               None), "_attnrt_routed", False):
            _install(module)
    elif not any(isinstance(f, _RouteOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RouteOnImport())
        _route_state["status"] = "pending"
    return _route_state["status"]
