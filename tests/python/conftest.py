"""Seed, per-test RNG, the max-abs-error table and the summary of the parity suite."""
from __future__ import annotations

import json
import math
import os
import random
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

TABLE = "max_abs_errors"


def pytest_configure(config):
    # Chosen once, in the controller; pytest-xdist workers inherit the environment.
    os.environ.setdefault("ATTNRT_TEST_SEED", str(random.SystemRandom().randrange(2**31)))


def suite_seed() -> int:
    return int(os.environ["ATTNRT_TEST_SEED"])


def pytest_report_header(config):
    return f"attnrt parity: ATTNRT_TEST_SEED={suite_seed()}"


def _table_dir(config) -> Path:
    """The session's pytest tmp root (shared by xdist workers, whose basetemp is below it)."""
    base = config._tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@pytest.fixture
def rng(request):
    """Fresh inputs every run: the seed is random unless ATTNRT_TEST_SEED is set."""
    return np.random.default_rng([suite_seed(), zlib.crc32(request.node.nodeid.encode())])


class ErrorTable:
    def __init__(self, path: Path):
        self.path = path

    def add(self, config: str, errors: dict[str, float], kernel: str):
        """errors: max abs error per compared output (NaN: shape/dtype or quantized bytes differ)."""
        worst = max(errors, key=lambda n: (math.isnan(errors[n]), errors[n]))
        with self.path.open("a") as f:
            f.write(json.dumps({"configuration": config, "max_abs_error": errors[worst],
                                "worst_output": worst, "errors": errors, "kernel": kernel}) + "\n")

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        rows = [json.loads(line) for line in self.path.read_text().splitlines()]
        return sorted(rows, key=lambda r: r["configuration"])

    def write(self) -> tuple[Path, Path]:
        rows = self.rows()
        json_path, md_path = self.path.with_suffix(".json"), self.path.with_suffix(".md")
        json_path.write_text(json.dumps({"seed": suite_seed(), "rows": rows}, indent=1))
        lines = ["configuration | max abs error vs onnxruntime | in | attnrt kernel",
                 "--- | --- | --- | ---"]
        lines += [f"{r['configuration']} | {r['max_abs_error']:.3g} | {r['worst_output']} | "
                  f"{r['kernel']}" for r in rows]
        md_path.write_text("\n".join(lines) + "\n")
        return json_path, md_path


@pytest.fixture(scope="session")
def error_table(pytestconfig) -> ErrorTable:
    return ErrorTable(_table_dir(pytestconfig) / f"{TABLE}.jsonl")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    tr.section("attnrt parity vs onnxruntime")
    tr.write_line(f"ATTNRT_TEST_SEED={suite_seed()}")
    table = ErrorTable(_table_dir(config) / f"{TABLE}.jsonl")
    if table.rows():
        json_path, md_path = table.write()
        tr.write_line(f"table: {md_path} (and {json_path.name})")
        for line in md_path.read_text().splitlines():
            tr.write_line(line)
