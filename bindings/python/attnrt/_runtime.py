"""Runtime: the discovered plugins and their ranked kernels; version and ABI queries."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from . import attnrt_c as _c
from ._errors import InvalidArgumentError
from ._op import closed as _closed


def version() -> str:
    """Library version "MAJOR.MINOR.PATCH"."""
    return _c.version()


def abi_version() -> tuple[int, int]:
    """(major, minor) ABI version of the loaded libattnrt.so."""
    return _c.abi_version_major(), _c.abi_version_minor()


# The C ABI this package was built against (the headers of its extension module): the loaded
# libattnrt.so must have the same major version and at least this minor one (a 1.2 library
# ignores attnrt_runtime_options.executor of 1.3, for one).
REQUIRED_ABI = (int(_c.ATTNRT_ABI_VERSION_MAJOR), int(_c.ATTNRT_ABI_VERSION_MINOR))


def check_abi(found: tuple[int, int] | None = None) -> None:
    """Raises ImportError unless the loaded libattnrt.so's ABI (`found`, default abi_version())
    serves this package: the same major version, a minor version >= REQUIRED_ABI's."""
    major, minor = abi_version() if found is None else found
    need_major, need_minor = REQUIRED_ABI
    if major != need_major or minor < need_minor:
        raise ImportError(
            f"attnrt: the loaded libattnrt.so has ABI {major}.{minor}, but this attnrt Python "
            f"package needs ABI {need_major}.{need_minor} (major {need_major}, minor >= "
            f"{need_minor}); install the libattnrt.so of the same release as the package")


check_abi()


