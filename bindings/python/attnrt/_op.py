"""Op, Plan and BoundCall: what every op kind shares (attnrt_op_create, attnrt_op_plan,
attnrt_plan_run, attnrt_op_explain), over the SWIG module attnrt.attnrt_c."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from . import attnrt_c as _c
from . import _arrays
from ._errors import InvalidArgumentError, PlanMismatchError

_CANDIDATE_STATUS = {code: _c.candidate_status_name(code) for code in range(7)}

# The extension's raw entry points: a bound call goes straight to them, past the proxy classes.
_raw = _c._attnrt_c


def closed(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is closed")


def io_names(kind: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The reference op's input and output names of op kind `kind`, by position."""
    def names(fn):
        out: list[str] = []
        while name := fn(kind, len(out)):
            out.append(name)
        return tuple(out)
    return names(_c.op_input_name), names(_c.op_output_name)


class Op:
    """What every op has: plan, run, explain, output allocation and the plan-cache counters.

    Subclasses set KIND (attnrt_op_kind), TITLE (for messages), INPUTS and OUTPUTS (the reference
    op's names by position), HOST_INTS ({input name: numpy dtype} for inputs that may be given as
    Python ints or lists), WRITTEN_INPUTS (inputs the op writes in place, borrowed writable), and
    implement _output_specs()."""

    KIND: int = 0
    TITLE: str = ""
    INPUTS: tuple[str, ...] = ()
    OUTPUTS: tuple[str, ...] = ()
    HOST_INTS: dict[str, Any] = {}
    WRITTEN_INPUTS: tuple[str, ...] = ()

    def __init__(self, runtime, native_attributes, *extra):
        self._handle = _c.Op(runtime._h(), native_attributes, *extra)
        self._input_index = {n: i for i, n in enumerate(self.INPUTS)}
        self._output_index = {n: i for i, n in enumerate(self.OUTPUTS)}
        self._written = sum(1 << self._input_index[n] for n in self.WRITTEN_INPUTS)

    def _h(self) -> "_c.Op":
        if self._handle is None:
            raise closed("op")
        return self._handle

    def close(self) -> None:
        """Destroys the op; plans made from it stay valid. Idempotent."""
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- tensors by position ----------------------------------------------------------------------

    def _positional(self, values, outputs: bool) -> list:
        """`values` (a mapping by name, a sequence by position, or None) as a list by position, with
        host integers (Python ints and lists) made arrays."""
        names = self.OUTPUTS if outputs else self.INPUTS
        kind = "output" if outputs else "input"
        if values is None:
            return []
        if isinstance(values, Mapping):
            index = self._output_index if outputs else self._input_index
            out = [None] * len(names)
            for name, value in values.items():
                i = index.get(name)
                if i is None:
                    raise InvalidArgumentError(
                        f"unknown {kind} '{name}'; {self.TITLE}'s {kind}s are {', '.join(names)}")
                out[i] = value
        else:
            if len(values) > len(names):
                raise InvalidArgumentError(
                    f"{len(values)} {kind}s given, {self.TITLE} has {len(names)}")
            out = list(values)
        if not outputs:
            for name, dtype in self.HOST_INTS.items():
                i = self._input_index[name]
                if i < len(out) and isinstance(out[i], (int, np.integer, list, tuple, np.bool_)):
                    try:
                        out[i] = _arrays.host_int_array(out[i], dtype)
                    except (TypeError, ValueError, OverflowError) as e:
                        raise InvalidArgumentError(f"{name}: {e}") from None
        _arrays.check_torch_tensors(out, names, kind, 0 if outputs else self._written)
        return out

    def _lists(self, inputs, outputs) -> tuple["_c.Tensors", "_c.Tensors"]:
        ti = _c.Tensors(len(self.INPUTS))
        to = _c.Tensors(len(self.OUTPUTS))
        ti.assign(self._positional(inputs, False), False, self.KIND, False, self._written)
        to.assign(self._positional(outputs, True), True, self.KIND, True)
        return ti, to

    # ---- plan, run, explain -----------------------------------------------------------------------

    def plan(self, inputs, outputs) -> "Plan":
        """Plans the op for these tensors (only shapes, dtypes and strides are read): validates every
        shape and picks the highest-ranked kernel that accepts them. Plans are cached per shape
        signature. `inputs`/`outputs`: a dict by the reference op's names (INPUTS, OUTPUTS) or a
        sequence by position; None or missing = absent. Arrays are borrowed, never copied.

        Raises:
            InvalidArgumentError: an invalid shape or dtype (the message names the input).
            UnsupportedError: no kernel accepts the problem (the message gives each one's reason).
        """
        ti, to = self._lists(inputs, outputs)
        try:
            return Plan(self._h().plan(ti, to), self)
        finally:
            ti.clear_all()
            to.clear_all()

    def run(self, inputs, outputs) -> None:
        """Plans (from the op's plan cache after the first call) and runs in one step."""
        ti, to = self._lists(inputs, outputs)
        try:
            self._h().plan(ti, to).run(ti, to)
        finally:
            ti.clear_all()
            to.clear_all()

    def explain(self, inputs, outputs=None) -> list[dict[str, Any]]:
        """Every kernel of the op ranked against these tensors, without planning:
        [{"kernel", "priority", "status" ("selected", "eligible", "declined", "disabled",
        "not-pinned", "unavailable", "wrong-device"), "reason"}] in rank order. Without `outputs`,
        outputs of the documented shapes are assumed (output_shapes())."""
        if outputs is None:
            outputs = self.allocate_outputs(inputs)
        ti, to = self._lists(inputs, outputs)
        try:
            explanation = self._h().explain(ti, to)
        finally:
            ti.clear_all()
            to.clear_all()
        out = []
        for i in range(explanation.count()):
            raw = _c.RawCandidate()
            explanation.candidate(i, raw)
            out.append({"kernel": raw.kernel, "priority": raw.priority,
                        "status": _CANDIDATE_STATUS.get(raw.status, str(raw.status)),
                        "reason": raw.reason})
        return out

    @property
    def plan_cache_stats(self) -> dict[str, int]:
        """{"hits": plans returned from the cache, "misses": plans made}."""
        h = self._h()
        return {"hits": h.plan_cache_hits(), "misses": h.plan_cache_misses()}

    # ---- outputs ------------------------------------------------------------------------------------

    def _output_specs(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """{output name: (shape, dtype)}: dtype None = the first input's, a str = that numpy dtype
        name, an array = that array's dtype. Implemented per op."""
        raise NotImplementedError

    def output_shapes(self, inputs) -> dict[str, tuple[tuple[int, ...], Any]]:
        """The documented output shapes and dtypes for these inputs: {name: (shape, dtype)}, the
        dtype a numpy dtype (a torch dtype when the first input is a torch tensor). Only the outputs
        the attributes ask for are listed (output_qk with qk_output, softmax_lse with
        return_softmax_lse)."""
        by_name = self._by_name(inputs)
        like = by_name.get(self.INPUTS[0])
        return {name: (shape, _arrays.dtype_of(like, dtype))
                for name, (shape, dtype) in self._specs(by_name).items()}

    def _specs(self, by_name: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], Any]]:
        try:
            return self._output_specs(by_name)
        except (TypeError, ValueError, IndexError, OverflowError) as e:
            raise InvalidArgumentError(
                f"cannot size the {self.TITLE} outputs from these inputs: {e}") from None

    def _by_name(self, inputs) -> dict[str, Any]:
        if isinstance(inputs, Mapping):
            return dict(inputs)
        return dict(zip(self.INPUTS, inputs))

    def allocate_outputs(self, inputs, given: Mapping | None = None) -> dict[str, Any]:
        """The outputs of the documented shapes, allocated in the framework of the first input
        (torch in, torch out), except those in `given`."""
        by_name = self._by_name(inputs)
        like = by_name.get(self.INPUTS[0])
        outputs = {}
        for name, (shape, dtype) in self._specs(by_name).items():
            value = given.get(name) if given else None
            outputs[name] = value if value is not None else _arrays.empty(like, shape, dtype)
        return outputs


