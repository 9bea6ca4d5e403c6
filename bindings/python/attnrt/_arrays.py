"""Arrays of any framework, read without copies: shapes, dtypes, small host values, and outputs
allocated in the framework of the caller's inputs (torch in, torch out; numpy otherwise)."""
from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from ._errors import InvalidArgumentError


def is_torch(value: Any) -> bool:
    """True for a torch.Tensor (without importing torch when the caller never did)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def check_torch_tensors(values: list, names: tuple, kind: str, written: int = 0) -> None:
    """Checks the torch tensors among `values` (in place) before DLPack describes them.

    A tensor the call writes (an output, or an input whose bit is set in `written`: a KV cache
    written in place) is never replaced by a copy, which would take the writes and be dropped: a
    negative or conjugate view (torch._neg_view, conj) of one is refused, and so is one that
    requires grad (the write would bypass autograd). A negative view being read is replaced by its
    values (DLPack would export its stored values). Under grad mode an input that requires grad is
    refused: the ops have no backward, so its gradient would be silently missing. A tensor whose
    elements reach past its storage (a storage resized under its view, untyped_storage().resize_)
    is refused, as DLPack carries no allocation size and the kernels would read or write past
    it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    grad_mode = None
    for i, (name, value) in enumerate(zip(names, values)):
        if not isinstance(value, torch.Tensor):
            continue
        writes = kind == "output" or (i < 64 and (written >> i) & 1)
        if writes:
            check_writable(value, f"{kind} '{name}'")
        elif value.requires_grad:
            if grad_mode is None:
                grad_mode = torch.is_grad_enabled()
            if grad_mode:
                raise InvalidArgumentError(requires_grad_message(f"{kind} '{name}'"))
        if value.is_neg() or value.is_conj():
            values[i] = value = value.resolve_conj().resolve_neg()
        if value.layout != torch.strided or value.is_meta or value.numel() == 0:
            continue
        last = value.storage_offset() + sum((n - 1) * st for n, st in zip(value.shape,
                                                                          value.stride()))
        held = value.untyped_storage().nbytes()
        if (last + 1) * value.element_size() > held:
            raise InvalidArgumentError(
                f"{kind} '{name}': its elements (shape {list(value.shape)}, strides "
                f"{list(value.stride())}, storage offset {value.storage_offset()}) reach past its "
                f"storage of {held} bytes")


def check_writable(value: Any, label: str) -> None:
    """Refuses a torch tensor a call would write but whose writes would not reach its memory as
    the caller reads it: a negative or conjugate view (only a resolved copy could be written), one
    that requires grad (autograd would not know of the write), or an inference tensor outside
    inference mode (torch allows no in-place update of one there)."""
    if value.is_neg() or value.is_conj():
        raise InvalidArgumentError(
            f"{label}: expected a tensor the call can write, got a "
            f"{'negative' if value.is_neg() else 'conjugate'} view (torch._neg_view / conj); "
            f"resolve it first")
    if value.requires_grad:
        raise InvalidArgumentError(
            f"{label}: expected a tensor the call can write, got one that requires grad (attnrt's "
            f"in-place writes have no backward); write into a tensor that does not")
    if value.is_inference():
        import torch

        if not torch.is_inference_mode_enabled():
            raise InvalidArgumentError(
                f"{label}: expected a tensor the call can write, got an inference tensor outside "
                f"inference mode (torch allows no in-place update of one there); call under "
                f"torch.inference_mode() or write into a normal tensor")


def requires_grad_message(label: str) -> str:
    return (f"{label}: requires grad, but attnrt's ops have no backward (its gradient would be "
            f"silently missing); call under torch.no_grad() or torch.inference_mode(), or pass "
            f".detach()")


def head_size_of_row(width: int, cache_type: tuple[int, int]) -> int:
    """The head size of a cache row `width` wide in a cache of `cache_type` (quant type, bit width):
    width elements, 2 * width int4 values, or width / 34 (Q8_0) or / 18 (Q4_0) blocks of 32."""
    quant, bits = cache_type
    if quant == 3:  # PER_BLOCK_32
        return width // (34 if bits == 8 else 18) * 32
    return width * 2 if quant != 0 and bits == 4 else width


