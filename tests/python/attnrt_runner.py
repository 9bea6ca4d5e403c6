"""Runs attnrt on one GQA call through the Python binding (`attnrt`, built in <build>/python)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _import_attnrt():
    build = Path(os.environ.get("ATTNRT_BUILD_DIR", REPO / "build"))
    module_dir = build / "python"
    if not (module_dir / "attnrt").is_dir():
        raise FileNotFoundError(f"{module_dir}/attnrt not found: build with the Python binding and "
                                "set ATTNRT_BUILD_DIR to the build folder")
    sys.path.insert(0, str(module_dir))
    import attnrt  # noqa: E402  (found through the build folder)
    return attnrt


attnrt = _import_attnrt()
AttnrtError = attnrt.Error
_runtime: attnrt.Runtime | None = None


def _shared_runtime() -> attnrt.Runtime:
    global _runtime
    if _runtime is None:
        _runtime = attnrt.Runtime()
    return _runtime


def _poisoned(shape, dtype) -> np.ndarray:
    """An output buffer whose every element a kernel must overwrite (NaN, or 0xA5 bytes)."""
    array = np.empty(shape, dtype)
    if np.issubdtype(array.dtype, np.floating):
        array.fill(np.nan)
    else:
        array.view(np.uint8).fill(0xA5)
    return array


def run_attnrt(attrs: dict, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    """Returns (outputs by ONNX Runtime name, kernel that ran); raises attnrt.Error on failure."""
    with attnrt.GqaOp(_shared_runtime(), **attrs) as op:
        outputs = {name: _poisoned(shape, dtype)
                   for name, (shape, dtype) in op.output_shapes(feeds).items()}
        with op.plan(feeds, outputs) as plan:
            plan.run(feeds, outputs)
            return outputs, plan.kernel
