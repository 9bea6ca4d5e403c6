"""Arrays of any framework, read without copies: shapes, dtypes, small host values, and outputs
allocated in the framework of the caller's inputs (torch in, torch out; numpy otherwise)."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._errors import InvalidArgumentError


def is_torch(value: Any) -> bool:
    """True for a torch.Tensor (without importing torch when the caller never did)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def shape_of(value: Any, name: str) -> tuple[int, ...]:
    """The shape of an array of any framework (numpy, torch, buffer-protocol objects, DLPack)."""
    if value is None:
        raise InvalidArgumentError(f"{name} is required")
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    try:
        return tuple(memoryview(value).shape)
    except TypeError:
        pass
    if hasattr(value, "__dlpack__"):
        return tuple(np.from_dlpack(value).shape)
    raise InvalidArgumentError(
        f"{name}: expected a numpy array, a torch tensor, an object with the buffer protocol or a "
        f"DLPack producer, got {type(value).__name__}")


def first_int(value: Any, name: str) -> int:
    """The first element of a host integer array (or a Python int) as an int."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    if value is None:
        raise InvalidArgumentError(f"{name} is required")
    if is_torch(value):
        return int(value.reshape(-1)[0])
    return int(np.asarray(value).reshape(-1)[0])


def host_int_array(value: Any, dtype) -> Any:
    """Python ints and lists (host-side integer inputs) as numpy arrays of `dtype`; arrays as they
    are."""
    if isinstance(value, (int, np.integer)):
        return np.array([value], dtype=dtype)
    if isinstance(value, (list, tuple)):
        return np.asarray(value, dtype=dtype)
    return value


def empty(like: Any, shape: tuple[int, ...], dtype: Any = None) -> Any:
    """An uninitialized array of `shape` in `like`'s framework: of `like`'s dtype when `dtype` is
    None, else of `dtype` (a numpy dtype name such as "float32" or "int32", or another array whose
    dtype is taken)."""
    if is_torch(like):
        import torch
        if dtype is None:
            torch_dtype = like.dtype
        elif isinstance(dtype, str):
            torch_dtype = getattr(torch, dtype)
        else:
            torch_dtype = dtype.dtype if is_torch(dtype) else _torch_dtype_of_numpy(dtype.dtype)
        return torch.empty(shape, dtype=torch_dtype, device=like.device)
    if dtype is None:
        np_dtype = _numpy_dtype(like)
    elif isinstance(dtype, str):
        np_dtype = np.dtype(dtype)
    else:
        np_dtype = _numpy_dtype(dtype)
    return np.empty(shape, np_dtype)


def _numpy_dtype(value: Any) -> np.dtype:
    if isinstance(value, np.ndarray):
        return value.dtype
    if is_torch(value):
        name = str(value.dtype).removeprefix("torch.")
        return _numpy_dtype_named(name)
    try:
        return np.asarray(memoryview(value)).dtype
    except TypeError:
        return np.from_dlpack(value).dtype


def _numpy_dtype_named(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16, float8_e4m3fn, ...
        return np.dtype(getattr(ml_dtypes, name))


def _torch_dtype_of_numpy(np_dtype: np.dtype):
    import torch
    return getattr(torch, np_dtype.name)
