"""ONNX Runtime sessions on attnrt: libattnrt_onnxruntime.so, a custom-op library whose
com.microsoft GroupQueryAttention takes over every such node of a session (docs/onnxruntime.md).

    import onnxruntime as ort
    import attnrt.onnxruntime

    so = ort.SessionOptions()
    attnrt.onnxruntime.register(so)
    session = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])

The library lives beside libattnrt.so (build/lib in a build tree, lib/ of an install); it is
built when ONNX Runtime's C API headers are found (scripts/setup-onnxruntime-headers.sh). This
module does not import onnxruntime: it works with any session options object that has
register_custom_ops_library and add_session_config_entry.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

from . import attnrt_c as _c  # loads libattnrt.so, whose folder holds the library

LIBRARY_NAME = "libattnrt_onnxruntime.so"
# Session config entry: threads of the attnrt runtime the session's nodes run on (0 = attnrt's
# default: ATTNRT_NUM_THREADS, else the hardware threads). Read when the library is registered.
NUM_THREADS_KEY = "attnrt.num_threads"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _libattnrt_dir() -> str | None:
    """The folder of the libattnrt.so this process loaded (through the extension module)."""
    assert _c is not None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libattnrt.so"):
                    return os.path.dirname(path)
    except OSError:
        pass
    return None


def library_path() -> str:
    """Path of libattnrt_onnxruntime.so: $ATTNRT_ONNXRUNTIME_LIBRARY when set, else the copy
    beside the libattnrt.so this package loaded (or in the package's lib/ folder).

    Raises:
        FileNotFoundError: the library is not there (built only with ONNX Runtime's headers).
    """
    override = os.environ.get("ATTNRT_ONNXRUNTIME_LIBRARY")
    if override:
        if not os.path.isfile(override):
            raise FileNotFoundError(f"ATTNRT_ONNXRUNTIME_LIBRARY={override}: no such file")
        return os.path.abspath(override)
    folders = [_libattnrt_dir(), os.path.join(_PACKAGE_DIR, "lib"),
               os.path.join(_PACKAGE_DIR, os.pardir, os.pardir, "lib")]
    tried = []
    for folder in folders:
        if folder is None:
            continue
        candidate = os.path.normpath(os.path.join(folder, LIBRARY_NAME))
        if os.path.isfile(candidate):
            return candidate
        tried.append(candidate)
    raise FileNotFoundError(
        f"{LIBRARY_NAME} not found (tried {', '.join(tried)}); it is built with attnrt when ONNX "
        "Runtime's C API headers are found: scripts/setup-onnxruntime-headers.sh BUILD_DIR, then "
        "rebuild (docs/onnxruntime.md)")


def register(session_options: Any, num_threads: int | None = None) -> Any:
    """Registers attnrt's GroupQueryAttention on onnxruntime.SessionOptions: every
    com.microsoft.GroupQueryAttention node of sessions made with them runs on attnrt.
    num_threads sets the session config entry attnrt.num_threads first. Returns the options."""
    if num_threads is not None:
        if (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                or not 0 <= num_threads <= 1024):
            raise ValueError(f"num_threads: expected an integer in [0, 1024] (0: attnrt's "
                             f"default), got {num_threads!r}")
        session_options.add_session_config_entry(NUM_THREADS_KEY, str(num_threads))
    session_options.register_custom_ops_library(library_path())
    return session_options


def runs() -> int:
    """GroupQueryAttention runs the library has served in this process (all sessions)."""
    counter = ctypes.CDLL(library_path()).attnrt_onnxruntime_runs
    counter.restype = ctypes.c_uint64
    return int(counter())
