"""The examples of docs/python.md and README.md run as written (each ```python block in a fresh
interpreter, with the attnrt package the other binding tests use), so the pages cannot go stale."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnrt

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "python.md"
README = REPO / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
README_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_page_has_an_example_per_op():
    text = "\n".join(BLOCKS)
    for call in ("attnrt.gqa(", "attnrt.paged_gqa(", "attnrt.BlockPool(", "attnrt.sparse_mla(",
                 "attnrt.sparse_mla_metadata(", "attnrt.sparse_mla_encode(", ".bind(",
                 "torch.ops.attnrt."):
        assert call in text, f"docs/python.md has no example calling {call}"


def test_the_readme_has_a_python_example():
    assert any("attnrt.Runtime(" in block for block in README_BLOCKS), \
        "README.md has no ```python example that makes a runtime"


@pytest.mark.parametrize("page, index", [(DOC, i) for i in range(len(BLOCKS))] +
                         [(README, i) for i in range(len(README_BLOCKS))],
                         ids=lambda value: value.name if isinstance(value, Path) else str(value))
def test_example_runs(page, index):
    code = (BLOCKS if page == DOC else README_BLOCKS)[index]
    if re.search(r"^import torch|^import attnrt.torch", code, re.M):
        pytest.importorskip("torch")
    package_parent = str(Path(attnrt.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                            timeout=300, cwd=page.parent)
    assert result.returncode == 0, f"{page.name} example {index} failed:\n{code}\n{result.stderr}"
    assert result.stdout.strip(), f"{page.name} example {index} printed nothing"