def value_rows_shape(shape, key_cache: Any, value_cache: Any,
                     key_type: tuple[int, int] = (0, 0),
                     value_type: tuple[int, int] = (0, 0)) -> tuple[int, ...]:
    """`shape` (a query's, [..., N * H] or [..., N, H]) with its last dimension scaled from the key
    head size to the value head size (the paged ops' v_head_size: the head sizes of value_cache's
    and key_cache's rows under their cache types, (quant type, bit width)): the shape of their
    output. Unchanged where the caches agree or do not say."""
    shape = tuple(int(d) for d in shape)
    try:
        key_pool, value_pool = shape_of(key_cache, "k_cache"), shape_of(value_cache, "v_cache")
    except (InvalidArgumentError, TypeError):
        return shape
    if len(key_pool) != 4 or len(value_pool) != 4:  # not block pools: the op says what is wrong
        return shape
    key_width = head_size_of_row(key_pool[-1], key_type)
    value_width = head_size_of_row(value_pool[-1], value_type)
    if not shape or key_width <= 0 or value_width == key_width or \
            shape[-1] * value_width % key_width:
        return shape
    return shape[:-1] + (shape[-1] * value_width // key_width,)


def shape_of(value: Any, name: str) -> tuple[int, ...]:
    """The shape of an array of any framework (numpy, torch, buffer-protocol objects, DLPack)."""
    if value is None:
        raise InvalidArgumentError(f"{name} is required")
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    try:
        return tuple(memoryview(value).shape or ())
    except TypeError:
        pass
    if hasattr(value, "__dlpack__"):
        return tuple(np.from_dlpack(value).shape)
    raise InvalidArgumentError(
        f"{name}: expected a numpy array, a torch tensor, an object with the buffer protocol or a "
        f"DLPack producer, got {type(value).__name__}")


def first_int(value: Any, name: str, dtype: Any = np.int32) -> int:
    """The first element of a host integer array (or a Python int or list) as an int, checked to be
    an integer of `dtype`'s range (it sizes outputs before the op sees it: a float or a value past
    the range would otherwise size them wrongly, or ask for terabytes)."""
    if value is None:
        raise InvalidArgumentError(f"{name} is required")
    try:
        if isinstance(value, (int, np.integer, np.bool_, list, tuple)):
            return int(host_int_array(value, dtype).reshape(-1)[0])
        if is_torch(value):
            if value.dtype.is_floating_point or value.dtype.is_complex or value.numel() == 0:
                raise TypeError(f"expected a {np.dtype(dtype).name} tensor, got {value.dtype} "
                                f"of shape {tuple(value.shape)}")
            return _in_range(int(value.reshape(-1)[0]), dtype, 0)
        array = np.asarray(value)
        if array.dtype.kind not in "iu" or array.size == 0:
            raise TypeError(f"expected a {np.dtype(dtype).name} array, got {array.dtype} of "
                            f"shape {array.shape}")
        return _in_range(int(array.reshape(-1)[0]), dtype, 0)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgumentError(f"{name}: {e}") from None


def _in_range(x: int, dtype: Any, index: int) -> int:
    info = np.iinfo(dtype)
    if not info.min <= x <= info.max:
        raise OverflowError(f"element {index} (flattened) = {x} does not fit "
                            f"{np.dtype(dtype).name} [{info.min}, {info.max}]")
    return x


def host_int_array(value: Any, dtype) -> Any:
    """Python ints and lists (host-side integer inputs) as numpy arrays of `dtype`; arrays as they
    are. Anything but integers in a list (floats, bools, strings, rows of different lengths) is a
    TypeError naming the first such element, not a silent truncation; a value outside `dtype`'s
    range an OverflowError naming it, not a wrap-around."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"expected an integer, got the bool {value!r}")
    if isinstance(value, (int, np.integer)):
        value = [value]
    elif not isinstance(value, (list, tuple)):
        return value
    flat = np.asarray(value, dtype=object).reshape(-1)
    for i, x in enumerate(flat):
        if isinstance(x, np.ndarray) and x.ndim == 0:
            x = x.item()  # a 0-d array: its one value
        if isinstance(x, (list, tuple, np.ndarray)):
            raise TypeError(f"a nested list whose rows differ in length (element {i} of the "
                            f"outer list is a row of {len(x)})")
        if not isinstance(x, (int, np.integer)) or isinstance(x, (bool, np.bool_)):
            raise TypeError(f"expected integers, element {i} (flattened) is "
                            f"{type(x).__name__} {x!r}")
        _in_range(int(x), dtype, i)
    return np.asarray(value, dtype=dtype)


def dtype_of(like: Any, dtype: Any = None) -> Any:
    """The dtype in `like`'s framework (torch.dtype for a torch tensor, numpy dtype otherwise) of
    `dtype`: None = `like`'s own, a str = that numpy dtype name, an array = that array's dtype."""
    if is_torch(like):
        import torch
        if dtype is None:
            return like.dtype
        if isinstance(dtype, str):
            return getattr(torch, dtype)
        return dtype.dtype if is_torch(dtype) else getattr(torch, _numpy_dtype(dtype).name)
    if dtype is None:
        return _numpy_dtype(like)
    if isinstance(dtype, str):
        return np.dtype(dtype)
    return _numpy_dtype(dtype)


def empty(like: Any, shape: tuple[int, ...], dtype: Any = None) -> Any:
    """An uninitialized array of `shape` in `like`'s framework, of dtype_of(like, dtype)."""
    resolved = dtype_of(like, dtype)
    if is_torch(like):
        import torch
        return torch.empty(shape, dtype=resolved, device=like.device)
    return np.empty(shape, resolved)


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


def integer(value: Any, name: str, bits: int = 64) -> int:
    """`value` as an int of a signed `bits`-bit range, or InvalidArgumentError naming `name`
    (floats, strings and None are rejected rather than truncated)."""
    if not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{name}: expected an integer, got {value!r}")
    value = int(value)
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidArgumentError(f"{name}: expected a {bits}-bit signed integer, got {value}")
    return value


def attribute(value: Any, kind: type, name: str) -> Any:
    """An attribute value converted to `kind` (int: 32-bit; float: any real that does not round
    to 0 in float32, the attributes' type, unless it is 0), or InvalidArgumentError naming the
    attribute."""
    if kind is int:
        return integer(value, name, 32)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name}: expected a number, got {value!r}")
    value = float(value)
    if value != 0.0 and abs(value) <= 2.0**-150:  # float32 rounds it to 0 (0 means the default)
        raise InvalidArgumentError(
            f"{name}: {value!r} rounds to 0 in float32, which the op reads as 0; expected 0 or a "
            f"magnitude above 2^-150 (7.0e-46)")
    return value


def set_attributes(native: Any, values: dict[str, Any], types: dict[str, type],
                   names: dict[str, dict[str, int]], title: str) -> None:
    """Sets attributes by name on a native attribute struct: `types` gives each attribute's Python
    type, `names` the attributes that also take names ({attribute: {NAME: code}}); unknown
    attributes, unknown names and bad values raise InvalidArgumentError naming the attribute."""
    for name, value in values.items():
        kind = types.get(name)
        if kind is None:
            raise InvalidArgumentError(
                f"unknown {title} attribute '{name}'; the attributes are {', '.join(types)}")
        codes = names.get(name)
        if codes is not None and isinstance(value, str):
            if value.upper() not in codes:
                raise InvalidArgumentError(
                    f"{name}: expected one of {', '.join(codes)}, got '{value}'")
            value = codes[value.upper()]
        setattr(native, name, attribute(value, kind, name))