class Runtime:
    """A runtime: the discovered plugins and their ranked kernels (attnrt_runtime_create).

    Use it as a context manager, or call close(). Ops and plans made from it stay valid after it is
    closed (they keep their plugins loaded).

    Args:
        plugin_paths: folders searched first for libattnrt_*.so (a str with ':'-separated folders, or
            a sequence of folders).
        search_default_paths: then search ATTNRT_PLUGIN_PATH and attnrt/plugins beside libattnrt.so.
        kernel: comma-separated globs of the kernels allowed to run (None: ATTNRT_KERNEL).
        disable: comma-separated globs of kernels excluded (None: ATTNRT_DISABLE).
        debug: log one line per planned op (None: ATTNRT_DEBUG).
        num_threads: CPU threads, caller included (0: ATTNRT_NUM_THREADS, else all hardware threads).

    Raises:
        InvalidArgumentError: a bad option value.
    """

    def __init__(self, plugin_paths: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                 *, search_default_paths: bool = True, kernel: str | None = None,
                 disable: str | None = None, debug: bool | None = None, num_threads: int = 0):
        if plugin_paths is None or isinstance(plugin_paths, (str, os.PathLike)):
            paths = [] if plugin_paths is None else [os.fspath(plugin_paths)]
        else:
            paths = [os.fspath(p) for p in plugin_paths]
        joined = ":".join(paths) if paths else None
        self._handle = _c.Runtime(joined, int(bool(search_default_paths)), kernel, disable,
                                  -1 if debug is None else int(bool(debug)), int(num_threads))
        self._ops: dict[tuple, Any] = {}

    def _h(self) -> "_c.Runtime":
        if self._handle is None:
            raise _closed("runtime")
        return self._handle

    def close(self) -> None:
        """Releases the runtime handle (and the ops cached by gqa()). Idempotent."""
        for op in self._ops.values():
            op.close()
        self._ops.clear()
        for hook in self.__dict__.pop("_close_hooks", ()):  # the C++ torch operators' registry
            hook()
        self._handle = None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def num_threads(self) -> int:
        """Threads of the runtime's CPU pool, caller thread included."""
        return self._h().num_threads()

    def plugins(self) -> list[dict[str, Any]]:
        """The loaded plugins: name, path, version, abi (major, minor), available, reason, facts
        (dict) and kernels (list of dicts: name, plugin, op, device, priority; in rank order)."""
        h = self._h()
        plugins = []
        for p in range(h.plugin_count()):
            raw = _c.RawPluginInfo()
            h.plugin_info(p, raw)
            facts = {h.plugin_fact_key(p, f): h.plugin_fact_value(p, f) for f in range(raw.num_facts)}
            kernels = []
            for k in range(raw.num_kernels):
                kraw = _c.RawKernelInfo()
                h.plugin_kernel(p, k, kraw)
                kernels.append({"name": kraw.name, "plugin": kraw.plugin,
                                "op": _c.op_kind_name(kraw.op_kind),
                                "device": {1: "cpu", 2: "cuda"}.get(kraw.device_type,
                                                                    str(kraw.device_type)),
                                "priority": kraw.priority})
            plugins.append({"name": raw.name, "path": raw.path, "version": raw.version,
                            "abi": (raw.abi_major, raw.abi_minor), "available": bool(raw.available),
                            "reason": raw.reason, "facts": facts, "kernels": kernels})
        return plugins

    def diagnostics(self) -> list[dict[str, str]]:
        """Files skipped during discovery: [{"path": ..., "message": ...}]."""
        h = self._h()
        out = []
        for i in range(h.diagnostic_count()):
            raw = _c.RawDiagnostic()
            h.diagnostic(i, raw)
            out.append({"path": raw.path, "message": raw.message})
        return out

    def list(self) -> dict[str, Any]:
        """What `plugin-inspect list` shows, as data: version, abi, num_threads, plugins,
        diagnostics."""
        return {"version": version(), "abi": abi_version(), "num_threads": self.num_threads,
                "plugins": self.plugins(), "diagnostics": self.diagnostics()}

    def gqa_op(self, num_heads: int, kv_num_heads: int, **attributes):
        """A GroupQueryAttention op; see attnrt.GqaOp."""
        from ._gqa import GqaOp
        return GqaOp(self, num_heads=num_heads, kv_num_heads=kv_num_heads, **attributes)

    def paged_gqa_op(self, num_heads: int, kv_num_heads: int, block_size: int, **attributes):
        """A GroupQueryAttention op over a paged KV cache; see attnrt.PagedGqaOp."""
        from ._paged_gqa import PagedGqaOp
        return PagedGqaOp(self, num_heads=num_heads, kv_num_heads=kv_num_heads,
                          block_size=block_size, **attributes)

    def sparse_mla_op(self, quant_mode: int, **attributes):
        """A sparse MLA op (CANN MixedQuantSparseFlashMla); see attnrt.SparseMlaOp."""
        from ._sparse_mla import SparseMlaOp
        return SparseMlaOp(self, quant_mode=quant_mode, **attributes)

    def sparse_mla_metadata_op(self, quant_mode: int, **attributes):
        """Its metadata op (MixedQuantSparseFlashMlaMetadata); see attnrt.SparseMlaMetadataOp."""
        from ._sparse_mla import SparseMlaMetadataOp
        return SparseMlaMetadataOp(self, quant_mode=quant_mode, **attributes)

    def cached_op(self, cls, **attributes):
        """An op of class `cls` made once per attribute set and kept by the runtime (up to 64 op
        sets; the oldest is closed first). The one-call functions (attnrt.gqa, ...) use it, so a
        decode loop creates its op and plan once. The key holds each value's type too: values that
        compare equal across types (True == 1 == 1.0 == numpy.int64(1)) are different attribute
        sets, so a value the op refuses is refused whatever was cached before."""
        key = (cls, tuple(sorted((name, type(value), value) for name, value in attributes.items())))
        try:
            op = self._ops.get(key)
        except TypeError:
            bad = [n for n, v in attributes.items() if not isinstance(v, (int, float, str))]
            raise InvalidArgumentError(
                f"{', '.join(bad)}: attributes are numbers or names, got "
                f"{', '.join(type(attributes[n]).__name__ for n in bad)}") from None
        if op is None:
            if len(self._ops) >= 64:
                self._ops.pop(next(iter(self._ops))).close()
            op = self._ops[key] = cls(self, **attributes)
        return op
