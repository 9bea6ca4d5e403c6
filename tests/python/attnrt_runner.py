"""Runs attnrt on one GQA call through `plugin-inspect run --inputs DIR --outputs DIR`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

class AttnrtError(RuntimeError):
    def __init__(self, status: str, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def plugin_inspect() -> Path:
    build = Path(os.environ.get("ATTNRT_BUILD_DIR", REPO / "build"))
    tool = build / "bin" / "plugin-inspect"
    if not tool.is_file():
        raise FileNotFoundError(f"{tool} not found (set ATTNRT_BUILD_DIR to the build folder)")
    return tool


def run_attnrt(attrs: dict, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
    """Returns (outputs by ONNX Runtime name, kernel that ran); raises AttnrtError on failure."""
    with tempfile.TemporaryDirectory(prefix="attnrt-parity-") as tmp:
        inputs, outputs = Path(tmp, "in"), Path(tmp, "out")
        inputs.mkdir()
        for name, array in feeds.items():
            np.save(inputs / f"{name}.npy", array)
        (inputs / "attributes.json").write_text(json.dumps(attrs))
        proc = subprocess.run(
            [str(plugin_inspect()), "run", "--inputs", str(inputs), "--outputs", str(outputs),
             "--no-check", "--json"], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            lines = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
            match = re.match(r"error: (ATTNRT_\w+): (.*)", lines[-1] if lines else "", re.S)
            if match:
                raise AttnrtError(match.group(1), match.group(2))
            raise AttnrtError(f"exit {proc.returncode}", proc.stderr.strip() or proc.stdout)
        kernel = json.loads(proc.stdout)["kernel"]
        return {p.stem: np.load(p) for p in outputs.glob("*.npy")}, kernel
