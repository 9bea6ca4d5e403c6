"""The names of the paged_gqa_varlen kernels the runtime finds, for tests that pin each in turn."""
from __future__ import annotations

import attnrt


def varlen_kernels() -> list[str]:
    with attnrt.Runtime() as rt:
        return [k["name"] for p in rt.list()["plugins"] for k in p["kernels"]
                if k["op"] == "paged_gqa_varlen"]
