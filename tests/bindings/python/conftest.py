"""Makes the attnrt package importable for the binding tests.

The package built in place (<build>/python/attnrt, ATTNRT_BUILD_DIR, default <repo>/build) is used
when it exists; otherwise the installed one (pip install .)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_build = Path(os.environ.get("ATTNRT_BUILD_DIR", REPO / "build"))
if (_build / "python" / "attnrt" / "__init__.py").is_file():
    sys.path.insert(0, str(_build / "python"))
sys.path.insert(0, str(Path(__file__).parent))
