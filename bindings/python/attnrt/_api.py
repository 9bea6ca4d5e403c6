"""Runtime, GqaOp, Plan and gqa(): the Python API over the SWIG module attnrt.attnrt_c."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import attnrt_c as _c
from ._errors import InvalidArgumentError

# ONNX Runtime's input and output names of com.microsoft.GroupQueryAttention, by position.
GQA_INPUTS: tuple[str, ...] = (
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale",
    "q_norm_weight", "k_norm_weight")
GQA_OUTPUTS: tuple[str, ...] = ("output", "present_key", "present_value", "output_qk")
assert all(getattr(_c, f"ATTNRT_GQA_INPUT_{n.upper()}") == i for i, n in enumerate(GQA_INPUTS))
assert all(getattr(_c, f"ATTNRT_GQA_OUTPUT_{n.upper()}") == i for i, n in enumerate(GQA_OUTPUTS))
assert _c.ATTNRT_GQA_NUM_INPUTS == len(GQA_INPUTS) and _c.ATTNRT_GQA_NUM_OUTPUTS == len(GQA_OUTPUTS)

# Every attribute of attnrt_gqa_attributes (ONNX Runtime's names), with its Python type.
GQA_ATTRIBUTES: dict[str, type] = {
    "num_heads": int, "kv_num_heads": int, "causal": int, "scale": float, "softcap": float,
    "local_window_size": int, "sliding_window_cache": int, "do_rotary": int,
    "rotary_interleaved": int, "smooth_softmax": int, "qk_output": int, "k_quant_type": int,
    "v_quant_type": int, "kv_cache_bit_width": int, "qk_norm_epsilon": float}
_QUANT_TYPES = {"NONE": _c.ATTNRT_GQA_QUANT_NONE, "PER_TENSOR": _c.ATTNRT_GQA_QUANT_PER_TENSOR,
                "PER_CHANNEL": _c.ATTNRT_GQA_QUANT_PER_CHANNEL}

# numpy dtypes without a buffer-protocol format (ml_dtypes): viewed as unsigned ints of their width
# and described with their DLPack code.
_VIEWED_DTYPES = {
    "bfloat16": (np.uint16, _c.ATTNRT_DTYPE_CODE_BFLOAT, 16),
    "float8_e4m3fn": (np.uint8, _c.ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN, 8),
    "float8_e8m0fnu": (np.uint8, _c.ATTNRT_DTYPE_CODE_FLOAT8_E8M0FNU, 8),
}

_CANDIDATE_STATUS = {code: _c.candidate_status_name(code) for code in range(7)}


def version() -> str:
    """Library version "MAJOR.MINOR.PATCH"."""
    return _c.version()


def abi_version() -> tuple[int, int]:
    """(major, minor) ABI version of the loaded libattnrt.so."""
    return _c.abi_version_major(), _c.abi_version_minor()


def _closed(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is closed")


def _fill(tensors: "_c.Tensors", names: Sequence[str], values, writable: bool, kind: str) -> None:
    """Puts `values` (a mapping by name, a sequence by position, or None) into `tensors`."""
    if values is None:
        return
    if isinstance(values, Mapping):
        items = []
        for name, value in values.items():
            if name not in names:
                raise InvalidArgumentError(
                    f"unknown {kind} '{name}'; GroupQueryAttention's {kind}s are {', '.join(names)}")
            items.append((names.index(name), name, value))
    else:
        if len(values) > len(names):
            raise InvalidArgumentError(
                f"{len(values)} {kind}s given, GroupQueryAttention has {len(names)}")
        items = [(i, names[i], v) for i, v in enumerate(values)]
    for index, name, value in items:
        if value is None:
            continue
        code, bits = -1, 0
        if isinstance(value, np.ndarray) and value.dtype.name in _VIEWED_DTYPES:
            view_type, code, bits = _VIEWED_DTYPES[value.dtype.name]
            value = value.view(view_type)
        tensors.set(index, name, value, writable, code, bits)


class _TensorLists:
    """The native input and output lists of one call; releases every borrowed buffer on exit."""

    def __init__(self, inputs, outputs):
        self.inputs = _c.Tensors(len(GQA_INPUTS))
        self.outputs = _c.Tensors(len(GQA_OUTPUTS))
        try:
            _fill(self.inputs, GQA_INPUTS, _normalize_inputs(inputs), False, "input")
            _fill(self.outputs, GQA_OUTPUTS, outputs, True, "output")
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inputs.clear_all()
        self.outputs.clear_all()


def _normalize_inputs(inputs):
    """Python ints and lists for the host-side integer inputs become int32/int64 arrays."""
    if not isinstance(inputs, Mapping):
        return inputs
    out = dict(inputs)
    total = out.get("total_sequence_length")
    if isinstance(total, (int, np.integer)):
        out["total_sequence_length"] = np.array([total], dtype=np.int32)
    for name, dtype in (("seqlens_k", np.int32), ("position_ids", np.int64)):
        if isinstance(out.get(name), (list, tuple)):
            out[name] = np.asarray(out[name], dtype=dtype)
    return out


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
        self._ops: dict[tuple, GqaOp] = {}

    def _h(self) -> "_c.Runtime":
        if self._handle is None:
            raise _closed("runtime")
        return self._handle

    def close(self) -> None:
        """Releases the runtime handle (and the ops cached by gqa()). Idempotent."""
        for op in self._ops.values():
            op.close()
        self._ops.clear()
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

    def gqa_op(self, num_heads: int, kv_num_heads: int, **attributes) -> "GqaOp":
        """A GroupQueryAttention op; see GqaOp."""
        return GqaOp(self, num_heads=num_heads, kv_num_heads=kv_num_heads, **attributes)

    def _cached_gqa_op(self, attributes: dict[str, Any]) -> "GqaOp":
        key = tuple(sorted(attributes.items()))
        op = self._ops.get(key)
        if op is None:
            if len(self._ops) >= 64:
                self._ops.pop(next(iter(self._ops))).close()
            op = self._ops[key] = GqaOp(self, **attributes)
        return op


class Plan:
    """A plan: the kernel chosen for one shape signature (attnrt_op_plan). Cheap to run many times.

    Use it as a context manager, or call close() (drops this reference; the op's cache may keep
    the plan)."""

    def __init__(self, handle: "_c.Plan"):
        self._handle = handle

    def _h(self) -> "_c.Plan":
        if self._handle is None:
            raise _closed("plan")
        return self._handle

    def close(self) -> None:
        """Drops this reference to the plan. Idempotent."""
        self._handle = None

    def __enter__(self) -> "Plan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def info(self) -> dict[str, Any]:
        """{"kernel", "workspace_size" (bytes), "workspace_alignment", "signature"}."""
        raw = _c.RawPlanInfo()
        self._h().info(raw)
        return {"kernel": raw.kernel, "workspace_size": raw.workspace_size,
                "workspace_alignment": raw.workspace_alignment, "signature": raw.signature}

    @property
    def kernel(self) -> str:
        """Name of the kernel that runs, e.g. "cpu_x86.gqa.flash.avx2"."""
        return self.info["kernel"]

    def run(self, inputs, outputs) -> None:
        """Runs the kernel on `inputs` into `outputs` (see GqaOp.plan for both). The tensors must
        have the shapes, dtypes and strides the plan was made for. The GIL is released while the
        kernel runs; the arrays must not be resized or freed meanwhile (they are borrowed).

        Raises:
            PlanMismatchError: other shapes, dtypes or strides than planned.
            InvalidArgumentError: seqlens_k, total_sequence_length or positions out of range.
        """
        with _TensorLists(inputs, outputs) as t:
            self._h().run(t.inputs, t.outputs)


class GqaOp:
    """com.microsoft.GroupQueryAttention with ONNX Runtime's semantics (attnrt_op_create).

    Attributes (ONNX Runtime's names and defaults): num_heads N and kv_num_heads Nkv (required,
    N % Nkv == 0), causal (1), scale (0: 1/sqrt(H)), softcap (0: off), local_window_size (-1: off),
    sliding_window_cache (0), do_rotary (0), rotary_interleaved (0), smooth_softmax (-1),
    qk_output (0 none, 1 before softmax, 2 after), k_quant_type / v_quant_type ("NONE",
    "PER_TENSOR", "PER_CHANNEL" or 0/1/2), kv_cache_bit_width (0, 4 or 8), qk_norm_epsilon (1e-6).

    Raises:
        InvalidArgumentError: an attribute is invalid (the message names it, expected and actual).
    """

    def __init__(self, runtime: Runtime, num_heads: int, kv_num_heads: int, **attributes):
        attributes = {"num_heads": num_heads, "kv_num_heads": kv_num_heads, **attributes}
        native = _c.GqaAttributes()
        for name, value in attributes.items():
            kind = GQA_ATTRIBUTES.get(name)
            if kind is None:
                raise InvalidArgumentError(
                    f"unknown GroupQueryAttention attribute '{name}'; the attributes are "
                    f"{', '.join(GQA_ATTRIBUTES)}")
            if name in ("k_quant_type", "v_quant_type") and isinstance(value, str):
                if value.upper() not in _QUANT_TYPES:
                    raise InvalidArgumentError(
                        f"{name}: expected one of {', '.join(_QUANT_TYPES)}, got '{value}'")
                value = _QUANT_TYPES[value.upper()]
            setattr(native, name, kind(value))
        self.attributes: dict[str, Any] = {n: getattr(native, n) for n in GQA_ATTRIBUTES}
        self._handle = _c.Op(runtime._h(), native)

    def _h(self) -> "_c.Op":
        if self._handle is None:
            raise _closed("op")
        return self._handle

    def close(self) -> None:
        """Destroys the op; plans made from it stay valid. Idempotent."""
        self._handle = None

    def __enter__(self) -> "GqaOp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def plan(self, inputs, outputs) -> Plan:
        """Plans the op for these tensors (only shapes, dtypes and strides are read).

        inputs: a dict by ONNX Runtime's input names (GQA_INPUTS) or a sequence by position;
            None or missing = absent. Shapes (B batch, S new tokens, L new K/V rows, N/Nkv heads,
            H head size, P past buffer rows, T total length):
              query (B,S,N*H) or packed QKV (B,S,(N+2*Nkv)*H), float32/float16/bfloat16;
              key, value (B,L,Nkv*H); past_key, past_value (B,Nkv,P,H) (int4 cache: uint8 (B,Nkv,P,H/2));
              seqlens_k int32 (B) = total length - 1 per batch; total_sequence_length int32 (1) or a
              Python int; cos_cache, sin_cache (M,R/2); position_ids int64 (B,S);
              attention_bias (B|1,N|1,S,T); head_sink (N); k_scale, v_scale float32 (1 or Nkv*H).
        outputs: the same by GQA_OUTPUTS: output (B,S,N*H); present_key, present_value
            (B,Nkv,max(T,P),H), which may be past_key / past_value themselves (a shared buffer);
            output_qk (B,N,S,T) with qk_output != 0.
        Arrays are borrowed, never copied: numpy arrays, any buffer-protocol object, or any object
        with __dlpack__. Non-contiguous arrays are passed with their strides and rejected by the
        kernels that need compact ones (InvalidArgumentError naming the input).

        Raises:
            InvalidArgumentError: an invalid shape or dtype (the message names the input).
            UnsupportedError: no kernel accepts the problem (the message gives each one's reason).
        """
        with _TensorLists(inputs, outputs) as t:
            return Plan(self._h().plan(t.inputs, t.outputs))

    def explain(self, inputs, outputs=None) -> list[dict[str, Any]]:
        """Every kernel of the op ranked against these tensors, without planning:
        [{"kernel", "priority", "status" ("selected", "eligible", "declined", "disabled",
        "not-pinned", "unavailable", "wrong-device"), "reason"}] in rank order. Without
        `outputs`, outputs of the documented shapes are assumed (output_shapes())."""
        if outputs is None:
            outputs = {name: np.empty(shape, dtype)
                       for name, (shape, dtype) in self.output_shapes(inputs).items()}
        with _TensorLists(inputs, outputs) as t:
            explanation = self._h().explain(t.inputs, t.outputs)
        out = []
        for i in range(explanation.count()):
            raw = _c.RawCandidate()
            explanation.candidate(i, raw)
            out.append({"kernel": raw.kernel, "priority": raw.priority,
                        "status": _CANDIDATE_STATUS.get(raw.status, str(raw.status)),
                        "reason": raw.reason})
        return out

    def run(self, inputs, outputs) -> None:
        """Plans (from the op's plan cache after the first call) and runs in one step; see plan()."""
        with _TensorLists(inputs, outputs) as t:
            plan = self._h().plan(t.inputs, t.outputs)
            plan.run(t.inputs, t.outputs)

    @property
    def plan_cache_stats(self) -> dict[str, int]:
        """{"hits": plans returned from the cache, "misses": plans made}."""
        h = self._h()
        return {"hits": h.plan_cache_hits(), "misses": h.plan_cache_misses()}

    def output_shapes(self, inputs) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The documented output shapes and dtypes for these inputs (a dict by name):
        output (B,S,N*H) of query's dtype; present_key/value (B,Nkv,max(T,P),H) (P rows with
        sliding_window_cache=1) of past_key's dtype
        (without a past: query's, or int8 / uint8 with H/2 for a quantized 8-/4-bit cache);
        output_qk (B,N,S,T) with qk_output != 0."""
        inputs = _normalize_inputs(dict(inputs) if isinstance(inputs, Mapping)
                                   else dict(zip(GQA_INPUTS, inputs)))
        a = self.attributes
        n, nkv = a["num_heads"], a["kv_num_heads"]
        query = _array_view(inputs.get("query"), "query")
        if query.ndim != 3:
            raise InvalidArgumentError(f"query: expected 3 dimensions (B,S,hidden), got {query.shape}")
        b, s, hidden = query.shape
        packed = inputs.get("key") is None
        h = hidden // (n + 2 * nkv) if packed else hidden // n
        total = inputs.get("total_sequence_length")
        if total is None:
            raise InvalidArgumentError("total_sequence_length is required to size the outputs")
        t = int(_array_view(total, "total_sequence_length").reshape(-1)[0])
        past_key = inputs.get("past_key")
        if past_key is not None:
            past = _array_view(past_key, "past_key")
            p, cache_dtype, cache_h = past.shape[2], past.dtype, past.shape[3]
        else:
            p, cache_dtype, cache_h = 0, query.dtype, h
            if a["k_quant_type"] != _c.ATTNRT_GQA_QUANT_NONE:
                bits = a["kv_cache_bit_width"]
                cache_dtype, cache_h = (np.dtype(np.uint8), h // 2) if bits == 4 else \
                    (np.dtype(np.int8), h)
        # A window-sized ring cache (sliding_window_cache=1) keeps the past buffer's P rows.
        present = p if a["sliding_window_cache"] == 1 else max(t, p)
        shapes = {"output": ((b, s, n * h), query.dtype),
                  "present_key": ((b, nkv, present, cache_h), cache_dtype),
                  "present_value": ((b, nkv, present, cache_h), cache_dtype)}
        if a["qk_output"]:
            shapes["output_qk"] = ((b, n, s, t), query.dtype)
        return shapes

    def __call__(self, output=None, present_key=None, present_value=None, output_qk=None,
                 **inputs):
        """Runs on inputs given by name and returns (output, present_key, present_value[,
        output_qk]); outputs not given are allocated (numpy, shapes of output_shapes())."""
        given = {"output": output, "present_key": present_key, "present_value": present_value,
                 "output_qk": output_qk}
        outputs = {}
        for name, (shape, dtype) in self.output_shapes(inputs).items():
            outputs[name] = given[name] if given[name] is not None else np.empty(shape, dtype)
        self.run(inputs, outputs)
        result = (outputs["output"], outputs["present_key"], outputs["present_value"])
        return result + (outputs["output_qk"],) if "output_qk" in outputs else result


def _array_view(value, name: str) -> np.ndarray:
    """A numpy view (never a copy) of `value`, for its shape and dtype."""
    if isinstance(value, np.ndarray):
        return value
    if value is None:
        raise InvalidArgumentError(f"{name} is required")
    if isinstance(value, (int, np.integer)):
        return np.array([value])
    try:
        return np.asarray(memoryview(value))
    except TypeError:
        pass
    if hasattr(value, "__dlpack__"):
        return np.from_dlpack(value)
    return np.asarray(value)


def gqa(runtime: Runtime, query, key=None, value=None, past_key=None, past_value=None,
        seqlens_k=None, total_sequence_length=None, cos_cache=None, sin_cache=None,
        position_ids=None, attention_bias=None, head_sink=None, k_scale=None, v_scale=None,
        q_norm_weight=None, k_norm_weight=None, *, num_heads: int, kv_num_heads: int,
        output=None, present_key=None, present_value=None, output_qk=None, **attributes):
    """com.microsoft.GroupQueryAttention, as ONNX Runtime runs it, with its input names.

    Returns (output, present_key, present_value), plus output_qk when qk_output != 0, as numpy
    arrays allocated here unless given (pass present_key=past_key, present_value=past_value to
    update a shared past/present buffer in place, as ONNX Runtime's IO binding does).

    Shapes and dtypes: see GqaOp.plan. seqlens_k may be a list and total_sequence_length an int.
    The op is made once per attribute set and cached on the runtime; plans are cached per shape
    signature by the op, so a decode loop plans once.

    Raises:
        attnrt.Error subclasses: InvalidArgumentError, UnsupportedError, ... with the library's
        message.
    """
    op = runtime._cached_gqa_op({"num_heads": num_heads, "kv_num_heads": kv_num_heads,
                                 **attributes})
    inputs = {"query": query, "key": key, "value": value, "past_key": past_key,
              "past_value": past_value, "seqlens_k": seqlens_k,
              "total_sequence_length": total_sequence_length, "cos_cache": cos_cache,
              "sin_cache": sin_cache, "position_ids": position_ids,
              "attention_bias": attention_bias, "head_sink": head_sink, "k_scale": k_scale,
              "v_scale": v_scale, "q_norm_weight": q_norm_weight, "k_norm_weight": k_norm_weight}
    return op(output=output, present_key=present_key, present_value=present_value,
              output_qk=output_qk, **inputs)
