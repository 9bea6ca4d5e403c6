"""attnrt: attention kernels behind one stable C ABI, for Python.

GroupQueryAttention with ONNX Runtime's semantics (com.microsoft.GroupQueryAttention), run by the
fastest plugin kernel that accepts the problem, on numpy arrays (or any buffer-protocol or DLPack
object) without copying them::

    import numpy as np
    import attnrt

    with attnrt.Runtime() as rt:
        print(rt.list()["plugins"][0]["kernels"])
        q = np.random.rand(1, 8, 32 * 128).astype(np.float32)      # (B, S, N*H)
        k = np.random.rand(1, 8, 8 * 128).astype(np.float32)       # (B, L, Nkv*H)
        v = np.random.rand(1, 8, 8 * 128).astype(np.float32)
        out, present_k, present_v = attnrt.gqa(
            rt, query=q, key=k, value=v, seqlens_k=[7], total_sequence_length=8,
            num_heads=32, kv_num_heads=8)

Lower level: Runtime.gqa_op(...) -> GqaOp; GqaOp.plan(inputs, outputs) -> Plan; Plan.run(...).
Every failure raises an attnrt.Error subclass per status code, carrying the library's message.
"""
from ._errors import (AbiMismatchError, Error, InternalError, InvalidArgumentError, NotFoundError,
                      OutOfMemoryError, PlanMismatchError, UnavailableError, UnsupportedError)
from ._api import (GQA_ATTRIBUTES, GQA_INPUTS, GQA_OUTPUTS, GqaOp, Plan, Runtime, abi_version, gqa,
                   version)

__version__ = version()

__all__ = [
    "AbiMismatchError", "Error", "GQA_ATTRIBUTES", "GQA_INPUTS", "GQA_OUTPUTS", "GqaOp",
    "InternalError", "InvalidArgumentError", "NotFoundError", "OutOfMemoryError", "Plan",
    "PlanMismatchError", "Runtime", "UnavailableError", "UnsupportedError", "abi_version", "gqa",
    "version",
]
