"""attnrt: attention kernels behind one stable C ABI, for Python.

Every op of the library, run by the fastest plugin kernel that accepts the problem, on numpy arrays,
torch tensors (CPU) or any buffer-protocol or DLPack object, without copying them; outputs come back
in the inputs' framework (torch in, torch out)::

    import numpy as np
    import attnrt

    with attnrt.Runtime() as rt:
        q = np.random.rand(1, 8, 32 * 128).astype(np.float32)      # (B, S, N*H)
        k = np.random.rand(1, 8, 8 * 128).astype(np.float32)       # (B, L, Nkv*H)
        v = np.random.rand(1, 8, 8 * 128).astype(np.float32)
        out, present_k, present_v = attnrt.gqa(
            rt, query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8,
            num_heads=32, kv_num_heads=8)

Ops: gqa (ONNX Runtime's com.microsoft.GroupQueryAttention), paged_gqa (the same over a paged KV
cache, with BlockPool), paged_attention_varlen (packed variable-length batches over a paged cache,
FlashAttention/vLLM style), sparse_mla and sparse_mla_metadata (CANN's MixedQuantSparseFlashMla and its
metadata op), sparse_mla_encode (the KV token formats). Lower level: Runtime.gqa_op(...),
paged_gqa_op, sparse_mla_op, sparse_mla_metadata_op -> op; op.plan(inputs, outputs) -> Plan;
Plan.run(...), Plan.bind(...) -> a callable that only runs; op.explain(...). PyTorch custom ops:
``import attnrt.torch`` (torch.ops.attnrt.*). Every failure raises an attnrt.Error subclass per
status code, carrying the library's message.
"""
from __future__ import annotations

import os as _os
import sys as _sys

try:
    from ._errors import (AbiMismatchError, Error, InternalError, InvalidArgumentError,
                          NotFoundError, OutOfMemoryError, PlanMismatchError, UnavailableError,
                          UnsupportedError)
    from ._runtime import Runtime, abi_version, version
    from ._op import BoundCall, Op, Plan
    from ._gqa import GQA_ATTRIBUTES, GQA_INPUTS, GQA_OUTPUTS, GqaOp, gqa
    from ._paged_gqa import PAGED_GQA_INPUTS, PAGED_GQA_OUTPUTS, PagedGqaOp, paged_gqa
    from ._varlen import (PAGED_GQA_VARLEN_INPUTS, PAGED_GQA_VARLEN_OUTPUTS, PagedGqaVarlenOp,
                          paged_attention_varlen)
    from ._block_pool import BlockCopy, BlockPool
    from ._sparse_mla import (SPARSE_MLA_ATTRIBUTES, SPARSE_MLA_INPUTS, SPARSE_MLA_OUTPUTS,
                              TQ4_CODEBOOK, SparseMlaMetadataOp, SparseMlaOp, sparse_mla,
                              sparse_mla_encode, sparse_mla_metadata)

    __version__ = version()
except ImportError as _error:
    # In a vLLM process asked to use attnrt (ATTNRT_VLLM set), vLLM imports this package for its
    # plugin entry point and only logs an import failure, then serves with its own attention. The
    # package then imports without its library, and attnrt.vllm.register() raises this error,
    # which fails vLLM's start-up with the reason; any other use of the package raises it too.
    if _os.environ.get("ATTNRT_VLLM", "").strip() in ("", "0") or "vllm" not in _sys.modules:
        raise
    _IMPORT_ERROR: ImportError | None = _error

    def __getattr__(name):
        raise ImportError(f"attnrt is not usable: {_IMPORT_ERROR}") from _IMPORT_ERROR
else:
    _IMPORT_ERROR = None

__all__ = [
    "AbiMismatchError", "BlockCopy", "BlockPool", "BoundCall", "Error", "GQA_ATTRIBUTES",
    "GQA_INPUTS", "GQA_OUTPUTS", "GqaOp", "InternalError", "InvalidArgumentError", "NotFoundError",
    "Op", "OutOfMemoryError", "PAGED_GQA_INPUTS", "PAGED_GQA_OUTPUTS",
    "PAGED_GQA_VARLEN_INPUTS", "PAGED_GQA_VARLEN_OUTPUTS", "PagedGqaOp", "PagedGqaVarlenOp", "Plan",
    "PlanMismatchError", "Runtime", "SPARSE_MLA_ATTRIBUTES", "SPARSE_MLA_INPUTS",
    "SPARSE_MLA_OUTPUTS", "SparseMlaMetadataOp", "SparseMlaOp", "TQ4_CODEBOOK",
    "UnavailableError", "UnsupportedError", "abi_version", "gqa", "paged_attention_varlen", "paged_gqa", "sparse_mla",
    "sparse_mla_encode", "sparse_mla_metadata", "version",
]