class Plan:
    """A plan: the kernel chosen for one shape signature (attnrt_op_plan). Cheap to run many times.

    run() borrows the tensors for one call; bind() borrows them once and returns a callable that
    only runs. Use the plan as a context manager, or call close() (drops this reference; the op's
    cache may keep the plan)."""

    __slots__ = ("_handle", "_op", "_free_lists")

    def __init__(self, handle: "_c.Plan", op: Op):
        self._handle = handle
        self._op = op
        self._free_lists: list = []

    def _h(self) -> "_c.Plan":
        if self._handle is None:
            raise closed("plan")
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
        """Runs the kernel on `inputs` into `outputs` (a dict by name or a sequence by position, as
        for Op.plan). The tensors must have the shapes, dtypes and strides the plan was made for.
        The GIL is released while the kernel runs; the arrays must not be resized or freed
        meanwhile (they are borrowed).

        Raises:
            PlanMismatchError: other shapes, dtypes or strides than planned.
            InvalidArgumentError: a value out of range (seqlens_k, block_table, ...), named.
        """
        op = self._op
        # Native tensor lists are reused across runs (one pair per concurrent caller).
        lists = self._free_lists.pop() if self._free_lists else (
            _c.Tensors(len(op.INPUTS)), _c.Tensors(len(op.OUTPUTS)))
        ti, to = lists
        try:
            ti.assign(op._positional(inputs, False), False, op.KIND, False, op._written)
            if type(outputs) is list:
                _arrays.check_torch_tensors(outputs, op.OUTPUTS, "output")
            to.assign(outputs if type(outputs) is list else op._positional(outputs, True), True,
                      op.KIND, True)
            self._h().run(ti, to)
        finally:
            ti.clear_all()
            to.clear_all()
            self._free_lists.append(lists)

    def bind(self, inputs, outputs) -> "BoundCall":
        """Borrows `inputs` and `outputs` once and returns a callable that runs the plan on them with
        no per-call conversion and a workspace allocated once: the fastest way to run a plan many
        times on the same buffers (a decode loop whose caches are updated in place). Change the
        arrays' contents between calls, never their shapes or memory; the bound call keeps them
        alive. Not reentrant: one bound call per thread."""
        return BoundCall(self, inputs, outputs)


class BoundCall:
    """A plan bound to its tensors (Plan.bind). Calling it runs the kernel; it returns None and raises
    as Plan.run does."""

    __slots__ = ("_call", "_args", "_keep", "plan")

    def __init__(self, plan: Plan, inputs, outputs):
        op = plan._op
        ti, to = op._lists(inputs, outputs)
        info = plan.info
        # Checked now rather than on every call: the op's plan for these tensors must be this one.
        signature = Plan(op._h().plan(ti, to), op).info["signature"] if op._handle else None
        if signature is not None and signature != info["signature"]:
            raise PlanMismatchError(
                f"bind: the tensors have the signature {signature}, the plan was made for "
                f"{info['signature']}")
        workspace = _c.Workspace(info["workspace_size"], max(1, info["workspace_alignment"]))
        self.plan = plan
        # The tensors stay borrowed by `ti`/`to` until this object goes; `_keep` holds the proxies.
        self._keep = (ti, to, workspace, plan._h())
        self._call: Callable = _raw.Plan_run_in
        # SWIG proxies' `this` (the wrapped pointers), passed to the raw wrapper.
        self._args = tuple(getattr(x, "this") for x in (plan._h(), ti, to, workspace))

    def __call__(self) -> None:
        self._call(*self._args)
