"""The package checks the loaded libattnrt.so's ABI version at import: the same major version and
a minor version at least the one its extension was built with (attnrt_runtime_options.executor
came with 1.3: a 1.2 library ignored it, so the torch-threads runtime started a pool of its own
while the log said it ran on torch's threads). Checked by importing the package in a fresh
interpreter whose extension module reports another library version."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnrt
from attnrt import _runtime

# Imports the extension module alone (a stub parent package), makes its version query report
# MAJOR.MINOR, then imports the package for real.
PROBE = """
import importlib.util, sys, types
spec = importlib.util.find_spec("attnrt")
stub = types.ModuleType("attnrt")
stub.__path__ = list(spec.submodule_search_locations)
sys.modules["attnrt"] = stub
import attnrt.attnrt_c as c
c.abi_version_major = lambda: {major}
c.abi_version_minor = lambda: {minor}
del sys.modules["attnrt"]
try:
    import attnrt
except ImportError as e:
    print("ImportError:", e)
    sys.exit(3)
print("imported", attnrt.abi_version())
"""


def import_with_library_abi(major: int, minor: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(attnrt.__file__).parents[1])] + sys.path))
    return subprocess.run([sys.executable, "-c", PROBE.format(major=major, minor=minor)],
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_built_library_serves_the_package():
    major, minor = attnrt.abi_version()
    assert (major, minor) == _runtime.REQUIRED_ABI
    _runtime.check_abi()


@pytest.mark.parametrize("delta_major, delta_minor", [(0, -1), (-1, 0), (1, 0), (-1, 5)])
def test_a_library_of_another_abi_fails_the_import_naming_both(delta_major, delta_minor):
    need_major, need_minor = _runtime.REQUIRED_ABI
    major, minor = need_major + delta_major, max(0, need_minor + delta_minor)
    r = import_with_library_abi(major, minor)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"libattnrt.so has ABI {major}.{minor}" in r.stdout, r.stdout
    assert f"needs ABI {need_major}.{need_minor}" in r.stdout, r.stdout


def test_a_newer_minor_version_is_accepted():
    need_major, need_minor = _runtime.REQUIRED_ABI
    r = import_with_library_abi(need_major, need_minor + 1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"imported ({need_major}, {need_minor + 1})" in r.stdout


FAKE_ABI_12 = """#include <stdint.h>
void attnrt_abi_version(uint32_t* major, uint32_t* minor) { *major = 1; *minor = 2; }
"""


@pytest.fixture(scope="module")
def abi12_preload(tmp_path_factory):
    """A library whose attnrt_abi_version says 1.2, preloaded ahead of libattnrt.so (what an older
    libattnrt.so answers, with the rest of this build's library)."""
    cc = next((c for c in ("cc", "gcc", "clang") if subprocess.run(
        ["sh", "-c", f"command -v {c}"], capture_output=True).returncode == 0), None)
    if cc is None:
        pytest.skip("no C compiler to build the stand-in library")
    d = tmp_path_factory.mktemp("abi12")
    (d / "fake.c").write_text(FAKE_ABI_12)
    lib = d / "libfake_abi12.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(d / "fake.c")], check=True)
    return dict(os.environ, LD_PRELOAD=str(lib), PYTHONPATH=os.pathsep.join(
        [str(Path(attnrt.__file__).parents[1])] + sys.path))


def test_an_abi_12_library_fails_the_import(abi12_preload):
    r = subprocess.run([sys.executable, "-c", "import attnrt"], env=abi12_preload,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "ImportError: attnrt: the loaded libattnrt.so has ABI 1.2, but this attnrt Python " \
           "package needs ABI 1." in r.stderr, r.stderr


def test_the_torch_threads_runtime_refuses_an_abi_12_library(abi12_preload):
    """libattnrt_torch.so loaded on its own (not through the package): a runtime on torch's threads
    is refused, as a 1.2 library would ignore its executor and start a pool of its own."""
    pytest.importorskip("torch")
    from attnrt import _torch_lib

    if not os.path.isfile(_torch_lib.LIBRARY):
        pytest.skip("libattnrt_torch.so is not built")
    probe = (f"import torch; torch.ops.load_library({_torch_lib.LIBRARY!r})\n"
             "try:\n    torch.ops.attnrt._torch_threads_runtime(1)\n"
             "except RuntimeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", probe], env=abi12_preload, capture_output=True,
                       text=True, timeout=300)
    assert "ATTNRT_ERROR_ABI_MISMATCH: the loaded libattnrt.so has ABI 1.2; a runtime on torch's " \
           "threads needs ABI 1.3" in r.stdout, r.stdout + r.stderr
