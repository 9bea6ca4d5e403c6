"""attnrt's C ABI through ctypes, independent of the SWIG binding: tensor descriptors built by hand
from numpy arrays and attnrt_plan_run called directly. The call-overhead benchmark uses it as the
floor of a Python call into the library, and the binding tests as the "run from C" side of their
bitwise comparisons (same plan, descriptors the binding did not make)."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(ctypes.Structure):
    """attnrt_tensor (DLPack's DLTensor layout)."""
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                ("dtype", DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


# numpy dtype name -> (DLPack code, bits); ml_dtypes names included.
_CODES = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16), "int8": (0, 8),
          "uint8": (1, 8), "int32": (0, 32), "int64": (0, 64), "float8_e4m3fn": (10, 8),
          "float8_e8m0fnu": (14, 8)}


def load(library: str | os.PathLike | None = None) -> ctypes.CDLL:
    """libattnrt.so: `library`, else the one the attnrt package loaded (same process, same
    handle)."""
    if library is None:
        import attnrt
        package = Path(attnrt.__file__).parent
        candidates = [package / "lib" / "libattnrt.so", package.parent.parent / "lib" / "libattnrt.so"]
        library = next((c for c in candidates if c.exists()), "libattnrt.so")
    lib = ctypes.CDLL(os.fspath(library))
    lib.attnrt_plan_run.restype = ctypes.c_int32
    lib.attnrt_plan_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(Tensor)),
                                    ctypes.c_size_t, ctypes.POINTER(ctypes.POINTER(Tensor)),
                                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_void_p]
    lib.attnrt_last_error_message.restype = ctypes.c_char_p
    return lib


class TensorArray:
    """A C array of attnrt_tensor pointers describing numpy arrays (None = absent). Keeps the arrays
    and the shape buffers alive."""

    def __init__(self, arrays):
        self.arrays = list(arrays)
        self.tensors = []
        self.pointers = (ctypes.POINTER(Tensor) * max(1, len(self.arrays)))()
        for i, a in enumerate(self.arrays):
            if a is None:
                continue
            if not a.flags.c_contiguous:
                raise ValueError("compact arrays only")
            code, bits = _CODES[a.dtype.name]
            shape = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
            t = Tensor(a.ctypes.data, Device(1, 0), a.ndim, DType(code, bits, 1), shape, None, 0)
            self.tensors.append((t, shape))
            self.pointers[i] = ctypes.pointer(t)
        self.count = len(self.arrays)


def plan_runner(lib: ctypes.CDLL, plan_address: int, inputs, outputs):
    """A no-argument callable that runs the plan at `plan_address` (an attnrt_plan*) on these numpy
    arrays through attnrt_plan_run, raising RuntimeError with the library's message on failure."""
    ti, to = TensorArray(inputs), TensorArray(outputs)
    run = lib.attnrt_plan_run
    args = (ctypes.c_void_p(plan_address), ti.pointers, ti.count, to.pointers, to.count, None, 0,
            None)

    def call():
        status = run(*args)
        if status != 0:
            raise RuntimeError(lib.attnrt_last_error_message().decode())
    call.keep = (ti, to)
    return call
